//! MySQL connection pools, and the one server error the callers test for.
//! The schema lives in [`crate::schema`], the installation's `meta` state in
//! [`crate::store::meta`].

use crate::config::MysqlConfig;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};

/// Opens the pool (connections are made on demand).
pub fn pool(cfg: &MysqlConfig) -> Result<Pool, mysql_async::Error> {
    pool_for(&cfg.url, cfg.pool_max)
}

/// Opens a pool of at most `pool_max` connections to `url` (a shard, a
/// replica or the meta database).
pub fn pool_for(url: &str, pool_max: usize) -> Result<Pool, mysql_async::Error> {
    let opts = Opts::from_url(url)?;
    let constraints = PoolConstraints::new(pool_max.min(8), pool_max).unwrap_or_default();
    // No reset on return to the pool: a reset costs a round trip and throws
    // away the connection's prepared statements, so every statement would be
    // prepared again. The origin never leaves session state behind.
    let builder = OptsBuilder::from_opts(opts)
        .pool_opts(
            PoolOpts::default()
                .with_constraints(constraints)
                .with_reset_connection(false)
                // With the default TTL of 0 the pool keeps only `min` idle
                // connections and closes every other one on return, so each
                // statement paid a TCP connect and handshake (~9 ms).
                .with_inactive_connection_ttl(std::time::Duration::from_secs(60)),
        )
        .stmt_cache_size(Some(256))
        .tcp_nodelay(true)
        .prefer_socket(false);
    Ok(Pool::new(builder))
}

/// True when `e` is a duplicate-key error (1062).
pub fn is_duplicate(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == 1062)
}
