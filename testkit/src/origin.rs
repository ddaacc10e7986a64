//! The `shorturl-origin` binary as a test process, shared by the origin's,
//! the edge's and the conformance suite's tests (each writes its own config).

use crate::proc::{spawn, workspace_bin, Proc};
use crate::wait::wait_for_tcp;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Runs `shorturl-origin -c <conf> <args>` to completion (e.g. `migrate`,
/// `pregen --count N --quiet`); returns stdout+stderr, panics with them on failure.
pub fn run(conf: &Path, args: &[&str]) -> String {
    let out = Command::new(workspace_bin("shorturl-origin"))
        .arg("-c")
        .arg(conf)
        .args(args)
        .output()
        .expect("run shorturl-origin");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "shorturl-origin {args:?} failed: {text}"
    );
    text
}

/// Starts `shorturl-origin -c <conf> serve` (log in `log`) and waits until
/// it accepts on `port`. `RUST_LOG` defaults to `warn`.
pub fn serve(conf: &Path, port: u16, log: &Path) -> Proc {
    serve_with(conf, port, log, &[])
}

/// [`serve`] with more environment variables (e.g. `SHORTURL_FAILPOINTS`).
pub fn serve_with(conf: &Path, port: u16, log: &Path, env: &[(String, String)]) -> Proc {
    let mut cmd = Command::new(workspace_bin("shorturl-origin"));
    cmd.arg("-c").arg(conf).arg("serve");
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "warn");
    }
    let p = spawn("shorturl-origin", cmd, log);
    wait_for_tcp(port, Duration::from_secs(60));
    p
}

/// Hex SHA-256, as the origin config stores API keys.
pub fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `shorturl-origin hash-password` with `password` on stdin: the argon2id
/// PHC string the console's user config holds (panics unless it is one).
pub fn hash_password(password: &str) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(workspace_bin("shorturl-origin"))
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run shorturl-origin hash-password");
    if let Some(mut stdin) = child.stdin.take() {
        writeln!(stdin, "{password}").expect("write the password");
    }
    let out = child.wait_with_output().expect("hash-password output");
    assert!(out.status.success(), "hash-password failed");
    let h = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(h.starts_with("$argon2id$"), "not an argon2id hash: {h}");
    h
}

/// A real origin for the edge's and the conformance suite's tests: its own
/// MariaDB (shared with its [`Origin::sibling`]s), migrated, `codes` codes
/// pre-generated, serving on a free port. Each suite writes its own config
/// and wraps this in its `support::Origin`.
pub struct Origin {
    pub proc: Option<Proc>,
    pub port: u16,
    pub dir: crate::TempDir,
    pub conf: std::path::PathBuf,
    /// Shared by [`Origin::sibling`]s.
    pub mysql: std::sync::Arc<crate::MariaDb>,
    /// Extra environment of `serve` (failpoints).
    pub env: Vec<(String, String)>,
}

impl Origin {
    /// Starts a MariaDB, writes the config `config(port, mysql_url)` returns
    /// (its first line must be `listen: 127.0.0.1:{port}`), migrates,
    /// pre-generates `codes` codes and serves with `env`.
    pub fn start(
        codes: u64,
        env: &[(&str, String)],
        config: impl FnOnce(u16, &str) -> String,
    ) -> Origin {
        let mysql = crate::MariaDb::start();
        let db_url = mysql.create_database("shorturl");
        let dir = crate::TempDir::new("origin");
        let port = crate::free_port();
        let conf = dir.path().join("origin.yaml");
        std::fs::write(&conf, config(port, &db_url)).unwrap();
        run(&conf, &["migrate"]);
        run(&conf, &["pregen", "--count", &codes.to_string(), "--quiet"]);
        let mut o = Origin {
            proc: None,
            port,
            dir,
            conf,
            mysql: std::sync::Arc::new(mysql),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        };
        o.restart();
        o
    }

    /// Another origin of the same fleet: the same config (database, Redis,
    /// apps) and environment on its own port.
    pub fn sibling(&self) -> Origin {
        let dir = crate::TempDir::new("origin");
        let port = crate::free_port();
        let text = std::fs::read_to_string(&self.conf).unwrap().replacen(
            &format!("listen: 127.0.0.1:{}", self.port),
            &format!("listen: 127.0.0.1:{port}"),
            1,
        );
        let conf = dir.path().join("origin.yaml");
        std::fs::write(&conf, text).unwrap();
        let mut o = Origin {
            proc: None,
            port,
            dir,
            conf,
            mysql: std::sync::Arc::clone(&self.mysql),
            env: self.env.clone(),
        };
        o.restart();
        o
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.proc.is_some()
    }

    /// SIGKILL: a crash.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// SIGTERM: the origin drains (its `/healthz` says draining), then
    /// finishes what is in flight; waits for it to exit.
    pub fn terminate(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.terminate(Duration::from_secs(30));
        }
    }

    /// (Re)starts `serve` and waits until `/healthz` answers 200.
    pub fn restart(&mut self) {
        self.stop();
        self.proc = Some(serve_with(
            &self.conf,
            self.port,
            &self.dir.path().join("origin.log"),
            &self.env,
        ));
        let port = self.port;
        crate::wait_for("origin /healthz", Duration::from_secs(30), || {
            crate::http::send(
                port,
                &crate::http::Request {
                    method: "GET".into(),
                    path: "/healthz".into(),
                    host: Some("localhost".into()),
                    ..Default::default()
                },
            )
            .is_ok_and(|r| r.status == 200)
        });
    }

    /// Requests the origin handled, excluding health checks, status fetches
    /// and metric scrapes: what "the origin was reached" means in a test.
    pub fn handled(&self) -> u64 {
        let text = crate::http::get(self.port, "/metrics", "localhost").text();
        text.lines()
            .filter(|l| l.starts_with("shorturl_request_duration_seconds_count{"))
            .filter(|l| {
                !["route=\"healthz\"", "route=\"status\"", "route=\"metrics\""]
                    .iter()
                    .any(|r| l.contains(r))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// How many requests the origin served on `route` (the count of its
    /// request-duration histogram, summed over status classes).
    pub fn route_count(&self, route: &str) -> u64 {
        crate::metrics::route_count(self.port, route)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("origin.log")).unwrap_or_default()
    }
}

/// Declares a test suite's `Origin`: a newtype over [`Origin`] whose
/// constructors the suite writes (its own config), with the shared methods
/// through `Deref` and [`Origin::sibling`] keeping the type.
#[macro_export]
macro_rules! suite_origin {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        pub struct $name(pub $crate::origin::Origin);

        impl ::std::ops::Deref for $name {
            type Target = $crate::origin::Origin;
            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }

        impl ::std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.0
            }
        }

        impl $name {
            /// Another origin of the same fleet: the same config (database,
            /// Redis, apps) and environment on its own port.
            pub fn sibling(&self) -> $name {
                $name(self.0.sibling())
            }
        }
    };
}
