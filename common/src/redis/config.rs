//! Where Redis is: one server, a Cluster, or a Sentinel-managed master.
//!
//! The edge and the origin share this model and its validation; each keeps
//! its own file format (`redis:` section) and calls [`RedisTopology::from_fields`]
//! with the raw values, so both name the same fields in their errors.

use redis::IntoConnectionInfo;
use std::time::Duration;

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
    pub mode: Option<String>,
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
    pub fn from_fields(f: TopologyFields, prefix: &str) -> Result<RedisTopology, String> {
        let url = f.url.filter(|u| !u.trim().is_empty());
        if let Some(u) = &url {
            check_url(u).map_err(|e| format!("{prefix}.url is invalid: {e}"))?;
        }
        let unused = |field: &str, present: bool, mode: &str| {
            if present {
                Err(format!("{prefix}.{field} is not used in mode {mode}"))
            } else {
                Ok(())
            }
        };
        match f.mode.as_deref().unwrap_or("single") {
            "single" => {
                unused("nodes", !f.nodes.is_empty(), "single")?;
                unused("sentinels", !f.sentinels.is_empty(), "single")?;
                unused("master_name", f.master_name.is_some(), "single")?;
                let Some(url) = url else {
                    return Err(format!("{prefix}.url is required in mode single"));
                };
                Ok(RedisTopology::Single { url })
            }
            "cluster" => {
                unused("sentinels", !f.sentinels.is_empty(), "cluster")?;
                unused("master_name", f.master_name.is_some(), "cluster")?;
                if f.nodes.is_empty() {
                    return Err(format!(
                        "{prefix}.nodes must list at least one seed node (host:port) in mode cluster"
                    ));
                }
                check_nodes(&f.nodes, &format!("{prefix}.nodes"))?;
                if let Some(u) = &url {
                    if db_of(u) != 0 {
                        return Err(format!("{prefix}.url: a cluster has only database 0"));
                    }
                }
                Ok(RedisTopology::Cluster {
                    nodes: f.nodes,
                    url,
                })
            }
            "sentinel" => {
                unused("nodes", !f.nodes.is_empty(), "sentinel")?;
                if f.sentinels.is_empty() {
                    return Err(format!(
                        "{prefix}.sentinels must list at least one Sentinel (host:port) in mode sentinel"
                    ));
                }
                check_nodes(&f.sentinels, &format!("{prefix}.sentinels"))?;
                let Some(master_name) = f.master_name.filter(|m| !m.trim().is_empty()) else {
                    return Err(format!("{prefix}.master_name is required in mode sentinel"));
                };
                Ok(RedisTopology::Sentinel {
                    sentinels: f.sentinels,
                    master_name,
                    url,
                })
            }
            other => Err(format!(
                "{prefix}.mode must be single, cluster or sentinel, not {other:?}"
            )),
        }
    }

    /// The mode's name as written in the file.
    pub fn mode(&self) -> &'static str {
        match self {
            RedisTopology::Single { .. } => "single",
            RedisTopology::Cluster { .. } => "cluster",
            RedisTopology::Sentinel { .. } => "sentinel",
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
fn check_nodes(nodes: &[String], field: &str) -> Result<(), String> {
    for n in nodes {
        let ok = n
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0))
            && node_info(n, None).is_ok();
        if !ok {
            return Err(format!("{field}: {n:?} is not host:port"));
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

    fn fields(mode: &str) -> TopologyFields {
        TopologyFields {
            mode: Some(mode.to_owned()),
            ..TopologyFields::default()
        }
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
        assert_eq!(e, Err("edge.redis.url is required in mode single".into()));
    }

    #[test]
    fn cluster_needs_nodes() {
        let e = RedisTopology::from_fields(fields("cluster"), "redis").unwrap_err();
        assert!(e.starts_with("redis.nodes must list"), "{e}");
        let mut f = fields("cluster");
        f.nodes = vec!["127.0.0.1".into()];
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert!(e.starts_with("redis.nodes: \"127.0.0.1\""), "{e}");
        let mut f = fields("cluster");
        f.nodes = vec!["127.0.0.1:7000".into(), "[::1]:7001".into()];
        f.url = Some("redis://:pw@x:1/".into());
        assert!(matches!(
            RedisTopology::from_fields(f, "redis"),
            Ok(RedisTopology::Cluster { nodes, url: Some(_) }) if nodes.len() == 2
        ));
        let mut f = fields("cluster");
        f.nodes = vec!["127.0.0.1:7000".into()];
        f.url = Some("redis://x:1/3".into());
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert!(e.contains("only database 0"), "{e}");
    }

    #[test]
    fn sentinel_needs_sentinels_and_a_master_name() {
        let mut f = fields("sentinel");
        f.master_name = Some("shorturl".into());
        let e = RedisTopology::from_fields(f, "edge.redis").unwrap_err();
        assert!(e.starts_with("edge.redis.sentinels must list"), "{e}");
        let mut f = fields("sentinel");
        f.sentinels = vec!["127.0.0.1:26379".into()];
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert_eq!(e, "redis.master_name is required in mode sentinel");
        let mut f = fields("sentinel");
        f.sentinels = vec!["127.0.0.1:26379".into()];
        f.master_name = Some("shorturl".into());
        let t = RedisTopology::from_fields(f, "redis").unwrap();
        assert_eq!(t.mode(), "sentinel");
        assert_eq!(t.describe(), "sentinel shorturl@127.0.0.1:26379");
    }

    #[test]
    fn unknown_mode_and_misplaced_fields_are_named() {
        let e = RedisTopology::from_fields(fields("ring"), "redis").unwrap_err();
        assert_eq!(
            e,
            "redis.mode must be single, cluster or sentinel, not \"ring\""
        );
        let mut f = fields("single");
        f.url = Some("redis://127.0.0.1/".into());
        f.nodes = vec!["127.0.0.1:7000".into()];
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert_eq!(e, "redis.nodes is not used in mode single");
        let mut f = fields("single");
        f.url = Some("http://127.0.0.1/".into());
        let e = RedisTopology::from_fields(f, "redis").unwrap_err();
        assert!(e.starts_with("redis.url is invalid"), "{e}");
    }
}
