//! Redis, read-only from the edge: `GET su:1:link:{code}`.
//!
//! A `ConnectionManager` reconnects by itself after Redis restarts (a bare
//! multiplexed connection never does). It is created lazily on first use
//! because no Tokio runtime exists before Pingora starts its services (and
//! `-d` forks). Every call is bounded by the configured timeout, connection
//! wait included, so a dead Redis costs a lookup tens of milliseconds, not
//! seconds.

use crate::config::RedisConfig;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::OnceLock;
use std::time::Duration;

/// Why a Redis read did not produce a value.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    #[error("redis timed out")]
    Timeout,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis client setup: {0}")]
    Setup(String),
}

/// Lazily connected, self-reconnecting Redis reader.
pub struct RedisStore {
    client: redis::Client,
    cfg: RedisConfig,
    manager: OnceLock<Result<ConnectionManager, String>>,
}

impl RedisStore {
    /// Validates the URL; connects on first use.
    pub fn new(cfg: RedisConfig) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(cfg.url.as_str())?;
        Ok(RedisStore {
            client,
            cfg,
            manager: OnceLock::new(),
        })
    }

    fn manager(&self) -> Result<ConnectionManager, RedisError> {
        let m = self
            .manager
            .get_or_init(|| lazy_manager(&self.client, self.cfg.connect_timeout, self.cfg.timeout));
        match m {
            Ok(m) => Ok(m.clone()),
            Err(e) => Err(RedisError::Setup(e.clone())),
        }
    }

    /// `GET key` within the timeout. `Ok(None)` is a miss.
    ///
    /// The first command on a connection that died while idle (Redis
    /// restarted) fails with a broken pipe while the manager starts its
    /// reconnect; one retry inside the same time budget turns that into an
    /// answer instead of a Redis error and an avoidable origin trip.
    pub async fn get(&self, key: &str) -> Result<Option<String>, RedisError> {
        let mut conn = self.manager()?;
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

/// A connection manager that connects on first use and reconnects by
/// itself (a bare multiplexed connection never recovers after a Redis
/// restart): one retry inside the caller's budget, short backoff. Every
/// Redis client of the edge is built here so they all behave alike.
pub(crate) fn lazy_manager(
    client: &redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<ConnectionManager, String> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(|e| e.to_string())
}
