//! `shorturl-origin reap`: one manual pass of the reaper, under the same
//! lease as the origins' (so it never runs beside one), with a progress
//! bar on stderr; then the Redis side of what it reaped (the outbox), so a
//! run finishes with every reaped link negative in Redis and announced.
//! With `lifecycle.recycle` the pass ends with recycling, as in `serve`.

use super::{holder_id, ReapError, Reaper};
use crate::cache::Cache;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::store::Store;
use indicatif::{ProgressBar, ProgressStyle};
use shorturl_common::time::now_unix;
use std::sync::Arc;
use std::time::Instant;

/// Why a manual run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum ReapRunError {
    #[error(transparent)]
    Reap(#[from] ReapError),
    #[error("mysql: {0}")]
    Mysql(#[from] mysql_async::Error),
    #[error("redis.url: {0}")]
    RedisUrl(#[source] redis::RedisError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// What a manual run did.
#[derive(Debug, Clone, Copy)]
pub struct ReapReport {
    /// Links marked expired.
    pub reaped: u64,
    /// Seconds the MySQL side took (the batches, rate bound included).
    pub reap_secs: f64,
    /// Outbox rows applied to Redis afterwards, and the seconds it took.
    pub applied: u64,
    pub apply_secs: f64,
    /// Codes appended to the pool again (`lifecycle.recycle`; part of the
    /// MySQL side, after the reaping).
    pub recycled: u64,
}

/// Runs one pass with `cfg.lifecycle` (its rate replaced by `rate` if
/// given); `progress` shows a bar on stderr.
pub async fn run(
    cfg: &Config,
    rate: Option<u32>,
    progress: bool,
) -> Result<ReapReport, ReapRunError> {
    let metrics = Arc::new(Metrics::new()?);
    // With `mysql.shards` the pass sweeps every shard (one outbox each).
    let (pool, store) = Store::open_all(&cfg.mysql, Arc::clone(&metrics)).await?;
    let cache =
        Cache::new(cfg.redis.clone(), Arc::clone(&metrics)).map_err(ReapRunError::RedisUrl)?;
    let outbox = Outbox::new(store.clone(), cache, Arc::clone(&metrics));
    let mut lc = cfg.lifecycle.clone();
    if let Some(r) = rate.filter(|r| *r > 0) {
        lc.reap_rate_per_sec = r;
    }
    let reaper = Reaper::new(store.clone(), lc, Arc::clone(&metrics), holder_id("reap"));
    reaper.hold().await?;
    // Only the bar's length: a count that fails or times out (a huge
    // backlog) does not stop the run.
    let backlog = store.reap_backlog(now_unix()).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "reap: could not count the backlog");
        0
    });
    let bar = if progress {
        ProgressBar::new(backlog)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("reap {bar:40} {pos}/{len} links  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let r = reaper.pass(&mut |n| bar.set_position(n)).await;
    bar.finish_and_clear();
    let reap_secs = t0.elapsed().as_secs_f64();
    reaper.release().await;
    let reaped = r?;
    if progress {
        eprintln!("reap: {reaped} links marked expired; applying them to Redis");
    }
    let t1 = Instant::now();
    let applied = outbox.drain_all().await;
    let apply_secs = t1.elapsed().as_secs_f64();
    pool.disconnect().await?;
    Ok(ReapReport {
        reaped,
        reap_secs,
        applied,
        apply_secs,
        recycled: metrics.lifecycle_recycled.get(),
    })
}
