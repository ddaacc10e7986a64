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
//!   creates it again;
//! * the stream's entries applied and older than [`STREAM_KEEP_MS`] are
//!   trimmed (`XTRIM MINID`): `XACK` leaves an entry in the stream, so
//!   without this it held every batch ever sent up to the edges' `MAXLEN`
//!   bound (a million batches: gigabytes of Redis memory, and every later
//!   batch counted `stream_full` by the edges though nothing was lost).
//!   The live view tails the last hour of the stream (`live.rs`), so an
//!   hour and a minute stay; an entry not yet read by the group, or read
//!   and not acknowledged, stays whatever its age.

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

/// How long an applied batch stays in the stream: the live view reads the
/// last hour of it (an origin restarted rebuilds the hour from it).
pub const STREAM_KEEP_MS: u64 = 61 * 60 * 1000;

/// The `MINID` below which entries may go at `now_ms`: older than
/// [`STREAM_KEEP_MS`], and older than the millisecond of the group's last
/// delivered entry and of its oldest unacknowledged one (entries of that
/// same millisecond stay: `MINID <ms>-0` keeps them).
pub fn trim_bound(now_ms: u64, last_delivered_ms: u64, oldest_pending_ms: Option<u64>) -> u64 {
    now_ms
        .saturating_sub(STREAM_KEEP_MS)
        .min(last_delivered_ms)
        .min(oldest_pending_ms.unwrap_or(u64::MAX))
}

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
    pub stream_entries: u64,
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
        match self.trim_stream(now).await {
            Ok(n) => removed.stream_entries = n,
            Err(e) => {
                self.metrics.redis_errors.inc();
                tracing::warn!(error = %e, "click retention: trimming the stream failed");
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

    /// A connection of its own for one step (a run is rare: none is kept).
    fn conn(&self, response_timeout: Duration) -> Result<RedisConn, RetentionError> {
        let opts = ConnOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout,
        };
        Ok(RedisConn::new(&self.redis, opts)?)
    }

    /// Trims the stream of applied entries older than [`STREAM_KEEP_MS`]
    /// ([`trim_bound`]); returns how many went.
    async fn trim_stream(&self, now: u64) -> Result<u64, RetentionError> {
        let mut conn = self.conn(Duration::from_secs(5))?;
        let groups: Result<Value, redis::RedisError> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(STREAM_KEY)
            .query_async(&mut conn)
            .await;
        let groups = match groups {
            Ok(v) => v,
            // No stream yet: nothing to trim.
            Err(e) if e.code() == Some("ERR") => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        // No group yet: nothing was read, everything stays.
        let Some(last) = stream::last_delivered(&groups, CONSUMER_GROUP)? else {
            return Ok(0);
        };
        let pending: Value = redis::cmd("XPENDING")
            .arg(STREAM_KEY)
            .arg(CONSUMER_GROUP)
            .query_async(&mut conn)
            .await?;
        let bad = |what| stream::ReplyError {
            command: "XINFO GROUPS",
            what,
        };
        let last_ms = stream::id_ms(&last).ok_or_else(|| bad("last-delivered-id"))?;
        let oldest = stream::oldest_pending(&pending).and_then(|id| stream::id_ms(&id));
        let bound = trim_bound(now.saturating_mul(1000), last_ms, oldest);
        if bound == 0 {
            return Ok(0);
        }
        let n: u64 = redis::cmd("XTRIM")
            .arg(STREAM_KEY)
            .arg("MINID")
            .arg(format!("{bound}-0"))
            .query_async(&mut conn)
            .await?;
        self.metrics.pruned.with_label_values(&["stream"]).inc_by(n);
        Ok(n)
    }

    async fn remove_idle_consumers(&self) -> Result<u64, RetentionError> {
        let mut conn = self.conn(Duration::from_secs(2))?;
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

#[cfg(test)]
mod tests {
    use super::{trim_bound, STREAM_KEEP_MS};

    #[test]
    fn the_trim_keeps_the_live_hour_and_what_the_group_has_not_done() {
        let now = 10 * STREAM_KEEP_MS;
        let hour_ago = now - STREAM_KEEP_MS;
        // Everything read and acknowledged: the live hour stays.
        assert_eq!(trim_bound(now, now, None), hour_ago);
        // Entries not yet delivered to the group stay, whatever their age.
        assert_eq!(trim_bound(now, 5, None), 5);
        // Nor one read and not acknowledged.
        assert_eq!(trim_bound(now, now, Some(7)), 7);
        // Nothing delivered yet (`0-0`): nothing goes.
        assert_eq!(trim_bound(now, 0, None), 0);
    }
}
