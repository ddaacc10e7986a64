//! The legacy config table mapped onto the edge's file model
//! ([`FileConfig`]), key by key; see `lua-compat/README.md` for the table.
//! The result goes through the same validation as `conf/edge.yaml`.

use super::section::{string_list, Section};
use super::value::Data;
use super::LegacyError;
use crate::config::file::{CacheFile, EdgeFile, FileConfig, LimitsFile, OriginFile, RedisFile};
use serde_yaml::{Mapping, Value as Yaml};
use shorturl_common::redirect::RedirectPolicy;

/// A mapped config and notes on the keys it ignored.
#[derive(Debug)]
pub struct Mapped {
    pub file: FileConfig,
    pub notes: Vec<String>,
}

/// Maps a legacy config table onto the edge's file model.
pub fn map(data: &Data) -> Result<Mapped, LegacyError> {
    let mut notes = Vec::new();
    let mut top = Section::new("", data)?;
    let server = server(top.uint("worker_processes")?.unwrap_or(2));
    let listen = listen(top.get("listen"))?;
    let metrics_listen = top.str("metrics_listen")?;
    let default_domain = default_domain(&mut top, &mut notes)?;
    let redis = redis(&mut top, &mut notes)?;
    let origin = origin(&mut top, &mut notes)?;
    let mut edge = EdgeFile::new(listen, default_domain, redis, origin);
    edge.metrics_listen = metrics_listen;
    if let Some(c) = top.section("cache")? {
        edge.cache = cache(c, &mut notes)?;
    }
    if let Some(r) = top.section("redirect")? {
        edge.redirect = redirect(r)?;
    }
    if let Some(l) = top.section("limits")? {
        edge.limits = limits(l)?;
    }
    if let Some(p) = top.str("access_log")? {
        edge.access_log.path = Some(p);
    }
    top.ignore(
        &["lua_code_cache", "resolver", "shared_dict"],
        "nginx-only setting",
        &mut notes,
    );
    top.finish()?;
    Ok(Mapped {
        file: FileConfig { server, edge },
        notes,
    })
}

/// Pingora's `server` section: the legacy `worker_processes` as threads.
fn server(threads: u64) -> Yaml {
    let mut m = Mapping::new();
    for (k, v) in [
        ("version", 1),
        ("threads", threads),
        ("grace_period_seconds", 10),
        ("graceful_shutdown_timeout_seconds", 5),
    ] {
        m.insert(Yaml::String(k.to_owned()), Yaml::Number(v.into()));
    }
    Yaml::Mapping(m)
}

/// `listen = 80 | "0.0.0.0:80" | "80" | { "0.0.0.0:80", ... }`.
fn listen(d: Option<&Data>) -> Result<Vec<String>, LegacyError> {
    Ok(match d {
        None => vec!["0.0.0.0:80".to_owned()],
        Some(Data::Int(p)) => vec![format!("0.0.0.0:{p}")],
        Some(d) => string_list(d, "listen")?
            .into_iter()
            .map(|l| {
                if l.parse::<u16>().is_ok() {
                    format!("0.0.0.0:{l}")
                } else {
                    l
                }
            })
            .collect(),
    })
}

/// `default_domain`, or `domain.default`; the merchant whitelist is the
/// origin's business now.
fn default_domain<'a>(
    top: &mut Section<'a>,
    notes: &mut Vec<String>,
) -> Result<String, LegacyError> {
    let mut found = top.str("default_domain")?;
    if let Some(mut d) = top.section("domain")? {
        if let Some(v) = d.str("default")? {
            found = Some(v);
        }
        d.ignore(
            &["allowed", "whitelist"],
            "the merchant whitelist is enforced by the origin on creation (conf/origin.yaml links.allowed_domains)",
            notes,
        );
        d.finish()?;
    }
    found.ok_or_else(|| LegacyError::new("default_domain (or domain.default) is required"))
}

/// `redis = { url = ... }` or `{ host, port, password, db|database }`.
fn redis<'a>(top: &mut Section<'a>, notes: &mut Vec<String>) -> Result<RedisFile, LegacyError> {
    let Some(mut r) = top.section("redis")? else {
        return Err(LegacyError::new("redis is required"));
    };
    let url = match r.str("url")? {
        Some(u) => u,
        None => {
            let host = r.str("host")?.unwrap_or_else(|| "127.0.0.1".into());
            let port = r.uint("port")?.unwrap_or(6379);
            let auth = match r.str("password")? {
                Some(p) => format!(":{}@", url_escape(&p)),
                None => String::new(),
            };
            let db = match r.uint("db")? {
                Some(db) => db,
                None => r.uint("database")?.unwrap_or(0),
            };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            format!("redis://{auth}{host}:{port}/{db}")
        }
    };
    let mut redis = RedisFile::new(url);
    if let Some(t) = r.uint("timeout")? {
        redis.timeout_ms = t;
    }
    if let Some(t) = r.uint("connect_timeout")? {
        redis.connect_timeout_ms = t;
    }
    r.ignore(
        &["pool_size", "keepalive", "keepalive_timeout", "backlog"],
        "the edge keeps one multiplexed connection per process",
        notes,
    );
    r.finish()?;
    Ok(redis)
}

/// `origin = { servers | host+port, timeouts }`. The old edge read MySQL
/// itself; the new one asks the origin, so `mysql` is only noted.
fn origin<'a>(top: &mut Section<'a>, notes: &mut Vec<String>) -> Result<OriginFile, LegacyError> {
    let mysql_present = top.get("mysql").is_some();
    if mysql_present {
        notes.push(
            "mysql ignored: the edge no longer reads MySQL; point the origin at it (conf/origin.yaml mysql.url)".into(),
        );
    }
    let Some(mut o) = top.section("origin")? else {
        return Err(LegacyError::new(if mysql_present {
            "origin.servers is required: the legacy edge read MySQL directly, the new edge asks the origin (set origin = { servers = { \"host:8081\" } })"
        } else {
            "origin.servers is required"
        }));
    };
    let servers = match o.get("servers") {
        Some(d) => string_list(d, "origin.servers")?,
        None => match (o.str("host")?, o.uint("port")?) {
            (Some(h), p) => vec![format!("{h}:{}", p.unwrap_or(8081))],
            (None, _) => {
                return Err(LegacyError::new(
                    "origin.servers (or origin.host) is required",
                ))
            }
        },
    };
    let mut origin = OriginFile::new(servers);
    for (legacy, field) in [
        ("timeout", &mut origin.record_timeout_ms),
        ("connect_timeout", &mut origin.connect_timeout_ms),
        ("read_timeout", &mut origin.read_timeout_ms),
        ("status_timeout", &mut origin.status_timeout_ms),
        (
            "health_check_interval",
            &mut origin.health_check_interval_ms,
        ),
    ] {
        if let Some(v) = o.uint(legacy)? {
            *field = v;
        }
    }
    if let Some(p) = o.str("health_check_path")? {
        origin.health_check_path = p;
    }
    o.finish()?;
    Ok(origin)
}

fn cache(mut c: Section<'_>, notes: &mut Vec<String>) -> Result<CacheFile, LegacyError> {
    let mut cache = CacheFile::default();
    if let Some(v) = c.uint("ttl")? {
        cache.positive_ttl_secs = v;
    }
    if let Some(v) = c.uint("negative_ttl")? {
        cache.negative_ttl_secs = v;
    }
    if let Some(v) = c.int("max_bytes")? {
        cache.max_bytes = v;
    }
    c.ignore(
        &["lru_size", "shared_dict", "shared_dict_size"],
        "the edge's in-process cache is bounded in bytes (cache.max_bytes)",
        notes,
    );
    c.finish()?;
    Ok(cache)
}

fn redirect(mut rd: Section<'_>) -> Result<RedirectPolicy, LegacyError> {
    let mut redirect = RedirectPolicy::default();
    if let Some(s) = rd.int("status")? {
        redirect.status = s;
    }
    if let Some(v) = rd.str("cache_control")? {
        redirect.cache_control = v;
    }
    if let Some(v) = rd.str("not_found_cache_control")? {
        redirect.not_found_cache_control = v;
    }
    rd.finish()?;
    Ok(redirect)
}

fn limits(mut l: Section<'_>) -> Result<LimitsFile, LegacyError> {
    let mut limits = LimitsFile::default();
    if let Some(v) = l.int("unknown_per_ip_per_sec")? {
        limits.unknown_per_ip_per_sec = v;
    }
    if let Some(v) = l.int("creations_per_ip_per_sec")? {
        limits.creations_per_ip_per_sec = v;
    }
    if let Some(v) = l.int("max_uri_bytes")? {
        limits.max_uri_bytes = v;
    }
    if let Some(v) = l.int("max_header_bytes")? {
        limits.max_header_bytes = v;
    }
    l.finish()?;
    Ok(limits)
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
