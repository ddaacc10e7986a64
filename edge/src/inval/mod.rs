//! Fleet-wide invalidation on the edge (protocol section 3.2).
//!
//! The origin publishes `<version> <code>` on `su:1:inval` after it wrote the
//! new state of a link to Redis. The edge keeps its own subscription to that
//! channel ([`subscriber`], a Pingora background service) and, per message,
//! drops its in-process entry unless that entry is already at `version` or
//! later, and leaves a tombstone so a lookup that read the old state before
//! the message arrived neither stores nor serves it (`lookup.rs` looks it
//! up once more).
//!
//! Messages are only as good as the subscription. While it is down (Redis
//! restarted, network cut) changes go unannounced, so the edge bounds how
//! long it trusts its memory: entries cached before the loss are served at
//! most `cache.unsubscribed_grace_ms` past the subscription's last sign of
//! life, and all of them are dropped when it is back; answers looked up
//! while not subscribed are cached at most that long. The mechanism is the
//! cache's generations (`cache/generation.rs`): one atomic compare per hit.
//!
//! The page cache (`pages/`) follows the same channel: a message purges
//! every cached page of its code (no version check: pages carry none, and
//! a purge only costs a refetch), and all pages are dropped whenever the
//! subscription is lost past its grace or established again.

pub mod subscriber;

use crate::cache::{Invalidated, LocalCache};
use crate::metrics::InvalMetrics;
use crate::pages::store::PageStore;
use shorturl_common::inval::Invalidation;
use std::time::Duration;

/// Applies one message of the channel to `cache` and `pages`, counting
/// what it did. `keep` is the tombstone lifetime.
pub fn apply(
    cache: &LocalCache,
    pages: &PageStore,
    payload: &[u8],
    keep: Duration,
    m: &InvalMetrics,
) {
    let Some(inv) = std::str::from_utf8(payload)
        .ok()
        .and_then(Invalidation::decode)
    else {
        m.invalid.inc();
        tracing::debug!(
            len = payload.len(),
            "malformed invalidation message ignored"
        );
        return;
    };
    m.applied.inc();
    pages.purge_code(inv.code);
    if cache.invalidate(inv.code, inv.version, keep) == Invalidated::Dropped {
        m.dropped.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::apply;
    use crate::cache::{Answer, LocalCache};
    use crate::metrics::Metrics;
    use crate::pages::metrics::PagesMetrics;
    use crate::pages::store::PageStore;
    use std::time::{Duration, Instant};

    #[test]
    fn messages_are_applied_and_counted() {
        let m = match Metrics::new() {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        let c = LocalCache::new(1 << 20);
        let pm = match PagesMetrics::new() {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        let pages = PageStore::new(1 << 20, 1 << 16, pm.clone());
        let keep = Duration::from_secs(10);
        c.put("aB3xYz", Answer::Negative(1), Duration::from_secs(60));
        c.put("kept01", Answer::Negative(5), Duration::from_secs(60));
        apply(&c, &pages, b"2 aB3xYz", keep, &m.inval);
        apply(&c, &pages, b"5 kept01", keep, &m.inval);
        apply(&c, &pages, b"7 never0", keep, &m.inval);
        for bad in [&b"2 aB3xYz x"[..], b"", b"x aB3xYz", b"\xff\xfe", b"2 a/b"] {
            apply(&c, &pages, bad, keep, &m.inval);
        }
        let i = &m.inval;
        // Applied: the older entry (dropped), the current one (kept) and
        // the uncached code; the rest are invalid.
        assert_eq!(
            (i.applied.get(), i.dropped.get(), i.invalid.get()),
            (3, 1, 5)
        );
        assert_eq!(i.messages(), 8);
        assert!(c.get("aB3xYz", Instant::now()).is_none());
        assert!(c.get("kept01", Instant::now()).is_some());
        // Each valid message purged its code's pages (none cached here).
        assert_eq!(pm.purged_inval.get(), 0);
    }
}
