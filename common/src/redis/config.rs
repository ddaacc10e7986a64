//! Where Redis is: one server, a Cluster, or a Sentinel-managed master.
//!
//! The edge and the origin share this model and its validation; each keeps
//! its own file format (`redis:` section) and calls [`RedisTopology::from_fields`]
//! with the raw values, so both name the same fields in their errors.

use crate::config::{bad, FieldError};
use redis::IntoConnectionInfo;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `redis.mode` as written in a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    #[default]
    Single,
    Cluster,
    Sentinel,
}

impl RedisMode {
    /// The name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            RedisMode::Single => "single",
            RedisMode::Cluster => "cluster",
            RedisMode::Sentinel => "sentinel",
        }
    }
}

/// The deployment shape of Redis (`redis.mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTopology {
    /// One server (`redis.url`), the default.
    Single { url: String },
    /// A Redis Cluster found through its seed nodes (`redis.nodes`,
    /// `host:port`). `url`, when given, only supplies the credentials.
    Cluster {
        nodes: Vec<String>,
        url: Option<String>,
    },
    /// A master monitored by Sentinels (`redis.sentinels`, `host:port`) under
    /// `redis.master_name`. `url`, when given, supplies the credentials and
    /// database of the master.
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
        url: Option<String>,
    },
}

/// The raw `redis:` keys shared by every file format.
#[derive(Debug, Clone, Default)]
pub struct TopologyFields {
    pub mode: RedisMode,
    pub url: Option<String>,
    pub nodes: Vec<String>,
    pub sentinels: Vec<String>,
    pub master_name: Option<String>,
}

/// Timeouts of one connection (every mode).
#[derive(Debug, Clone, Copy)]
pub struct ConnOptions {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
}

impl RedisTopology {
    /// Validates the raw fields; `prefix` is the section's path in the file
    /// (`edge.redis`, `redis`) so errors name the field.
    pub fn from_fields(f: TopologyFields, prefix: &str) -> Result<RedisTopology, FieldError> {
        let field = |name: &str| format!("{prefix}.{name}");
        let url = f.url.filter(|u| !u.trim().is_empty());
        if let Some(u) = &url {
            check_url(u).map_err(|e| FieldError::new(field("url"), format!("invalid: {e}")))?;
        }
        let mode = f.mode.as_str();
        let unused = |name: &str, present: bool| {
            if present {
                bad(field(name), format!("not used in mode {mode}"))
            } else {
                Ok(())
            }
        };
        match f.mode {
            RedisMode::Single => {
                unused("nodes", !f.nodes.is_empty())?;
                unused("sentinels", !f.sentinels.is_empty())?;
                unused("master_name", f.master_name.is_some())?;
                let Some(url) = url else {
                    return bad(field("url"), "required in mode single");
                };
                Ok(RedisTopology::Single { url })
            }
            RedisMode::Cluster => {
                unused("sentinels", !f.sentinels.is_empty())?;
                unused("master_name", f.master_name.is_some())?;
                if f.nodes.is_empty() {
                    return bad(
                        field("nodes"),
                        "must list at least one seed node (host:port) in mode cluster",
                    );
                }
                check_nodes(&f.nodes, &field("nodes"))?;
                if url.as_deref().is_some_and(|u| db_of(u) != 0) {
                    return bad(field("url"), "a cluster has only database 0");
                }
                Ok(RedisTopology::Cluster {
                    nodes: f.nodes,
                    url,
                })
            }
            RedisMode::Sentinel => {
                unused("nodes", !f.nodes.is_empty())?;
                if f.sentinels.is_empty() {
                    return bad(
                        field("sentinels"),
                        "must list at least one Sentinel (host:port) in mode sentinel",
                    );
                }
                check_nodes(&f.sentinels, &field("sentinels"))?;
                let Some(master_name) = f.master_name.filter(|m| !m.trim().is_empty()) else {
                    return bad(field("master_name"), "required in mode sentinel");
                };
                Ok(RedisTopology::Sentinel {
                    sentinels: f.sentinels,
                    master_name,
                    url,
                })
            }
        }
    }

    /// The mode's name as written in the file.
    pub fn mode(&self) -> RedisMode {
        match self {
            RedisTopology::Single { .. } => RedisMode::Single,
            RedisTopology::Cluster { .. } => RedisMode::Cluster,
            RedisTopology::Sentinel { .. } => RedisMode::Sentinel,
        }
    }

    /// A one-line description without credentials, for logs and status.
    pub fn describe(&self) -> String {
        match self {
            RedisTopology::Single { url } => match url.parse::<url::Url>() {
                Ok(u) => format!(
                    "single {}:{}",
                    u.host_str().unwrap_or("?"),
                    u.port().unwrap_or(6379)
                ),
                Err(_) => "single".to_owned(),
            },
            RedisTopology::Cluster { nodes, .. } => format!("cluster {}", nodes.join(",")),
            RedisTopology::Sentinel {
                sentinels,
                master_name,
                ..
            } => format!("sentinel {master_name}@{}", sentinels.join(",")),
        }
    }
}

fn check_url(u: &str) -> Result<(), redis::RedisError> {
    u.into_connection_info().map(|_| ())
}

fn db_of(u: &str) -> i64 {
    u.into_connection_info()
        .map(|i| i.redis_settings().db())
        .unwrap_or(0)
}

/// `host:port` with a non-zero port; IPv6 literals in brackets.
fn check_nodes(nodes: &[String], field: &str) -> Result<(), FieldError> {
    for n in nodes {
        let ok = n
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0))
            && node_info(n, None).is_ok();
        if !ok {
            return bad(field, format!("{n:?} is not host:port"));
        }
    }
    Ok(())
}

/// The connection info of `host:port`, with the credentials (and database)
/// of `template` when one is given.
pub(crate) fn node_info(
    node: &str,
    template: Option<&str>,
) -> Result<redis::ConnectionInfo, redis::RedisError> {
    let info = format!("redis://{node}/").into_connection_info()?;
    match template {
        Some(t) => {
            let t = t.into_connection_info()?;
            Ok(info.set_redis_settings(t.redis_settings().clone()))
        }
        None => Ok(info),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(mode: RedisMode) -> TopologyFields {
        TopologyFields {
            mode,
            ..TopologyFields::default()
        }
    }

    fn problem(r: Result<RedisTopology, FieldError>) -> (String, String) {
        let e = r.unwrap_err();
        (e.field, e.problem)
    }

    #[test]
    fn single_is_the_default_and_needs_a_url() {
        let t = RedisTopology::from_fields(
            TopologyFields {
                url: Some("redis://127.0.0.1:6379/".into()),
                ..TopologyFields::default()
            },
            "redis",
        );
        assert_eq!(
            t,
            Ok(RedisTopology::Single {
                url: "redis://127.0.0.1:6379/".into()
            })
        );
        let e = RedisTopology::from_fields(TopologyFields::default(), "edge.redis");
        assert_eq!(
            e.unwrap_err().to_string(),
            "edge.redis.url: required in mode single"
        );
    }

    #[test]
    fn cluster_needs_nodes() {
        let (field, p) = problem(RedisTopology::from_fields(
            fields(RedisMode::Cluster),
            "redis",
        ));
        assert_eq!(field, "redis.nodes");
        assert!(p.starts_with("must list"), "{p}");
        let mut f = fields(RedisMode::Cluster);
        f.nodes = vec!["127.0.0.1".into()];
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert_eq!(e.to_string(), "redis.nodes: \"127.0.0.1\" is not host:port");
        let mut f = fields(RedisMode::Cluster);
        f.nodes = vec!["127.0.0.1:7000".into(), "[::1]:7001".into()];
        f.url = Some("redis://:pw@x:1/".into());
        assert!(matches!(
            RedisTopology::from_fields(f, "redis"),
            Ok(RedisTopology::Cluster { nodes, url: Some(_) }) if nodes.len() == 2
        ));
        let mut f = fields(RedisMode::Cluster);
        f.nodes = vec!["127.0.0.1:7000".into()];
        f.url = Some("redis://x:1/3".into());
        let (field, p) = problem(RedisTopology::from_fields(f, "redis"));
        assert_eq!(
            (field.as_str(), p.as_str()),
            ("redis.url", "a cluster has only database 0")
        );
    }

    #[test]
    fn sentinel_needs_sentinels_and_a_master_name() {
        let mut f = fields(RedisMode::Sentinel);
        f.master_name = Some("shorturl".into());
        let (field, _) = problem(RedisTopology::from_fields(f, "edge.redis"));
        assert_eq!(field, "edge.redis.sentinels");
        let mut f = fields(RedisMode::Sentinel);
        f.sentinels = vec!["127.0.0.1:26379".into()];
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert_eq!(
            e,
            FieldError::new("redis.master_name", "required in mode sentinel")
        );
        let mut f = fields(RedisMode::Sentinel);
        f.sentinels = vec!["127.0.0.1:26379".into()];
        f.master_name = Some("shorturl".into());
        let t = RedisTopology::from_fields(f, "redis").unwrap();
        assert_eq!(t.mode(), RedisMode::Sentinel);
        assert_eq!(t.describe(), "sentinel shorturl@127.0.0.1:26379");
    }

    #[test]
    fn modes_parse_by_name_and_misplaced_fields_are_named() {
        let m: RedisMode = serde_json::from_str("\"cluster\"").unwrap();
        assert_eq!(m, RedisMode::Cluster);
        assert!(serde_json::from_str::<RedisMode>("\"ring\"").is_err());
        let mut f = fields(RedisMode::Single);
        f.url = Some("redis://127.0.0.1/".into());
        f.nodes = vec!["127.0.0.1:7000".into()];
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert_eq!(e, FieldError::new("redis.nodes", "not used in mode single"));
        let mut f = fields(RedisMode::Single);
        f.url = Some("http://127.0.0.1/".into());
        let (field, p) = problem(RedisTopology::from_fields(f, "redis"));
        assert_eq!(field, "redis.url");
        assert!(p.starts_with("invalid"), "{p}");
    }
}
