//! Admission, eviction and byte accounting of one shard: S3-FIFO.
//!
//! Every new entry joins a small FIFO queue (a tenth of the shard's bytes);
//! the rest is the main queue. Readers only bump an entry's hit counter
//! (capped at 3). Evicting from the small queue, an entry that was hit
//! since it arrived moves to the main queue; one that was not is dropped,
//! and if it was a link its hash goes into the ghost filter, so a link
//! fetched again soon after goes straight to the main queue. Evicting from
//! the main queue, an entry that was hit gets another round (its counter
//! decremented); one that was not, or whose TTL has passed (or whose
//! generation was retired), is dropped.
//!
//! Negative and unavailable answers never enter the main queue (neither by
//! hits nor through the ghost): an enumeration scan, however it repeats its
//! codes, only churns the small queue and cannot flush the hot set.
//!
//! The shard's bytes are exact: the sum of its entries' weights, plus its
//! slot array and its ghost filter. Inserting evicts until the total fits
//! the shard's budget, so the cache never holds more than `max_bytes`.

use super::entry::{Entry, MAIN, SMALL};
use super::generation::Horizon;
use super::table::{Index, Table};
use super::SinkSlot;
use crossbeam_epoch::Guard;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};
use std::sync::Arc;

/// Share of a shard's budget for the small queue, in tenths.
const SMALL_TENTHS: usize = 1;

/// A doubly linked FIFO threaded through the entries (`prev`/`next`).
/// Every linked entry is in the shard's table, which keeps it alive.
#[derive(Default)]
struct Queue {
    head: AtomicPtr<Entry>,
    tail: AtomicPtr<Entry>,
    bytes: usize,
    len: usize,
}

impl Queue {
    fn push_back(&mut self, e: &Entry) {
        let p = ptr::from_ref(e).cast_mut();
        let tail = self.tail.load(Relaxed);
        e.prev.store(tail, Relaxed);
        e.next.store(ptr::null_mut(), Relaxed);
        // SAFETY: `tail` is linked, so it is in the table and alive.
        match unsafe { tail.as_ref() } {
            Some(t) => t.next.store(p, Relaxed),
            None => self.head.store(p, Relaxed),
        }
        self.tail.store(p, Relaxed);
        self.bytes += e.weight();
        self.len += 1;
    }

    fn unlink(&mut self, e: &Entry) {
        let prev = e.prev.swap(ptr::null_mut(), Relaxed);
        let next = e.next.swap(ptr::null_mut(), Relaxed);
        // SAFETY: neighbours of a linked entry are linked, hence alive.
        match unsafe { prev.as_ref() } {
            Some(p) => p.next.store(next, Relaxed),
            None => self.head.store(next, Relaxed),
        }
        // SAFETY: as above.
        match unsafe { next.as_ref() } {
            Some(n) => n.prev.store(prev, Relaxed),
            None => self.tail.store(prev, Relaxed),
        }
        self.bytes -= e.weight();
        self.len -= 1;
    }

    /// The oldest entry, valid while `guard` is pinned (an entry leaves the
    /// table, and then memory, only through the epoch).
    fn front<'g>(&self, _guard: &'g Guard) -> Option<&'g Entry> {
        // SAFETY: a linked entry is alive; see above for the lifetime.
        unsafe { self.head.load(Relaxed).as_ref() }
    }
}

/// Recently evicted links, as two rotating bit sets (8 bits per entry,
/// two probes): "seen" if either set has both bits.
#[derive(Default)]
struct Ghost {
    current: Vec<u64>,
    previous: Vec<u64>,
    added: usize,
}

impl Ghost {
    fn probes(words: usize, hash: u64) -> [(usize, u64); 2] {
        let bits = (words * 64) as u64;
        let g = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let a = (g >> 32) % bits;
        let b = (g & 0xFFFF_FFFF) % bits;
        [
            ((a / 64) as usize, 1 << (a % 64)),
            ((b / 64) as usize, 1 << (b % 64)),
        ]
    }

    fn has(set: &[u64], hash: u64) -> bool {
        !set.is_empty()
            && Self::probes(set.len(), hash)
                .iter()
                .all(|(w, m)| set.get(*w).is_some_and(|v| v & m != 0))
    }

    fn contains(&self, hash: u64) -> bool {
        Self::has(&self.current, hash) || Self::has(&self.previous, hash)
    }

    /// Remembers `hash`; after `window` additions the older set is dropped,
    /// so the filter covers the last `window` to `2 × window` evictions.
    fn insert(&mut self, hash: u64, window: usize) {
        let window = window.max(64);
        if self.current.is_empty() {
            self.current = vec![0; window.div_ceil(8)];
        }
        for (w, m) in Self::probes(self.current.len(), hash) {
            if let Some(v) = self.current.get_mut(w) {
                *v |= m;
            }
        }
        self.added += 1;
        if self.added >= window {
            self.previous = std::mem::replace(&mut self.current, vec![0; window.div_ceil(8)]);
            self.added = 0;
        }
    }

    fn bytes(&self) -> usize {
        (self.current.capacity() + self.previous.capacity()) * 8
    }
}

/// A shard's writer state (behind its lock).
pub(super) struct State {
    pub(super) index: Index,
    small: Queue,
    main: Queue,
    ghost: Ghost,
    budget: usize,
    /// Entries dropped to make room since the last call to `take_evicted`.
    evicted: u64,
    /// Where the tally of an entry unlinked here goes (see
    /// `clicks::tally`); empty while counting is off.
    sink: Arc<SinkSlot>,
}

/// What an insertion did, for the cache's totals.
pub(super) struct Change {
    pub(super) bytes_before: usize,
    pub(super) bytes_after: usize,
    pub(super) len_before: usize,
    pub(super) len_after: usize,
}

impl State {
    pub(super) fn new(index: Index, budget: usize, sink: Arc<SinkSlot>) -> State {
        State {
            index,
            small: Queue::default(),
            main: Queue::default(),
            ghost: Ghost::default(),
            budget,
            evicted: 0,
            sink,
        }
    }

    /// All bytes this shard holds: entries, slot array, ghost filter.
    pub(super) fn bytes(&self) -> usize {
        self.small.bytes + self.main.bytes + Table::bytes(&self.index) + self.ghost.bytes()
    }

    pub(super) fn len(&self) -> usize {
        Table::len(&self.index)
    }

    #[cfg(test)]
    pub(super) fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes that are not entries: slot array and ghost filter (tests).
    #[cfg(test)]
    pub(super) fn overhead(&self) -> usize {
        Table::bytes(&self.index) + self.ghost.bytes()
    }

    pub(super) fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    /// The weights of every entry, walking both queues (tests).
    #[cfg(test)]
    pub(super) fn weights(&self, guard: &Guard) -> (usize, usize) {
        let (mut sum, mut n) = (0, 0);
        for q in [&self.small, &self.main] {
            let mut e = q.front(guard);
            while let Some(x) = e {
                sum += x.weight();
                n += 1;
                // SAFETY: linked, hence alive while pinned.
                e = unsafe { x.next.load(Relaxed).as_ref() };
            }
        }
        (sum, n)
    }

    /// Stores `entry` (replacing the entry for its code, if any), evicting
    /// until the shard fits its budget; an entry that cannot fit is dropped.
    pub(super) fn insert(
        &mut self,
        table: &Table,
        entry: Arc<Entry>,
        horizon: Horizon,
        guard: &Guard,
    ) -> Change {
        let bytes_before = self.bytes();
        let len_before = self.len();
        let mut to_main = false;
        if let Some(old) = table.find(entry.hash, entry.key(), guard) {
            if old.queue.load(Relaxed) == MAIN && entry.is_found() {
                to_main = true;
                entry.set_freq(old.freq());
            }
            self.remove(table, old, guard);
        }
        to_main |= entry.is_found() && self.ghost.contains(entry.hash);
        if entry.weight() <= self.budget / 4 {
            while self.bytes_if_added(entry.weight()) > self.budget {
                if !self.evict_one(table, horizon, guard) {
                    break;
                }
            }
            if self.bytes_if_added(entry.weight()) <= self.budget {
                let e = Arc::clone(&entry);
                if table.insert(&mut self.index, entry, guard).is_ok() {
                    let q = if to_main { MAIN } else { SMALL };
                    e.queue.store(q, Relaxed);
                    self.queue(q).push_back(&e);
                }
            }
        }
        Change {
            bytes_before,
            bytes_after: self.bytes(),
            len_before,
            len_after: self.len(),
        }
    }

    /// Bytes after inserting one entry of `weight`, counting the slot array
    /// it may make grow.
    fn bytes_if_added(&self, weight: usize) -> usize {
        self.bytes() + weight + Table::growth_on_insert(&self.index)
    }

    fn queue(&mut self, q: u8) -> &mut Queue {
        if q == MAIN {
            &mut self.main
        } else {
            &mut self.small
        }
    }

    /// Drops `e` (an entry of this shard) from its queue and the table.
    /// [`State::remove`], returning the bytes and entries before and after
    /// for the cache-wide accounting.
    pub(super) fn remove_counted(&mut self, table: &Table, e: &Entry, guard: &Guard) -> Change {
        let (bytes_before, len_before) = (self.bytes(), self.len());
        self.remove(table, e, guard);
        Change {
            bytes_before,
            bytes_after: self.bytes(),
            len_before,
            len_after: self.len(),
        }
    }

    pub(super) fn remove(&mut self, table: &Table, e: &Entry, guard: &Guard) {
        let q = e.queue.load(Relaxed);
        self.queue(q).unlink(e);
        if let Some(arc) = table.remove(&mut self.index, e, guard) {
            // Its tally closed (a reader still holding the entry queues its
            // click instead) and what it held counted now, not whenever the
            // epoch frees the entry. Under the shard lock: the counts'
            // lock is only ever taken after a shard's, never before.
            if let Some(sink) = self.sink.get() {
                if let Some((hour, n)) = arc.tally().close(crate::clicks::tally::now_hour()) {
                    sink.spill(arc.code(), arc.domain(), hour, n);
                }
            }
            guard.defer(move || drop(arc));
        }
    }

    /// Evicts one entry; false when the shard is empty.
    fn evict_one(&mut self, table: &Table, horizon: Horizon, guard: &Guard) -> bool {
        // Each main-queue pass decrements a counter of at most 3, so a
        // victim turns up within 4 passes; the bound guards against readers
        // re-bumping counters as fast as the hand clears them.
        let mut rounds = 4 * (self.small.len + self.main.len) + 8;
        loop {
            let from_small = self.small.len > 0
                && (self.small.bytes * 10 > self.budget * SMALL_TENTHS || self.main.len == 0);
            let q = if from_small { &self.small } else { &self.main };
            let Some(e) = q.front(guard) else {
                return false;
            };
            rounds = rounds.saturating_sub(1);
            // Past its TTL or of a retired generation: dropped first.
            let fresh = horizon.admits(e);
            if from_small {
                if fresh && e.is_found() && e.freq() > 0 && rounds > 0 {
                    self.small.unlink(e);
                    e.queue.store(MAIN, Relaxed);
                    self.main.push_back(e);
                    continue;
                }
                if fresh && e.is_found() {
                    let window = self.main.len.max(self.small.len);
                    self.ghost.insert(e.hash, window);
                }
            } else if fresh && e.freq() > 0 && rounds > 0 {
                e.set_freq(e.freq() - 1);
                self.main.unlink(e);
                self.main.push_back(e);
                continue;
            }
            self.remove(table, e, guard);
            self.evicted += 1;
            return true;
        }
    }
}
