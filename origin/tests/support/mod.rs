//! Test support: a real origin process over private MariaDB and Redis.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use testkit::{free_port, wait_for, workspace_bin, MariaDb, Proc, Redis, TempDir};

pub const KEY: &str = "test-key-demo";
pub const OTHER_KEY: &str = "test-key-other";

/// One MariaDB per test binary; each origin gets its own database in it.
pub fn shared_mariadb() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(MariaDb::start)
}

/// A fresh database name.
pub fn fresh_db(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub use testkit::origin::sha256_hex;

/// How to configure an origin.
#[derive(Clone)]
pub struct OriginOpts {
    pub mysql_url: String,
    pub redis_url: String,
    pub pregen: u64,
    /// YAML appended at the top level (e.g. `apollo:` or `issuer:` sections).
    pub extra_yaml: String,
    /// `links:` section body lines (indented by the caller with two spaces).
    pub links_yaml: String,
    pub port: u16,
}

impl OriginOpts {
    pub fn new(mysql_url: String, redis_url: String) -> Self {
        OriginOpts {
            mysql_url,
            redis_url,
            pregen: 5000,
            extra_yaml: String::new(),
            links_yaml: "  allowed_domains: [s.shop55.com, go.brand91.cn]\n".into(),
            port: free_port(),
        }
    }
}

/// A running origin process.
pub struct Origin {
    pub proc: Proc,
    pub port: u16,
    pub config: PathBuf,
    pub dir: TempDir,
    pub opts: OriginOpts,
    pub http: reqwest::Client,
}

pub fn origin_bin() -> PathBuf {
    workspace_bin("shorturl-origin")
}

pub fn write_config(dir: &TempDir, o: &OriginOpts) -> PathBuf {
    let yaml = format!(
        "listen: 127.0.0.1:{port}\ndefault_domain: sho.rt\npublic_scheme: http\n\
         mysql:\n  url: '{mysql}'\n  timeout_ms: 1500\n\
         redis:\n  url: '{redis}'\n  timeout_ms: 1000\n\
         links:\n{links}\
         apps:\n  - {{name: demo, key_sha256: {k1}, rate_per_sec: 100000, burst: 100000}}\n  - {{name: other, key_sha256: {k2}, rate_per_sec: 2, burst: 3}}\n\
         shutdown_grace_secs: 2\n{extra}",
        port = o.port,
        mysql = o.mysql_url,
        redis = o.redis_url,
        links = o.links_yaml,
        k1 = sha256_hex(KEY),
        k2 = sha256_hex(OTHER_KEY),
        extra = o.extra_yaml,
    );
    let p = dir.path().join("origin.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

/// Runs `shorturl-origin pregen` to completion.
pub fn pregen(config: &Path, count: u64) -> String {
    testkit::origin::run(
        config,
        &["pregen", "--quiet", "--count", &count.to_string()],
    )
}

impl Origin {
    /// Writes the config, pre-generates, starts `serve`, waits for /healthz.
    pub fn start(opts: OriginOpts) -> Origin {
        let dir = TempDir::new("origin");
        let config = write_config(&dir, &opts);
        if opts.pregen > 0 {
            pregen(&config, opts.pregen);
        }
        let mut o = Origin {
            proc: Origin::spawn_serve(&dir, &config, opts.port),
            port: opts.port,
            config,
            dir,
            opts,
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        };
        o.wait_healthy();
        o
    }

    fn spawn_serve(dir: &TempDir, config: &Path, port: u16) -> Proc {
        testkit::origin::serve(config, port, &dir.path().join("origin.log"))
    }

    pub fn wait_healthy(&mut self) {
        let port = self.port;
        wait_for("origin /healthz", Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
    }

    /// SIGKILL without reaping (a crash; usable while others borrow the origin).
    pub fn crash(&self) {
        self.proc.signal(9);
    }

    /// SIGKILL (a crash) and reap.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Starts `serve` again with the same config and port.
    pub fn restart(&mut self) {
        self.proc.kill();
        self.proc = Origin::spawn_serve(&self.dir, &self.config, self.port);
        self.wait_healthy();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// POST /api/v1/links with the demo key.
    pub async fn create(&self, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.create_with_key(KEY, body).await
    }

    pub async fn create_with_key(
        &self,
        key: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(self.url("/api/v1/links"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(serde_json::Value::Null))
    }

    /// Creates and returns the code, asserting 201.
    pub async fn create_ok(&self, body: serde_json::Value) -> String {
        let (st, v) = self.create(body.clone()).await;
        assert_eq!(st, 201, "create {body}: {v}");
        v["code"].as_str().unwrap().to_owned()
    }

    /// GET /{code} with `Host`; returns (status, Location).
    pub async fn follow(&self, host: &str, code: &str) -> (u16, Option<String>) {
        let r = self
            .http
            .get(self.url(&format!("/{code}")))
            .header("Host", host)
            .send()
            .await
            .unwrap();
        let loc = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned());
        (r.status().as_u16(), loc)
    }

    pub async fn status(&self) -> serde_json::Value {
        self.http
            .get(self.url("/shorturl_status"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A complete private setup: Redis + a database in the shared MariaDB + an origin.
pub struct Setup {
    pub redis: Redis,
    pub db: String,
    pub origin: Origin,
}

impl Setup {
    pub fn start() -> Setup {
        Setup::start_with(|_| {})
    }

    pub fn start_with(f: impl FnOnce(&mut OriginOpts)) -> Setup {
        let m = shared_mariadb();
        let db = fresh_db("t");
        let url = m.create_database(&db);
        let redis = Redis::start();
        let mut opts = OriginOpts::new(url, redis.url());
        f(&mut opts);
        let origin = Origin::start(opts);
        Setup { redis, db, origin }
    }

    /// A connection to this setup's Redis, to inspect or tamper with the cache.
    pub async fn redis_conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// SQL against this setup's database.
    pub fn sql(&self, sql: &str) -> String {
        shared_mariadb().sql(&format!("USE `{}`; {sql}", self.db))
    }
}
