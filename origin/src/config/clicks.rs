//! The `clicks:` part of the configuration: the click-batch consumer and
//! the limits of the stats API.

use super::file::ClicksFile;
use super::{err, positive, ConfigError};
use std::time::Duration;

/// Click analytics settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClicksConfig {
    /// Whether this origin consumes click batches (the stats API answers
    /// either way, from what MySQL holds).
    pub consume: bool,
    /// How long one `XREADGROUP ... BLOCK` waits for new batches.
    pub block: Duration,
    /// Most batches read (or claimed) at once.
    pub read_count: usize,
    /// A batch read by a consumer and not acknowledged for this long is
    /// claimed by another (its reader is taken for dead).
    pub claim_idle: Duration,
    /// Most points of an hourly series (bounds `to - from`).
    pub max_hour_points: u64,
    /// Most points of a daily series.
    pub max_day_points: u64,
    /// Hourly rows older than this are pruned (the daily rows stay).
    pub retention_hours: Duration,
    /// Referrer rows (`click_day_referrer`) of days older than this are
    /// pruned (the device rows, which hold the daily series, stay).
    pub retention_referrers: Duration,
    /// Named referrer hosts kept per link-day; the rest are summed into
    /// `~other`, so a link-day holds at most this many rows plus one.
    pub referrers_per_day: usize,
    /// Applied batch ids older than this are pruned: far longer than a
    /// batch can wait in the stream or in an edge's buffer, so a pruned id
    /// can no longer be redelivered.
    pub batch_ids_retention: Duration,
    /// A consumer of the group idle this long with nothing pending is
    /// removed (`XGROUP DELCONSUMER`): every origin start adds one.
    pub consumer_idle: Duration,
    /// Links the live view (`crate::clicks::live`) follows at once; clicks
    /// of links beyond it are left out of it (counted). 0: no live view.
    pub live_max_links: usize,
}

impl Default for ClicksConfig {
    fn default() -> Self {
        ClicksConfig {
            consume: true,
            block: Duration::from_millis(2000),
            read_count: 16,
            claim_idle: Duration::from_secs(30),
            max_hour_points: 24 * 31,
            max_day_points: 366,
            retention_hours: Duration::from_secs(90 * 86_400),
            retention_referrers: Duration::from_secs(400 * 86_400),
            referrers_per_day: 20,
            batch_ids_retention: Duration::from_secs(30 * 86_400),
            consumer_idle: Duration::from_secs(3600),
            live_max_links: 100_000,
        }
    }
}

/// Largest `clicks.referrers_per_day` (each applied batch reads a
/// link-day's rows under lock: keep them few).
const MAX_REFERRERS_PER_DAY: usize = 1000;

/// `clicks:` validated.
pub fn clicks(f: ClicksFile) -> Result<ClicksConfig, ConfigError> {
    let d = ClicksConfig::default();
    let block_ms = positive(f.block_ms, d.block.as_millis() as u64, "clicks.block_ms")?;
    if block_ms > 60_000 {
        return err("clicks.block_ms", "at most 60000");
    }
    let claim_idle_ms = positive(
        f.claim_idle_ms,
        d.claim_idle.as_millis() as u64,
        "clicks.claim_idle_ms",
    )?;
    let days = |v: Option<u64>, d: Duration, field: &str| -> Result<Duration, ConfigError> {
        Ok(Duration::from_secs(
            positive(v, d.as_secs() / 86_400, field)?.saturating_mul(86_400),
        ))
    };
    let retention_hours = days(
        f.retention_hours_days,
        d.retention_hours,
        "clicks.retention_hours_days",
    )?;
    let retention_referrers = days(
        f.retention_referrers_days,
        d.retention_referrers,
        "clicks.retention_referrers_days",
    )?;
    let referrers_per_day = positive(
        f.referrers_per_day,
        d.referrers_per_day,
        "clicks.referrers_per_day",
    )?;
    if referrers_per_day > MAX_REFERRERS_PER_DAY {
        return err(
            "clicks.referrers_per_day",
            format!("at most {MAX_REFERRERS_PER_DAY}"),
        );
    }
    let batch_ids_retention = days(
        f.batch_ids_retention_days,
        d.batch_ids_retention,
        "clicks.batch_ids_retention_days",
    )?;
    let consumer_idle = Duration::from_secs(positive(
        f.consumer_idle_secs,
        d.consumer_idle.as_secs(),
        "clicks.consumer_idle_secs",
    )?);
    if consumer_idle <= Duration::from_millis(claim_idle_ms) {
        return err(
            "clicks.consumer_idle_secs",
            "must be longer than clicks.claim_idle_ms",
        );
    }
    Ok(ClicksConfig {
        live_max_links: f.live_max_links.unwrap_or(d.live_max_links),
        retention_hours,
        retention_referrers,
        referrers_per_day,
        batch_ids_retention,
        consumer_idle,
        consume: f.consume.unwrap_or(d.consume),
        block: Duration::from_millis(block_ms),
        read_count: positive(f.read_count, d.read_count, "clicks.read_count")?,
        claim_idle: Duration::from_millis(claim_idle_ms),
        max_hour_points: positive(
            f.max_hour_points,
            d.max_hour_points,
            "clicks.max_hour_points",
        )?,
        max_day_points: positive(f.max_day_points, d.max_day_points, "clicks.max_day_points")?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::MIN;
    use super::super::Config;
    use super::ClicksConfig;
    use std::time::Duration;

    #[test]
    fn defaults_and_values() {
        let c = Config::parse(MIN, |_| None).unwrap();
        assert_eq!(c.clicks, ClicksConfig::default());
        assert_eq!(c.clicks.claim_idle, Duration::from_secs(30));
        let c = Config::parse(
            &format!("{MIN}clicks: {{consume: false, claim_idle_ms: 500, block_ms: 100}}\n"),
            |_| None,
        )
        .unwrap();
        assert!(!c.clicks.consume);
        assert_eq!(c.clicks.claim_idle, Duration::from_millis(500));
        assert_eq!(c.clicks.block, Duration::from_millis(100));
        let c = Config::parse(
            &format!("{MIN}clicks: {{retention_hours_days: 7, batch_ids_retention_days: 2, retention_referrers_days: 30, referrers_per_day: 5}}\n"),
            |_| None,
        )
        .unwrap();
        assert_eq!(
            c.clicks.retention_referrers,
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(c.clicks.referrers_per_day, 5);
        assert_eq!(c.clicks.retention_hours, Duration::from_secs(7 * 86_400));
        assert_eq!(
            c.clicks.batch_ids_retention,
            Duration::from_secs(2 * 86_400)
        );
        for bad in [
            "{block_ms: 0}",
            "{block_ms: 60001}",
            "{read_count: 0}",
            "{retention_hours_days: 0}",
            "{retention_referrers_days: 0}",
            "{referrers_per_day: 0}",
            "{referrers_per_day: 1001}",
            "{batch_ids_retention_days: 0}",
            "{consumer_idle_secs: 10, claim_idle_ms: 20000}",
            "{nope: 1}",
        ] {
            assert!(
                Config::parse(&format!("{MIN}clicks: {bad}\n"), |_| None).is_err(),
                "{bad}"
            );
        }
    }
}
