//! The in-process cache: (domain, code) → what the code resolved to on that
//! domain, bounded by the bytes it really occupies.
//!
//! * **Memory.** `max_bytes`, less [`ALLOCATOR_SHARE`], is split evenly
//!   over up to 256 shards. A shard counts its bytes exactly — each entry's
//!   weight is what its two allocations occupy under the edge's allocator
//!   ([`allocation_size`]), plus the shard's slot array and ghost filter —
//!   and evicts before an insertion would pass its share. Nothing is sized from the budget up
//!   front: an empty cache is a few tens of KiB whatever `max_bytes` says.
//! * **Reads** (`get`, the redirect hot path) take no lock and allocate
//!   nothing: an epoch pin, a probe of the shard's slot array, a compare of
//!   the code and domain, one reference-count increment.
//! * **Keys** are (domain, code) (protocol 3.5): a custom code may be one
//!   merchant's link on one domain and another's on another. The domain is
//!   the request's host part, compared and hashed case-blind; entries hold
//!   it lower-cased.
//! * **Writes** (`put`, `remove`: the miss path) take the shard's lock.
//! * **Collisions.** Slots are found by a per-process keyed hash (SipHash
//!   with a random key), and a read compares the stored code and domain:
//!   two keys can never be answered with each other's URL.
//! * **Eviction** is S3-FIFO (`policy`): new entries in a small queue, hits
//!   promote links to the main queue; negative and unavailable answers stay
//!   in the small queue, so a scan of unknown codes cannot flush the hot
//!   set. Every answer offered is admitted.
//! * **TTL** per entry; a stale entry reads as absent until replaced or
//!   evicted.
//! * **Invalidation** (`invalidate`): a message `<v> <code> <domain>` drops the
//!   entry unless its version is already `v` or later, and leaves a
//!   tombstone (`tombstones`) that makes `store` refuse an older answer for
//!   a while. Generations (`generation`) let the subscriber retire, in one
//!   store, everything cached before it lost the subscription.

mod entry;
mod export;
mod frame;
mod generation;
mod key;
mod policy;
mod table;
mod tombstones;

pub use entry::{allocation_size, Answer, AnswerRef, Entry, RecordRef};
pub use frame::{Frame, Serialiser};
pub use generation::Generation;
pub use key::Key;
pub use tombstones::MAX_TOMBSTONES;

use crate::clicks::tally::TallySink;
use crossbeam_epoch as epoch;
use generation::{Generations, Horizon};
use pingora_prometheus::prometheus;
use policy::{Change, State};
use std::hash::RandomState;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use table::Table;
use tombstones::Tombstones;

/// Shards get at least this much of the budget each (at most 256 shards).
const MIN_SHARD_BYTES: usize = 1 << 20;
/// The part of `max_bytes` (1/32) left for what the allocator holds around
/// the entries: mimalloc's pages cost 1–4% more than the blocks charged to
/// the shards (page headers, pages left partly used by evictions). With
/// the whole budget charged, `loadtest/memory` measured the RSS above an
/// idle edge at 101–102% of a 64 MiB budget and 100% of 256 MiB (issue 30:
/// at most 100%).
pub const ALLOCATOR_SHARE: usize = 32;
const MAX_SHARDS: usize = 256;

struct Shard {
    table: Table,
    state: Mutex<Locked>,
    /// Some entry of the shard was tallied since the last harvest: an
    /// idle shard's entries are not walked (see `harvest_tallies`).
    tallied: AtomicBool,
}

/// A tally taken from an entry: (entry, hour, clicks).
pub type Tallied<'a> = (&'a Entry, u64, u64);

/// Where the tallies of entries leaving the cache go: set once, when
/// counting is on (`LocalCache::set_tally_sink`).
pub(crate) type SinkSlot = std::sync::OnceLock<Arc<dyn TallySink>>;

/// What a shard's lock guards: its eviction state and its tombstones.
struct Locked {
    policy: State,
    tombs: Tombstones,
}

impl Shard {
    fn lock(&self) -> MutexGuard<'_, Locked> {
        // A panic never leaves a shard half-changed (no code under the
        // lock panics), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The cache's totals, kept by the writers (deltas under each shard's
/// lock) and read by `len`/`bytes` and the metrics exporter.
#[derive(Default)]
struct Totals {
    entries: AtomicI64,
    bytes: AtomicI64,
    evictions: AtomicU64,
    max_bytes: usize,
}

/// Bytes-bounded TTL cache of code lookups, safe to share between threads.
pub struct LocalCache {
    shards: Box<[Shard]>,
    keys: RandomState,
    /// Origin of the entries' clock.
    base: Instant,
    totals: Arc<Totals>,
    gens: Generations,
    /// The fast path's redirect head: records stored whose URL fits it are
    /// servable ([`Entry::servable`]).
    frame: std::sync::OnceLock<Arc<Frame>>,
    /// Shared with every shard's writer state.
    sink: Arc<SinkSlot>,
    /// Tests: every code gets this hash (all collide).
    #[cfg(test)]
    fixed_hash: Option<u64>,
}

impl LocalCache {
    /// A cache holding at most `max_bytes` of entries and index.
    pub fn new(max_bytes: usize) -> Self {
        let mut n = 1;
        while n < MAX_SHARDS && max_bytes / (n * 2) >= MIN_SHARD_BYTES {
            n *= 2;
        }
        let per_shard = (max_bytes - max_bytes / ALLOCATOR_SHARE) / n;
        let tombs_per_shard = MAX_TOMBSTONES.div_ceil(n);
        let sink = Arc::new(SinkSlot::new());
        let shards = (0..n)
            .map(|_| {
                let (table, index) = Table::new();
                Shard {
                    table,
                    state: Mutex::new(Locked {
                        policy: State::new(index, per_shard, Arc::clone(&sink)),
                        tombs: Tombstones::new(tombs_per_shard),
                    }),
                    tallied: AtomicBool::new(false),
                }
            })
            .collect::<Box<[_]>>();
        let totals = Arc::new(Totals {
            max_bytes,
            ..Totals::default()
        });
        let cache = LocalCache {
            shards,
            keys: RandomState::new(),
            base: Instant::now(),
            totals,
            gens: Generations::default(),
            frame: std::sync::OnceLock::new(),
            sink,
            #[cfg(test)]
            fixed_hash: None,
        };
        let start: usize = cache.shards.iter().map(|s| s.lock().policy.bytes()).sum();
        cache.totals.bytes.store(start as i64, Relaxed);
        cache
    }

    /// Registers the `shorturl_cache_*` metrics in the registry that the
    /// edge's Prometheus endpoint serves.
    pub fn register_metrics(&self) -> Result<(), prometheus::Error> {
        prometheus::register(Box::new(export::Exporter::new(Arc::clone(&self.totals))?))
    }

    /// From now on, every record stored whose URL fits `f` is servable
    /// by the fast path ([`Entry::servable`]). Set once, before serving;
    /// later calls are ignored.
    pub fn set_frame(&self, f: Arc<Frame>) {
        let _ = self.frame.set(f);
    }

    /// From now on, the tally of an entry leaving the cache goes to
    /// `sink` (counting is on). Set once, before serving; later calls are
    /// ignored.
    pub fn set_tally_sink(&self, sink: Arc<dyn TallySink>) {
        let _ = self.sink.set(sink);
    }

    fn hash(&self, key: Key<'_>) -> u64 {
        #[cfg(test)]
        if let Some(h) = self.fixed_hash {
            return h;
        }
        key.hash(&self.keys)
    }

    fn shard(&self, hash: u64) -> &Shard {
        // Bits 32.. pick the shard; the slot index uses the low bits and
        // the slot tag the top 16, so the three stay independent.
        let i = (hash >> 32) as usize & (self.shards.len() - 1);
        &self.shards[i]
    }

    /// `t` on the entries' clock (nanoseconds since the cache was made).
    fn ticks(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn horizon(&self, now: Instant) -> Horizon {
        Horizon {
            now: self.ticks(now),
            oldest_live: self.gens.oldest_live(),
        }
    }

    fn ttl_ticks(ttl: Duration) -> u64 {
        u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The fresh entry for `key`, if any. Stale entries and entries of a
    /// retired generation are treated as absent. Lock-free and
    /// allocation-free.
    pub fn get(&self, key: Key<'_>, now: Instant) -> Option<Arc<Entry>> {
        let e = self.peek(key, now)?;
        e.touch();
        Some(e)
    }

    /// Counts one bot click of `hour` (hours since the epoch) on `e`, an
    /// entry of this cache ([`LocalCache::get`]). False when the entry's
    /// tally holds another hour or the entry has left the cache meanwhile
    /// (count the click the usual way).
    #[inline]
    pub fn tally(&self, e: &Entry, hour: u64) -> bool {
        if !e.tally().add(hour) {
            return false;
        }
        // Sequentially consistent (free on x86: the tally's swap is a
        // locked instruction already): a harvest that swaps the flag after
        // this load saw it set walks the table after this click.
        let flag = &self.shard(e.hash).tallied;
        if !flag.load(SeqCst) {
            flag.store(true, SeqCst);
        }
        true
    }

    /// Takes the tallies of every entry into `f`, as (entry, hour,
    /// clicks), one call per shard (with `all`, every shard; otherwise
    /// only those tallied on since the last harvest). `f` runs pinned and
    /// holding no shard lock (it may take the counts' lock, which a spill
    /// takes under a shard lock).
    pub fn harvest_tallies(&self, all: bool, f: &mut dyn FnMut(&[Tallied<'_>])) {
        let now = crate::clicks::tally::now_hour();
        for shard in self.shards.iter() {
            if !shard.tallied.swap(false, SeqCst) && !all {
                continue;
            }
            let guard = epoch::pin();
            let mut taken = Vec::new();
            shard.table.for_each(&guard, |e| {
                if let Some((hour, n)) = e.tally().take(now) {
                    taken.push((e, hour, n));
                }
            });
            if !taken.is_empty() {
                f(&taken);
            }
        }
    }

    /// [`LocalCache::get`] without counting a use. (The request whose own
    /// lookup stored an entry gets it from [`LocalCache::store_entry`]: a
    /// touch there would make every looked-up code look used twice, and
    /// the eviction policy would keep one-hit codes as if they were hot.)
    fn peek(&self, key: Key<'_>, now: Instant) -> Option<Arc<Entry>> {
        let hash = self.hash(key);
        let h = self.horizon(now);
        self.shard(hash).table.get(hash, key, |e| h.admits(e))
    }

    /// Stores `answer` for `key` for `ttl` in the current generation (see
    /// [`LocalCache::store`], which the lookup path uses).
    pub fn put(&self, key: Key<'_>, answer: Answer, ttl: Duration) {
        let _ = self.store(key, answer, ttl, self.generation());
    }

    /// Stores `answer` for `key` for `ttl`, replacing what was cached for
    /// it, stamped with `gen` (the generation current when the lookup that
    /// produced it started). Every answer is admitted (see the module doc
    /// for where it goes); an entry larger than a quarter of a shard is not
    /// cached. An answer older than the key's tombstone is refused. A
    /// record of another domain than the key's is stored as what it is
    /// there: no link (`- 0`).
    pub fn store(&self, key: Key<'_>, answer: Answer, ttl: Duration, gen: Generation) -> Stored {
        self.store_entry(key, answer, ttl, gen).0
    }

    /// [`LocalCache::store`], also handing back the entry it cached (the
    /// request that looked the code up answers from it, without reading
    /// the cache again).
    pub fn store_entry(
        &self,
        key: Key<'_>,
        answer: Answer,
        ttl: Duration,
        gen: Generation,
    ) -> (Stored, Option<Arc<Entry>>) {
        let answer = key.own(answer);
        let hash = self.hash(key);
        let h = self.horizon(Instant::now());
        let shard = self.shard(hash);
        let domain = key.domain.to_ascii_lowercase();
        let tomb = key.tomb_id();
        let entry = Entry::build(
            key.code,
            &domain,
            &answer,
            hash,
            h.now.saturating_add(Self::ttl_ticks(ttl)),
            gen.0,
            self.frame.get().map(|f| &**f),
        )
        .map(Arc::new);
        let guard = epoch::pin();
        let (change, evicted, kept) = {
            let mut st = shard.lock();
            if let (Some(v), Some(t)) = (answer.version(), st.tombs.version(&tomb, h.now)) {
                if v < t {
                    return (Stored::Superseded(t), None);
                }
            }
            if ttl.is_zero() {
                return (Stored::NotCached, None);
            }
            let Some(entry) = entry else {
                // Too long to cache; at least do not keep serving the old answer.
                drop(st);
                self.remove(key);
                return (Stored::NotCached, None);
            };
            let kept = Arc::clone(&entry);
            let c = st.policy.insert(&shard.table, entry, h, &guard);
            (c, st.policy.take_evicted(), kept)
        };
        self.account(&change, evicted);
        (Stored::Cached, Some(kept))
    }

    /// Handles the invalidation `<version> <code> <domain>`: drops the
    /// entry for `key` unless its version is already `version` or later,
    /// and remembers the version for `keep` (a lookup completing meanwhile
    /// with an older answer cannot store it).
    pub fn invalidate(&self, key: Key<'_>, version: u64, keep: Duration) -> Invalidated {
        let hash = self.hash(key);
        let tomb = key.tomb_id();
        let now = self.ticks(Instant::now());
        let shard = self.shard(hash);
        let guard = epoch::pin();
        let change = {
            let mut st = shard.lock();
            st.tombs.raise(
                tomb,
                version,
                now,
                now.saturating_add(Self::ttl_ticks(keep)),
            );
            let Some(e) = shard.table.find(hash, key, &guard) else {
                return Invalidated::Absent;
            };
            if e.version() >= version && !matches!(e.answer(), AnswerRef::Unavailable) {
                return Invalidated::Current;
            }
            st.policy.remove_counted(&shard.table, e, &guard)
        };
        self.account(&change, 0);
        Invalidated::Dropped
    }

    /// The current generation: read it before a lookup starts and hand it
    /// to [`LocalCache::store`].
    pub fn generation(&self) -> Generation {
        self.gens.current()
    }

    /// Opens a new generation: the subscription was lost or established,
    /// and what is looked up from now on is told apart from what was
    /// looked up before.
    pub fn begin_generation(&self) -> Generation {
        self.gens.begin()
    }

    /// Records which generation is the subscribed one (`None`: the
    /// invalidation subscription is down).
    pub fn set_subscribed(&self, g: Option<Generation>) {
        self.gens.set_subscribed(g);
    }

    /// True when a lookup that started in `gen` is covered by the
    /// subscription: every change after it started will be announced.
    pub fn is_subscribed_in(&self, gen: Generation) -> bool {
        self.gens.is_subscribed_in(gen)
    }

    /// Entries of generations before `g` read as absent from now on (and
    /// are the first to go when their shard needs room).
    pub fn retire_before(&self, g: Generation) {
        self.gens.retire_before(g);
    }

    /// Drops the entry for `key`. True if there was one.
    pub fn remove(&self, key: Key<'_>) -> bool {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let guard = epoch::pin();
        let change = {
            let mut st = shard.lock();
            let Some(e) = shard.table.find(hash, key, &guard) else {
                return false;
            };
            st.policy.remove_counted(&shard.table, e, &guard)
        };
        self.account(&change, 0);
        true
    }

    fn account(&self, c: &Change, evicted: u64) {
        let d = |after: usize, before: usize| after as i64 - before as i64;
        let t = &self.totals;
        t.bytes.fetch_add(d(c.bytes_after, c.bytes_before), Relaxed);
        t.entries.fetch_add(d(c.len_after, c.len_before), Relaxed);
        t.evictions.fetch_add(evicted, Relaxed);
    }

    /// Entries held (fresh or stale).
    pub fn len(&self) -> usize {
        self.totals.entries.load(Relaxed).max(0) as usize
    }

    /// True when the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held: entries' weights plus the shards' slot arrays and ghost
    /// filters. Never more than `max_bytes`.
    pub fn bytes(&self) -> usize {
        self.totals.bytes.load(Relaxed).max(0) as usize
    }

    /// Entries evicted to stay within the budget, since start.
    pub fn evictions(&self) -> u64 {
        self.totals.evictions.load(Relaxed)
    }
}

/// What [`LocalCache::store`] did with an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Cached,
    /// A zero TTL, or an answer too long to cache (the old entry is gone).
    NotCached,
    /// Refused: an invalidation announced this version of the code, newer
    /// than the answer. Look it up again.
    Superseded(u64),
}

/// What [`LocalCache::invalidate`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidated {
    /// An older entry (or a failed lookup) was dropped.
    Dropped,
    /// The entry is already at that version or later: kept.
    Current,
    /// Nothing was cached for the code.
    Absent,
}

#[cfg(test)]
mod tests;
