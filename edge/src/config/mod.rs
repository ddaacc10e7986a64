//! Configuration: the file format lives in [`file`]; this module turns it
//! into the internal model the rest of the edge uses, applies environment
//! overrides (secrets never have to live in the file) and validates it, so
//! `shorturl-edge --test -c ...` catches every mistake before a deploy.
//!
//! One convention for every section: its internal model and the function
//! that validates it from the file model (`from_file`) live in one file,
//! and this loader only composes them. Shared sections come from `common`
//! (`RedisTopology`, `RedirectPolicy`, `FieldError`). The sections here
//! are `origin`, `cache` (and the page cache), `limits`, `redis`,
//! `access_log` and `geo`; the two that belong to one subsystem each live beside its
//! code (`tls::config`, `clicks::config`). The sections that modules below
//! the loader take (`redis`, `limits`) import nothing of the edge but the
//! file format, so those modules never depend on this loader: the
//! dependencies run one way, from here down.

pub mod access_log;
pub mod cache;
pub mod file;
pub mod geo;
pub mod legacy_lua;
pub mod limits;
pub mod origin;
pub mod redis;
pub mod unlock;

pub use self::access_log::{AccessLogConfig, AccessLogTarget};
pub use self::cache::{CacheConfig, PagesCacheConfig};
pub use self::geo::GeoConfig;
pub use self::limits::LimitsConfig;
pub use self::origin::{InternalToken, OriginConfig};
pub use self::redis::RedisConfig;

use crate::net::CidrList;
use pingora::server::configuration::ServerConf;
use shorturl_common::config::{positive, FieldError, ReadError};
use shorturl_common::host::normalize_host;
use shorturl_common::redirect::RedirectPolicy;
#[cfg(test)]
use shorturl_common::redis::RedisMode;
use shorturl_common::redis::{RedisTopology, TopologyFields};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

/// Environment variable overriding `edge.redis.url` (it may carry a password).
pub const ENV_REDIS_URL: &str = "SHORTURL_EDGE_REDIS_URL";
/// Environment variable overriding `edge.origin.servers` (comma-separated).
pub const ENV_ORIGINS: &str = "SHORTURL_EDGE_ORIGINS";
/// Environment variable overriding `edge.origin.internal_token` (a secret).
pub const ENV_INTERNAL_TOKEN: &str = "SHORTURL_EDGE_INTERNAL_TOKEN";

/// A configuration problem, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Not valid YAML, or not the file format (serde names the field).
    #[error("invalid config: {0}")]
    Format(#[from] serde_yaml::Error),
    /// The `server:` section, as Pingora reads it.
    #[error("invalid server section: {0}")]
    Server(#[source] Box<pingora::Error>),
    /// A value the edge cannot take, and its field.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// A legacy `config.lua` that cannot be mapped or read.
    #[error(transparent)]
    Legacy(Box<legacy_lua::LegacyError>),
}

fn err<T>(field: impl Into<String>, problem: impl Into<String>) -> Result<T, ConfigError> {
    Err(FieldError::new(field, problem).into())
}

/// Everything the edge needs, in the units the code uses.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    pub listen: Vec<String>,
    pub metrics_listen: Option<String>,
    /// The service's own domain: the `Host` of the edge's internal requests
    /// to the origin (record fetches, status, health checks).
    pub default_domain: String,
    pub redis: RedisConfig,
    pub origin: OriginConfig,
    pub cache: CacheConfig,
    pub redirect: RedirectPolicy,
    pub limits: LimitsConfig,
    pub access_log: AccessLogConfig,
    /// Peers whose `X-Forwarded-For` names the client (default: none).
    pub trusted_proxies: CidrList,
    /// Clients that may read `/shorturl_status`; others get the normal 404.
    pub status_allow: CidrList,
    /// TLS listeners, certificates, HTTPS policy and ACME (`crate::tls`).
    pub tls: crate::tls::config::TlsSettings,
    /// Click counting (`crate::clicks`).
    pub clicks: crate::clicks::ClicksConfig,
    /// How often the status heartbeat goes to every origin (zero: never).
    pub heartbeat_interval: Duration,
    /// The cache of the pages for people (`crate::pages`).
    pub pages_cache: PagesCacheConfig,
    /// The redirect fast path (`crate::fast_path`).
    pub fast_path: FastPathConfig,
    /// The visitor's country for the link rules (`crate::geo`).
    pub geo: GeoConfig,
    /// The keys that open password links' unlock tokens (protocol 4.5).
    pub unlock: shorturl_common::unlock::UnlockKeys,
}

/// The redirect fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastPathConfig {
    /// Off: every request goes through the Pingora proxy session.
    pub enabled: bool,
}

/// Both halves of the file, validated.
pub struct Loaded {
    pub server: ServerConf,
    pub edge: EdgeConfig,
}

/// Reads, overrides from the environment, and validates `path`.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let text = shorturl_common::config::read(path)?;
    parse(&text, |k| std::env::var(k).ok())
}

/// Parses a config text; `env` looks up overrides (injectable for tests).
pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Loaded, ConfigError> {
    let file: file::FileConfig = serde_yaml::from_str(text)?;
    from_file(file, env)
}

/// Validates a file model however it was read (YAML, or a legacy
/// `config.lua` mapped onto it); `env` as in [`parse`].
pub fn from_file(
    file: file::FileConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Loaded, ConfigError> {
    let server_yaml = serde_yaml::to_string(&file.server)?;
    let server = ServerConf::from_yaml(&server_yaml).map_err(ConfigError::Server)?;
    if server.grace_period_seconds.is_none() || server.graceful_shutdown_timeout_seconds.is_none() {
        return err(
            "server.grace_period_seconds",
            "must be set, as must server.graceful_shutdown_timeout_seconds",
        );
    }
    if server.threads == 0 {
        return err("server.threads", "must be at least 1");
    }
    let edge = edge_from_file(file.edge, &env)?;
    Ok(Loaded { server, edge })
}

fn ms(v: u64, name: &str) -> Result<Duration, ConfigError> {
    Ok(Duration::from_millis(positive(v, name)?))
}

fn resolve(addr: &str, name: &str) -> Result<SocketAddr, ConfigError> {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| {
            FieldError::new(name, format!("cannot resolve {addr:?} as host:port")).into()
        })
}

fn edge_from_file(
    f: file::EdgeFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<EdgeConfig, ConfigError> {
    if f.listen.is_empty() {
        return err("edge.listen", "must list at least one address");
    }
    for l in &f.listen {
        resolve(l, "edge.listen")?;
    }
    if let Some(m) = &f.metrics_listen {
        resolve(m, "edge.metrics_listen")?;
    }
    let Some(default_domain) = normalize_host(&f.default_domain) else {
        return err(
            "edge.default_domain",
            format!("{:?} is not a valid host", f.default_domain),
        );
    };
    let topology = RedisTopology::from_fields(
        TopologyFields {
            mode: f.redis.mode,
            url: env(ENV_REDIS_URL).or(f.redis.url),
            nodes: f.redis.nodes,
            sentinels: f.redis.sentinels,
            master_name: f.redis.master_name,
        },
        "edge.redis",
    )?;
    let origin = origin::from_file(f.origin, env)?;
    f.redirect.validate("edge.redirect")?;
    let cache = cache::from_file(&f.cache)?;
    let limits = limits::from_file(&f.limits)?;
    let trusted_proxies = CidrList::parse(&f.trusted_proxies)
        .map_err(|e| FieldError::new("edge.trusted_proxies", e.to_string()))?;
    let status_allow = CidrList::parse(&f.status_allow)
        .map_err(|e| FieldError::new("edge.status_allow", e.to_string()))?;
    let tls =
        crate::tls::config::from_file(f.tls_listen, f.tls, f.https, f.acme, &default_domain, env)?;
    let clicks = crate::clicks::config::from_file(f.clicks)?;
    if f.heartbeat_interval_ms != 0 && f.heartbeat_interval_ms < 100 {
        return err(
            "edge.heartbeat_interval_ms",
            "must be 0 (off) or at least 100",
        );
    }
    let pages_cache = cache::pages_from_file(&f.pages_cache)?;
    let access_log = access_log::from_file(&f.access_log)?;
    let geo = geo::from_file(&f.geo)?;
    if clicks.city && geo.mmdb_path.is_none() {
        return err(
            "edge.clicks.city",
            "needs edge.geo.mmdb_path (a city database such as GeoLite2-City)",
        );
    }
    let unlock = unlock::from_file(&f.unlock, env)?;
    Ok(EdgeConfig {
        listen: f.listen,
        metrics_listen: f.metrics_listen,
        default_domain,
        redis: RedisConfig {
            topology,
            timeout: ms(f.redis.timeout_ms, "edge.redis.timeout_ms")?,
            connect_timeout: ms(f.redis.connect_timeout_ms, "edge.redis.connect_timeout_ms")?,
        },
        origin,
        cache,
        redirect: f.redirect,
        limits,
        access_log,
        trusted_proxies,
        status_allow,
        tls,
        clicks,
        pages_cache,
        fast_path: FastPathConfig {
            enabled: f.fast_path.enabled,
        },
        heartbeat_interval: Duration::from_millis(f.heartbeat_interval_ms),
        geo,
        unlock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
server:
  version: 1
  threads: 1
  grace_period_seconds: 1
  graceful_shutdown_timeout_seconds: 1
edge:
  listen: ["127.0.0.1:8080"]
  default_domain: Localhost.
  redis: { url: "redis://127.0.0.1:6379/" }
  origin: { servers: ["127.0.0.1:8081"] }
"#;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn loads_defaults() {
        let l = parse(GOOD, no_env).map_err(|e| e.to_string());
        let l = match l {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(l.edge.default_domain, "localhost");
        assert_eq!(l.edge.redirect.status, 302);
        assert_eq!(l.edge.cache.positive_ttl, Duration::from_secs(30));
        assert_eq!(l.edge.cache.negative_ttl, Duration::from_secs(5));
        assert_eq!(l.edge.cache.tombstone_ttl, Duration::from_secs(10));
        assert_eq!(l.edge.cache.unsubscribed_grace, Duration::from_secs(5));
        assert_eq!(l.edge.origin.pool_idle_timeout, Duration::from_secs(5));
        assert_eq!(l.server.threads, 1);
        assert_eq!(l.edge.pages_cache.max_bytes, 32 << 20);
        assert_eq!(
            l.edge.pages_cache.stale_if_error,
            Duration::from_secs(86_400)
        );
        assert!(l.edge.trusted_proxies.is_empty());
        let allowed = |s: &str| {
            l.edge
                .status_allow
                .contains(s.parse().unwrap_or_else(|_| panic!()))
        };
        assert!(allowed("127.0.0.1") && allowed("::1") && allowed("10.1.2.3"));
        assert!(allowed("172.16.0.1") && allowed("192.168.9.9") && allowed("fd00::1"));
        assert!(!allowed("8.8.8.8") && !allowed("2001:db8::1") && !allowed("172.32.0.1"));
        let lim = &l.edge.limits;
        assert_eq!(lim.refused_creations_per_ip_per_min, 10);
        assert_eq!(lim.clients_tracked, 100_000);
        assert_eq!(lim.ipv6_prefix_len, 64);
        assert_eq!(lim.header_timeout, Duration::from_secs(5));
        assert_eq!(
            (lim.max_connections, lim.max_connections_per_ip),
            (10_000, 64)
        );
    }

    #[test]
    fn redis_modes() {
        let cluster = GOOD.replace(
            r#"redis: { url: "redis://127.0.0.1:6379/" }"#,
            r#"redis: { mode: cluster, nodes: ["127.0.0.1:7000", "127.0.0.1:7001"] }"#,
        );
        let l = parse(&cluster, no_env).map_err(|e| e.to_string());
        assert!(
            matches!(&l, Ok(l) if matches!(&l.edge.redis.topology,
                RedisTopology::Cluster { nodes, url: None } if nodes.len() == 2)),
            "{:?}",
            l.map(|l| l.edge.redis)
        );
        let no_nodes = GOOD.replace(
            r#"redis: { url: "redis://127.0.0.1:6379/" }"#,
            "redis: { mode: cluster }",
        );
        let e = parse(&no_nodes, no_env).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.starts_with("edge.redis.nodes: must list")),
            "{e:?}"
        );
        let sentinel = GOOD.replace(
            r#"redis: { url: "redis://127.0.0.1:6379/" }"#,
            r#"redis: { mode: sentinel, sentinels: ["127.0.0.1:26379"] }"#,
        );
        let e = parse(&sentinel, no_env).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("edge.redis.master_name: required in mode sentinel")
        );
        let sentinel = sentinel.replace("sentinels:", "master_name: shorturl, sentinels:");
        let l = parse(&sentinel, no_env).map_err(|e| e.to_string());
        assert!(
            matches!(&l, Ok(l) if l.edge.redis.topology.mode() == RedisMode::Sentinel),
            "{:?}",
            l.map(|l| l.edge.redis)
        );
    }

    #[test]
    fn the_internal_token_comes_from_the_file_or_the_environment_and_is_never_shown() {
        let with = GOOD.replace("origin: {", r#"origin: { internal_token: "file-tok3n","#);
        let l = parse(&with, no_env).map_err(|e| e.to_string());
        let tok = l.map(|l| l.edge.origin.internal_token);
        assert!(
            matches!(&tok, Ok(Some(t)) if t.expose() == "file-tok3n"),
            "{tok:?}"
        );
        let env = |k: &str| (k == ENV_INTERNAL_TOKEN).then(|| "env-tok3n".to_owned());
        let l = parse(&with, env).map_err(|e| e.to_string());
        let tok = l.map(|l| l.edge.origin.internal_token);
        assert!(
            matches!(&tok, Ok(Some(t)) if t.expose() == "env-tok3n"),
            "{tok:?}"
        );
        assert!(
            !format!("{tok:?}").contains("tok3n"),
            "Debug shows the token"
        );
        let l = parse(GOOD, no_env).map_err(|e| e.to_string());
        assert!(matches!(l.map(|l| l.edge.origin.internal_token), Ok(None)));
        for bad in ["", "has space", "tab\there", "é"] {
            let text = GOOD.replace(
                "origin: {",
                &format!(r#"origin: {{ internal_token: "{bad}","#),
            );
            let e = parse(&text, no_env)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("edge.origin.internal_token"), "{bad:?}: {e}");
            assert!(
                bad.is_empty() || !e.contains(bad),
                "the error shows the token: {e}"
            );
        }
    }

    #[test]
    fn env_overrides_secrets() {
        let env = |k: &str| match k {
            ENV_REDIS_URL => Some("redis://:secret@127.0.0.1:7000/".to_owned()),
            ENV_ORIGINS => Some("127.0.0.1:9001, 127.0.0.1:9002".to_owned()),
            _ => None,
        };
        let l = match parse(GOOD, env) {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            l.edge.redis.topology,
            RedisTopology::Single {
                url: "redis://:secret@127.0.0.1:7000/".into()
            }
        );
        assert_eq!(l.edge.origin.servers.len(), 2);
    }

    #[test]
    fn rejects_mistakes() {
        let cases = [
            (
                GOOD.replace("listen: [\"127.0.0.1:8080\"]", "listen: []"),
                "edge.listen",
            ),
            (GOOD.replace("Localhost.", "bad host!"), "default_domain"),
            (
                GOOD.replace("redis://127.0.0.1:6379/", "nope://x"),
                "redis.url",
            ),
            (
                GOOD.replace("  grace_period_seconds: 1\n", ""),
                "grace_period_seconds",
            ),
            (
                GOOD.replace("origin: {", "origin: { bogus: 1,"),
                "unknown field",
            ),
            (
                format!("{GOOD}  redirect: {{ status: 200 }}\n"),
                "redirect.status",
            ),
            (
                GOOD.replace("127.0.0.1:8081", "not-an-addr"),
                "origin.servers",
            ),
            (
                format!("{GOOD}  trusted_proxies: [10.0.0.0/33]\n"),
                "edge.trusted_proxies",
            ),
            (
                format!("{GOOD}  status_allow: [localhost]\n"),
                "edge.status_allow",
            ),
            (
                format!("{GOOD}  limits: {{ ipv6_prefix_len: 0 }}\n"),
                "ipv6_prefix_len",
            ),
            (
                format!("{GOOD}  limits: {{ header_timeout_secs: 0 }}\n"),
                "header_timeout_secs",
            ),
            (
                format!("{GOOD}  limits: {{ clients_tracked: 0 }}\n"),
                "clients_tracked",
            ),
            (
                format!("{GOOD}  cache: {{ unsubscribed_grace_ms: 0 }}\n"),
                "unsubscribed_grace_ms",
            ),
            (
                GOOD.replace("origin: {", "origin: { pool_idle_timeout_ms: 0,"),
                "edge.origin.pool_idle_timeout_ms",
            ),
            (
                format!("{GOOD}  cache: {{ tombstone_ttl_ms: 0 }}\n"),
                "tombstone_ttl_ms",
            ),
            (
                format!("{GOOD}  clicks: {{ flush_interval_ms: 6000 }}\n"),
                "edge.clicks.flush_interval_ms",
            ),
            (format!("{GOOD}  clicks: {{ bogus: 1 }}\n"), "unknown field"),
            (
                format!("{GOOD}  clicks: {{ city: true }}\n"),
                "needs edge.geo.mmdb_path",
            ),
            (
                format!("{GOOD}  clicks: {{ city: true, dimensions: false }}\n"),
                "edge.clicks.city",
            ),
            (
                format!("{GOOD}  pages_cache: {{ max_bytes: 100 }}\n"),
                "edge.pages_cache.max_bytes",
            ),
            (
                format!("{GOOD}  pages_cache: {{ max_entry_bytes: 0 }}\n"),
                "edge.pages_cache.max_entry_bytes",
            ),
            (
                format!("{GOOD}  pages_cache: {{ lock_timeout_ms: 0 }}\n"),
                "edge.pages_cache.lock_timeout_ms",
            ),
        ];
        for (text, needle) in cases {
            match parse(&text, no_env) {
                Ok(_) => panic!("accepted config expected to fail on {needle}"),
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.contains(needle), "{needle:?} not in {e:?}");
                }
            }
        }
    }
}
