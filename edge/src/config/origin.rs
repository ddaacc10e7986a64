//! `edge.origin`: the origin pool, its timeouts and health check, and the
//! token the edge's own requests carry.

use super::file::OriginFile;
use super::{err, ms, resolve, ConfigError, ENV_INTERNAL_TOKEN, ENV_ORIGINS};
use std::net::SocketAddr;
use std::time::Duration;

/// The origin pool.
#[derive(Debug, Clone)]
pub struct OriginConfig {
    pub servers: Vec<SocketAddr>,
    pub connect_timeout: Duration,
    /// Read timeout for forwarded API requests.
    pub read_timeout: Duration,
    /// Whole budget of one record fetch on the miss path.
    pub record_timeout: Duration,
    /// Whole budget of the status fetch behind `/shorturl_status`.
    pub status_timeout: Duration,
    pub health_check_interval: Duration,
    pub health_check_path: String,
    /// Longest an idle connection to an origin stays pooled (proxied
    /// requests and the edge's own): shorter than the origin keeps it.
    pub pool_idle_timeout: Duration,
    /// Sent as `Authorization: Bearer` on the edge's own requests (record,
    /// whitelist, heartbeat, status merge); `None`: no header.
    pub internal_token: Option<InternalToken>,
}

/// The shared edge token (`edge.origin.internal_token`, protocol section
/// 5): 1 to 512 visible ASCII characters. A secret: its `Debug` never
/// shows it, and no message or status document names it.
#[derive(Clone, PartialEq, Eq)]
pub struct InternalToken(String);

impl InternalToken {
    /// Checks a configured value; the error names the setting, never the value.
    pub fn new(value: String) -> Result<Self, ConfigError> {
        if value.is_empty() || value.len() > 512 || !value.bytes().all(|b| b.is_ascii_graphic()) {
            return err(
                "edge.origin.internal_token",
                format!(
                    "(or {ENV_INTERNAL_TOKEN}) must be 1 to 512 visible ASCII characters (no \
                     spaces); omit it to send none"
                ),
            );
        }
        Ok(InternalToken(value))
    }

    /// The token itself (for the `Authorization` header only).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for InternalToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InternalToken(<redacted>)")
    }
}

/// `edge.origin`, with `SHORTURL_EDGE_ORIGINS` and
/// `SHORTURL_EDGE_INTERNAL_TOKEN` from `env` overriding the file.
pub fn from_file(
    f: OriginFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<OriginConfig, ConfigError> {
    let servers_raw: Vec<String> = match env(ENV_ORIGINS) {
        Some(list) => list
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
        None => f.servers,
    };
    if servers_raw.is_empty() {
        return err("edge.origin.servers", "must list at least one origin");
    }
    let servers = servers_raw
        .iter()
        .map(|s| resolve(s, "edge.origin.servers"))
        .collect::<Result<Vec<_>, _>>()?;
    if !f.health_check_path.starts_with('/') {
        return err("edge.origin.health_check_path", "must start with /");
    }
    Ok(OriginConfig {
        servers,
        connect_timeout: ms(f.connect_timeout_ms, "edge.origin.connect_timeout_ms")?,
        read_timeout: ms(f.read_timeout_ms, "edge.origin.read_timeout_ms")?,
        record_timeout: ms(f.record_timeout_ms, "edge.origin.record_timeout_ms")?,
        status_timeout: ms(f.status_timeout_ms, "edge.origin.status_timeout_ms")?,
        health_check_interval: ms(
            f.health_check_interval_ms,
            "edge.origin.health_check_interval_ms",
        )?,
        health_check_path: f.health_check_path,
        pool_idle_timeout: ms(f.pool_idle_timeout_ms, "edge.origin.pool_idle_timeout_ms")?,
        internal_token: env(ENV_INTERNAL_TOKEN)
            .filter(|t| !t.is_empty())
            .or(f.internal_token)
            .map(InternalToken::new)
            .transpose()?,
    })
}
