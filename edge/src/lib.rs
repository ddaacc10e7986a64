//! The short-link edge on Pingora.
//!
//! Redirects are answered in `request_filter` from an in-process cache, then
//! Redis, then the origin's record endpoint (coalesced per code); API routes
//! are proxied to a health-checked origin pool. See `docs/architecture.md`.

pub mod access_log;
pub mod cache;
pub mod config;
pub mod legacy_lua;
pub mod limits;
pub mod lookup;
pub mod metrics;
pub mod origin;
pub mod outcome;
pub mod proxy;
pub mod redis_store;
pub mod respond;
pub mod status;
