//! The `edge.limits` section, validated: per-client limits, request sizes,
//! timeouts and connection caps. A file of its own that imports nothing of
//! the edge, so `conn` and `limits` take it without depending on the
//! loader (`config/mod.rs`), which depends on `tls::config`.

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
