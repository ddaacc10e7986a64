//! Retention of click data, run by the origin holding the reaper's lease
//! after each reap pass (one origin at a time, so MySQL sees one pruner):
//!
//! * hourly rows (`click_hour`) older than `clicks.retention_hours_days`
//!   are deleted, and referrer rows (`click_day_referrer`) of days older
//!   than `clicks.retention_referrers_days`; the device rows, which hold
//!   the daily series, stay for ever;
//! * applied batch ids (`click_batches`) older than
//!   `clicks.batch_ids_retention_days` are deleted: a batch older than
//!   that can no longer be redelivered (the stream is bounded and an
//!   edge's buffer holds minutes to hours), so its id guards nothing;
//! * consumers of the group idle longer than `clicks.consumer_idle_secs`
//!   with nothing pending are removed (`XGROUP DELCONSUMER`): every origin
//!   start adds a consumer, and a dead one's pending entries have been
//!   claimed by then. Removing a live one would lose nothing either: a
//!   consumer with nothing pending holds nothing, and its next read
//!   creates it again.

use super::stream::{self, ConsumerInfo};
use super::ClickMetrics;
use crate::config::ClicksConfig;
use crate::store::retention::Pruned;
use crate::store::{DbError, Store};
use redis::Value;
use shorturl_common::clicks::{CONSUMER_GROUP, STREAM_KEY};
use shorturl_common::redis::{ConnOptions, RedisConn, RedisTopology};
use std::sync::Arc;
use std::time::Duration;

/// Rows one `DELETE` removes at most (a short transaction).
const PRUNE_BATCH: usize = 1000;

/// What went wrong in a retention run (the run goes on with the next step).
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error(transparent)]
    Database(#[from] DbError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Reply(#[from] stream::ReplyError),
}

/// What one run removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub hour_rows: u64,
    pub referrer_rows: u64,
    pub batch_ids: u64,
    pub consumers: u64,
}

/// The click-data pruner.
pub struct Retention {
    store: Store,
    cfg: ClicksConfig,
    redis: RedisTopology,
    metrics: Arc<ClickMetrics>,
}

impl Retention {
    /// A pruner over `store` and the Redis of `redis`.
    pub fn new(
        store: Store,
        cfg: ClicksConfig,
        redis: RedisTopology,
        metrics: Arc<ClickMetrics>,
    ) -> Retention {
        Retention {
            store,
            cfg,
            redis,
            metrics,
        }
    }

    /// One run at `now` (Unix seconds). Failures are logged and counted;
    /// what was removed before one is still reported.
    pub async fn run_once(&self, now: u64) -> Removed {
        let mut removed = Removed::default();
        let hours_before = now.saturating_sub(self.cfg.retention_hours.as_secs());
        match self.prune(Pruned::ClickHour, hours_before).await {
            Ok(n) => removed.hour_rows = n,
            Err(e) => tracing::warn!(error = %e, "click retention: pruning click_hour failed"),
        }
        let days_before = now.saturating_sub(self.cfg.retention_referrers.as_secs());
        match self.prune(Pruned::ClickDayReferrer, days_before).await {
            Ok(n) => removed.referrer_rows = n,
            Err(e) => {
                tracing::warn!(error = %e, "click retention: pruning click_day_referrer failed")
            }
        }
        let ids_before = now.saturating_sub(self.cfg.batch_ids_retention.as_secs());
        match self.prune(Pruned::ClickBatches, ids_before).await {
            Ok(n) => removed.batch_ids = n,
            Err(e) => tracing::warn!(error = %e, "click retention: pruning click_batches failed"),
        }
        match self.remove_idle_consumers().await {
            Ok(n) => removed.consumers = n,
            Err(e) => {
                self.metrics.redis_errors.inc();
                tracing::warn!(error = %e, "click retention: removing idle consumers failed");
            }
        }
        if removed != Removed::default() {
            tracing::info!(?removed, "click retention: pruned");
        }
        removed
    }

    /// Deletes `what` older than `before` in batches, pausing between
    /// them so the deletes do not crowd out the rollup writes.
    async fn prune(&self, what: Pruned, before: u64) -> Result<u64, DbError> {
        let mut total = 0;
        loop {
            let n = self.store.prune(what, before, PRUNE_BATCH).await?;
            total += n;
            self.metrics
                .pruned
                .with_label_values(&[what.table()])
                .inc_by(n);
            if n < PRUNE_BATCH as u64 {
                return Ok(total);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn remove_idle_consumers(&self) -> Result<u64, RetentionError> {
        let opts = ConnOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
        };
        let mut conn = RedisConn::new(&self.redis, opts)?;
        let r: Result<Value, redis::RedisError> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(STREAM_KEY)
            .arg(CONSUMER_GROUP)
            .query_async(&mut conn)
            .await;
        let list = match r {
            Ok(v) => stream::consumers(&v)?,
            // No stream or no group yet: nothing to remove.
            Err(e) if matches!(e.code(), Some("NOGROUP") | Some("ERR")) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        let idle_ms = i64::try_from(self.cfg.consumer_idle.as_millis()).unwrap_or(i64::MAX);
        let mut removed = 0;
        for ConsumerInfo { name, .. } in list
            .into_iter()
            .filter(|c| c.pending == 0 && c.idle_ms > idle_ms)
        {
            let _: Value = redis::cmd("XGROUP")
                .arg("DELCONSUMER")
                .arg(STREAM_KEY)
                .arg(CONSUMER_GROUP)
                .arg(&name)
                .query_async(&mut conn)
                .await?;
            tracing::info!(consumer = %name, "click retention: idle consumer removed");
            removed += 1;
        }
        self.metrics.consumers_removed.inc_by(removed);
        Ok(removed)
    }
}
