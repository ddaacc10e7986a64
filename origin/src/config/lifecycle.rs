//! The `lifecycle:` part of the configuration: the reaper that marks links
//! past their expiry as `expired` (issue 11).

use super::file::LifecycleFile;
use super::{err, positive, ConfigError};
use std::time::Duration;

/// Most rows one reap batch may take: a batch is one transaction holding
/// its row locks and must finish well within `mysql.timeout_ms`.
pub const MAX_REAP_BATCH: usize = 5000;

/// Reaper settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// Whether `serve` runs the reaper (one origin at a time holds its lease).
    pub enabled: bool,
    /// Rows reaped per second at most, so MySQL is not flooded.
    pub reap_rate_per_sec: u32,
    /// Rows per transaction.
    pub reap_batch: usize,
    /// Pause between passes once the backlog is empty.
    pub reap_interval: Duration,
    /// How long the reaper's lease lasts without a heartbeat; another
    /// origin takes over this long after the holder died.
    pub lease_ttl: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            enabled: true,
            reap_rate_per_sec: 1000,
            reap_batch: 200,
            reap_interval: Duration::from_secs(60),
            lease_ttl: Duration::from_secs(30),
        }
    }
}

impl LifecycleConfig {
    /// The holder renews its lease this often (a third of its lifetime, so
    /// two missed heartbeats still keep it).
    pub fn heartbeat(&self) -> Duration {
        self.lease_ttl / 3
    }
}

/// `lifecycle:` validated (absent: the defaults).
pub fn lifecycle(f: LifecycleFile) -> Result<LifecycleConfig, ConfigError> {
    let d = LifecycleConfig::default();
    let reap_batch = positive(f.reap_batch, d.reap_batch, "lifecycle.reap_batch")?;
    if reap_batch > MAX_REAP_BATCH {
        return err(format!("lifecycle.reap_batch: at most {MAX_REAP_BATCH}"));
    }
    let lease_secs = positive(
        f.lease_ttl_secs,
        d.lease_ttl.as_secs(),
        "lifecycle.lease_ttl_secs",
    )?;
    if lease_secs < 2 {
        return err("lifecycle.lease_ttl_secs: at least 2 (the heartbeat is a third of it)");
    }
    Ok(LifecycleConfig {
        enabled: f.enabled.unwrap_or(d.enabled),
        reap_rate_per_sec: positive(
            f.reap_rate_per_sec,
            d.reap_rate_per_sec,
            "lifecycle.reap_rate_per_sec",
        )?,
        reap_batch,
        reap_interval: Duration::from_secs(positive(
            f.reap_interval_secs,
            d.reap_interval.as_secs(),
            "lifecycle.reap_interval_secs",
        )?),
        lease_ttl: Duration::from_secs(lease_secs),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::MIN;
    use super::*;
    use crate::config::Config;

    #[test]
    fn defaults_and_values() {
        let c = Config::parse(MIN, |_| None).unwrap();
        assert_eq!(c.lifecycle, LifecycleConfig::default());
        assert_eq!(c.lifecycle.heartbeat(), Duration::from_secs(10));
        let text = format!(
            "{MIN}lifecycle: {{enabled: false, reap_rate_per_sec: 50, reap_batch: 10, \
             reap_interval_secs: 1, lease_ttl_secs: 3}}\n"
        );
        let c = Config::parse(&text, |_| None).unwrap();
        assert_eq!(
            c.lifecycle,
            LifecycleConfig {
                enabled: false,
                reap_rate_per_sec: 50,
                reap_batch: 10,
                reap_interval: Duration::from_secs(1),
                lease_ttl: Duration::from_secs(3),
            }
        );
    }

    #[test]
    fn bad_values_name_the_field() {
        for (body, field) in [
            ("reap_rate_per_sec: 0", "lifecycle.reap_rate_per_sec"),
            ("reap_batch: 0", "lifecycle.reap_batch"),
            ("reap_batch: 5001", "lifecycle.reap_batch"),
            ("reap_interval_secs: 0", "lifecycle.reap_interval_secs"),
            ("lease_ttl_secs: 1", "lifecycle.lease_ttl_secs"),
            ("recycle: true", "recycle"),
        ] {
            let e = Config::parse(&format!("{MIN}lifecycle: {{{body}}}\n"), |_| None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(field), "{body}: {e}");
        }
    }
}
