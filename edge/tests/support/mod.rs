//! Test harness: a real edge process in front of real Redis (and, for the
//! end-to-end tests, a real origin on a real MariaDB), all on free loopback
//! ports, all stopped with the test.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod clicks;
pub mod failover;
pub use testkit::http;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use testkit::{free_port, spawn, wait_for, wait_for_tcp, Proc, Redis, TempDir};

pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The bearer key the test origin accepts.
pub const API_KEY: &str = "edge-test-key";

/// A second key, allowed to read stats once [`stats_app`] is appended to
/// the origin's `apps:` list.
pub const STATS_KEY: &str = "edge-stats-key";

/// The `apps:` entry for [`STATS_KEY`].
pub fn stats_app() -> String {
    format!(
        "  - {{ name: stats, key_sha256: \"{}\", scopes: [\"links:read\", \"stats:read\", \"admin\"] }}",
        testkit::origin::sha256_hex(STATS_KEY)
    )
}

/// The shared TLS store's key in the edges' test configs
/// (`edge.tls.store_key`, base64 of 32 bytes).
pub const STORE_KEY: &str = "VVwpcB3qoZMxGeKJDD6/L/6j1UKlqy3tPZoQPLDkd64=";
/// A second store key (rotation tests).
pub const STORE_KEY_2: &str = "04WDCq+60ZZcXhiaBEJMMovOMVXcjaUiy3iBoaBGRvA=";
/// A key no test edge is given.
pub const STORE_KEY_UNKNOWN: &str = "u6Wdr8AArHgbKY3ScVBsrrR/RvwU/qj44pQTiT73MWI=";

/// The store keys `current` (sealing) and `old` (opening only).
pub fn store_keys(current: &str, old: &[&str]) -> shorturl_common::tls_seal::StoreKeys {
    let key = |k: &str| shorturl_common::tls_seal::StoreKey::from_base64(k).unwrap();
    shorturl_common::tls_seal::StoreKeys::new(key(current), old.iter().map(|k| key(k)).collect())
}

/// The id of a store key (first 8 hex digits of SHA-256 over its bytes).
pub fn store_key_id(key: &str) -> String {
    shorturl_common::tls_seal::StoreKey::from_base64(key)
        .unwrap()
        .id()
        .to_owned()
}

/// Writes `value` at `key` in Redis (`SET`, optional TTL in seconds).
pub fn redis_set(redis: &Redis, key: &str, value: &str) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(&mut con)
        .unwrap();
}

/// Deletes `key`.
pub fn redis_del(redis: &Redis, key: &str) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("DEL").arg(key).query::<()>(&mut con).unwrap();
}

/// Reads `key`.
pub fn redis_get(redis: &Redis, key: &str) -> Option<String> {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(&mut con)
        .unwrap()
}

/// A record line for `domain` → `url`, expiring in `secs` seconds.
pub fn record_line(domain: &str, url: &str, secs: u64) -> String {
    format!(
        "1 {} {domain} {url}",
        shorturl_common::time::now_unix() + secs
    )
}

/// A running edge.
pub struct Edge {
    pub proc: Proc,
    pub port: u16,
    pub metrics_port: u16,
    pub dir: TempDir,
    pub conf: PathBuf,
}

/// Knobs for the generated edge config.
pub struct EdgeOpts<'a> {
    /// A URL, or the address fields of `redis:` ([`redis_fields`]).
    pub redis_url: String,
    pub origins: Vec<String>,
    /// Extra lines appended inside `edge:` (indented two spaces).
    pub extra: &'a str,
    /// Pingora worker threads.
    pub threads: usize,
    /// Extra environment of the edge process (e.g. `SHORTURL_FAILPOINTS`).
    pub env: Vec<(&'a str, String)>,
    /// `edge.redis.timeout_ms`: generous, so a loaded test machine does not
    /// turn a slow Redis answer into a 503 (a stopped Redis refuses at once).
    pub redis_timeout_ms: u64,
    /// The plain listener's port (`None`: a free one).
    pub port: Option<u16>,
    /// `edge.origin.pool_idle_timeout_ms` (`None`: the default).
    pub pool_idle_timeout_ms: Option<u64>,
    /// `edge.access_log.truncate_addresses`.
    pub truncate_log_addresses: bool,
}

impl<'a> EdgeOpts<'a> {
    pub fn new(redis_url: String, origins: Vec<String>) -> Self {
        EdgeOpts {
            redis_url,
            origins,
            extra: "",
            threads: 2,
            env: Vec::new(),
            redis_timeout_ms: 1000,
            port: None,
            pool_idle_timeout_ms: None,
            truncate_log_addresses: false,
        }
    }
}

/// Pingora's graceful upgrade of `old`: start a new process with `-u` on the
/// same config, SIGQUIT the old one once the new one listens on the upgrade
/// socket (it hands its sockets over), wait until the old one exited.
/// Returns the new process.
pub fn upgrade(old: &mut Edge) -> Proc {
    // Pingora's sequence: the new process first; once it listens on the
    // upgrade socket (waiting up to 5 s for the sockets), SIGQUIT the old
    // one, which hands them over at once. The other way round the old
    // process gives up after 5 retries a second apart, and a new process
    // slower than that to start (a debug build on a loaded machine) found
    // no sockets: the listeners were closed and requests refused.
    let sock = old.dir.path().join("upgrade.sock");
    let _ = std::fs::remove_file(&sock);
    let mut cmd = Command::new(edge_bin());
    cmd.arg("-u")
        .arg("-c")
        .arg(&old.conf)
        .env("RUST_LOG", "info");
    let new = spawn(
        "shorturl-edge-new",
        cmd,
        &old.dir.path().join("edge-new.log"),
    );
    wait_for("the new edge's upgrade socket", TIMEOUT, || sock.exists());
    old.proc.signal(libc::SIGQUIT);
    wait_for("old edge to exit", TIMEOUT, || !old.proc.is_running());
    new
}

pub fn edge_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shorturl-edge"))
}

/// Writes a config for `opts` into `dir` and returns its path and ports.
/// The `redis:` mapping's address fields: `url: "<url>"` for a URL, or the
/// text as given (`mode: cluster, nodes: [...]`, see [`cluster_fields`]).
pub fn redis_fields(where_: &str) -> String {
    if where_.starts_with("redis://") || where_.starts_with("unix://") {
        format!("url: \"{where_}\"")
    } else {
        where_.to_owned()
    }
}

/// `redis:` fields for a Redis Cluster with these seed nodes.
pub fn cluster_fields(seeds: &[String]) -> String {
    let nodes: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!("mode: cluster, nodes: [{}]", nodes.join(", "))
}

/// `redis:` fields for a Sentinel-managed master.
pub fn sentinel_fields(sentinels: &[String], master_name: &str) -> String {
    let list: Vec<String> = sentinels.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "mode: sentinel, master_name: {master_name}, sentinels: [{}]",
        list.join(", ")
    )
}

pub fn write_edge_config(dir: &Path, opts: &EdgeOpts<'_>, port: u16, metrics_port: u16) -> PathBuf {
    let origins = opts
        .origins
        .iter()
        .map(|o| format!("\"{o}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        r#"server:
  version: 1
  threads: {threads}
  pid_file: {dir}/edge.pid
  upgrade_sock: {dir}/upgrade.sock
  grace_period_seconds: 1
  graceful_shutdown_timeout_seconds: 1
edge:
  listen: ["127.0.0.1:{port}"]
  metrics_listen: 127.0.0.1:{metrics_port}
  default_domain: localhost
  redis: {{ {redis}, timeout_ms: {redis_timeout}, connect_timeout_ms: 100 }}
  origin:
    servers: [{origins}]
    connect_timeout_ms: 100
    record_timeout_ms: 1000
    status_timeout_ms: 300
    health_check_interval_ms: 200
{pool_idle}  access_log: {{ path: {dir}/access.log, flush_interval_ms: 20, truncate_addresses: {truncate} }}
{heartbeat}{extra}
"#,
        threads = opts.threads,
        dir = dir.display(),
        redis = redis_fields(&opts.redis_url),
        redis_timeout = opts.redis_timeout_ms,
        extra = opts.extra,
        truncate = opts.truncate_log_addresses,
        pool_idle = opts
            .pool_idle_timeout_ms
            .map_or(String::new(), |ms| format!(
                "    pool_idle_timeout_ms: {ms}\n"
            )),
        // Off unless a test asks: tests with stand-in origins count the
        // requests those receive.
        heartbeat = if opts.extra.contains("heartbeat_interval_ms") {
            ""
        } else {
            "  heartbeat_interval_ms: 0\n"
        },
    );
    let conf = dir.join("edge.yaml");
    std::fs::write(&conf, text).unwrap();
    conf
}

/// Starts an edge and waits until it answers.
pub fn start_edge(opts: EdgeOpts<'_>) -> Edge {
    let dir = TempDir::new("edge");
    let (port, metrics_port) = (opts.port.unwrap_or_else(free_port), free_port());
    let conf = write_edge_config(dir.path(), &opts, port, metrics_port);
    let mut cmd = Command::new(edge_bin());
    cmd.arg("-c").arg(&conf).env("RUST_LOG", "warn");
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    let proc = spawn("shorturl-edge", cmd, &dir.path().join("edge.log"));
    let edge = Edge {
        proc,
        port,
        metrics_port,
        dir,
        conf,
    };
    edge.wait_ready();
    edge
}

impl Edge {
    /// Kills the edge (SIGKILL) and starts it again with the same config.
    pub fn restart(&mut self, env: &[(&str, &str)]) {
        self.proc.kill();
        let mut cmd = Command::new(edge_bin());
        cmd.arg("-c").arg(&self.conf).env("RUST_LOG", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.proc = spawn("shorturl-edge", cmd, &self.dir.path().join("edge.log"));
        self.wait_ready();
    }

    pub fn wait_ready(&self) {
        wait_for_tcp(self.port, TIMEOUT);
        // Each Pingora service binds its listeners on its own runtime, the
        // metrics service's possibly well after the proxy's on a loaded
        // machine: a test reading a metric right after the first answers
        // found nothing listening there.
        wait_for_tcp(self.metrics_port, TIMEOUT);
        wait_for("edge /healthz", TIMEOUT, || {
            http::Conn::open(self.port)
                .and_then(|mut c| c.get("/healthz", "localhost"))
                .map(|r| r.status == 200)
                .unwrap_or(false)
        });
    }

    /// `GET /shorturl_status` as JSON.
    pub fn status(&self) -> serde_json::Value {
        http::get(self.port, "/shorturl_status", "localhost").json()
    }

    /// `GET /shorturl_status`, parsed into the protocol's type.
    pub fn typed_status(&self) -> shorturl_common::status::EdgeStatus {
        let r = http::get(self.port, "/shorturl_status", "localhost");
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("status is not an EdgeStatus ({e}): {}", r.text()))
    }

    /// The value of one Prometheus series (`name{labels}` exactly as
    /// exposed), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        metric_value(
            &http::get(self.metrics_port, "/metrics", "localhost").text(),
            series,
        )
    }

    /// One counter of the status JSON, e.g. `("redis", "hit")`.
    pub fn counter(&self, dim: &str, key: &str) -> u64 {
        self.status()[dim][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {dim}.{key} in status"))
    }

    /// Waits for an access-log line containing `needle` and returns it.
    pub fn log_line(&self, needle: &str) -> String {
        let path = self.dir.path().join("access.log");
        let mut found = String::new();
        wait_for(&format!("access-log line with {needle:?}"), TIMEOUT, || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            match text.lines().find(|l| l.contains(needle)) {
                Some(l) => {
                    found = l.to_owned();
                    true
                }
                None => false,
            }
        });
        found
    }

    pub fn log(&self) -> String {
        self.proc.log()
    }
}

/// The value of `series` (`name{labels}` as exposed) in a Prometheus text
/// exposition, 0 when absent.
pub fn metric_value(text: &str, series: &str) -> f64 {
    testkit::metrics::metric_in(text, series).unwrap_or(0.0)
}

/// How many requests the origin served on `route` (the count of its
/// request-duration histogram, summed over status classes), from its
/// `/metrics`.
pub fn origin_route_count(origin_port: u16, route: &str) -> u64 {
    testkit::metrics::route_count(origin_port, route)
}

testkit::suite_origin!(
    /// A real origin (migrated, pre-generated codes) on its own MariaDB, with
    /// these tests' config: [`testkit::origin::Origin`] (its methods through
    /// `Deref`).
    Origin
);

impl Origin {
    /// Migrates, pre-generates `codes` codes and serves on a free port.
    pub fn start(redis: &Redis, codes: u64) -> Origin {
        Self::start_with(redis, codes, "")
    }

    /// Like [`Origin::start`], with `extra` YAML appended to its config
    /// (e.g. an `apollo:` section).
    pub fn start_with(redis: &Redis, codes: u64, extra: &str) -> Origin {
        Self::start_on(&redis.url(), codes, extra)
    }

    /// Like [`Origin::start_with`] on any Redis: `redis` is a URL or the
    /// fields of a `redis:` mapping ([`redis_fields`]).
    pub fn start_on(redis: &str, codes: u64, extra: &str) -> Origin {
        Origin(testkit::origin::Origin::start(
            codes,
            &[],
            |port, db_url| {
                format!(
                    r#"listen: 127.0.0.1:{port}
default_domain: localhost
public_scheme: http
mysql: {{ url: "{db_url}" }}
redis: {{ {redis}, legacy_keys: false }}
links: {{ allowed_domains: ["s.shop55.com"] }}
apps:
  - {{ name: demo, key_sha256: "{key}" }}
{extra}
"#,
                    redis = redis_fields(redis),
                    key = testkit::origin::sha256_hex(API_KEY),
                )
            },
        ))
    }

    /// `GET /api/v1/links/{code}/stats` with [`STATS_KEY`] (must be 200).
    pub fn stats(&self, code: &str) -> serde_json::Value {
        let auth = format!("Bearer {STATS_KEY}");
        let r = http::request(
            self.port,
            "GET",
            &format!("/api/v1/links/{code}/stats"),
            "localhost",
            &[("Authorization", &auth)],
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }
}

/// Creates a link through `port` (edge or origin); returns the JSON answer.
pub fn create_link(port: u16, url: &str, domain: Option<&str>) -> http::Response {
    let body = match domain {
        Some(d) => serde_json::json!({ "url": url, "domain": d }),
        None => serde_json::json!({ "url": url }),
    };
    http::api(port, API_KEY, "POST", "/api/v1/links", &body)
}

/// `PATCH /api/v1/links/{code}` with a JSON body, through `port` (edge or origin).
pub fn patch_link(port: u16, code: &str, body: serde_json::Value) -> http::Response {
    http::api(
        port,
        API_KEY,
        "PATCH",
        &format!("/api/v1/links/{code}"),
        &body,
    )
}

/// `DELETE /api/v1/links/{code}` through `port` (edge or origin).
pub fn delete_link(port: u16, code: &str) -> http::Response {
    let path = format!("/api/v1/links/{code}");
    http::api(port, API_KEY, "DELETE", &path, &serde_json::Value::Null)
}

impl Edge {
    /// The `inval` dimension of the status (the Pingora edge always has it).
    pub fn inval(&self) -> shorturl_common::status::InvalDim {
        self.typed_status()
            .inval
            .unwrap_or_else(|| panic!("no inval dimension in the edge status"))
    }

    /// Waits until the edge is subscribed to the invalidation channel.
    pub fn wait_subscribed(&self) {
        wait_for("edge to subscribe to su:1:inval", TIMEOUT, || {
            self.inval().subscribed
        });
    }
}
