//! Batches cut and not yet accepted by the stream, oldest first, bounded in
//! clicks and in bytes: while Redis is unreachable they wait here; past
//! either bound whole oldest batches are dropped (and their clicks reported
//! as dropped), never the newest: a cut made while the flusher waited on a
//! dead Redis can alone hold more clicks than the bound (a line carries a
//! count), and dropping it would lose the newest clicks and keep nothing.
//! Memory stays bounded: a batch is at most `MAX_BATCH_LINES` lines, far
//! under the smallest bytes bound. The bytes bound is the memory bound: a click on a link of
//! its own costs up to ~400 bytes of lines with dimensions, so a million
//! clicks alone could hold hundreds of megabytes. A
//! batch keeps its id across retries, so one whose `XADD` succeeded but
//! whose reply was lost counts once at the origin.
//!
//! The clicks bound holds only while Redis does not take batches (an
//! outage, or before the first batch went): while it does, a buffer over
//! it is a flush interval's harvest on its way, not clicks at risk. Bots'
//! clicks tallied on cache entries are harvested every interval as a few
//! lines per link-hour: at 200,000 such redirects a second, one harvest is
//! a million clicks in a few hundred kilobytes, which the clicks bound
//! dropped while Redis took every batch (session 27's kit, ~50,000 clicks
//! a round). The bytes bound, the memory bound, holds always.

use std::collections::VecDeque;

/// One encoded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsent {
    pub id: String,
    /// The format version (`v`): [`shorturl_common::clicks::Batch::version`].
    pub version: &'static str,
    /// Shared: the sender clones the oldest batch under the lock (and the
    /// encoded `String` becomes one without a copy).
    pub body: bytes::Bytes,
    /// Human plus bot clicks in it.
    pub clicks: u64,
}

/// The bounded buffer.
#[derive(Debug)]
pub struct Pending {
    queue: VecDeque<Unsent>,
    clicks: u64,
    bytes: u64,
    max_clicks: u64,
    max_bytes: u64,
}

impl Pending {
    /// An empty buffer holding at most `max_clicks` clicks in at most
    /// `max_bytes` bytes of bodies.
    pub fn new(max_clicks: u64, max_bytes: u64) -> Pending {
        Pending {
            queue: VecDeque::new(),
            clicks: 0,
            bytes: 0,
            max_clicks,
            max_bytes,
        }
    }

    /// Appends `b`, then drops whole oldest batches until the bounds hold
    /// (the clicks bound only when `!answering`: Redis is not taking
    /// batches) or only `b` is left (kept even when it alone is over a
    /// bound). Returns the clicks dropped.
    pub fn push(&mut self, b: Unsent, answering: bool) -> u64 {
        self.clicks += b.clicks;
        self.bytes += b.body.len() as u64;
        self.queue.push_back(b);
        let mut dropped = 0;
        while ((!answering && self.clicks > self.max_clicks) || self.bytes > self.max_bytes)
            && self.queue.len() > 1
        {
            let Some(old) = self.queue.pop_front() else {
                break;
            };
            self.forget(&old);
            dropped += old.clicks;
        }
        dropped
    }

    fn forget(&mut self, b: &Unsent) {
        self.clicks -= b.clicks;
        self.bytes -= b.body.len() as u64;
    }

    /// The oldest batch: the next to send.
    pub fn front(&self) -> Option<&Unsent> {
        self.queue.front()
    }

    /// Every unsent batch, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Unsent> {
        self.queue.iter()
    }

    /// Removes the oldest batch if it is `id` (it was sent).
    pub fn pop_sent(&mut self, id: &str) -> Option<Unsent> {
        if self.queue.front().is_some_and(|b| b.id == id) {
            let b = self.queue.pop_front()?;
            self.forget(&b);
            return Some(b);
        }
        None
    }

    /// How often request threads pause for the flusher
    /// ([`super::pause_level`]) with `unsent` clicks counted and not sent
    /// (these batches' and the counts not cut yet) and this buffer's bytes:
    /// the nearer bound decides (the lower level pauses more often).
    pub fn pause_level(&self, unsent: u64) -> u8 {
        [
            super::pause_level(unsent, self.max_clicks),
            super::pause_level(self.bytes, self.max_bytes),
        ]
        .into_iter()
        .filter(|l| *l > 0)
        .min()
        .unwrap_or(0)
    }

    /// Clicks held.
    pub fn clicks(&self) -> u64 {
        self.clicks
    }

    /// Bytes of the bodies held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(id: &str, clicks: u64) -> Unsent {
        sized(id, clicks, 0)
    }

    fn sized(id: &str, clicks: u64, len: usize) -> Unsent {
        Unsent {
            id: id.into(),
            version: "1",
            body: bytes::Bytes::from(vec![b'h'; len]),
            clicks,
        }
    }

    #[test]
    fn bounded_oldest_first() {
        let mut p = Pending::new(10, u64::MAX);
        assert_eq!(p.push(b("a", 4), false), 0);
        assert_eq!(p.push(b("b", 5), false), 0);
        assert_eq!(p.clicks(), 9);
        // 9 + 3 > 10: the oldest whole batch goes.
        assert_eq!(p.push(b("c", 3), false), 4);
        assert_eq!(
            (p.clicks(), p.front().map(|f| f.id.as_str())),
            (8, Some("b"))
        );
        assert!(p.pop_sent("c").is_none());
        assert_eq!(p.pop_sent("b").map(|x| x.clicks), Some(5));
        // A batch over the bound by itself is kept (the newest clicks),
        // the older ones go; the next batch drops it.
        assert_eq!(p.push(b("d", 11), false), 3);
        assert_eq!(
            (p.clicks(), p.front().map(|f| f.id.as_str())),
            (11, Some("d"))
        );
        assert_eq!(p.push(b("e", 1), false), 11);
        assert_eq!(
            (p.clicks(), p.front().map(|f| f.id.as_str())),
            (1, Some("e"))
        );
    }

    #[test]
    fn while_redis_takes_batches_only_the_bytes_bound_holds() {
        let mut p = Pending::new(10, 100);
        assert_eq!(p.push(sized("a", 9, 10), true), 0);
        // A harvest of a million tallied clicks in a few bytes: kept.
        assert_eq!(p.push(sized("b", 1_000_000, 20), true), 0);
        assert_eq!((p.clicks(), p.bytes()), (1_000_009, 30));
        // The bytes bound still drops the oldest.
        assert_eq!(p.push(sized("c", 1, 80), true), 9);
        assert_eq!((p.clicks(), p.bytes()), (1_000_001, 100));
        // Redis gone: the clicks bound again.
        assert_eq!(p.push(sized("d", 1, 0), false), 1_000_000);
        assert_eq!(p.clicks(), 2);
    }

    #[test]
    fn the_bytes_bound_drops_oldest_batches_too() {
        let mut p = Pending::new(1_000, 100);
        assert_eq!(p.push(sized("a", 1, 60), false), 0);
        assert_eq!(p.push(sized("b", 2, 30), false), 0);
        assert_eq!((p.clicks(), p.bytes()), (3, 90));
        // 90 + 20 bytes > 100: the oldest batch goes, with its click.
        assert_eq!(p.push(sized("c", 4, 20), false), 1);
        assert_eq!((p.clicks(), p.bytes()), (6, 50));
        assert_eq!(p.pop_sent("b").map(|x| x.clicks), Some(2));
        assert_eq!((p.clicks(), p.bytes()), (4, 20));
        // A batch over the bytes bound by itself is kept, the older go.
        assert_eq!(p.push(sized("d", 5, 101), false), 4);
        assert_eq!((p.clicks(), p.bytes()), (5, 101));
    }
}
