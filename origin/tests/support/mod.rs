//! Test support: a real origin process over private MariaDB and Redis.
//! Its `http` client checks every response against the API contract
//! ([`contract`]).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod clicks;
pub mod contract;
pub mod pages;

use shorturl_common::status::OriginStatus;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use testkit::{free_port, wait_for, workspace_bin, MariaDb, Proc, Redis, TempDir};

pub const KEY: &str = "test-key-demo";
pub const OTHER_KEY: &str = "test-key-other";
/// An `admin`-scoped key (app `support-admin`): the only kind of key bound
/// to no merchant that may name a `kdt_id`.
pub const ADMIN_KEY: &str = "test-key-support-admin";

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
    /// `mysql:` section extra lines (indented by the caller with two spaces).
    pub mysql_yaml: String,
    /// More `apps:` entries, each a line `  - {...}\n`.
    pub apps_yaml: String,
    /// Environment of `serve` (e.g. `SHORTURL_FAILPOINTS`).
    pub env: Vec<(String, String)>,
    pub port: u16,
    /// `redis.legacy_keys` (off: the tests see the protocol 3.5 keys and
    /// messages alone; the upgrade tests turn it on).
    pub legacy_keys: bool,
}

impl OriginOpts {
    pub fn new(mysql_url: String, redis_url: String) -> Self {
        OriginOpts {
            mysql_url,
            redis_url,
            pregen: 5000,
            extra_yaml: String::new(),
            links_yaml: "  allowed_domains: [s.shop55.com, go.brand91.cn]\n".into(),
            mysql_yaml: String::new(),
            apps_yaml: String::new(),
            env: Vec::new(),
            port: free_port(),
            legacy_keys: false,
        }
    }

    /// Sets the test failpoints (`SHORTURL_FAILPOINTS`).
    pub fn failpoints(mut self, spec: &str) -> Self {
        self.env
            .push((shorturl_common::failpoint::ENV.into(), spec.into()));
        self
    }
}

/// A running origin process.
pub struct Origin {
    pub proc: Proc,
    pub port: u16,
    pub config: PathBuf,
    pub dir: TempDir,
    pub opts: OriginOpts,
    /// Every response through it is checked against `docs/openapi.yaml`.
    pub http: contract::CheckedClient,
}

pub fn origin_bin() -> PathBuf {
    workspace_bin("shorturl-origin")
}

/// `shorturl-origin -c <config> check`: its exit status and output.
pub fn check_config(config: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
    std::process::Command::new(origin_bin())
        .arg("-c")
        .arg(config)
        .arg("check")
        .output()
        .unwrap()
}

pub fn write_config(dir: &TempDir, o: &OriginOpts) -> PathBuf {
    let yaml = format!(
        "listen: 127.0.0.1:{port}\ndefault_domain: sho.rt\npublic_scheme: http\n\
         mysql:\n  url: '{mysql}'\n  timeout_ms: 1500\n{mysql_extra}\
         redis:\n  url: '{redis}'\n  timeout_ms: 1000\n  legacy_keys: {legacy}\n\
         links:\n{links}\
         apps:\n  - {{name: demo, key_sha256: {k1}, rate_per_sec: 100000, burst: 100000}}\n  - {{name: other, key_sha256: {k2}, rate_per_sec: 2, burst: 3}}\n  - {{name: support-admin, key_sha256: {k3}, scopes: [admin]}}\n{apps}\
         shutdown_grace_secs: 2\n{extra}",
        port = o.port,
        mysql = o.mysql_url,
        mysql_extra = o.mysql_yaml,
        redis = o.redis_url,
        links = o.links_yaml,
        k1 = sha256_hex(KEY),
        k2 = sha256_hex(OTHER_KEY),
        k3 = sha256_hex(ADMIN_KEY),
        apps = o.apps_yaml,
        extra = o.extra_yaml,
        legacy = o.legacy_keys,
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
            proc: Origin::spawn_serve(&dir, &config, &opts),
            port: opts.port,
            config,
            dir,
            opts,
            http: Origin::client(),
        };
        o.wait_healthy();
        o
    }

    /// A client with a pool of its own. A restart gives the origin a new
    /// one: a test restarting from a blocking call has not let its runtime
    /// see the old process's connections close, so the old pool would hand
    /// one of them out (and the request fail with an incomplete message).
    fn client() -> contract::CheckedClient {
        contract::CheckedClient::new(
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        )
    }

    fn spawn_serve(dir: &TempDir, config: &Path, opts: &OriginOpts) -> Proc {
        let mut cmd = std::process::Command::new(origin_bin());
        cmd.arg("-c").arg(config).arg("serve");
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
        let p = testkit::spawn("shorturl-origin", cmd, &dir.path().join("origin.log"));
        testkit::wait_for_tcp(opts.port, Duration::from_secs(60));
        p
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
        self.proc = Origin::spawn_serve(&self.dir, &self.config, &self.opts);
        self.http = Origin::client();
        self.wait_healthy();
    }

    /// Stops `serve` gracefully (SIGTERM: in-flight requests finish) and
    /// starts it again with the config file as it now is (a rolling restart).
    pub fn restart_graceful(&mut self) {
        self.proc.terminate(Duration::from_secs(10));
        self.proc = Origin::spawn_serve(&self.dir, &self.config, &self.opts);
        self.http = Origin::client();
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

    /// GET `path` (code and query) with `Host` and more headers; returns
    /// (status, Location).
    pub async fn follow_with(
        &self,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Option<String>) {
        let mut req = self.http.get(self.url(path)).header("Host", host);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let loc = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned());
        (r.status().as_u16(), loc)
    }

    /// `GET /shorturl_status`, parsed into the protocol's type.
    pub async fn status(&self) -> OriginStatus {
        let r = self
            .http
            .get(self.url("/shorturl_status"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "/shorturl_status");
        let text = r.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("status {text}: {e}"))
    }

    /// `GET /metrics`: the Prometheus text.
    pub async fn metrics(&self) -> String {
        let r = self.http.get(self.url("/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200, "/metrics");
        r.text().await.unwrap()
    }

    /// An API call with `key`: status, JSON body (`Null` if none) and headers.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        key: &str,
        body: Option<serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> (u16, serde_json::Value, reqwest::header::HeaderMap) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let h = r.headers().clone();
        let text = r.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        (status, v, h)
    }

    /// `GET /api/v1/links/{code}` with `key`: status and the raw body.
    pub async fn read_raw(&self, key: &str, code: &str) -> (u16, String) {
        let r = self
            .http
            .get(self.url(&format!("/api/v1/links/{code}")))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// `PATCH /api/v1/links/{code}` with `key` and a JSON body.
    pub async fn patch(
        &self,
        key: &str,
        code: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let (st, v, _) = self
            .call(
                reqwest::Method::PATCH,
                &format!("/api/v1/links/{code}"),
                key,
                Some(body),
                &[],
            )
            .await;
        (st, v)
    }

    /// `DELETE /api/v1/links/{code}` with `key`.
    pub async fn delete(&self, key: &str, code: &str) -> (u16, serde_json::Value) {
        let (st, v, _) = self
            .call(
                reqwest::Method::DELETE,
                &format!("/api/v1/links/{code}"),
                key,
                None,
                &[],
            )
            .await;
        (st, v)
    }

    /// One raw request: status and body text.
    pub async fn get_text(&self, path: &str, host: &str) -> (u16, String) {
        let r = self
            .http
            .get(self.url(path))
            .header("Host", host)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
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
        Setup::start_on(url, db, f)
    }

    /// [`Setup::start_with`] on a database the test prepared (`url`, named `db`).
    pub fn start_on(url: String, db: String, f: impl FnOnce(&mut OriginOpts)) -> Setup {
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

    /// The raw value of `su:1:link:sho.rt/{code}` (the default domain) in this setup's Redis.
    pub async fn redis_record(&self, code: &str) -> Option<String> {
        self.redis_record_on("sho.rt", code).await
    }

    /// The raw value of `code`'s record on `domain` in this setup's Redis.
    pub async fn redis_record_on(&self, domain: &str, code: &str) -> Option<String> {
        let mut c = self.redis_conn().await;
        redis::cmd("GET")
            .arg(shorturl_common::keys::link_key(domain, code))
            .query_async(&mut c)
            .await
            .unwrap()
    }

    /// A subscriber on the invalidation channel of this setup's Redis.
    pub async fn subscribe(&self) -> Subscriber {
        Subscriber::connect(&self.redis.url()).await
    }

    /// SQL against this setup's database.
    pub fn sql(&self, sql: &str) -> String {
        shared_mariadb().sql(&format!("USE `{}`; {sql}", self.db))
    }
}

/// One number from SQL against `s`'s database.
pub fn count(s: &Setup, sql: &str) -> u64 {
    let out = s.sql(sql);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{sql}: {out:?}"))
}

/// The value of one series of `o`'s `/metrics` (`name{labels}` exactly),
/// `None` when the series is absent.
pub async fn metric_value(o: &Origin, series: &str) -> Option<f64> {
    metric_in(&o.metrics().await, series)
}

pub use testkit::metrics::metric_in;

/// Polls `cond` until it is true; panics naming `what` after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    while !cond().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client subscribed to `su:1:inval`, as an edge is.
pub struct Subscriber {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = redis::Msg> + Send>>,
}

impl Subscriber {
    /// Connects to `redis_url` and subscribes (returns once subscribed).
    pub async fn connect(redis_url: &str) -> Subscriber {
        let mut ps = redis::Client::open(redis_url)
            .unwrap()
            .get_async_pubsub()
            .await
            .unwrap();
        ps.subscribe(shorturl_common::keys::INVAL_CHANNEL)
            .await
            .unwrap();
        Subscriber {
            stream: Box::pin(ps.into_on_message()),
        }
    }

    /// The next message (its payload), or `None` after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<String> {
        use futures::StreamExt;
        let m = tokio::time::timeout(timeout, self.stream.next())
            .await
            .ok()??;
        Some(m.get_payload::<String>().unwrap())
    }

    /// The next message about `code` (others are skipped); panics after `timeout`.
    pub async fn next_for(&mut self, code: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let m = self
                .next(left)
                .await
                .unwrap_or_else(|| panic!("no invalidation for {code} within {timeout:?}"));
            if m.split(' ').nth(1) == Some(code) {
                return m;
            }
        }
    }
}
