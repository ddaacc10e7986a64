//! `shorturl-origin issuer migrate --from A --to B`: moves the issuer's
//! counter from one backend to another while the origins are stopped.
//!
//! The destination is raised to the highest of the source's value and the
//! highest id MySQL knows to be used, and never lowered: a destination that
//! is already ahead (it issued before, say) keeps its value. So a move can
//! never hand out an id twice, whichever way it goes; the command reads the
//! destination back and fails if it is not at least there.

use super::counter::{self, Counter, CounterError};
use crate::cache::Cache;
use crate::config::{Config, CounterBackend};
use crate::metrics::Metrics;
use crate::store::{meta, ShardMap};
use crate::{db, schema};
use std::sync::Arc;

/// Why the counter could not be moved.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("--from and --to name the same backend ({0:?})")]
    SameBackend(CounterBackend),
    #[error("issuer.zookeeper.hosts: required to use the zookeeper backend")]
    NoZooKeeper,
    #[error("mysql: {0}")]
    Mysql(#[from] mysql_async::Error),
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("{backend} counter: {source}")]
    Counter {
        backend: &'static str,
        #[source]
        source: CounterError,
    },
    #[error("the {backend} counter reads {got} after the move, below {want}")]
    NotRaised {
        backend: &'static str,
        got: u64,
        want: u64,
    },
}

/// What a move did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// The source counter's value.
    pub source: u64,
    /// The highest id MySQL knows to be used.
    pub floor: u64,
    /// The destination's value before and after.
    pub before: u64,
    pub after: u64,
}

/// Moves `cfg.issuer.name`'s counter from `from` to `to`.
pub async fn run(
    cfg: &Config,
    from: CounterBackend,
    to: CounterBackend,
) -> Result<Moved, MigrateError> {
    if from == to {
        return Err(MigrateError::SameBackend(from));
    }
    let pool = db::pool(&cfg.mysql)?;
    schema::migrate(&pool).await?;
    let perm = meta::load_permutation(&pool).await?;
    let shards = ShardMap::open(&cfg.mysql, &pool, perm, None)?;
    let floor = shards.highest_used_id().await?;
    let metrics = Arc::new(Metrics::new()?);
    let cache = Cache::new(cfg.redis.clone(), metrics).map_err(MigrateError::Redis)?;
    let open = |backend| {
        counter::open(
            backend,
            &cfg.issuer,
            &cfg.issuer.name,
            &pool,
            cache.connection(),
            0,
        )
        .ok_or(MigrateError::NoZooKeeper)
    };
    let (src, dst) = (open(from)?, open(to)?);
    let failed = |c: &dyn Counter| {
        let backend = c.kind();
        move |source| MigrateError::Counter { backend, source }
    };
    // `advance(0)` reads a counter without moving it (creating it at 0).
    let source = src.advance(0).await.map_err(failed(&*src))?;
    let before = dst.advance(0).await.map_err(failed(&*dst))?;
    let want = source.max(floor);
    dst.raise_to(want).await.map_err(failed(&*dst))?;
    let after = dst.advance(0).await.map_err(failed(&*dst))?;
    if after < want {
        return Err(MigrateError::NotRaised {
            backend: dst.kind(),
            got: after,
            want,
        });
    }
    Ok(Moved {
        source,
        floor,
        before,
        after,
    })
}
