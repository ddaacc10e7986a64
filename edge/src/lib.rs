//! The short-link edge on Pingora.
//!
//! Redirects are answered in `request_filter` from an in-process cache, then
//! Redis, then the origin's record endpoint (coalesced per code); API routes
//! are proxied to a health-checked origin pool; invalidation messages from
//! Redis pub/sub keep the in-process cache current (`inval`). Connections pass through
//! `conn` first (connection caps, request-head deadline), then `fast_path`,
//! which answers hot cache hits before a proxy session exists and hands
//! everything else to the proxy. Every redirect is
//! counted as a click (`clicks`), flushed to a Redis Stream in batches. QR
//! codes and previews are proxied through `pingora-cache` (`pages`). See
//! `docs/architecture.md`.

pub mod access_log;
pub mod alloc;
pub mod cache;
pub mod clicks;
pub mod config;
pub mod conn;
pub mod decide;
pub mod fast_path;
pub mod geo;
pub mod heartbeat;
pub mod inval;
pub mod limits;
pub mod lookup;
pub mod metrics;
pub mod net;
pub mod origin;
pub mod outcome;
pub mod pages;
pub mod proxy;
pub mod redis_store;
pub mod request_rules;
pub mod respond;
pub mod route;
pub mod start;
pub mod state;
pub mod status;
pub mod tls;
