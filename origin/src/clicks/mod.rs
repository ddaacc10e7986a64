//! Click analytics on the origin: the consumer that applies the edges'
//! click batches to MySQL rollups, exactly once, and the statistics the API
//! reads from them.
//!
//! [`consumer`] reads the Redis Stream as consumer group `origins`
//! ([`stream`] parses its replies), [`apply`] applies one batch in one
//! transaction with its id, [`referrers`] bounds the referrer rows of a
//! link-day, [`stats`] answers the stats API, [`live`] keeps the last
//! hour per minute from the stream itself (the live view), [`retention`]
//! prunes old hourly and referrer rows, batch ids and idle consumers. The batch
//! format and the user-agent rules are shared with the edges in
//! `shorturl_common::clicks`.

pub mod apply;
pub mod consumer;
pub mod live;
mod live_query;
pub mod referrers;
pub mod retention;
pub mod shard;
pub mod stats;
pub mod stream;

pub use consumer::Consumer;
pub use live_query::{LinkLiveView, LiveQuery, TenantLiveView};
pub use stats::{
    GroupBy, GroupCount, Interval, LinkQuery, LinkStats, StatsRange, TenantDetails, TenantFilter,
    TenantQuery, TenantStats,
};

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The consumer's counters (`/metrics`, names as protocol section 7).
pub struct ClickMetrics {
    /// Batches applied to MySQL by this origin.
    pub applied: IntCounter,
    /// Batches found already applied (redelivered): acknowledged only.
    pub duplicate: IntCounter,
    /// Batches rejected whole as malformed: acknowledged, nothing applied.
    pub malformed: IntCounter,
    /// Attempts to apply a batch that failed on MySQL (retried later).
    pub failed: IntCounter,
    /// Pending batches trimmed from the stream (`MAXLEN`) before anyone
    /// applied them: lost, and counted here.
    pub trimmed: IntCounter,
    /// Redis errors of the consumer (it reconnects with backoff).
    pub redis_errors: IntCounter,
    /// Batches read by some origin and not yet acknowledged (the group's
    /// pending count, as last polled): the consumer's lag.
    pub pending: IntGauge,
    /// Clicks applied, by `kind` (`human`, `bot`).
    pub clicks: IntCounterVec,
    /// Rows removed by the retention, by `table`.
    pub pruned: IntCounterVec,
    /// Idle consumers removed from the group.
    pub consumers_removed: IntCounter,
    /// Codes of old-format batches (version 1, 2) that name a per-domain
    /// code held on several domains: counted under the bare code, which no
    /// link reads (protocol 3.6; per batch read, so a redelivery counts
    /// again).
    pub unattributed: IntCounter,
}

impl ClickMetrics {
    /// Creates the metrics and registers them in `reg`.
    pub fn register(reg: &Registry) -> Result<ClickMetrics, prometheus::Error> {
        let batches = IntCounterVec::new(
            Opts::new(
                "clicks_batches_total",
                "Click batches handled, by result (applied, duplicate, malformed, failed, trimmed)",
            ),
            &["result"],
        )?;
        reg.register(Box::new(batches.clone()))?;
        let redis_errors = IntCounter::new(
            "clicks_redis_errors_total",
            "Redis errors of the click-batch consumer",
        )?;
        reg.register(Box::new(redis_errors.clone()))?;
        let pending = IntGauge::new(
            "clicks_pending",
            "Click batches read and not yet acknowledged by the origins",
        )?;
        reg.register(Box::new(pending.clone()))?;
        let clicks = IntCounterVec::new(
            Opts::new("clicks_applied_total", "Clicks applied to MySQL, by kind"),
            &["kind"],
        )?;
        reg.register(Box::new(clicks.clone()))?;
        let pruned = IntCounterVec::new(
            Opts::new(
                "clicks_pruned_rows_total",
                "Click rows removed by the retention, by table (click_hour, click_day_referrer, click_batches; stream: applied entries of su:1:clicks past the live hour)",
            ),
            &["table"],
        )?;
        reg.register(Box::new(pruned.clone()))?;
        let consumers_removed = IntCounter::new(
            "clicks_consumers_removed_total",
            "Idle consumers removed from the click consumer group",
        )?;
        reg.register(Box::new(consumers_removed.clone()))?;
        let unattributed = IntCounter::new(
            "clicks_unattributed_total",
            "Per-domain codes of old-format click batches held on several domains (not credited to a link)",
        )?;
        reg.register(Box::new(unattributed.clone()))?;
        Ok(ClickMetrics {
            unattributed,
            pruned,
            consumers_removed,
            applied: batches.with_label_values(&["applied"]),
            duplicate: batches.with_label_values(&["duplicate"]),
            malformed: batches.with_label_values(&["malformed"]),
            failed: batches.with_label_values(&["failed"]),
            trimmed: batches.with_label_values(&["trimmed"]),
            redis_errors,
            pending,
            clicks,
        })
    }
}
