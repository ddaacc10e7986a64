//! The index of one shard: an open-addressing table (linear probing) of
//! `Arc<Entry>` pointers that readers search without any lock.
//!
//! Each slot is one `AtomicU64`: 0 (empty), 1 (a removed entry: probing
//! continues past it), or an entry pointer with the top 16 bits of the
//! code's hash in its unused high bits, so a probe rejects other codes
//! without touching their memory. Only the shard's writer (holding the
//! shard lock, proven by `&mut` access to its [`Index`]) changes slots or
//! swaps the slot array; an entry or array it unlinks is freed through
//! `crossbeam-epoch` once no reader pinned before the unlink is left. The
//! table holds one strong count of every entry it points to.

use super::entry::Entry;
use super::key::Key;
use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Release};
use std::sync::Arc;

const EMPTY: u64 = 0;
const REMOVED: u64 = 1;
const TAG_SHIFT: u32 = 48;
const PTR_MASK: u64 = (1 << TAG_SHIFT) - 1;
/// Smallest slot array (the table of an empty shard: 128 bytes).
pub(super) const MIN_SLOTS: usize = 16;

fn tag(hash: u64) -> u64 {
    hash >> TAG_SHIFT
}

fn entry_ptr(slot: u64) -> *const Entry {
    (slot & PTR_MASK) as usize as *const Entry
}

struct Slots {
    words: Box<[AtomicU64]>,
}

impl Slots {
    fn new(n: usize) -> Slots {
        Slots {
            words: (0..n).map(|_| AtomicU64::new(EMPTY)).collect(),
        }
    }

    fn mask(&self) -> usize {
        self.words.len() - 1
    }
}

/// The reader-visible part: the current slot array. On a cache line of
/// its own, so the writer's lock and bookkeeping next to it in the shard
/// never invalidate what every hit reads.
#[repr(align(64))]
pub(super) struct Table {
    slots: Atomic<Slots>,
}

/// The writer's bookkeeping, kept inside the shard lock.
pub(super) struct Index {
    live: usize,
    removed: usize,
    capacity: usize,
}

impl Table {
    pub(super) fn new() -> (Table, Index) {
        (
            Table {
                slots: Atomic::new(Slots::new(MIN_SLOTS)),
            },
            Index {
                live: 0,
                removed: 0,
                capacity: MIN_SLOTS,
            },
        )
    }

    fn current<'g>(&self, guard: &'g Guard) -> Option<&'g Slots> {
        // SAFETY: the array is replaced only by `rebuild`, which defers
        // freeing the old one past every guard pinned before the swap.
        unsafe { self.slots.load(Acquire, guard).as_ref() }
    }

    /// The entry for `key`, valid while `guard` is pinned. Lock-free: loads
    /// and compares only.
    pub(super) fn find<'g>(&self, hash: u64, key: Key<'_>, guard: &'g Guard) -> Option<&'g Entry> {
        let slots = self.current(guard)?;
        let mask = slots.mask();
        let mut i = hash as usize & mask;
        for _ in 0..=mask {
            let w = slots.words.get(i)?.load(Acquire);
            if w == EMPTY {
                return None;
            }
            if w != REMOVED && (w >> TAG_SHIFT) == tag(hash) {
                // SAFETY: a slot points to a live entry (the table's strong
                // count), and one unlinked after we loaded the slot is freed
                // only once `guard` is released.
                let e = unsafe { &*entry_ptr(w) };
                if e.hash == hash && key.is_of(e) {
                    return Some(e);
                }
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Calls `f` with every entry in the table, valid while `guard` is
    /// pinned (an entry inserted or removed meanwhile may or may not be
    /// seen; a rebuild meanwhile is not seen).
    pub(super) fn for_each<'g>(&self, guard: &'g Guard, mut f: impl FnMut(&'g Entry)) {
        let Some(slots) = self.current(guard) else {
            return;
        };
        for w in slots.words.iter().map(|s| s.load(Acquire)) {
            if w != EMPTY && w != REMOVED {
                // SAFETY: as in `find`.
                f(unsafe { &*entry_ptr(w) });
            }
        }
    }

    /// A shared handle to the entry for `key` if `keep` accepts it.
    pub(super) fn get(
        &self,
        hash: u64,
        key: Key<'_>,
        keep: impl FnOnce(&Entry) -> bool,
    ) -> Option<Arc<Entry>> {
        let guard = epoch::pin();
        let e = self.find(hash, key, &guard).filter(|e| keep(e))?;
        let p = std::ptr::from_ref(e);
        // SAFETY: `e` came from a slot, which holds a strong count that is
        // released (through the epoch) only after `guard` is dropped.
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    }

    /// Where `target` sits, for the writer.
    fn position(&self, target: *const Entry, hash: u64, guard: &Guard) -> Option<usize> {
        let slots = self.current(guard)?;
        let mask = slots.mask();
        let mut i = hash as usize & mask;
        for _ in 0..=mask {
            let w = slots.words.get(i)?.load(Acquire);
            if w == EMPTY {
                return None;
            }
            if w != REMOVED && entry_ptr(w) == target {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Stores `entry`, which must not be in the table yet (the writer removed
    /// any previous entry for its code first). Gives the entry back when it
    /// cannot be stored (a pointer with its high bits in use).
    pub(super) fn insert(
        &self,
        ix: &mut Index,
        entry: Arc<Entry>,
        guard: &Guard,
    ) -> Result<(), Arc<Entry>> {
        let hash = entry.hash;
        let raw = Arc::as_ptr(&entry) as usize as u64;
        if raw & !PTR_MASK != 0 {
            return Err(entry);
        }
        if (ix.live + ix.removed + 1) * 8 > ix.capacity * 7 {
            // Over 7/8 full: double when live entries alone pass half,
            // otherwise rebuild at the same size to drop removed slots.
            let cap = if (ix.live + 1) * 2 > ix.capacity {
                ix.capacity * 2
            } else {
                ix.capacity
            };
            self.rebuild(ix, cap, guard);
        }
        let Some(slots) = self.current(guard) else {
            return Err(entry);
        };
        let mask = slots.mask();
        let mut i = hash as usize & mask;
        loop {
            let Some(slot) = slots.words.get(i) else {
                return Err(entry);
            };
            let w = slot.load(Acquire);
            if w == EMPTY || w == REMOVED {
                if w == REMOVED {
                    ix.removed -= 1;
                }
                ix.live += 1;
                let raw = Arc::into_raw(entry) as usize as u64;
                slot.store(raw | (tag(hash) << TAG_SHIFT), Release);
                return Ok(());
            }
            i = (i + 1) & mask;
        }
    }

    /// Unlinks `target` (an entry in the table) and hands back the table's
    /// strong count of it; free it through the epoch (`guard.defer`).
    pub(super) fn remove(
        &self,
        ix: &mut Index,
        target: &Entry,
        guard: &Guard,
    ) -> Option<Arc<Entry>> {
        let i = self.position(target, target.hash, guard)?;
        let slots = self.current(guard)?;
        let w = slots.words.get(i)?.swap(REMOVED, Release);
        ix.live -= 1;
        ix.removed += 1;
        // SAFETY: the slot held the table's strong count of this entry;
        // now nothing in the table refers to it.
        let arc = unsafe { Arc::from_raw(entry_ptr(w)) };
        if ix.capacity > MIN_SLOTS && ix.live * 8 < ix.capacity {
            self.rebuild(ix, ix.capacity / 2, guard);
        }
        Some(arc)
    }

    /// Replaces the slot array with one of `cap` slots holding the live
    /// entries (their strong counts move with the words).
    fn rebuild(&self, ix: &mut Index, cap: usize, guard: &Guard) {
        let Some(old) = self.current(guard) else {
            return;
        };
        let new = Slots::new(cap);
        let mask = new.mask();
        for w in old.words.iter().map(|s| s.load(Acquire)) {
            if w == EMPTY || w == REMOVED {
                continue;
            }
            // SAFETY: live slot, as in `find`.
            let hash = unsafe { &*entry_ptr(w) }.hash;
            let mut i = hash as usize & mask;
            while new.words.get(i).is_some_and(|s| s.load(Acquire) != EMPTY) {
                i = (i + 1) & mask;
            }
            if let Some(s) = new.words.get(i) {
                s.store(w, Release);
            }
        }
        let old = self.slots.swap(Owned::new(new), Release, guard);
        // SAFETY: `old` is unreachable from now on; readers still using it
        // are pinned, and the epoch frees it after them. Only the array is
        // freed: the entries now belong to the new one.
        unsafe { guard.defer_destroy(old) };
        ix.capacity = cap;
        ix.removed = 0;
    }

    /// Bytes of the slot array (charged to the shard).
    pub(super) fn bytes(ix: &Index) -> usize {
        ix.capacity * size_of::<AtomicU64>()
    }

    /// Bytes the slot array grows by if one more entry is inserted now.
    pub(super) fn growth_on_insert(ix: &Index) -> usize {
        let full = (ix.live + ix.removed + 1) * 8 > ix.capacity * 7;
        if full && (ix.live + 1) * 2 > ix.capacity {
            ix.capacity * size_of::<AtomicU64>()
        } else {
            0
        }
    }

    pub(super) fn len(ix: &Index) -> usize {
        ix.live
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer is left.
        let guard = unsafe { epoch::unprotected() };
        let cur: Shared<'_, Slots> = self.slots.load(Acquire, guard);
        if cur.is_null() {
            return;
        }
        // SAFETY: as above; each live word owns a strong count.
        let slots = unsafe { cur.into_owned() };
        for w in slots.words.iter().map(|s| s.load(Acquire)) {
            if w != EMPTY && w != REMOVED {
                // SAFETY: the word's strong count, released once.
                drop(unsafe { Arc::from_raw(entry_ptr(w)) });
            }
        }
    }
}
