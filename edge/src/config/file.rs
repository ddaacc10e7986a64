//! The YAML file format of `conf/edge.yaml`. Kept apart from the internal
//! model ([`super::EdgeConfig`]) so the file can keep friendly units
//! (`*_ms`, `*_secs`) and defaults while the code works with `Duration`s.

use serde::Deserialize;
use shorturl_common::redirect::RedirectPolicy;
use shorturl_common::redis::RedisMode;

/// The whole file: Pingora's own `server` section next to ours.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Pingora `ServerConf` keys (threads, pid_file, upgrade_sock, grace periods...).
    pub server: serde_yaml::Value,
    /// The edge's own settings.
    pub edge: EdgeFile,
}

/// `edge:` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeFile {
    pub listen: Vec<String>,
    #[serde(default)]
    pub metrics_listen: Option<String>,
    pub default_domain: String,
    pub redis: RedisFile,
    pub origin: OriginFile,
    #[serde(default)]
    pub cache: CacheFile,
    #[serde(default)]
    pub redirect: RedirectPolicy,
    #[serde(default)]
    pub limits: LimitsFile,
    #[serde(default)]
    pub access_log: AccessLogFile,
    /// CIDRs of load balancers/proxies whose `X-Forwarded-For` is believed.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// CIDRs allowed to read `/shorturl_status`.
    #[serde(default = "d_status_allow")]
    pub status_allow: Vec<String>,
    /// TLS listeners (next to `listen`); empty: no TLS.
    #[serde(default)]
    pub tls_listen: Vec<String>,
    /// Certificate store and TLS settings (`crate::tls::config`).
    #[serde(default)]
    pub tls: crate::tls::config::TlsFile,
    /// Plain HTTP to HTTPS and HSTS.
    #[serde(default)]
    pub https: crate::tls::config::HttpsFile,
    /// ACME issuance.
    #[serde(default)]
    pub acme: crate::tls::config::AcmeFile,
    /// Click counting (`crate::clicks::config`).
    #[serde(default)]
    pub clicks: crate::clicks::config::ClicksFile,
    /// The cache of the pages for people (`crate::pages`).
    #[serde(default)]
    pub pages_cache: PagesCacheFile,
    /// The redirect fast path (`crate::fast_path`).
    #[serde(default)]
    pub fast_path: FastPathFile,
    /// Status heartbeat to every origin (admin console); 0: off.
    #[serde(default = "d_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// The visitor's country for the link rules (`config::geo`).
    #[serde(default)]
    pub geo: GeoFile,
    /// Password links' unlock tokens (`config::unlock`).
    #[serde(default)]
    pub unlock: UnlockFile,
}

/// `edge.unlock`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnlockFile {
    /// Base64 of 32 bytes each: every key an unlock token may be signed
    /// with (the origins' `unlock.key` and, while rotating, the previous).
    #[serde(default)]
    pub keys: Vec<String>,
}

/// `edge.geo`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoFile {
    /// Header with the country a trusted proxy or CDN sets.
    #[serde(default)]
    pub country_header: Option<String>,
    /// MMDB country database.
    #[serde(default)]
    pub mmdb_path: Option<String>,
    /// How often the database file is checked for a change.
    #[serde(default = "d_geo_reload_interval_ms")]
    pub reload_interval_ms: u64,
}

impl Default for GeoFile {
    fn default() -> Self {
        GeoFile {
            country_header: None,
            mmdb_path: None,
            reload_interval_ms: d_geo_reload_interval_ms(),
        }
    }
}

fn d_geo_reload_interval_ms() -> u64 {
    5_000
}

fn d_heartbeat_interval_ms() -> u64 {
    10_000
}

impl EdgeFile {
    /// The required keys; everything else at its default (what the YAML
    /// gives when only these are written).
    pub fn new(
        listen: Vec<String>,
        default_domain: String,
        redis: RedisFile,
        origin: OriginFile,
    ) -> Self {
        EdgeFile {
            listen,
            metrics_listen: None,
            default_domain,
            redis,
            origin,
            cache: CacheFile::default(),
            redirect: RedirectPolicy::default(),
            limits: LimitsFile::default(),
            access_log: AccessLogFile::default(),
            trusted_proxies: Vec::new(),
            status_allow: d_status_allow(),
            tls_listen: Vec::new(),
            tls: Default::default(),
            https: Default::default(),
            acme: Default::default(),
            clicks: Default::default(),
            pages_cache: Default::default(),
            fast_path: FastPathFile::default(),
            heartbeat_interval_ms: d_heartbeat_interval_ms(),
            geo: GeoFile::default(),
            unlock: UnlockFile::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisFile {
    /// `single` (default), `cluster` or `sentinel`.
    #[serde(default)]
    pub mode: RedisMode,
    /// single: the server; cluster/sentinel: credentials (and database) only.
    #[serde(default)]
    pub url: Option<String>,
    /// cluster: seed nodes, `host:port`.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// sentinel: the Sentinels, `host:port`.
    #[serde(default)]
    pub sentinels: Vec<String>,
    /// sentinel: the monitored master's name.
    #[serde(default)]
    pub master_name: Option<String>,
    #[serde(default = "d_redis_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "d_redis_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
}

impl RedisFile {
    /// `url` with the default timeouts.
    pub fn new(url: String) -> Self {
        RedisFile {
            mode: RedisMode::Single,
            url: Some(url),
            nodes: Vec::new(),
            sentinels: Vec::new(),
            master_name: None,
            timeout_ms: d_redis_timeout_ms(),
            connect_timeout_ms: d_redis_connect_timeout_ms(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginFile {
    pub servers: Vec<String>,
    #[serde(default = "d_origin_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(default = "d_origin_read_timeout_ms")]
    pub read_timeout_ms: u64,
    #[serde(default = "d_origin_record_timeout_ms")]
    pub record_timeout_ms: u64,
    #[serde(default = "d_origin_status_timeout_ms")]
    pub status_timeout_ms: u64,
    #[serde(default = "d_health_interval_ms")]
    pub health_check_interval_ms: u64,
    #[serde(default = "d_health_path")]
    pub health_check_path: String,
    /// How long a connection to an origin may sit idle in the pool (well
    /// under the origin's own idle close, `limits.header_timeout_secs`).
    #[serde(default = "d_origin_pool_idle_timeout_ms")]
    pub pool_idle_timeout_ms: u64,
    /// The shared edge token, sent as `Authorization: Bearer` on the edge's
    /// own requests to an origin (`SHORTURL_EDGE_INTERNAL_TOKEN` overrides).
    #[serde(default)]
    pub internal_token: Option<String>,
}

impl OriginFile {
    /// `servers` with the default timeouts and health check.
    pub fn new(servers: Vec<String>) -> Self {
        OriginFile {
            servers,
            connect_timeout_ms: d_origin_connect_timeout_ms(),
            read_timeout_ms: d_origin_read_timeout_ms(),
            record_timeout_ms: d_origin_record_timeout_ms(),
            status_timeout_ms: d_origin_status_timeout_ms(),
            health_check_interval_ms: d_health_interval_ms(),
            health_check_path: d_health_path(),
            pool_idle_timeout_ms: d_origin_pool_idle_timeout_ms(),
            internal_token: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheFile {
    pub max_bytes: usize,
    pub positive_ttl_secs: u64,
    pub negative_ttl_secs: u64,
    pub unavailable_ttl_ms: u64,
    /// How long an invalidation's version is remembered against lookups
    /// that read an older state before the message arrived.
    pub tombstone_ttl_ms: u64,
    /// While the invalidation subscription is down, entries are trusted at
    /// most this long past its last sign of life.
    pub unsubscribed_grace_ms: u64,
    /// Let the kernel back the edge's memory with transparent huge pages
    /// (default false: RSS then follows what the cache really uses).
    pub transparent_huge_pages: bool,
}

impl Default for CacheFile {
    fn default() -> Self {
        CacheFile {
            max_bytes: 64 << 20,
            positive_ttl_secs: 30,
            negative_ttl_secs: 5,
            unavailable_ttl_ms: 1000,
            tombstone_ttl_ms: 10_000,
            unsubscribed_grace_ms: 5_000,
            transparent_huge_pages: false,
        }
    }
}

/// `pages_cache:` section: QR codes and previews cached on the edge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PagesCacheFile {
    /// Byte budget of the cached pages (bodies and headers); the least
    /// recently used are evicted past it.
    pub max_bytes: usize,
    /// Larger answers are passed through, not cached.
    pub max_entry_bytes: usize,
    /// How long past its freshness a cached page is still served while the
    /// origin is down or answers 5xx.
    pub stale_if_error_secs: u64,
    /// Longest wait of a request for another one fetching the same page.
    pub lock_timeout_ms: u64,
}

impl Default for PagesCacheFile {
    fn default() -> Self {
        PagesCacheFile {
            max_bytes: 32 << 20,
            max_entry_bytes: 1 << 20,
            stale_if_error_secs: 86_400,
            lock_timeout_ms: 3_000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsFile {
    pub unknown_per_ip_per_sec: u32,
    pub creations_per_ip_per_sec: u32,
    pub max_uri_bytes: usize,
    pub max_header_bytes: usize,
    pub client_timeout_secs: u64,
    pub keepalive_timeout_secs: u64,
    pub refused_creations_per_ip_per_min: u32,
    pub clients_tracked: usize,
    pub ipv6_prefix_len: u8,
    pub header_timeout_secs: u64,
    pub max_connections: usize,
    pub max_connections_per_ip: u32,
}

impl Default for LimitsFile {
    fn default() -> Self {
        LimitsFile {
            unknown_per_ip_per_sec: 50,
            creations_per_ip_per_sec: 20,
            max_uri_bytes: 4096,
            max_header_bytes: 16384,
            client_timeout_secs: 10,
            keepalive_timeout_secs: 60,
            refused_creations_per_ip_per_min: 10,
            clients_tracked: 100_000,
            ipv6_prefix_len: 64,
            header_timeout_secs: 5,
            max_connections: 10_000,
            max_connections_per_ip: 64,
        }
    }
}

/// `edge.fast_path`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FastPathFile {
    /// Answer cached hits before a proxy session exists (default true).
    pub enabled: bool,
}

impl Default for FastPathFile {
    fn default() -> Self {
        FastPathFile { enabled: true }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogFile {
    /// File path, `-` for stdout, or empty/absent to disable.
    pub path: Option<String>,
    pub flush_interval_ms: u64,
    /// Log client addresses cut to IPv4 /24 and IPv6 /48.
    pub truncate_addresses: bool,
}

impl Default for AccessLogFile {
    fn default() -> Self {
        AccessLogFile {
            path: None,
            flush_interval_ms: 200,
            truncate_addresses: false,
        }
    }
}

fn d_redis_timeout_ms() -> u64 {
    30
}
fn d_redis_connect_timeout_ms() -> u64 {
    200
}
fn d_origin_connect_timeout_ms() -> u64 {
    100
}
fn d_origin_read_timeout_ms() -> u64 {
    5000
}
fn d_origin_record_timeout_ms() -> u64 {
    500
}
fn d_origin_status_timeout_ms() -> u64 {
    300
}
fn d_origin_pool_idle_timeout_ms() -> u64 {
    5000
}
fn d_health_interval_ms() -> u64 {
    1000
}
fn d_health_path() -> String {
    "/healthz".into()
}
/// Loopback and private ranges: operators and monitoring, not the internet.
pub fn d_status_allow() -> Vec<String> {
    shorturl_common::cidr::DEFAULT_STATUS_ALLOW
        .map(String::from)
        .to_vec()
}
