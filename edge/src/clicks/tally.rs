//! Bots' clicks counted on the link's cache entry (issue 27, item 5).
//!
//! A bot's click on a plain link without a referrer (a crawler, a link
//! preview, a monitor: counted as one bot click of the hour, one of the
//! day, no referrer, no dimensions) needs nothing but a number per
//! link-hour. The fast path has just read the link's cache entry; a
//! [`Tally`] there takes the click with one compare-and-swap on a line
//! already in the core's cache, instead of an event queued and a hash
//! lookup in the counts. The counts are not bounded by `clicks.max_links`
//! (they cost eight bytes of an entry that exists anyway), so they build
//! up over a whole flush interval and the per-link work of the batches
//! (a map entry, a line encoded) is paid once per link and interval, not
//! once per click when links outnumber `max_links`.
//!
//! Who reads them: the flusher's harvest at every flush interval walks the
//! cache ([`crate::cache::LocalCache::harvest_tallies`]) and takes each
//! tally with a swap; an entry leaving the cache (evicted, invalidated,
//! replaced) closes its tally and hands what it held to the counts at
//! once ([`TallySink::spill`]); a reader still holding the entry then finds
//! the tally closed and queues its click as any other. Exact: every click
//! is in exactly one swap's result or queued.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};

/// Bits of the word holding the count; the hour is above them.
const COUNT_BITS: u32 = 40;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// A tally of an entry that left the cache: takes no more clicks.
const CLOSED: u64 = u64::MAX;

/// One link's bot clicks of one hour since the last take: `hour << 40 |
/// count` (hours since the epoch fit 24 bits for the next 1,900 years).
#[derive(Debug, Default)]
pub struct Tally(AtomicU64);

impl Tally {
    /// An empty tally.
    pub const fn new() -> Tally {
        Tally(AtomicU64::new(0))
    }

    /// Counts one click of `hour` (hours since the epoch). False, counting
    /// nothing, when the tally holds another hour's clicks (the caller
    /// counts this one the usual way; the next take empties it) or is
    /// closed.
    #[inline]
    pub fn add(&self, hour: u64) -> bool {
        let mut cur = self.0.load(Relaxed);
        loop {
            let n = cur & COUNT_MASK;
            let next = if n == 0 {
                (hour << COUNT_BITS) | 1
            } else if cur >> COUNT_BITS == hour && n < COUNT_MASK - 1 {
                cur + 1
            } else {
                return false;
            };
            match self.0.compare_exchange_weak(cur, next, SeqCst, Relaxed) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Takes what the tally holds: `(hour, clicks)`, `None` when empty
    /// or closed.
    pub fn take(&self) -> Option<(u64, u64)> {
        let mut cur = self.0.load(Relaxed);
        loop {
            // Most entries between two harvests: no write to their line.
            if cur == 0 || cur == CLOSED {
                return None;
            }
            match self.0.compare_exchange_weak(cur, 0, SeqCst, Relaxed) {
                Ok(_) => return Some((cur >> COUNT_BITS, cur & COUNT_MASK)),
                Err(now) => cur = now,
            }
        }
    }

    /// Closes the tally (its entry leaves the cache) and takes what it
    /// held, as [`Tally::take`].
    pub fn close(&self) -> Option<(u64, u64)> {
        let w = self.0.swap(CLOSED, SeqCst);
        let n = w & COUNT_MASK;
        (w != CLOSED && n > 0).then_some((w >> COUNT_BITS, n))
    }
}

/// Where the clicks of an entry leaving the cache go (the edge's
/// [`super::Clicks`]).
pub trait TallySink: Send + Sync {
    /// `clicks` bot clicks of `hour` on `code` on `domain`.
    fn spill(&self, code: &str, domain: &str, hour: u64, clicks: u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_one_hour_and_refuses_another_until_taken() {
        let t = Tally::new();
        assert_eq!(t.take(), None);
        assert!(t.add(490_000));
        assert!(t.add(490_000));
        assert!(!t.add(490_001), "another hour waits for the take");
        assert_eq!(t.take(), Some((490_000, 2)));
        assert_eq!(t.take(), None);
        assert!(t.add(490_001));
        assert_eq!(t.take(), Some((490_001, 1)));
        assert!(t.add(490_001));
        assert_eq!(t.close(), Some((490_001, 1)));
        assert!(!t.add(490_001), "closed");
        assert_eq!((t.take(), t.close()), (None, None));
    }

    #[test]
    fn concurrent_clicks_and_takes_lose_nothing() {
        let t = Arc::new(Tally::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || (0..50_000).filter(|_| t.add(7)).count() as u64)
            })
            .collect();
        let mut taken = 0;
        while threads.iter().any(|h| !h.is_finished()) {
            if taken >= 50_000 {
                // Closed midway: later clicks are refused, none lost.
                taken += t.close().map_or(0, |(_, n)| n);
                break;
            }
            taken += t.take().map_or(0, |(h, n)| {
                assert_eq!(h, 7);
                n
            });
        }
        let added: u64 = threads.into_iter().map(|h| h.join().unwrap_or(0)).sum();
        taken += t.take().map_or(0, |(_, n)| n);
        taken += t.close().map_or(0, |(_, n)| n);
        assert_eq!(taken, added);
        assert!(added >= 50_000);
    }
}
