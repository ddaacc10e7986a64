//! The stack both edges share: one Redis, one MariaDB, one origin; and the two
//! edges in front of it, configured alike (same timeouts, TTLs and limits).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub use testkit::http;

pub mod clicks;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use testkit::{free_port, spawn, wait_for, Proc, Redis, TempDir};

pub const TIMEOUT: Duration = Duration::from_secs(30);
/// The bearer key the origin accepts for app `demo`.
pub const API_KEY: &str = "conformance-key";
/// An `admin` key (the screening policy's entries).
pub const ADMIN_KEY: &str = "conformance-admin-key";

testkit::suite_origin!(
    /// A real origin on its own MariaDB with this suite's config:
    /// [`testkit::origin::Origin`] (its methods through `Deref`).
    Origin
);

impl Origin {
    /// Migrates, pre-generates `codes` codes and serves on a free port.
    pub fn start(redis: &Redis, codes: u64) -> Origin {
        Origin::start_with(redis, codes, &[])
    }

    /// [`Origin::start`] with more environment for `serve` (failpoints).
    pub fn start_with(redis: &Redis, codes: u64, env: &[(&str, String)]) -> Origin {
        Origin::start_on(&format!("url: \"{}\"", redis.url()), codes, env)
    }

    /// An origin whose `redis:` section holds `redis_yaml` (flow-mapping
    /// entries, e.g. `mode: cluster, nodes: ["127.0.0.1:7000"]`).
    pub fn start_on(redis_yaml: &str, codes: u64, env: &[(&str, String)]) -> Origin {
        Origin(testkit::origin::Origin::start(
            codes,
            env,
            |port, db_url| {
                format!(
                "listen: 127.0.0.1:{port}\ndefault_domain: localhost\npublic_scheme: http\n\
                 mysql: {{ url: \"{db_url}\", timeout_ms: 3000 }}\n\
                 redis: {{ {redis}, timeout_ms: 100, legacy_keys: false }}\n\
                 links: {{ allowed_domains: [\"s.shop55.com\"] }}\n\
                 apps:\n  - {{ name: demo, key_sha256: \"{key}\", rate_per_sec: 100000, burst: 100000, scopes: [links:create, links:read, links:manage, stats:read] }}\n\
                 \x20 - {{ name: ops, key_sha256: \"{admin}\", scopes: [admin] }}\n\
                 screening: {{ refresh_secs: 1 }}\n\
                 shutdown_grace_secs: 1\n",
                redis = redis_yaml,
                key = testkit::origin::sha256_hex(API_KEY),
                admin = testkit::origin::sha256_hex(ADMIN_KEY),
            )
            },
        ))
    }
}

/// Shared edge settings: both edges get exactly these.
#[derive(Debug, Clone, Copy)]
pub struct EdgeKnobs {
    pub redis_timeout_ms: u64,
    pub record_timeout_ms: u64,
    pub status_timeout_ms: u64,
    pub health_interval_ms: u64,
    pub positive_ttl_secs: u64,
    pub negative_ttl_secs: u64,
    pub unavailable_ttl_ms: u64,
    pub unknown_limit: u32,
    pub creation_limit: u32,
}

pub const KNOBS: EdgeKnobs = EdgeKnobs {
    // Generous, as in the edge's own tests: on a loaded test machine a
    // Redis answer slower than a production-tight timeout is a miss that
    // falls back to the origin, which is not what a case is about.
    redis_timeout_ms: 1000,
    record_timeout_ms: 3000,
    status_timeout_ms: 500,
    health_interval_ms: 200,
    positive_ttl_secs: 30,
    negative_ttl_secs: 5,
    // Long enough that a repeated request inside one case hits it.
    unavailable_ttl_ms: 3000,
    unknown_limit: 0,
    creation_limit: 0,
};

/// A running edge of either kind.
pub struct Edge {
    pub name: &'static str,
    pub port: u16,
    pub proc: Proc,
    pub dir: TempDir,
    pub log_file: PathBuf,
}

impl Edge {
    /// The Pingora edge (`shorturl-edge`).
    pub fn pingora(redis_url: &str, origin: &str) -> Edge {
        Edge::pingora_with(redis_url, origin, "")
    }

    /// The Pingora edge with more settings of its `edge:` section (YAML
    /// lines indented by two spaces, e.g. `  clicks: {...}\n`).
    pub fn pingora_with(redis_url: &str, origin: &str, extra: &str) -> Edge {
        Edge::pingora_on(&format!("url: \"{redis_url}\""), origin, extra)
    }

    /// The Pingora edge whose `redis:` section holds `redis_yaml`
    /// (flow-mapping entries, as [`Origin::start_on`]).
    pub fn pingora_on(redis_yaml: &str, origin: &str, extra: &str) -> Edge {
        Edge::pingora_knobs(redis_yaml, origin, extra, &KNOBS)
    }

    /// [`Edge::pingora_on`] with other knobs (the OpenResty module gets the
    /// same through `SU_*` variables).
    pub fn pingora_knobs(redis_yaml: &str, origin: &str, extra: &str, k: &EdgeKnobs) -> Edge {
        let dir = TempDir::new("conf-pingora");
        let port = free_port();
        let text = format!(
            r#"server:
  version: 1
  threads: 2
  pid_file: {dir}/edge.pid
  upgrade_sock: {dir}/upgrade.sock
  grace_period_seconds: 1
  graceful_shutdown_timeout_seconds: 1
edge:
  listen: ["127.0.0.1:{port}"]
  default_domain: localhost
  redis: {{ {redis_yaml}, timeout_ms: {rt}, connect_timeout_ms: {rt} }}
  origin:
    servers: ["{origin}"]
    connect_timeout_ms: 100
    record_timeout_ms: {rec}
    status_timeout_ms: {st}
    health_check_interval_ms: {hc}
  cache: {{ positive_ttl_secs: {pos}, negative_ttl_secs: {neg}, unavailable_ttl_ms: {un} }}
  limits: {{ unknown_per_ip_per_sec: {ul}, creations_per_ip_per_sec: {cl} }}
  access_log: {{ path: {dir}/access.log, flush_interval_ms: 20 }}
{extra}"#,
            dir = dir.path().display(),
            rt = k.redis_timeout_ms,
            rec = k.record_timeout_ms,
            st = k.status_timeout_ms,
            hc = k.health_interval_ms,
            pos = k.positive_ttl_secs,
            neg = k.negative_ttl_secs,
            un = k.unavailable_ttl_ms,
            ul = k.unknown_limit,
            cl = k.creation_limit,
        );
        let conf = dir.path().join("edge.yaml");
        std::fs::write(&conf, text).unwrap();
        let mut cmd = Command::new(testkit::workspace_bin("shorturl-edge"));
        cmd.arg("-c").arg(&conf).env("RUST_LOG", "warn");
        let log_file = dir.path().join("access.log");
        let proc = spawn("shorturl-edge", cmd, &dir.path().join("edge.log"));
        let e = Edge {
            name: "pingora",
            port,
            proc,
            dir,
            log_file,
        };
        e.wait_ready();
        e
    }

    /// The OpenResty module, through its start script.
    pub fn openresty(redis_addr: &str, origin: &str) -> Edge {
        Edge::openresty_with(redis_addr, origin, &[])
    }

    /// The OpenResty module with more `SU_*` settings (they override the
    /// shared knobs).
    pub fn openresty_with(redis_addr: &str, origin: &str, env: &[(&str, String)]) -> Edge {
        let dir = TempDir::new("conf-openresty");
        let port = free_port();
        let k = &KNOBS;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../openresty/start.sh");
        let prefix = dir.path().join("nginx");
        let mut cmd = Command::new(script);
        cmd.arg(&prefix)
            .arg(port.to_string())
            .arg(redis_addr)
            .arg(origin)
            .env("SU_WORKERS", "2")
            .env("SU_DIE_WITH_MASTER", "1")
            .env("SU_REDIS_TIMEOUT_MS", k.redis_timeout_ms.to_string())
            .env(
                "SU_REDIS_CONNECT_TIMEOUT_MS",
                k.redis_timeout_ms.to_string(),
            )
            .env("SU_RECORD_TIMEOUT_MS", k.record_timeout_ms.to_string())
            .env("SU_STATUS_TIMEOUT_MS", k.status_timeout_ms.to_string())
            .env("SU_HEALTH_INTERVAL_MS", k.health_interval_ms.to_string())
            .env("SU_POSITIVE_TTL_SECS", k.positive_ttl_secs.to_string())
            .env("SU_NEGATIVE_TTL_SECS", k.negative_ttl_secs.to_string())
            .env("SU_UNAVAILABLE_TTL_MS", k.unavailable_ttl_ms.to_string())
            .env("SU_UNKNOWN_LIMIT", k.unknown_limit.to_string())
            .env("SU_CREATION_LIMIT", k.creation_limit.to_string())
            .env("SU_ERROR_LOG_LEVEL", "warn");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let log_file = prefix.join("logs/access.log");
        let proc = spawn("nginx", cmd, &dir.path().join("start.log"));
        let e = Edge {
            name: "openresty",
            port,
            proc,
            dir,
            log_file,
        };
        e.wait_ready();
        e
    }

    fn wait_ready(&self) {
        wait_for(
            &format!("{} to answer /healthz", self.name),
            TIMEOUT,
            || {
                http::send(
                    self.port,
                    &http::Request {
                        method: "GET".into(),
                        path: "/healthz".into(),
                        host: Some("localhost".into()),
                        ..Default::default()
                    },
                )
                .is_ok_and(|r| r.status == 200)
            },
        );
    }

    /// The status JSON.
    pub fn status(&self) -> serde_json::Value {
        let r = http::get(self.port, "/shorturl_status", "localhost");
        serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{} status is not JSON ({e}): {}", self.name, r.text()))
    }

    /// Everything the process and nginx logged (for failure messages).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for f in [
            "edge.log",
            "start.log",
            "nginx/logs/error.log",
            "nginx/logs/access.log",
        ] {
            if let Ok(t) = std::fs::read_to_string(self.dir.path().join(f)) {
                out.push_str(&format!("--- {f}\n{t}"));
            }
        }
        out
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        // nginx: SIGTERM lets the master stop its workers; SIGKILL follows
        // after the grace period (workers also die with the master).
        self.proc.terminate(Duration::from_secs(5));
    }
}

/// Redis helpers (a plain synchronous connection per call).
pub fn redis_cmd(url: &str, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_connection()?;
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query::<redis::Value>(&mut con)
}

/// Page requests `origin` served (its request histogram, route `page`).
pub fn origin_pages(origin: &Origin) -> u64 {
    let text = http::get(origin.port, "/metrics", "localhost").text();
    text.lines()
        .filter(|l| l.starts_with("shorturl_request_duration_seconds_count{"))
        .filter(|l| l.contains("route=\"page\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Both edges in front of `origin`, each subscribed to invalidations (so
/// a later change's message reaches it).
pub fn subscribed_edges(redis: &Redis, origin: &Origin) -> [Edge; 2] {
    let edges = [
        Edge::pingora(&redis.url(), &origin.addr()),
        Edge::openresty(&format!("127.0.0.1:{}", redis.port()), &origin.addr()),
    ];
    for e in &edges {
        wait_for(&format!("{} to subscribe", e.name), TIMEOUT, || {
            e.status()["inval"]["subscribed"] == serde_json::json!(true)
        });
    }
    edges
}
