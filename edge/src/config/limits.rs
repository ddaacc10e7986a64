//! The `edge.limits` section, validated: per-client limits, request sizes,
//! timeouts and connection caps. It imports nothing of the edge but the
//! file format, so `conn` and `limits` take it without depending on the
//! loader (`config/mod.rs`), which depends on `tls::config`.

use super::file::LimitsFile;
use shorturl_common::config::{bad, FieldError};
use std::time::Duration;

/// Abuse limits; a rate or cap of 0 disables that limit.
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    pub unknown_per_ip_per_sec: u32,
    pub creations_per_ip_per_sec: u32,
    /// Creations the origin refused (401/403) per client per minute before
    /// further creations from it are answered 429 by the edge.
    pub refused_creations_per_ip_per_min: u32,
    /// Clients with live counters; the least recently seen is evicted.
    pub clients_tracked: usize,
    /// IPv6 clients are counted by this prefix (64: one subscriber).
    pub ipv6_prefix_len: u8,
    pub max_uri_bytes: usize,
    pub max_header_bytes: usize,
    pub client_timeout: Duration,
    pub keepalive_timeout_secs: u64,
    /// Time to receive a whole request head (from accept on a new
    /// connection, from the first byte on a kept-alive one).
    pub header_timeout: Duration,
    /// Concurrent client connections in total (0: no cap).
    pub max_connections: usize,
    /// Concurrent connections per client key (0: no cap).
    pub max_connections_per_ip: u32,
}

/// `edge.limits`.
pub fn from_file(f: &LimitsFile) -> Result<LimitsConfig, FieldError> {
    if f.max_uri_bytes < 64 || f.max_header_bytes < 256 {
        return bad(
            "edge.limits.max_uri_bytes",
            "must be >= 64, and edge.limits.max_header_bytes >= 256",
        );
    }
    if f.clients_tracked == 0 {
        return bad("edge.limits.clients_tracked", "must be at least 1");
    }
    if !(1..=128).contains(&f.ipv6_prefix_len) {
        return bad("edge.limits.ipv6_prefix_len", "must be between 1 and 128");
    }
    if f.header_timeout_secs == 0 {
        return bad("edge.limits.header_timeout_secs", "must be > 0");
    }
    Ok(LimitsConfig {
        unknown_per_ip_per_sec: f.unknown_per_ip_per_sec,
        creations_per_ip_per_sec: f.creations_per_ip_per_sec,
        refused_creations_per_ip_per_min: f.refused_creations_per_ip_per_min,
        clients_tracked: f.clients_tracked,
        ipv6_prefix_len: f.ipv6_prefix_len,
        max_uri_bytes: f.max_uri_bytes,
        max_header_bytes: f.max_header_bytes,
        client_timeout: Duration::from_secs(f.client_timeout_secs.max(1)),
        keepalive_timeout_secs: f.keepalive_timeout_secs.max(1),
        header_timeout: Duration::from_secs(f.header_timeout_secs),
        max_connections: f.max_connections,
        max_connections_per_ip: f.max_connections_per_ip,
    })
}
