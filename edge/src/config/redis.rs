//! The `edge.redis` section, validated: where Redis is and the budgets of
//! a call. A file of its own that imports nothing of the edge, so every
//! Redis client (lookups, invalidation, clicks, the TLS shared store)
//! takes it without depending on the loader (`config/mod.rs`), which
//! depends on `tls::config` and `clicks::config`.

use shorturl_common::redis::{ConnOptions, RedisTopology};
use std::time::Duration;

/// Redis, the shared cache in front of the origin.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// Where Redis is (`redis.mode` and its addresses).
    pub topology: RedisTopology,
    /// Budget for one `GET` inside a lookup (connection wait included).
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

impl RedisConfig {
    /// The timeouts of the lookup connection (and of every other one that
    /// has no budget of its own).
    pub fn options(&self) -> ConnOptions {
        ConnOptions {
            connect_timeout: self.connect_timeout,
            response_timeout: self.timeout,
        }
    }
}
