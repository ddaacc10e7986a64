//! Durable counters that hand out id blocks. Each call moves the counter by
//! a whole block, so the counter sees 1/block of the creation rate.

use crate::config::{CounterBackend, IssuerConfig};
use futures::future::BoxFuture;
use mysql_async::prelude::*;
use mysql_async::Pool;
use shorturl_common::keys;
use shorturl_common::redis::RedisConn;

/// Why the durable counter could not be advanced.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    #[error("mysql counter: {0}")]
    Mysql(#[from] mysql_async::Error),
    #[error("mysql counter: the statement returned no LAST_INSERT_ID")]
    NoInsertId,
    #[error("redis counter: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("zookeeper counter: {0}")]
    ZooKeeper(#[from] zookeeper_client::Error),
    #[error("zookeeper counter: {0} does not hold a whole number")]
    ZooKeeperValue(String),
    #[error("zookeeper counter: {0} compare-and-set conflicts in a row")]
    ZooKeeperContended(u32),
    #[error("counter returned {got}, below one block of {block}")]
    BelowBlock { got: u64, block: u64 },
}

/// The counter named `cfg.name` on `backend` (the configured one, or another
/// for `issuer migrate`); `floor` is the highest id known to be used, under
/// which the Redis and ZooKeeper counters never hand out a block. `None`:
/// the ZooKeeper backend without `issuer.zookeeper`.
pub fn open(
    backend: CounterBackend,
    cfg: &IssuerConfig,
    name: &str,
    mysql: &Pool,
    redis: RedisConn,
    floor: u64,
) -> Option<Box<dyn Counter>> {
    Some(match backend {
        CounterBackend::Mysql => Box::new(MysqlCounter::new(mysql.clone(), name.to_owned())),
        CounterBackend::Redis => Box::new(RedisCounter::new(redis, name, floor)),
        CounterBackend::ZooKeeper => Box::new(super::zookeeper::ZooKeeperCounter::new(
            cfg.zookeeper.clone()?,
            name,
            floor,
        )),
    })
}

/// A durable, atomic counter.
pub trait Counter: Send + Sync + 'static {
    /// Atomically adds `n` and returns the new value: the block
    /// `value - n + 1 ..= value` now belongs to the caller alone.
    fn advance(&self, n: u64) -> BoxFuture<'_, Result<u64, CounterError>>;
    /// Backend name for logs and status.
    fn kind(&self) -> &'static str;
    /// Raises the counter to at least `v` (never lowers it): issuing
    /// continues after `v` (a shard that is down is skipped).
    fn raise_to(&self, v: u64) -> BoxFuture<'_, Result<(), CounterError>> {
        Box::pin(async move {
            let now = self.advance(0).await?;
            if now < v {
                self.advance(v - now).await?;
            }
            Ok(())
        })
    }
}

/// One row of the `counter` table; `LAST_INSERT_ID(expr)` returns the value
/// this connection wrote, so no second statement and no explicit lock.
pub struct MysqlCounter {
    pool: Pool,
    name: String,
}

impl MysqlCounter {
    /// Counter row `name` (created at 0 if missing).
    pub fn new(pool: Pool, name: String) -> Self {
        MysqlCounter { pool, name }
    }
}

impl Counter for MysqlCounter {
    fn advance(&self, n: u64) -> BoxFuture<'_, Result<u64, CounterError>> {
        Box::pin(async move {
            let mut conn = self.pool.get_conn().await?;
            conn.exec_drop(
                "INSERT INTO counter (name, value) VALUES (?, LAST_INSERT_ID(?)) \
                 ON DUPLICATE KEY UPDATE value = LAST_INSERT_ID(value + ?)",
                (&self.name, n, n),
            )
            .await?;
            conn.last_insert_id().ok_or(CounterError::NoInsertId)
        })
    }

    fn kind(&self) -> &'static str {
        "mysql"
    }

    fn raise_to(&self, v: u64) -> BoxFuture<'_, Result<(), CounterError>> {
        Box::pin(async move {
            let mut conn = self.pool.get_conn().await?;
            conn.exec_drop(
                "INSERT INTO counter (name, value) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE value = GREATEST(value, VALUES(value))",
                (&self.name, v),
            )
            .await?;
            Ok(())
        })
    }
}

/// Redis `INCRBY`, guarded by a floor: if the key was lost (Redis restarted
/// without persistence) the counter is first raised to the highest id known
/// to be used, so it never walks back over issued ids. Claims check
/// `state = free` too, so even a lower value could not issue a code twice.
pub struct RedisCounter {
    conn: RedisConn,
    key: String,
    floor: std::sync::atomic::AtomicU64,
}

const INCR_WITH_FLOOR: &str = r"
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[2])
if v < floor then redis.call('SET', KEYS[1], floor) end
return redis.call('INCRBY', KEYS[1], ARGV[1])
";

impl RedisCounter {
    /// Counter `su:1:issuer:<name>`; `floor` is the highest used id known now.
    pub fn new(conn: RedisConn, name: &str, floor: u64) -> Self {
        RedisCounter {
            conn,
            key: keys::issuer_key(name),
            floor: floor.into(),
        }
    }
}

impl Counter for RedisCounter {
    fn advance(&self, n: u64) -> BoxFuture<'_, Result<u64, CounterError>> {
        Box::pin(async move {
            let mut c = self.conn.clone();
            let floor = self.floor.load(std::sync::atomic::Ordering::Relaxed);
            let v: u64 = redis::Script::new(INCR_WITH_FLOOR)
                .key(&self.key)
                .arg(n)
                .arg(floor)
                .invoke_async(&mut c)
                .await?;
            self.floor
                .fetch_max(v, std::sync::atomic::Ordering::Relaxed);
            Ok(v)
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
