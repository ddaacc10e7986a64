//! Fleet-wide invalidation on the edge (protocol section 3.2).
//!
//! The origin publishes `<version> <code> <domain>` on `su:1:inval` after it
//! wrote the new state of a link to Redis. The edge keeps its own
//! subscription to that channel ([`subscriber`], a Pingora background
//! service) and, per message, drops its in-process entry for (domain, code)
//! unless that entry is already at `version` or
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

pub mod resp;
pub mod subscriber;

use crate::cache::{Invalidated, Key, LocalCache};
use crate::metrics::InvalMetrics;
use crate::pages::store::PageStore;
use shorturl_common::inval::{Invalidation, Message};
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
    let inv = match std::str::from_utf8(payload)
        .ok()
        .and_then(Invalidation::decode)
    {
        Some(Message::Link(inv)) => inv,
        // The same change comes in the new form too (protocol 3.5).
        Some(Message::Legacy) => {
            m.legacy.inc();
            return;
        }
        None => {
            m.invalid.inc();
            tracing::debug!(
                len = payload.len(),
                "malformed invalidation message ignored"
            );
            return;
        }
    };
    m.applied.inc();
    pages.purge_code(inv.code);
    let key = Key {
        domain: inv.domain,
        code: inv.code,
    };
    if cache.invalidate(key, inv.version, keep) == Invalidated::Dropped {
        m.dropped.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::apply;
    use crate::cache::{Answer, Key, LocalCache};
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
        let k = |domain, code| Key { domain, code };
        let min = Duration::from_secs(60);
        c.put(k("s.com", "aB3xYz"), Answer::Negative(1), min);
        c.put(k("s.com", "kept01"), Answer::Negative(5), min);
        c.put(k("t.com", "aB3xYz"), Answer::Negative(1), min);
        apply(&c, &pages, b"2 aB3xYz s.com", keep, &m.inval);
        apply(&c, &pages, b"5 kept01 s.com", keep, &m.inval);
        apply(&c, &pages, b"7 never0 s.com", keep, &m.inval);
        // The legacy form is for edges of the previous version: ignored.
        apply(&c, &pages, b"2 kept01", keep, &m.inval);
        for bad in [
            &b"2 aB3xYz x y"[..],
            b"",
            b"x aB3xYz",
            b"\xff\xfe",
            b"2 a/b s.com",
        ] {
            apply(&c, &pages, bad, keep, &m.inval);
        }
        let i = &m.inval;
        // Applied: the older entry (dropped), the current one (kept) and
        // the uncached code; one legacy; the rest are invalid.
        assert_eq!(
            (
                i.applied.get(),
                i.dropped.get(),
                i.legacy.get(),
                i.invalid.get()
            ),
            (3, 1, 1, 5)
        );
        assert_eq!(i.messages(), 9);
        assert!(c.get(k("s.com", "aB3xYz"), Instant::now()).is_none());
        assert!(c.get(k("s.com", "kept01"), Instant::now()).is_some());
        // Another domain's link of the same code is another key.
        assert!(c.get(k("t.com", "aB3xYz"), Instant::now()).is_some());
        // Each valid message purged its code's pages (none cached here).
        assert_eq!(pm.purged_inval.get(), 0);
    }
}
