//! What every single-server connection shares, whether the server is named
//! (`single`) or found through Sentinels: the `ConnectionManager` settings,
//! the errors we make ourselves, and which errors mean the server is gone.
//! Below both [`super::conn`] and [`super::sentinel`], so neither imports
//! the other's helpers.

use super::config::ConnOptions;
use redis::aio::ConnectionManagerConfig;
use redis::RedisError;
use std::time::Duration;

/// The `ConnectionManager` settings every single-server connection uses:
/// one retry inside the caller's budget, short backoff.
pub(crate) fn manager_config(opts: ConnOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(opts.connect_timeout))
        .set_response_timeout(Some(opts.response_timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(500))
}

/// An error of our own making (no server answer), shaped like an I/O error
/// so callers treat it as "Redis unavailable".
pub(crate) fn setup_error(msg: String) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, msg))
}

/// Whether `e` says this connection reached the wrong server or none:
/// the cue for Sentinel re-resolution.
pub(crate) fn is_failover_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.code(), Some("READONLY" | "LOADING" | "MASTERDOWN"))
}
