//! How the origin serves connections: `limits:` (head deadline and
//! connection caps), `internal:` (who may call `/internal/*` and
//! `/metrics`) and `drain_secs` (rolling restarts).

use super::file::{InternalFile, ServeLimitsFile};
use super::{err, positive, private_networks, ConfigError};
use shorturl_common::cidr::CidrList;
use shorturl_common::conn_caps::CapsConfig;
use std::time::Duration;

/// Connection limits of the HTTP listener.
#[derive(Debug, Clone)]
pub struct ServeLimits {
    /// A request head must be complete this long after accept or after the
    /// previous answer on a kept-alive connection (so it also bounds idle
    /// keep-alive: edges pool connections for less, `origin.pool_idle_timeout_ms`).
    pub header_timeout: Duration,
    /// Caps on open connections (0 = off), per client by `ipv6_prefix_len`.
    pub caps: CapsConfig,
}

/// Access to the edges' routes (`/internal/*`) and `/metrics`.
#[derive(Debug, Clone)]
pub struct InternalConfig {
    /// Peers that may reach them at all; anyone else gets the protocol 404.
    pub allow: CidrList,
    /// SHA-256 of the edges' shared token (`Authorization: Bearer`). `None`:
    /// loopback peers only, without a token.
    pub token_sha256: Option<[u8; 32]>,
}

pub(super) fn limits(f: ServeLimitsFile) -> Result<ServeLimits, ConfigError> {
    let v6_prefix = f.ipv6_prefix_len.unwrap_or(64);
    if v6_prefix > 128 {
        return err("limits.ipv6_prefix_len", "at most 128");
    }
    Ok(ServeLimits {
        header_timeout: Duration::from_secs(positive(
            f.header_timeout_secs,
            10,
            "limits.header_timeout_secs",
        )?),
        caps: CapsConfig {
            max_total: f.max_connections.unwrap_or(8192),
            max_per_client: f.max_connections_per_ip.unwrap_or(512),
            v6_prefix,
            exempt: CidrList::default(),
        },
    })
}

pub(super) fn internal(
    f: Option<InternalFile>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<InternalConfig, ConfigError> {
    let f = f.unwrap_or_default();
    let allow = private_networks(f.allow.as_deref(), "internal.allow")?;
    let token = env("SHORTURL_INTERNAL_TOKEN_SHA256").or(f.token_sha256);
    let token_sha256 = match token {
        None => None,
        Some(hex_text) => {
            let mut out = [0u8; 32];
            if hex::decode_to_slice(hex_text.trim(), &mut out).is_err() {
                return err(
                    "internal.token_sha256",
                    "must be 64 hex digits (printf %s \"$TOKEN\" | sha256sum)",
                );
            }
            Some(out)
        }
    };
    Ok(InternalConfig {
        allow,
        token_sha256,
    })
}
