//! Per-client-IP abuse limits on top of `pingora-limits::Rate` (a count-min
//! sketch per one-second window: constant memory whatever the number of
//! clients, lock-free).
//!
//! * unknown-code lookups: every 404 for a code-shaped path counts against
//!   the client; once past the limit, its next *uncached* lookups are 429
//!   before any Redis or origin work, so an enumeration scan costs the edge
//!   almost nothing. Cached redirects are never limited.
//! * creations: `POST /api/v1/links` per client before forwarding.

use crate::config::LimitsConfig;
use pingora_limits::rate::Rate;
use std::net::IpAddr;
use std::time::Duration;

/// The two per-IP limiters.
pub struct Limits {
    unknown: Rate,
    unknown_max: isize,
    creations: Rate,
    creations_max: isize,
}

impl Limits {
    /// Limiters with one-second windows; a configured 0 disables one.
    pub fn new(cfg: &LimitsConfig) -> Self {
        Limits {
            unknown: Rate::new(Duration::from_secs(1)),
            unknown_max: cfg.unknown_per_ip_per_sec as isize,
            creations: Rate::new(Duration::from_secs(1)),
            creations_max: cfg.creations_per_ip_per_sec as isize,
        }
    }

    /// True when `ip` has already produced too many unknown-code answers in
    /// the current window.
    pub fn unknown_exceeded(&self, ip: &IpAddr) -> bool {
        self.unknown_max > 0 && self.unknown.observe(ip, 0) >= self.unknown_max
    }

    /// Counts one unknown-code answer for `ip`.
    pub fn count_unknown(&self, ip: &IpAddr) {
        if self.unknown_max > 0 {
            self.unknown.observe(ip, 1);
        }
    }

    /// Counts a creation for `ip`; false when it is over the limit.
    pub fn allow_creation(&self, ip: &IpAddr) -> bool {
        self.creations_max == 0 || self.creations.observe(ip, 1) <= self.creations_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(unknown: u32, creations: u32) -> LimitsConfig {
        LimitsConfig {
            unknown_per_ip_per_sec: unknown,
            creations_per_ip_per_sec: creations,
            max_uri_bytes: 4096,
            max_header_bytes: 16384,
            client_timeout: Duration::from_secs(10),
            keepalive_timeout_secs: 60,
        }
    }

    #[test]
    fn per_ip_and_disabled() {
        let l = Limits::new(&cfg(3, 2));
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        for _ in 0..3 {
            assert!(!l.unknown_exceeded(&a));
            l.count_unknown(&a);
        }
        assert!(l.unknown_exceeded(&a));
        assert!(!l.unknown_exceeded(&b), "limits are per client");
        assert!(l.allow_creation(&a) && l.allow_creation(&a));
        assert!(!l.allow_creation(&a));
        let off = Limits::new(&cfg(0, 0));
        for _ in 0..100 {
            off.count_unknown(&a);
            assert!(off.allow_creation(&a));
        }
        assert!(!off.unknown_exceeded(&a));
    }
}
