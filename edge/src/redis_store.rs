//! Redis, read-only from the edge: `GET su:1:link:{code}`.
//!
//! The connection is a [`RedisConn`] (single server, Cluster or Sentinel,
//! see `shorturl_common::redis`): it connects on first use, because no
//! Tokio runtime exists before Pingora starts its services (and `-d`
//! forks), and reconnects by itself. Every call is bounded by the
//! configured timeout, connection wait included, so a dead Redis costs a
//! lookup tens of milliseconds, not seconds.

use crate::config::redis::RedisConfig;
use shorturl_common::redis::{ConnOptions, RedisConn};
use std::time::Duration;

/// Why a Redis read did not produce a value.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    #[error("redis timed out")]
    Timeout,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Lazily connected, self-reconnecting Redis reader.
pub struct RedisStore {
    conn: RedisConn,
    cfg: RedisConfig,
}

impl RedisStore {
    /// Validates the addresses; connects on first use.
    pub fn new(cfg: RedisConfig) -> Result<Self, redis::RedisError> {
        let conn = connect(&cfg, cfg.timeout)?;
        Ok(RedisStore { conn, cfg })
    }

    /// `GET key` within the timeout. `Ok(None)` is a miss.
    ///
    /// The first command on a connection that died while idle (Redis
    /// restarted) fails with a broken pipe while the manager starts its
    /// reconnect; one retry inside the same time budget turns that into an
    /// answer instead of a Redis error and an avoidable origin trip.
    pub async fn get(&self, key: &str) -> Result<Option<String>, RedisError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        let attempt = async {
            match cmd.query_async::<Option<String>>(&mut conn).await {
                Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                    cmd.query_async::<Option<String>>(&mut conn).await
                }
                r => r,
            }
        };
        match tokio::time::timeout(self.cfg.timeout, attempt).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(RedisError::Timeout),
        }
    }
}

/// A connection to the configured Redis (any mode) that connects on first
/// use and reconnects by itself, with `response_timeout` per command.
/// Every Redis client of the edge is built here so they all behave alike.
pub(crate) fn connect(
    cfg: &RedisConfig,
    response_timeout: Duration,
) -> Result<RedisConn, redis::RedisError> {
    RedisConn::new(
        &cfg.topology,
        ConnOptions {
            connect_timeout: cfg.connect_timeout,
            response_timeout,
        },
    )
}
