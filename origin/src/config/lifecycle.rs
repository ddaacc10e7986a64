//! The `lifecycle:` part of the configuration: the reaper that marks links
//! past their expiry as `expired`, and the opt-in recycling of their codes
//! after a quarantine (issue 11).

use super::file::LifecycleFile;
use super::{err, positive, ConfigError};
use std::time::Duration;

/// Most rows one reap batch may take: a batch is one transaction holding
/// its row locks and must finish well within `mysql.timeout_ms`.
pub const MAX_REAP_BATCH: usize = 5000;

const DAY: u64 = 86_400;

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
    /// Whether the reaper also appends reusable codes to the pool again.
    pub recycle: bool,
    /// How long a code stays out of use after its link ended (deleted or
    /// reaped) before it may be recycled: longer than every cache TTL, so
    /// no cache anywhere can still hold the old link ([`check_quarantine`]).
    pub quarantine: Duration,
    /// Longest time an edge may keep an entry (in-process caches, pages):
    /// the edges' TTLs are not in this file, so the operator states the bound.
    pub max_edge_cache_ttl: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            enabled: true,
            reap_rate_per_sec: 1000,
            reap_batch: 200,
            reap_interval: Duration::from_secs(60),
            lease_ttl: Duration::from_secs(30),
            recycle: false,
            quarantine: Duration::from_secs(180 * DAY),
            max_edge_cache_ttl: Duration::from_secs(3600),
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
        return err("lifecycle.reap_batch", format!("at most {MAX_REAP_BATCH}"));
    }
    let lease_secs = positive(
        f.lease_ttl_secs,
        d.lease_ttl.as_secs(),
        "lifecycle.lease_ttl_secs",
    )?;
    if lease_secs < 2 {
        return err(
            "lifecycle.lease_ttl_secs",
            "at least 2 (the heartbeat is a third of it)",
        );
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
        recycle: f.recycle.unwrap_or(d.recycle),
        quarantine: Duration::from_secs(
            u64::from(positive(
                f.quarantine_days,
                (d.quarantine.as_secs() / DAY) as u32,
                "lifecycle.quarantine_days",
            )?) * DAY,
        ),
        max_edge_cache_ttl: Duration::from_secs(positive(
            f.max_edge_cache_ttl_secs,
            d.max_edge_cache_ttl.as_secs(),
            "lifecycle.max_edge_cache_ttl_secs",
        )?),
    })
}

/// The longest lifetime a `Cache-Control` value allows a cache
/// (`max-age` or `s-maxage`, whichever is longer; `None` when neither).
pub fn cache_control_max_age(value: &str) -> Option<u64> {
    value
        .split(',')
        .filter_map(|d| {
            let (name, v) = d.trim().split_once('=')?;
            let name = name.trim().to_ascii_lowercase();
            (name == "max-age" || name == "s-maxage")
                .then(|| v.trim().trim_matches('"').parse::<u64>().ok())?
        })
        .max()
}

/// With recycling on, refuses a quarantine that is not longer than every
/// cache TTL in `ttls` (`(field, ttl)`: Redis records, dedup window,
/// redirect `Cache-Control`, edges), naming the fields that are too long:
/// a cache still holding the old link when its code is reissued would send
/// the new link's visitors to the old target.
pub fn check_quarantine(
    cfg: &LifecycleConfig,
    ttls: &[(&str, Duration)],
) -> Result<(), ConfigError> {
    if !cfg.recycle {
        return Ok(());
    }
    let too_long: Vec<String> = ttls
        .iter()
        .filter(|(_, ttl)| *ttl >= cfg.quarantine)
        .map(|(field, ttl)| format!("{field} ({} s)", ttl.as_secs()))
        .collect();
    if too_long.is_empty() {
        return Ok(());
    }
    err(
        "lifecycle.quarantine_days",
        format!(
            "{} days ({} s) must be longer than every cache TTL; not longer than {}",
            cfg.quarantine.as_secs() / DAY,
            cfg.quarantine.as_secs(),
            too_long.join(", ")
        ),
    )
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
                ..LifecycleConfig::default()
            }
        );
        assert!(!c.lifecycle.recycle);
        assert_eq!(c.lifecycle.quarantine, Duration::from_secs(180 * DAY));
        let text = format!(
            "{MIN}lifecycle: {{recycle: true, quarantine_days: 30, max_edge_cache_ttl_secs: 600}}\n"
        );
        let c = Config::parse(&text, |_| None).unwrap();
        assert!(c.lifecycle.recycle);
        assert_eq!(c.lifecycle.quarantine, Duration::from_secs(30 * DAY));
        assert_eq!(c.lifecycle.max_edge_cache_ttl, Duration::from_secs(600));
    }

    #[test]
    fn max_age_of_cache_control() {
        assert_eq!(cache_control_max_age("private, max-age=60"), Some(60));
        assert_eq!(
            cache_control_max_age("public, Max-Age=60, s-maxage=\"900\""),
            Some(900)
        );
        assert_eq!(cache_control_max_age("no-store"), None);
    }

    #[test]
    fn a_quarantine_not_longer_than_a_cache_ttl_is_refused_naming_the_field() {
        let on =
            |extra: &str| format!("{MIN}lifecycle: {{recycle: true, quarantine_days: 7{extra}}}\n");
        assert!(Config::parse(&on(""), |_| None).is_ok());
        // The default Redis record TTL is 6 days: a 6-day quarantine is refused.
        let e = Config::parse(
            &format!("{MIN}lifecycle: {{recycle: true, quarantine_days: 6}}\n"),
            |_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("lifecycle.quarantine_days") && e.contains("redis.record_ttl_secs"),
            "{e}"
        );
        let e = Config::parse(&on(", max_edge_cache_ttl_secs: 604800"), |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lifecycle.max_edge_cache_ttl_secs"), "{e}");
        let mut text = on("");
        text.push_str("redirect: {cache_control: 'public, max-age=999999999'}\n");
        let e = Config::parse(&text, |_| None).unwrap_err().to_string();
        assert!(e.contains("redirect.cache_control"), "{e}");
        // Recycling off: the quarantine is not checked.
        let off = format!("{MIN}lifecycle: {{quarantine_days: 1}}\n");
        assert!(Config::parse(&off, |_| None).is_ok());
    }

    #[test]
    fn bad_values_name_the_field() {
        for (body, field) in [
            ("reap_rate_per_sec: 0", "lifecycle.reap_rate_per_sec"),
            ("reap_batch: 0", "lifecycle.reap_batch"),
            ("reap_batch: 5001", "lifecycle.reap_batch"),
            ("reap_interval_secs: 0", "lifecycle.reap_interval_secs"),
            ("lease_ttl_secs: 1", "lifecycle.lease_ttl_secs"),
            ("quarantine_days: 0", "lifecycle.quarantine_days"),
            (
                "max_edge_cache_ttl_secs: 0",
                "lifecycle.max_edge_cache_ttl_secs",
            ),
            ("recycle: 3", "recycle"),
        ] {
            let e = Config::parse(&format!("{MIN}lifecycle: {{{body}}}\n"), |_| None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(field), "{body}: {e}");
        }
    }
}
