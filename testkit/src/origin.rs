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
