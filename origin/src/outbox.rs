//! Fleet-wide invalidation, origin side (protocol section 3.2).
//!
//! Every change of a link commits an `outbox` row in its own transaction.
//! Right after the commit the request applies that row itself
//! ([`Outbox::apply_now`]): it reads the link's current state, writes it to
//! Redis through the compare-and-set script, publishes `<version> <code>`
//! on `su:1:inval` in the same script, and deletes the row. Whatever did
//! not go through (Redis down, a crash between commit and apply) is picked
//! up by the [`Outbox::run_drainer`] task every origin runs: every 200 ms,
//! the oldest 100 pending rows, `FOR UPDATE SKIP LOCKED` so origins never
//! apply the same row at once, until Redis takes them. Applying re-reads
//! the current row, so it is idempotent and an old row writes the newest
//! state; a row is deleted only after Redis accepted it, so the Redis side
//! of a change cannot be lost.

use crate::cache::{Cache, Publish, Written};
use crate::metrics::Metrics;
use crate::store::outbox::{Applier, Pass, Take};
use crate::store::Store;
use futures::future::BoxFuture;
use shorturl_common::failpoint;
use shorturl_common::record::Lookup;
use shorturl_common::time::now_unix_ms;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often the drainer looks for pending rows.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(200);
/// Rows one drain pass takes, oldest first.
pub const DRAIN_BATCH: usize = 100;

/// Applies outbox rows to Redis.
pub struct Outbox {
    store: Store,
    cache: Cache,
    metrics: Arc<Metrics>,
}

impl Outbox {
    /// The applier over `store` and `cache`.
    pub fn new(store: Store, cache: Cache, metrics: Arc<Metrics>) -> Arc<Outbox> {
        Arc::new(Outbox {
            store,
            cache,
            metrics,
        })
    }

    /// Applies rows of one shard's outbox (`store` is that shard's view)
    /// selected by `take`; counts what was applied and what failed.
    async fn apply(&self, store: &Store, take: Take) -> Option<Pass> {
        let r = store.outbox_apply(take, self).await;
        match r {
            Ok(pass) => {
                self.metrics.outbox_applied.inc_by(pass.applied as u64);
                Some(pass)
            }
            Err(e) => {
                self.metrics.outbox_failed.inc();
                tracing::warn!(error = %e, "outbox: could not read or update the outbox");
                None
            }
        }
    }

    /// Applies the row a request just committed, before the request answers,
    /// so that when the API says 200 the change is in Redis and announced.
    /// A failure leaves the row to the drainer (the change itself stands).
    /// `shard` is the shard whose outbox holds the row.
    pub async fn apply_now(&self, shard: usize, outbox_id: u64) {
        if let Some(p) = self
            .apply(&self.store.on(shard), Take::One(outbox_id))
            .await
        {
            if p.failed {
                tracing::warn!(
                    outbox_id,
                    "outbox: Redis did not take the change; the drainer will retry"
                );
            }
        }
    }

    /// One drainer step: refresh the backlog figures, then apply the oldest
    /// pending rows. Returns whether a full batch was applied (more may wait).
    ///
    /// Every shard has its own outbox: the figures are their sums, and each
    /// shard with pending rows gets a pass (a shard that is down is skipped).
    pub async fn drain_once(&self) -> bool {
        let mut pending = 0u64;
        let mut oldest: Option<u64> = None;
        let mut busy = Vec::new();
        for shard in self.store.every_shard() {
            match shard.outbox_backlog().await {
                Ok(b) => {
                    pending += b.pending;
                    oldest = match (oldest, b.oldest_ms) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    if b.pending > 0 {
                        busy.push(shard);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "outbox: backlog query failed"),
            }
        }
        self.metrics.outbox_pending.set(pending as i64);
        let age_ms = oldest.map_or(0, |t| now_unix_ms().saturating_sub(t));
        self.metrics.outbox_oldest_age.set(age_ms as f64 / 1000.0);
        if busy.is_empty() || held() {
            return false;
        }
        let mut more = false;
        for shard in &busy {
            if let Some(p) = self.apply(shard, Take::Oldest(DRAIN_BATCH)).await {
                more |= !p.failed && p.applied == DRAIN_BATCH;
            }
        }
        more
    }

    /// Applies pending rows, oldest first, until none is left or Redis
    /// refuses one; returns how many were applied. Unlike [`Outbox::drain_once`]
    /// it does not count the backlog before each batch: after a large reap
    /// (a million rows) that count would cost more than the batch.
    pub async fn drain_all(&self) -> u64 {
        let mut total = 0u64;
        for shard in self.store.every_shard() {
            while let Some(p) = self.apply(&shard, Take::Oldest(DRAIN_BATCH)).await {
                total += p.applied as u64;
                if p.failed || p.applied < DRAIN_BATCH {
                    break;
                }
            }
        }
        total
    }

    /// The background drainer: runs until the task is aborted.
    pub async fn run_drainer(self: Arc<Self>) {
        let mut failing = false;
        loop {
            let more = self.drain_once().await;
            let pending = self.metrics.outbox_pending.get();
            if pending > 0 && !failing {
                tracing::info!(pending, "outbox: rows pending");
            }
            failing = pending > 0;
            if !more {
                tokio::time::sleep(DRAIN_INTERVAL).await;
            }
        }
    }
}

impl Applier for Outbox {
    fn apply<'a>(
        &'a self,
        code: &'a str,
        domain: Option<&'a str>,
        state: &'a Lookup,
        was: Option<&'a str>,
    ) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            if let Some(was) = was.filter(|w| Some(*w) != domain) {
                let gone = Lookup::Negative(state.version());
                let written = self
                    .cache
                    .write_link_key(was, code, &gone, Publish::Yes)
                    .await;
                if written.is_err() {
                    self.metrics.outbox_failed.inc();
                    return false;
                }
            }
            match self
                .cache
                .write_record(code, domain, state, Publish::Yes)
                .await
            {
                Ok(Written::Stored) => true,
                // Redis already holds a newer version, announced by its writer.
                Ok(Written::Stale) => true,
                Err(_) => {
                    self.metrics.outbox_failed.inc();
                    false
                }
            }
        })
    }
}

/// Test failpoint `origin.outbox.hold=<path>`: while the file exists the
/// drainer applies nothing (it creates `<path>.held` to say it is holding).
fn held() -> bool {
    let Some(path) = failpoint::value("origin.outbox.hold") else {
        return false;
    };
    if Path::new(path).exists() {
        let _ = std::fs::write(format!("{path}.held"), b"");
        true
    } else {
        false
    }
}
