//! Bots' clicks counted on the link's cache entry (issue 27, item 5).
//!
//! A bot's click on a plain link without a referrer (a crawler, a link
//! preview, a monitor: counted as one bot click of the hour, one of the
//! day, no referrer, no dimensions) needs nothing but a number per
//! link-hour. The fast path has just read the link's cache entry; a
//! [`Tally`] there takes the click with one compare-and-swap on a line
//! already in the core's cache, instead of an event queued and a hash
//! lookup in the counts. The counts are not bounded by `clicks.max_links`
//! (they cost four bytes of an entry that exists anyway), so they build
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

use std::sync::atomic::{AtomicU32, Ordering::Relaxed, Ordering::SeqCst};

/// Bits of the word holding the count; the hour's low eight bits are
/// above them.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u32 = (1 << COUNT_BITS) - 1;
/// A tally of an entry that left the cache: takes no more clicks.
const CLOSED: u32 = u32::MAX;

/// One link's bot clicks of one hour since the last take: `(hour mod 256)
/// << 24 | count`. Four bytes, so the entry's block stays 88 bytes (eight
/// more put it in a larger size class: +14 bytes of RSS per entry,
/// `loadtest/memory`). The hour is told from its low bits by the time of
/// the take, the nearest such hour to it: a tally is taken at every flush
/// interval (≤ 5 s), far inside the ±128 hours that allows.
#[derive(Debug, Default)]
pub struct Tally(AtomicU32);

/// The hour nearest to `now_hour` whose low eight bits are `low`.
fn full_hour(low: u32, now_hour: u64) -> u64 {
    let diff = (low as u8).wrapping_sub(now_hour as u8) as i8;
    now_hour.wrapping_add_signed(i64::from(diff))
}

impl Tally {
    /// An empty tally.
    pub const fn new() -> Tally {
        Tally(AtomicU32::new(0))
    }

    /// Counts one click of `hour` (hours since the epoch). False, counting
    /// nothing, when the tally holds another hour's clicks (the caller
    /// counts this one the usual way; the next take empties it), is full
    /// or is closed.
    #[inline]
    pub fn add(&self, hour: u64) -> bool {
        let low = u32::from(hour as u8);
        let mut cur = self.0.load(Relaxed);
        loop {
            let n = cur & COUNT_MASK;
            let next = if n == 0 {
                (low << COUNT_BITS) | 1
            } else if cur >> COUNT_BITS == low && n < COUNT_MASK - 1 {
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

    /// Takes what the tally holds: `(hour, clicks)`, the hour the one
    /// nearest to `now_hour`; `None` when empty or closed.
    pub fn take(&self, now_hour: u64) -> Option<(u64, u64)> {
        let mut cur = self.0.load(Relaxed);
        loop {
            // Most entries between two harvests: no write to their line.
            if cur == 0 || cur == CLOSED {
                return None;
            }
            match self.0.compare_exchange_weak(cur, 0, SeqCst, Relaxed) {
                Ok(_) => return Some(split(cur, now_hour)),
                Err(now) => cur = now,
            }
        }
    }

    /// Closes the tally (its entry leaves the cache) and takes what it
    /// held, as [`Tally::take`].
    pub fn close(&self, now_hour: u64) -> Option<(u64, u64)> {
        let w = self.0.swap(CLOSED, SeqCst);
        (w != CLOSED && w & COUNT_MASK > 0).then(|| split(w, now_hour))
    }
}

fn split(w: u32, now_hour: u64) -> (u64, u64) {
    (
        full_hour(w >> COUNT_BITS, now_hour),
        u64::from(w & COUNT_MASK),
    )
}

/// The hour of `unix` seconds.
pub fn hour_of(unix: u64) -> u64 {
    unix / 3600
}

/// The hour now: what a take or a close tells a tally's hour by.
pub fn now_hour() -> u64 {
    hour_of(shorturl_common::time::now_unix())
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
        let now = 490_001;
        assert_eq!(t.take(now), None);
        assert!(t.add(490_000));
        assert!(t.add(490_000));
        assert!(!t.add(490_001), "another hour waits for the take");
        assert_eq!(t.take(now), Some((490_000, 2)));
        assert_eq!(t.take(now), None);
        assert!(t.add(490_001));
        assert_eq!(t.take(now), Some((490_001, 1)));
        assert!(t.add(490_001));
        assert_eq!(t.close(now), Some((490_001, 1)));
        assert!(!t.add(490_001), "closed");
        assert_eq!((t.take(now), t.close(now)), (None, None));
        // The hour from its low bits: the nearest one to the take's.
        assert_eq!(full_hour(0xff, 490_240), 490_239);
        assert_eq!(full_hour(0x00, 490_239), 490_240);
        assert_eq!(full_hour(490_000 % 256, 490_000 + 127), 490_000);
        assert_eq!(full_hour(490_000 % 256, 490_000 - 127), 490_000);
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
                taken += t.close(7).map_or(0, |(_, n)| n);
                break;
            }
            taken += t.take(7).map_or(0, |(h, n)| {
                assert_eq!(h, 7);
                n
            });
        }
        let added: u64 = threads.into_iter().map(|h| h.join().unwrap_or(0)).sum();
        taken += t.take(7).map_or(0, |(_, n)| n);
        taken += t.close(7).map_or(0, |(_, n)| n);
        assert_eq!(taken, added);
        assert!(added >= 50_000);
    }
}
