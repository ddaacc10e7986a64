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
        }
    }
}

/// `clicks:` validated.
pub fn clicks(f: ClicksFile) -> Result<ClicksConfig, ConfigError> {
    let d = ClicksConfig::default();
    let block_ms = positive(f.block_ms, d.block.as_millis() as u64, "clicks.block_ms")?;
    if block_ms > 60_000 {
        return err("clicks.block_ms: at most 60000");
    }
    let claim_idle_ms = positive(
        f.claim_idle_ms,
        d.claim_idle.as_millis() as u64,
        "clicks.claim_idle_ms",
    )?;
    Ok(ClicksConfig {
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
        for bad in [
            "{block_ms: 0}",
            "{block_ms: 60001}",
            "{read_count: 0}",
            "{nope: 1}",
        ] {
            assert!(
                Config::parse(&format!("{MIN}clicks: {bad}\n"), |_| None).is_err(),
                "{bad}"
            );
        }
    }
}
