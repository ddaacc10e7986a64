//! The YAML file format of `conf/edge.yaml`. Kept apart from the internal
//! model ([`super::EdgeConfig`]) so the file can keep friendly units
//! (`*_ms`, `*_secs`) and defaults while the code works with `Duration`s.

use serde::Deserialize;
use shorturl_common::redirect::RedirectPolicy;

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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisFile {
    pub url: String,
    #[serde(default = "d_redis_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "d_redis_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheFile {
    pub max_bytes: usize,
    pub positive_ttl_secs: u64,
    pub negative_ttl_secs: u64,
    pub unavailable_ttl_ms: u64,
}

impl Default for CacheFile {
    fn default() -> Self {
        CacheFile {
            max_bytes: 64 << 20,
            positive_ttl_secs: 30,
            negative_ttl_secs: 5,
            unavailable_ttl_ms: 1000,
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
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogFile {
    /// File path, `-` for stdout, or empty/absent to disable.
    pub path: Option<String>,
    pub flush_interval_ms: u64,
}

impl Default for AccessLogFile {
    fn default() -> Self {
        AccessLogFile {
            path: None,
            flush_interval_ms: 200,
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
fn d_health_interval_ms() -> u64 {
    1000
}
fn d_health_path() -> String {
    "/healthz".into()
}
