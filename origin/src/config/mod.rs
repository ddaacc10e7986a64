//! The origin's configuration: the validated internal model.
//!
//! [`file`] is the YAML format; [`Config::load`] reads it, applies the
//! environment overrides (`SHORTURL_MYSQL_URL`, `SHORTURL_REDIS_URL`), and
//! validates everything at once so a bad file fails at start with a message
//! naming the field, never later on a request.

mod admin;
mod clicks;
pub mod file;
mod guide;
mod lifecycle;
mod oidc;
mod pages;
mod role;
mod screening;
mod serving;
mod shards;
mod tenancy;
mod unlock;
mod webhooks;

pub use admin::{AdminConfig, AdminUser, Role};
pub use clicks::ClicksConfig;
pub use guide::GuideConfig;
pub use lifecycle::LifecycleConfig;
pub use oidc::{parse as parse_oidc, OidcConfig, CALLBACK_PATH, ENV_OIDC_CLIENT_SECRET};
pub use pages::{PagesConfig, Theme};
pub use screening::{ScreeningConfig, ScreeningList};
pub use serving::{InternalConfig, ServeLimits};
pub use shards::{ShardConfig, ShardsConfig};
pub use tenancy::AppConfig;
pub use unlock::{UnlockConfig, ENV_UNLOCK_KEY};
pub use webhooks::{WebhooksConfig, ENV_WEBHOOK_KEY};

use file::FileConfig;
use shorturl_common::cidr::{CidrError, CidrList};
use shorturl_common::config::{FieldError, ReadError};
use shorturl_common::host::normalize_host;
use shorturl_common::redirect::RedirectPolicy;
use shorturl_common::redis::{RedisTopology, TopologyFields};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Which durable counter hands out id blocks (`issuer.backend`: `mysql`,
/// the default, `redis` or `zookeeper`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum CounterBackend {
    /// One row in MySQL, `UPDATE ... SET value = LAST_INSERT_ID(value + n)`.
    #[default]
    Mysql,
    /// Redis `INCRBY` (needs a persistent Redis; claims stay safe either way).
    Redis,
    /// A znode's value moved by compare-and-set on its version
    /// (`issuer.zookeeper`).
    ZooKeeper,
}

/// Where the ZooKeeper counter lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperConfig {
    /// The connect string: `host:port` of each member, comma-separated.
    pub hosts: String,
    /// The parent znode of the counters; the counter is `<root>/<name>`.
    pub root: String,
    pub session_timeout: Duration,
}

/// MySQL settings.
#[derive(Debug, Clone)]
pub struct MysqlConfig {
    pub url: String,
    pub pool_max: usize,
    /// Bound on any one MySQL operation; past it the request fails with 503.
    pub timeout: Duration,
    /// Most claims committed in one transaction (group commit).
    pub claim_batch: usize,
    /// Concurrent claim transactions.
    pub claim_workers: usize,
    /// The id ranges and their databases (one over `url` when unsharded).
    pub shards: ShardsConfig,
}

/// Redis settings (Redis is a cache: every timeout falls back to MySQL).
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// Where Redis is (`redis.mode` and its addresses).
    pub topology: RedisTopology,
    pub timeout: Duration,
    pub record_ttl: Duration,
    pub negative_ttl: Duration,
    pub dedup_ttl: Duration,
    /// Also write every record under its pre-protocol-3.5 key
    /// (`su:1:link:{code}`) and publish the legacy message, for edges of
    /// the previous version during an upgrade (default on; turn it off
    /// once every edge speaks protocol 3.5).
    pub legacy_keys: bool,
}

/// Issuer settings.
#[derive(Debug, Clone)]
pub struct IssuerConfig {
    pub backend: CounterBackend,
    /// Ids fetched from the counter per call (the old "HBase increment" of 100).
    pub block: u64,
    /// Prefetch the next block when this many ids are left in the current one.
    pub low_water: u64,
    /// Counter name (row in `counter`, Redis key suffix, or znode name).
    pub name: String,
    /// Set with `backend: zookeeper`.
    pub zookeeper: Option<ZooKeeperConfig>,
}

/// Link rules.
#[derive(Debug, Clone)]
pub struct LinksConfig {
    pub default_ttl_days: u32,
    pub max_ttl_days: u32,
    pub max_url_bytes: usize,
    pub max_body_bytes: usize,
    /// Body limit of `POST /api/v1/links/batch` (up to 1000 creations).
    pub max_batch_body_bytes: usize,
    /// Body limit of `POST /api/v1/imports` (a whole file, held in memory
    /// while its job runs).
    pub max_import_body_bytes: usize,
    /// Static whitelist (normalised), not including the default domain.
    pub allowed_domains: BTreeSet<String>,
    /// Static merchant domains: kdt_id → its domains (normalised), merged
    /// with Apollo's map. A domain with owners needs an owning `kdt_id`.
    pub merchant_domains: BTreeMap<u64, BTreeSet<String>>,
    /// Custom codes one app may be refused per minute (0 = no limit): a
    /// refused code says the code exists somewhere, so probing is metered.
    pub custom_code_refusals_per_min: u32,
    /// Default of a new link's `forward_query` (`links.forward_query`).
    pub forward_query: bool,
}

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub default_domain: String,
    pub public_scheme: String,
    pub public_port: Option<u16>,
    pub mysql: MysqlConfig,
    pub redis: RedisConfig,
    pub issuer: IssuerConfig,
    pub links: LinksConfig,
    pub redirect: RedirectPolicy,
    pub apps: Vec<AppConfig>,
    pub apollo: Option<crate::apollo::ApolloConfig>,
    /// Click analytics: the batch consumer and the stats API's limits.
    pub clicks: ClicksConfig,
    /// Bound on the whole shutdown after SIGTERM, in-flight requests included.
    pub shutdown_grace: Duration,
    /// Peers that may read `/shorturl_status`; others get the protocol 404.
    pub status_allow: CidrList,
    /// The reaper of expired links.
    pub lifecycle: LifecycleConfig,
    /// QR codes, the preview page and HTML 404 pages.
    pub pages: PagesConfig,
    /// The admin console's users and sessions.
    pub admin: AdminConfig,
    /// Password-protected links: the token key and attempt limits.
    pub unlock: UnlockConfig,
    /// In-app browser guidance: which links, apps and destinations.
    pub guide: GuideConfig,
    /// Destination screening: the policy's files and how it is refreshed.
    pub screening: ScreeningConfig,
    /// Webhooks: the sealing key, allowed destinations, the schedule.
    pub webhooks: WebhooksConfig,
    /// The listener's head deadline and connection caps.
    pub limits: ServeLimits,
    /// Who may call `/internal/*` and `/metrics`.
    pub internal: InternalConfig,
    /// After SIGTERM: serve on this long with `/healthz` draining, then stop.
    pub drain: Duration,
}

/// A configuration problem, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Not valid YAML, or not the file format (serde names the field).
    #[error("config: {0}")]
    Format(#[from] serde_yaml::Error),
    /// A network list entry that is not a CIDR.
    #[error("{field}: {source}")]
    Cidr {
        field: &'static str,
        #[source]
        source: CidrError,
    },
    /// A URL that does not parse.
    #[error("{field}: {value:?}: {source}")]
    Url {
        field: &'static str,
        value: String,
        #[source]
        source: url::ParseError,
    },
    /// A value out of its range, or inconsistent with another, and its
    /// field.
    #[error(transparent)]
    Field(#[from] FieldError),
}

pub(crate) fn err<T>(
    field: impl Into<String>,
    problem: impl Into<String>,
) -> Result<T, ConfigError> {
    Err(FieldError::new(field, problem).into())
}

impl Config {
    /// Reads, overrides from the environment, and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = shorturl_common::config::read(path)?;
        Config::parse(&text, |k| std::env::var(k).ok())
    }

    /// Parses YAML text; `env` looks up override variables.
    pub fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut f: FileConfig = serde_yaml::from_str(text)?;
        if let Some(v) = env("SHORTURL_MYSQL_URL") {
            f.mysql.url = v;
        }
        if let Some(v) = env("SHORTURL_REDIS_URL") {
            f.redis.url = Some(v);
        }
        Config::from_file(f, &env)
    }

    fn from_file(
        f: FileConfig,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let Ok(listen) = f.listen.parse::<SocketAddr>() else {
            return err("listen", format!("not an address:port: {:?}", f.listen));
        };
        let Some(default_domain) = normalize_host(&f.default_domain) else {
            return err(
                "default_domain",
                format!("not a valid host: {:?}", f.default_domain),
            );
        };
        if f.public_scheme != "http" && f.public_scheme != "https" {
            return err("public_scheme", "must be http or https");
        }
        if !f.mysql.url.starts_with("mysql://") {
            return err("mysql.url", "must start with mysql://");
        }
        if let Some(u) = &f.redis.url {
            if !(u.starts_with("redis://") || u.starts_with("unix://")) {
                return err("redis.url", "must start with redis:// or unix://");
            }
        }
        let topology = RedisTopology::from_fields(
            TopologyFields {
                mode: f.redis.mode,
                url: f.redis.url,
                nodes: f.redis.nodes,
                sentinels: f.redis.sentinels,
                master_name: f.redis.master_name,
            },
            "redis",
        )?;
        let shards = shards::shards(f.mysql.shards, f.mysql.skip_dead_shards, &f.mysql.url)?;
        let mysql = MysqlConfig {
            shards,
            url: f.mysql.url,
            pool_max: positive(f.mysql.pool_max, 32, "mysql.pool_max")?,
            timeout: Duration::from_millis(positive(f.mysql.timeout_ms, 2000, "mysql.timeout_ms")?),
            claim_batch: positive(f.mysql.claim_batch, 64, "mysql.claim_batch")?,
            claim_workers: positive(f.mysql.claim_workers, 4, "mysql.claim_workers")?,
        };
        let redis = RedisConfig {
            topology,
            timeout: Duration::from_millis(positive(f.redis.timeout_ms, 50, "redis.timeout_ms")?),
            record_ttl: Duration::from_secs(positive(
                f.redis.record_ttl_secs,
                6 * 86_400,
                "redis.record_ttl_secs",
            )?),
            negative_ttl: Duration::from_secs(positive(
                f.redis.negative_ttl_secs,
                60,
                "redis.negative_ttl_secs",
            )?),
            dedup_ttl: Duration::from_secs(positive(
                f.redis.dedup_ttl_secs,
                86_400,
                "redis.dedup_ttl_secs",
            )?),
            legacy_keys: f.redis.legacy_keys.unwrap_or(true),
        };
        let backend = f.issuer.backend;
        let block = positive(f.issuer.block, 100, "issuer.block")?;
        let low_water = f.issuer.low_water.unwrap_or(block / 5);
        if low_water >= block {
            return err("issuer.low_water", "must be smaller than issuer.block");
        }
        // Checked whenever given (`issuer migrate` may use it with another
        // backend configured); required with `backend: zookeeper`.
        let zookeeper = f.issuer.zookeeper.map(zookeeper_from_file).transpose()?;
        if backend == CounterBackend::ZooKeeper && zookeeper.is_none() {
            return err(
                "issuer.zookeeper.hosts",
                "required with issuer.backend: zookeeper",
            );
        }
        let issuer = IssuerConfig {
            backend,
            block,
            low_water,
            name: f.issuer.name.unwrap_or_else(|| "default".into()),
            zookeeper,
        };
        if issuer.name.is_empty()
            || !issuer
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return err("issuer.name", "use [A-Za-z0-9_-]");
        }
        let mut allowed = BTreeSet::new();
        for d in &f.links.allowed_domains {
            let Some(n) = normalize_host(d) else {
                return err("links.allowed_domains", format!("not a valid host: {d:?}"));
            };
            allowed.insert(n);
        }
        let default_ttl_days = positive(f.links.default_ttl_days, 730, "links.default_ttl_days")?;
        let max_ttl_days = positive(f.links.max_ttl_days, 3650, "links.max_ttl_days")?;
        if default_ttl_days > max_ttl_days {
            return err("links.default_ttl_days", "larger than links.max_ttl_days");
        }
        let max_url_bytes = positive(f.links.max_url_bytes, 2048, "links.max_url_bytes")?;
        if max_url_bytes > crate::schema::LONG_URL_MAX_BYTES {
            // A longer URL would pass validation and then fail its claim batch.
            return err(
                "links.max_url_bytes",
                format!(
                    "at most {} (the size of the long_url column)",
                    crate::schema::LONG_URL_MAX_BYTES
                ),
            );
        }
        let merchant_domains =
            tenancy::merchant_domains(&f.links.merchant_domains, &default_domain)?;
        let links = LinksConfig {
            default_ttl_days,
            max_ttl_days,
            max_url_bytes,
            max_body_bytes: positive(f.links.max_body_bytes, 16 * 1024, "links.max_body_bytes")?,
            max_batch_body_bytes: positive(
                f.links.max_batch_body_bytes,
                2 * 1024 * 1024,
                "links.max_batch_body_bytes",
            )?,
            max_import_body_bytes: positive(
                f.links.max_import_body_bytes,
                32 * 1024 * 1024,
                "links.max_import_body_bytes",
            )?,
            allowed_domains: allowed,
            merchant_domains,
            custom_code_refusals_per_min: f.links.custom_code_refusals_per_min.unwrap_or(10),
            forward_query: f.links.forward_query.unwrap_or(false),
        };
        f.redirect.validate("redirect")?;
        let apps = tenancy::apps(f.apps)?;
        let apollo = match f.apollo {
            Some(a) => Some(crate::apollo::ApolloConfig::from_file(a, env)?),
            None => None,
        };
        let clicks = clicks::clicks(f.clicks)?;
        let status_allow = private_networks(f.status_allow.as_deref(), "status_allow")?;
        let lifecycle = lifecycle::lifecycle(f.lifecycle)?;
        if lifecycle.recycle && mysql.shards.sharded {
            // Recycling appends codes after the table's end: with shards that
            // end is a range boundary (not done yet, see docs/architecture.md).
            return err("lifecycle.recycle", "not supported with mysql.shards yet");
        }
        let pages = pages::pages(f.pages)?;
        let admin = admin::admin(f.admin, env)?;
        let unlock = unlock::unlock(f.unlock, env)?;
        let guide = guide::guide(f.guide)?;
        let screening = screening::screening(f.screening)?;
        let webhooks = webhooks::webhooks(f.webhooks, env)?;
        let limits = serving::limits(f.limits)?;
        let internal = serving::internal(f.internal, env)?;
        let redirect_max_age = lifecycle::cache_control_max_age(&f.redirect.cache_control)
            .unwrap_or(0)
            .max(
                lifecycle::cache_control_max_age(&f.redirect.not_found_cache_control).unwrap_or(0),
            );
        lifecycle::check_quarantine(
            &lifecycle,
            &[
                ("redis.record_ttl_secs", redis.record_ttl),
                ("redis.negative_ttl_secs", redis.negative_ttl),
                ("redis.dedup_ttl_secs", redis.dedup_ttl),
                (
                    "redirect.cache_control",
                    Duration::from_secs(redirect_max_age),
                ),
                (
                    "lifecycle.max_edge_cache_ttl_secs",
                    lifecycle.max_edge_cache_ttl,
                ),
                ("pages.preview_max_age_secs", pages.preview_max_age),
            ],
        )?;
        Ok(Config {
            listen,
            default_domain,
            public_scheme: f.public_scheme,
            public_port: f.public_port,
            mysql,
            redis,
            issuer,
            links,
            redirect: f.redirect,
            apps,
            apollo,
            clicks,
            shutdown_grace: Duration::from_secs(f.shutdown_grace_secs.unwrap_or(10)),
            status_allow,
            lifecycle,
            pages,
            admin,
            unlock,
            guide,
            screening,
            webhooks,
            limits,
            internal,
            drain: Duration::from_secs(f.drain_secs.unwrap_or(3)),
        })
    }

    /// The public short URL of `code` on `domain`.
    pub fn short_url(&self, domain: &str, code: &str) -> String {
        match self.public_port {
            Some(p) => format!("{}://{domain}:{p}/{code}", self.public_scheme),
            None => format!("{}://{domain}/{code}", self.public_scheme),
        }
    }
}

/// A CIDR list field; absent: loopback and the private ranges.
fn private_networks(list: Option<&[String]>, field: &'static str) -> Result<CidrList, ConfigError> {
    match list {
        Some(list) => CidrList::parse(list).map_err(|source| ConfigError::Cidr { field, source }),
        None => Ok(CidrList::default_status_allow()),
    }
}

/// `v`, or `default` when absent; above zero either way.
/// `issuer.zookeeper`, checked: members as `host:port`, a root path of
/// plain segments.
fn zookeeper_from_file(z: file::ZooKeeperFile) -> Result<ZooKeeperConfig, ConfigError> {
    if z.hosts.is_empty() {
        return err("issuer.zookeeper.hosts", "must list at least one host:port");
    }
    for h in &z.hosts {
        let ok = h.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        }) && !h.contains(',')
            && !h.contains('/');
        if !ok {
            return err("issuer.zookeeper.hosts", format!("{h:?} is not host:port"));
        }
    }
    let root = z.root.unwrap_or_else(|| "/shorturl/issuer".into());
    let plain = |seg: &str| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    };
    if !root.starts_with('/') || !root[1..].split('/').all(plain) {
        return err(
            "issuer.zookeeper.root",
            format!("{root:?} is not an absolute znode path of [A-Za-z0-9_.-] segments"),
        );
    }
    let ms = positive(
        z.session_timeout_ms,
        6_000,
        "issuer.zookeeper.session_timeout_ms",
    )?;
    Ok(ZooKeeperConfig {
        hosts: z.hosts.join(","),
        root,
        session_timeout: Duration::from_millis(ms),
    })
}

fn positive<T: PartialOrd + Default + Copy>(
    v: Option<T>,
    default: T,
    name: &str,
) -> Result<T, ConfigError> {
    Ok(shorturl_common::config::positive(
        v.unwrap_or(default),
        name,
    )?)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(super) const MIN: &str = "listen: 127.0.0.1:8081\ndefault_domain: Sho.RT.\nmysql: {url: 'mysql://root@127.0.0.1:3306/x'}\nredis: {url: 'redis://127.0.0.1:6379/'}\n";

    #[test]
    fn minimal_config_gets_defaults() {
        let c = Config::parse(MIN, |_| None).unwrap();
        assert_eq!(c.default_domain, "sho.rt");
        assert_eq!(c.issuer.block, 100);
        assert_eq!(c.issuer.low_water, 20);
        assert_eq!(c.links.default_ttl_days, 730);
        assert_eq!(c.links.max_url_bytes, 2048);
        assert_eq!(c.redirect.status, 302);
        assert_eq!(c.short_url("sho.rt", "abc123"), "https://sho.rt/abc123");
        assert_eq!(c.status_allow, CidrList::default_status_allow());
    }

    #[test]
    fn redis_modes_are_validated() {
        let base = MIN.replace("redis: {url: 'redis://127.0.0.1:6379/'}\n", "");
        let c = Config::parse(
            &format!("{base}redis: {{mode: cluster, nodes: ['127.0.0.1:7000']}}\n"),
            |_| None,
        )
        .unwrap();
        assert_eq!(
            c.redis.topology,
            RedisTopology::Cluster {
                nodes: vec!["127.0.0.1:7000".into()],
                url: None
            }
        );
        let e = Config::parse(&format!("{base}redis: {{mode: cluster}}\n"), |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("redis.nodes: must list"), "{e}");
        let e = Config::parse(
            &format!("{base}redis: {{mode: sentinel, master_name: m}}\n"),
            |_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("redis.sentinels: must list"), "{e}");
        let e = Config::parse(&format!("{base}redis: {{}}\n"), |_| None)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "redis.url: required in mode single");
        let e = Config::parse(&format!("{base}redis: {{mode: ring}}\n"), |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("redis.mode: unknown variant `ring`"), "{e}");
        let c = Config::parse(
            &format!("{base}redis: {{mode: sentinel, master_name: m, sentinels: ['127.0.0.1:26379'], timeout_ms: 80}}\n"),
            |_| None,
        )
        .unwrap();
        assert_eq!(c.redis.topology.mode().as_str(), "sentinel");
        assert_eq!(c.redis.timeout, Duration::from_millis(80));
    }

    #[test]
    fn status_allow_is_parsed() {
        let c = Config::parse(&format!("{MIN}status_allow: [10.0.0.0/8, '::1']\n"), |_| {
            None
        })
        .unwrap();
        let shown: Vec<String> = c.status_allow.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.0.0.0/8", "::1/128"]);
        let c = Config::parse(&format!("{MIN}status_allow: []\n"), |_| None).unwrap();
        assert!(c.status_allow.is_empty());
    }

    #[test]
    fn max_url_bytes_cannot_exceed_the_column() {
        let ok = format!("{MIN}links: {{max_url_bytes: 8192}}\n");
        assert_eq!(
            Config::parse(&ok, |_| None).unwrap().links.max_url_bytes,
            8192
        );
        let e = Config::parse(&format!("{MIN}links: {{max_url_bytes: 8193}}\n"), |_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("links.max_url_bytes") && e.contains("8192"),
            "{e}"
        );
    }

    #[test]
    fn env_overrides_urls() {
        let c = Config::parse(MIN, |k| {
            (k == "SHORTURL_MYSQL_URL").then(|| "mysql://u:p@db/y".to_string())
        })
        .unwrap();
        assert_eq!(c.mysql.url, "mysql://u:p@db/y");
    }

    #[test]
    fn zookeeper_issuer_section() {
        let c = Config::parse(
            &format!("{MIN}issuer: {{backend: zookeeper, name: n1, zookeeper: {{hosts: ['zk1:2181', '10.0.0.2:2181']}}}}\n"),
            |_| None,
        )
        .unwrap();
        assert_eq!(c.issuer.backend, CounterBackend::ZooKeeper);
        assert_eq!(
            c.issuer.zookeeper,
            Some(ZooKeeperConfig {
                hosts: "zk1:2181,10.0.0.2:2181".into(),
                root: "/shorturl/issuer".into(),
                session_timeout: Duration::from_secs(6),
            })
        );
        // Given with another backend (for `issuer migrate`): read too.
        let c = Config::parse(
            &format!("{MIN}issuer: {{zookeeper: {{hosts: ['zk1:2181'], root: /a}}}}\n"),
            |_| None,
        )
        .unwrap();
        assert_eq!(c.issuer.backend, CounterBackend::Mysql);
        assert_eq!(c.issuer.zookeeper.map(|z| z.root), Some("/a".into()));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (MIN.replace("127.0.0.1:8081", "nope"), "listen"),
            (
                format!("{MIN}redirect: {{status: 200}}\n"),
                "redirect.status",
            ),
            (
                format!("{MIN}issuer: {{backend: hbase}}\n"),
                "issuer.backend",
            ),
            (
                format!("{MIN}issuer: {{block: 10, low_water: 10}}\n"),
                "issuer.low_water",
            ),
            (
                format!("{MIN}issuer: {{backend: zookeeper}}\n"),
                "issuer.zookeeper.hosts",
            ),
            (
                format!("{MIN}issuer: {{backend: zookeeper, zookeeper: {{hosts: ['zk1']}}}}\n"),
                "issuer.zookeeper.hosts",
            ),
            (
                format!("{MIN}issuer: {{backend: zookeeper, zookeeper: {{hosts: ['zk1:2181'], root: 'a/b'}}}}\n"),
                "issuer.zookeeper.root",
            ),
            (
                format!("{MIN}issuer: {{backend: zookeeper, zookeeper: {{hosts: ['zk1:2181'], root: '/a/../b'}}}}\n"),
                "issuer.zookeeper.root",
            ),
            (
                format!("{MIN}links: {{allowed_domains: ['a b']}}\n"),
                "links.allowed_domains",
            ),
            (
                format!("{MIN}apps: [{{name: a, key_sha256: xyz}}]\n"),
                "apps.a.key_sha256",
            ),
            (format!("{MIN}bogus: 1\n"), "bogus"),
            (
                format!(
                    "{MIN}apps: [{{name: a, key_sha256: '{}', scopes: [links:delete]}}]\n",
                    "a".repeat(64)
                ),
                "apps.a.scopes",
            ),
            (
                format!("{MIN}links: {{merchant_domains: {{x: [a.com]}}}}\n"),
                "links.merchant_domains",
            ),
            (
                format!("{MIN}links: {{merchant_domains: {{'5': ['a b']}}}}\n"),
                "links.merchant_domains.5",
            ),
            (
                format!("{MIN}links: {{merchant_domains: {{'5': [sho.rt]}}}}\n"),
                "links.merchant_domains.5",
            ),
            (format!("{MIN}status_allow: [10.0.0.1/8]\n"), "status_allow"),
            (format!("{MIN}status_allow: [nope]\n"), "status_allow"),
        ];
        for (text, field) in cases {
            let e = Config::parse(&text, |_| None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
