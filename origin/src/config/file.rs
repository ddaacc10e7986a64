//! The YAML file format of `conf/origin.yaml`. Only serde lives here; the
//! validated model the service uses is [`super::Config`].

use super::CounterBackend;
use serde::Deserialize;
use shorturl_common::redirect::RedirectPolicy;
use shorturl_common::redis::RedisMode;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: String,
    pub default_domain: String,
    #[serde(default = "default_scheme")]
    pub public_scheme: String,
    #[serde(default)]
    pub public_port: Option<u16>,
    pub mysql: MysqlFile,
    pub redis: RedisFile,
    #[serde(default)]
    pub issuer: IssuerFile,
    #[serde(default)]
    pub links: LinksFile,
    #[serde(default)]
    pub redirect: RedirectPolicy,
    #[serde(default)]
    pub apps: Vec<AppFile>,
    #[serde(default)]
    pub apollo: Option<crate::apollo::ApolloFile>,
    #[serde(default)]
    pub clicks: ClicksFile,
    #[serde(default)]
    pub shutdown_grace_secs: Option<u64>,
    /// CIDRs that may read `/shorturl_status` (default: loopback and private ranges).
    #[serde(default)]
    pub status_allow: Option<Vec<String>>,
    #[serde(default)]
    pub lifecycle: LifecycleFile,
    #[serde(default)]
    pub pages: PagesFile,
    /// The admin console (`/admin/`); see `super::admin::AdminConfig`.
    #[serde(default)]
    pub admin: Option<AdminFile>,
    /// Connection limits of the listener (`super::serving`).
    #[serde(default)]
    pub limits: ServeLimitsFile,
    /// Who may call `/internal/*` and `/metrics` (`super::serving`).
    #[serde(default)]
    pub internal: Option<InternalFile>,
    /// After SIGTERM, keep serving this long while `/healthz` says draining.
    #[serde(default)]
    pub drain_secs: Option<u64>,
    /// Password-protected links (`super::unlock`).
    #[serde(default)]
    pub unlock: UnlockFile,
    /// In-app browser guidance (`super::guide`).
    #[serde(default)]
    pub guide: GuideFile,
    /// Destination screening (`super::screening`).
    #[serde(default)]
    pub screening: ScreeningFile,
    /// Webhooks (`super::webhooks`).
    #[serde(default)]
    pub webhooks: WebhooksFile,
}

/// `webhooks:` (issue 28).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhooksFile {
    /// Base64 of 32 bytes: seals endpoint secrets (or `SHORTURL_WEBHOOK_KEY`).
    #[serde(default)]
    pub key: Option<String>,
    /// Earlier keys, still opening secrets sealed with them.
    #[serde(default)]
    pub old_keys: Vec<String>,
    #[serde(default)]
    pub allow_http: Option<bool>,
    /// CIDRs endpoints may resolve to although not public.
    #[serde(default)]
    pub allow_networks: Vec<String>,
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub max_in_flight_per_endpoint: Option<u64>,
    #[serde(default)]
    pub retry_base_ms: Option<u64>,
    #[serde(default)]
    pub retry_max_ms: Option<u64>,
    #[serde(default)]
    pub give_up_after_secs: Option<u64>,
    #[serde(default)]
    pub keep_finished_days: Option<u64>,
    #[serde(default)]
    pub max_endpoints_per_app: Option<u64>,
    /// The period of a link.clicked digest (default 60).
    #[serde(default)]
    pub click_digest_secs: Option<u64>,
}

/// `screening:` (protocol 4.7).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreeningFile {
    /// Domain lists (hosts-file or one domain per line), each with its action.
    #[serde(default)]
    pub files: Vec<ScreeningListFile>,
    /// How often every origin reads the managed entries and the files'
    /// modification times (default 5).
    #[serde(default)]
    pub refresh_secs: Option<u64>,
    /// The pass's lease (default 60).
    #[serde(default)]
    pub lease_ttl_secs: Option<u64>,
    /// Links read per statement of the pass (default 500).
    #[serde(default)]
    pub pass_batch: Option<u32>,
}

/// One list of `screening.files`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreeningListFile {
    pub path: std::path::PathBuf,
    /// `block` (default), `warn` or `allow`.
    #[serde(default)]
    pub action: Option<String>,
}

/// `guide:` (protocol 4.6).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuideFile {
    /// Links guide unless their domain or they say otherwise (default true).
    #[serde(default)]
    pub default: Option<bool>,
    /// Per short domain: on or off.
    #[serde(default)]
    pub domains: std::collections::BTreeMap<String, bool>,
    /// The in-app browsers guided (default wechat, qq, weibo, alipay, dingtalk).
    #[serde(default)]
    pub apps: Option<Vec<String>>,
    /// Destinations whose path ends with `.<ext>` (default [apk]).
    #[serde(default)]
    pub extensions: Option<Vec<String>>,
    /// Destinations on these hosts or their subdomains.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// `unlock:` (protocol 4.5).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnlockFile {
    /// Base64 of 32 bytes: signs unlock tokens (or `SHORTURL_UNLOCK_KEY`).
    #[serde(default)]
    pub key: Option<String>,
    /// Earlier keys, still accepted on the origin's own `/{code}`.
    #[serde(default)]
    pub old_keys: Vec<String>,
    #[serde(default)]
    pub token_ttl_secs: Option<u64>,
    #[serde(default)]
    pub burst: Option<u32>,
    #[serde(default)]
    pub refill_per_min: Option<u32>,
    #[serde(default)]
    pub address_burst: Option<u32>,
    #[serde(default)]
    pub address_refill_per_min: Option<u32>,
    #[serde(default)]
    pub max_concurrent_checks: Option<u32>,
}

/// `limits:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeLimitsFile {
    #[serde(default)]
    pub header_timeout_secs: Option<u64>,
    #[serde(default)]
    pub max_connections: Option<usize>,
    #[serde(default)]
    pub max_connections_per_ip: Option<u32>,
    #[serde(default)]
    pub ipv6_prefix_len: Option<u8>,
}

/// `internal:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InternalFile {
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub token_sha256: Option<String>,
}

fn default_scheme() -> String {
    "https".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlFile {
    pub url: String,
    #[serde(default)]
    pub pool_max: Option<usize>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub claim_batch: Option<usize>,
    #[serde(default)]
    pub claim_workers: Option<usize>,
    /// Shards by id range (config/shards.rs); absent: `url` holds every id.
    #[serde(default)]
    pub shards: Option<Vec<ShardFile>>,
    #[serde(default)]
    pub skip_dead_shards: Option<bool>,
}

/// One entry of `mysql.shards`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardFile {
    pub name: String,
    pub first_id: u64,
    pub last_id: u64,
    pub url: String,
    #[serde(default)]
    pub replicas: Vec<String>,
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
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub record_ttl_secs: Option<u64>,
    #[serde(default)]
    pub negative_ttl_secs: Option<u64>,
    #[serde(default)]
    pub dedup_ttl_secs: Option<u64>,
    #[serde(default)]
    pub legacy_keys: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerFile {
    #[serde(default)]
    pub backend: CounterBackend,
    #[serde(default)]
    pub block: Option<u64>,
    #[serde(default)]
    pub low_water: Option<u64>,
    #[serde(default)]
    pub name: Option<String>,
    /// Where the counter lives with `backend: zookeeper`.
    #[serde(default)]
    pub zookeeper: Option<ZooKeeperFile>,
}

/// `issuer.zookeeper`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZooKeeperFile {
    /// The ensemble, `host:port` each.
    pub hosts: Vec<String>,
    /// The parent of the counter znodes (default `/shorturl/issuer`).
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub session_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinksFile {
    #[serde(default)]
    pub default_ttl_days: Option<u32>,
    #[serde(default)]
    pub max_ttl_days: Option<u32>,
    #[serde(default)]
    pub max_url_bytes: Option<usize>,
    /// Default of a new link's `forward_query` (false).
    #[serde(default)]
    pub forward_query: Option<bool>,
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    #[serde(default)]
    pub max_batch_body_bytes: Option<usize>,
    #[serde(default)]
    pub max_import_body_bytes: Option<usize>,
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// kdt_id (as a string or an integer key) → that merchant's domains.
    #[serde(default)]
    pub merchant_domains: std::collections::BTreeMap<String, Vec<String>>,
    /// Custom codes an app may be refused per minute (0 = no limit).
    #[serde(default)]
    pub custom_code_refusals_per_min: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppFile {
    pub name: String,
    pub key_sha256: String,
    #[serde(default)]
    pub rate_per_sec: Option<f64>,
    #[serde(default)]
    pub burst: Option<f64>,
    /// `links:create`, `links:read`, `links:manage`, `stats:read`, `admin`;
    /// absent: the first three (own links only).
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// kdt_ids this key is bound to (absent or empty: none).
    #[serde(default)]
    pub merchants: Vec<u64>,
    /// May create links whose target is a domain this fleet serves.
    #[serde(default)]
    pub allow_short_domain_targets: bool,
}

/// `lifecycle:` (the reaper; absent keys take the defaults of
/// [`super::lifecycle::LifecycleConfig`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleFile {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub reap_rate_per_sec: Option<u32>,
    #[serde(default)]
    pub reap_batch: Option<usize>,
    #[serde(default)]
    pub reap_interval_secs: Option<u64>,
    #[serde(default)]
    pub lease_ttl_secs: Option<u64>,
    #[serde(default)]
    pub recycle: Option<bool>,
    #[serde(default)]
    pub quarantine_days: Option<u32>,
    #[serde(default)]
    pub max_edge_cache_ttl_secs: Option<u64>,
}

/// `clicks:` (all optional; see `super::clicks::ClicksConfig`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClicksFile {
    #[serde(default)]
    pub consume: Option<bool>,
    #[serde(default)]
    pub block_ms: Option<u64>,
    #[serde(default)]
    pub read_count: Option<usize>,
    #[serde(default)]
    pub claim_idle_ms: Option<u64>,
    #[serde(default)]
    pub max_hour_points: Option<u64>,
    #[serde(default)]
    pub max_day_points: Option<u64>,
    #[serde(default)]
    pub retention_hours_days: Option<u64>,
    #[serde(default)]
    pub batch_ids_retention_days: Option<u64>,
    #[serde(default)]
    pub consumer_idle_secs: Option<u64>,
    /// Links the live view follows at once (0: no live view).
    #[serde(default)]
    pub live_max_links: Option<usize>,
    #[serde(default)]
    pub referrers_per_day: Option<usize>,
    #[serde(default)]
    pub retention_referrers_days: Option<u64>,
}

/// `pages:` (QR codes, the preview page and HTML 404 pages; see
/// `super::pages::PagesConfig`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagesFile {
    #[serde(default)]
    pub default: ThemeFile,
    /// Normalised host → its theme (absent fields: the default's).
    #[serde(default)]
    pub domains: std::collections::BTreeMap<String, ThemeFile>,
    #[serde(default)]
    pub qr_max_age_secs: Option<u64>,
    #[serde(default)]
    pub preview_max_age_secs: Option<u64>,
}

/// One theme of the HTML pages; colours are `#rrggbb`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThemeFile {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub background: Option<String>,
    #[serde(default)]
    pub foreground: Option<String>,
    #[serde(default)]
    pub accent: Option<String>,
}

/// `admin:` (the console; see `super::admin::AdminConfig`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminFile {
    #[serde(default)]
    pub users: Vec<AdminUserFile>,
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    #[serde(default)]
    pub absolute_timeout_secs: Option<u64>,
    /// CIDRs whose `X-Forwarded-Proto` is believed (default: none).
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    #[serde(default)]
    pub signin_burst: Option<u32>,
    #[serde(default)]
    pub signin_refill_per_min: Option<u32>,
    #[serde(default)]
    pub signin_address_burst: Option<u32>,
    #[serde(default)]
    pub signin_address_refill_per_min: Option<u32>,
    #[serde(default)]
    pub max_concurrent_signins: Option<u32>,
    /// Whether the configured users may sign in with their passwords
    /// (default true; false needs `oidc`).
    #[serde(default)]
    pub password_signin: Option<bool>,
    /// Single sign-on (`super::oidc`).
    #[serde(default)]
    pub oidc: Option<OidcFile>,
}

/// `admin.oidc:` (see `super::oidc::OidcConfig`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcFile {
    pub issuer: String,
    pub client_id: String,
    /// Overridden by `SHORTURL_OIDC_CLIENT_SECRET`.
    #[serde(default)]
    pub client_secret: Option<String>,
    pub redirect_url: String,
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    #[serde(default)]
    pub name_claim: Option<String>,
    #[serde(default)]
    pub roles_claim: Option<String>,
    /// Claim value -> `viewer`, `operator` or `admin`.
    #[serde(default)]
    pub roles: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub merchants_claim: Option<String>,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One console user.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminUserFile {
    pub name: String,
    /// argon2id PHC string (`shorturl-origin hash-password`).
    pub password_hash: String,
    /// `viewer`, `operator` or `admin`.
    pub role: String,
    /// Merchants (kdt_id) a support user is restricted to.
    #[serde(default)]
    pub merchants: Vec<u64>,
}
