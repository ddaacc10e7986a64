//! `edge.clicks`: file format and validated model (the knob names are the
//! OpenResty module's too).

use serde::Deserialize;
use shorturl_common::config::{bad, FieldError};
use std::time::Duration;

/// Longest flush interval: the protocol promises a flush at least every 5 s.
pub const MAX_FLUSH_INTERVAL_MS: u64 = 5000;
/// Shortest flush interval (tests use it; production wants seconds).
pub const MIN_FLUSH_INTERVAL_MS: u64 = 50;
/// Largest per-thread queue (each slot holds a whole click, ~300 bytes).
pub const MAX_QUEUE_PER_THREAD: usize = 1 << 20;
/// Bounds of `max_links`: below, batches get tiny; above, the counts
/// could take a gigabyte.
pub const MIN_MAX_LINKS: usize = 100;
pub const MAX_MAX_LINKS: usize = 1_000_000;
/// Least `max_buffered_bytes`: a few whole batches (one is at most
/// `MAX_BATCH_LINES` lines of ~320 bytes, ~1.6 MiB), so a bound this small
/// never drops a batch before it could be sent.
pub const MIN_MAX_BUFFERED_BYTES: u64 = 4 << 20;

/// `edge.clicks` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClicksFile {
    pub enabled: bool,
    pub flush_interval_ms: u64,
    /// First part of every batch id; default the host name.
    pub edge_name: Option<String>,
    pub max_buffered_clicks: u64,
    pub max_buffered_bytes: u64,
    pub queue_per_thread: usize,
    pub max_links: usize,
    pub backpressure: bool,
    pub dimensions: bool,
    pub city: bool,
    pub tally_bots: bool,
}

impl Default for ClicksFile {
    fn default() -> Self {
        ClicksFile {
            enabled: true,
            flush_interval_ms: 5000,
            edge_name: None,
            max_buffered_clicks: 1_000_000,
            max_buffered_bytes: 64 << 20,
            queue_per_thread: 1_024,
            max_links: 20_000,
            backpressure: true,
            dimensions: true,
            city: false,
            tally_bots: true,
        }
    }
}

/// Click counting, validated.
#[derive(Debug, Clone)]
pub struct ClicksConfig {
    /// Off: the redirect path checks this flag and nothing else.
    pub enabled: bool,
    /// Counts are sent at least this often.
    pub flush_interval: Duration,
    /// `[A-Za-z0-9._-]{1,64}`: the batch ids' first part.
    pub edge_name: String,
    /// Clicks kept unsent (Redis unreachable) before whole oldest batches
    /// are dropped.
    pub max_buffered_clicks: u64,
    /// Bytes of unsent batches kept before whole oldest batches are
    /// dropped: the memory bound of an outage (a click on a link of its own
    /// is up to ~400 bytes of lines).
    pub max_buffered_bytes: u64,
    /// Clicks each request thread can hold between two drains.
    pub queue_per_thread: usize,
    /// Distinct links counted before a batch is cut early: what bounds the
    /// counts' memory (about a kilobyte a link) when many distinct links
    /// are clicked within one flush interval (a scan, an import).
    pub max_links: usize,
    /// While half of `max_buffered_clicks` (or of the bytes) is unsent and Redis takes
    /// batches, request threads pause so the flusher catches up (slower
    /// answers, no click dropped); off: the bound drops the oldest instead.
    pub backpressure: bool,
    /// Count each human click's dimensions (country, browser, OS,
    /// language, QR, UTM) and write batch version 5 (protocol 3.8); off
    /// for a fleet whose origins are older.
    pub dimensions: bool,
    /// Count each human click's city too, from `edge.geo.mmdb_path` (a
    /// city database; protocol 3.9): off by default, as an origin older
    /// than 3.9 refuses its lines.
    pub city: bool,
    /// Count a bot's click without a referrer on a plain cached link on
    /// its cache entry (`clicks::tally`), harvested every flush interval;
    /// off: every click is queued (the same counts, sent the same way).
    pub tally_bots: bool,
}

/// Whether `s` is an edge name or nonce of a batch id.
pub fn is_id_word(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The host name reduced to `[A-Za-z0-9._-]` (64 bytes at most), or `edge`.
pub fn default_edge_name(hostname: Option<&str>) -> String {
    let name: String = hostname
        .unwrap_or("")
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(64)
        .collect();
    if name.is_empty() {
        "edge".to_owned()
    } else {
        name
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
}

/// Validates `f`; the error names the field.
pub fn from_file(f: ClicksFile) -> Result<ClicksConfig, FieldError> {
    if !(MIN_FLUSH_INTERVAL_MS..=MAX_FLUSH_INTERVAL_MS).contains(&f.flush_interval_ms) {
        return bad(
            "edge.clicks.flush_interval_ms",
            format!("must be between {MIN_FLUSH_INTERVAL_MS} and {MAX_FLUSH_INTERVAL_MS}"),
        );
    }
    let edge_name = match f.edge_name {
        Some(n) if is_id_word(&n) => n,
        Some(n) => {
            return bad(
                "edge.clicks.edge_name",
                format!("{n:?} must be 1-64 of [A-Za-z0-9._-]"),
            )
        }
        None => default_edge_name(hostname().as_deref()),
    };
    if f.max_buffered_clicks == 0 {
        return bad("edge.clicks.max_buffered_clicks", "must be at least 1");
    }
    if f.max_buffered_bytes < MIN_MAX_BUFFERED_BYTES {
        return bad(
            "edge.clicks.max_buffered_bytes",
            format!("must be at least {MIN_MAX_BUFFERED_BYTES} (4 MiB)"),
        );
    }
    if !(1..=MAX_QUEUE_PER_THREAD).contains(&f.queue_per_thread) {
        return bad(
            "edge.clicks.queue_per_thread",
            format!("must be between 1 and {MAX_QUEUE_PER_THREAD}"),
        );
    }
    if !(MIN_MAX_LINKS..=MAX_MAX_LINKS).contains(&f.max_links) {
        return bad(
            "edge.clicks.max_links",
            format!("must be between {MIN_MAX_LINKS} and {MAX_MAX_LINKS}"),
        );
    }
    if f.city && !f.dimensions {
        return bad("edge.clicks.city", "needs edge.clicks.dimensions on");
    }
    Ok(ClicksConfig {
        max_links: f.max_links,
        enabled: f.enabled,
        flush_interval: Duration::from_millis(f.flush_interval_ms),
        edge_name,
        max_buffered_clicks: f.max_buffered_clicks,
        max_buffered_bytes: f.max_buffered_bytes,
        queue_per_thread: f.queue_per_thread,
        backpressure: f.backpressure,
        dimensions: f.dimensions,
        city: f.city,
        tally_bots: f.tally_bots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_names() {
        let c = from_file(ClicksFile::default()).map_err(|e| e.to_string());
        let c = c.unwrap_or_else(|e| panic!("{e}"));
        assert!(c.enabled);
        assert_eq!(c.flush_interval, Duration::from_secs(5));
        assert!(is_id_word(&c.edge_name), "{}", c.edge_name);
        assert_eq!(default_edge_name(Some("web-01.dc1\n")), "web-01.dc1");
        assert_eq!(default_edge_name(Some("ünï côde")), "ncde");
        assert_eq!(default_edge_name(Some(" ")), "edge");
        assert_eq!(default_edge_name(None), "edge");
        assert_eq!(default_edge_name(Some(&"a".repeat(99))).len(), 64);
    }

    #[test]
    fn rejects_mistakes() {
        let cases: [(ClicksFile, &str); 8] = [
            (
                ClicksFile {
                    flush_interval_ms: 5001,
                    ..Default::default()
                },
                "flush_interval_ms",
            ),
            (
                ClicksFile {
                    flush_interval_ms: 49,
                    ..Default::default()
                },
                "flush_interval_ms",
            ),
            (
                ClicksFile {
                    edge_name: Some("a:b".into()),
                    ..Default::default()
                },
                "edge_name",
            ),
            (
                ClicksFile {
                    max_buffered_clicks: 0,
                    ..Default::default()
                },
                "max_buffered_clicks",
            ),
            (
                ClicksFile {
                    max_buffered_bytes: MIN_MAX_BUFFERED_BYTES - 1,
                    ..Default::default()
                },
                "max_buffered_bytes",
            ),
            (
                ClicksFile {
                    queue_per_thread: 0,
                    ..Default::default()
                },
                "queue_per_thread",
            ),
            (
                ClicksFile {
                    max_links: 99,
                    ..Default::default()
                },
                "max_links",
            ),
            (
                ClicksFile {
                    max_links: 1_000_001,
                    ..Default::default()
                },
                "max_links",
            ),
        ];
        for (f, field) in cases {
            match from_file(f) {
                Ok(_) => panic!("accepted, expected an error on {field}"),
                Err(e) => assert!(e.field.ends_with(field), "{e}"),
            }
        }
    }
}
