//! Per-client abuse limits with exact counters.
//!
//! Each client (its address; IPv6 by its prefix, see [`ClientKey`]) has its
//! own counters in a bounded table that evicts the least recently seen
//! client, so a spray of distinct source addresses can only push other
//! *sprayers* out of the table; it can never raise anyone else's count (the
//! count-min sketch used before could be filled that way, after which every
//! client was over every limit). An evicted client starts again from zero.
//!
//! * unknown-code lookups: every 404 for a code-shaped path counts; once a
//!   client is past `unknown_per_ip_per_sec`, its next lookups that are not a
//!   cached record answer 429 before any Redis or origin work. Cached
//!   redirects never reach this module.
//! * creations: `POST /api/v1/links` per client, counted before forwarding;
//!   a batch (`/api/v1/links/batch`) spends one per item, all or nothing,
//!   before the end of its body is forwarded.
//! * refused creations: creations the origin answered 401/403, a stricter
//!   per-minute budget; once spent, further creations from that client are
//!   429 at the edge and never reach the origin.
//!
//! Windows are fixed and start at a client's first counted event, so a burst
//! shorter than the window is counted exactly. A limit of 0 is off; with
//! every limit off the table is never touched.

use crate::config::limits::LimitsConfig;
use crate::net::ClientKey;
use lru::LruCache;
use pingora_prometheus::prometheus::IntCounter;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

const SECOND_MS: u64 = 1000;
const MINUTE_MS: u64 = 60_000;
/// Tables at least this large are split into [`SHARDS`] locks.
const SHARD_FROM: usize = 1024;
const SHARDS: usize = 16;

/// Which limit refused a request (the `limit` label of
/// `shorturl_limits_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Too many unknown-code answers this second.
    Unknown,
    /// Too many creations this second.
    Creations,
    /// Too many creations refused by the origin this minute.
    RefusedCreations,
}

impl Refusal {
    /// Every refusal, in label order.
    pub const ALL: [Refusal; 3] = [
        Refusal::Unknown,
        Refusal::Creations,
        Refusal::RefusedCreations,
    ];

    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Unknown => "unknown",
            Refusal::Creations => "creations",
            Refusal::RefusedCreations => "refused_creations",
        }
    }

    /// The 429 message.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Unknown => "too many requests for unknown links",
            Refusal::Creations => "too many creations",
            Refusal::RefusedCreations => "too many refused creations",
        }
    }
}

/// A fixed window starting at the first event counted in it.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    start_ms: u64,
    count: u32,
}

impl Window {
    fn value(&self, now_ms: u64, len_ms: u64) -> u32 {
        if now_ms.saturating_sub(self.start_ms) >= len_ms {
            0
        } else {
            self.count
        }
    }

    fn add(&mut self, now_ms: u64, len_ms: u64) -> u32 {
        self.add_n(now_ms, len_ms, 1)
    }

    fn add_n(&mut self, now_ms: u64, len_ms: u64, n: u32) -> u32 {
        if self.value(now_ms, len_ms) == 0 {
            *self = Window {
                start_ms: now_ms,
                count: 0,
            };
        }
        self.count = self.count.saturating_add(n);
        self.count
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    unknown: Window,
    creations: Window,
    refused: Window,
}

type Shard = LruCache<ClientKey, Counters>;

/// The bounded client table.
struct ClientTable {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::hash::RandomState,
    epoch: Instant,
    evictions: IntCounter,
}

impl ClientTable {
    fn new(clients: usize, evictions: IntCounter) -> Self {
        let n = if clients >= SHARD_FROM { SHARDS } else { 1 };
        let per = NonZeroUsize::new(clients.div_ceil(n)).unwrap_or(NonZeroUsize::MIN);
        ClientTable {
            // Sparse: memory follows the clients seen, not the bound.
            shards: (0..n).map(|_| Mutex::new(LruCache::sparse(per))).collect(),
            hasher: std::hash::RandomState::new(),
            epoch: Instant::now(),
            evictions,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn shard(&self, key: &ClientKey) -> MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        let m = &self.shards[i];
        // A poisoned shard still holds whole entries.
        match m.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Reads `key`'s counters (marking it seen); `None` when not tracked.
    fn read<R>(&self, key: &ClientKey, f: impl FnOnce(&Counters, u64) -> R) -> Option<R> {
        let now = self.now_ms();
        self.shard(key).get(key).map(|c| f(c, now))
    }

    /// Updates `key`'s counters, tracking it (and evicting the least
    /// recently seen client of its shard when full) if it is new.
    fn update<R>(&self, key: ClientKey, f: impl FnOnce(&mut Counters, u64) -> R) -> R {
        let now = self.now_ms();
        let mut shard = self.shard(&key);
        if shard.len() >= shard.cap().get() && !shard.contains(&key) {
            self.evictions.inc();
        }
        f(shard.get_or_insert_mut(key, Counters::default), now)
    }
}

/// The per-client limits.
pub struct Limits {
    unknown_max: u32,
    creations_max: u32,
    refused_max: u32,
    table: ClientTable,
}

impl Limits {
    /// Limits from the configuration; `evictions` counts clients pushed out
    /// of the table.
    pub fn new(cfg: &LimitsConfig, evictions: IntCounter) -> Self {
        Limits {
            unknown_max: cfg.unknown_per_ip_per_sec,
            creations_max: cfg.creations_per_ip_per_sec,
            refused_max: cfg.refused_creations_per_ip_per_min,
            table: ClientTable::new(cfg.clients_tracked, evictions),
        }
    }

    /// True when `client` has already produced too many unknown-code
    /// answers in its current one-second window.
    pub fn unknown_exceeded(&self, client: &ClientKey) -> bool {
        self.unknown_max > 0
            && self
                .table
                .read(client, |c, now| {
                    c.unknown.value(now, SECOND_MS) >= self.unknown_max
                })
                .unwrap_or(false)
    }

    /// Counts one unknown-code answer for `client`.
    pub fn count_unknown(&self, client: ClientKey) {
        if self.unknown_max > 0 {
            self.table
                .update(client, |c, now| c.unknown.add(now, SECOND_MS));
        }
    }

    /// Decides a creation before it is forwarded: refused while the client's
    /// refused-creation budget is spent, else counted against the
    /// per-second creation limit.
    pub fn admit_creation(&self, client: ClientKey) -> Result<(), Refusal> {
        self.admit_creations(client, 1)
    }

    /// Decides `items` creations at once (a batch): refused while the
    /// client's refused-creation budget is spent, or when they do not all
    /// fit in what is left of its per-second limit; then nothing is spent.
    /// Else all are counted, in one step under the client's lock.
    pub fn admit_creations(&self, client: ClientKey, items: u64) -> Result<(), Refusal> {
        if self.creations_max == 0 && self.refused_max == 0 {
            return Ok(());
        }
        let n = u32::try_from(items).unwrap_or(u32::MAX);
        self.table.update(client, |c, now| {
            if self.refused_max > 0 && c.refused.value(now, MINUTE_MS) >= self.refused_max {
                return Err(Refusal::RefusedCreations);
            }
            if self.creations_max > 0 {
                let used = c.creations.value(now, SECOND_MS);
                if used.saturating_add(n) > self.creations_max {
                    return Err(Refusal::Creations);
                }
                c.creations.add_n(now, SECOND_MS, n);
            }
            Ok(())
        })
    }

    /// The refusal a creation from `client` would get now whatever its
    /// size: its refused-creation budget is spent, or its per-second
    /// creations are. Spends nothing (a batch is refused at its head
    /// before its body is read).
    pub fn creation_blocked(&self, client: &ClientKey) -> Option<Refusal> {
        if self.creations_max == 0 && self.refused_max == 0 {
            return None;
        }
        self.table
            .read(client, |c, now| {
                if self.refused_max > 0 && c.refused.value(now, MINUTE_MS) >= self.refused_max {
                    Some(Refusal::RefusedCreations)
                } else if self.creations_max > 0
                    && c.creations.value(now, SECOND_MS) >= self.creations_max
                {
                    Some(Refusal::Creations)
                } else {
                    None
                }
            })
            .flatten()
    }

    /// Counts a creation the origin refused (401/403) for `client`.
    pub fn count_refused_creation(&self, client: ClientKey) {
        if self.refused_max > 0 {
            self.table
                .update(client, |c, now| c.refused.add(now, MINUTE_MS));
        }
    }
}

/// A configuration for unit tests: these budgets, the other limits at
/// their usual values.
#[cfg(test)]
pub(crate) fn test_config(
    unknown: u32,
    creations: u32,
    refused: u32,
    clients: usize,
) -> LimitsConfig {
    LimitsConfig {
        unknown_per_ip_per_sec: unknown,
        creations_per_ip_per_sec: creations,
        refused_creations_per_ip_per_min: refused,
        clients_tracked: clients,
        ipv6_prefix_len: 64,
        max_uri_bytes: 4096,
        max_header_bytes: 16384,
        client_timeout: std::time::Duration::from_secs(10),
        keepalive_timeout_secs: 60,
        header_timeout: std::time::Duration::from_secs(5),
        max_connections: 0,
        max_connections_per_ip: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn cfg(unknown: u32, creations: u32, refused: u32, clients: usize) -> LimitsConfig {
        test_config(unknown, creations, refused, clients)
    }

    fn evictions() -> IntCounter {
        IntCounter::new("test_evictions", "test").unwrap_or_else(|e| panic!("{e}"))
    }

    fn key(n: u32) -> ClientKey {
        ClientKey::new(IpAddr::from(n.to_be_bytes()), 64)
    }

    #[test]
    fn per_client_and_disabled() {
        let l = Limits::new(&cfg(3, 2, 0, 100), evictions());
        let (a, b) = (key(1), key(2));
        for _ in 0..3 {
            assert!(!l.unknown_exceeded(&a));
            l.count_unknown(a);
        }
        assert!(l.unknown_exceeded(&a));
        assert!(!l.unknown_exceeded(&b), "limits are per client");
        assert_eq!(l.admit_creation(a), Ok(()));
        assert_eq!(l.admit_creation(a), Ok(()));
        assert_eq!(l.admit_creation(a), Err(Refusal::Creations));
        assert_eq!(l.admit_creation(b), Ok(()));
        let off = Limits::new(&cfg(0, 0, 0, 100), evictions());
        for _ in 0..100 {
            off.count_unknown(a);
            off.count_refused_creation(a);
            assert_eq!(off.admit_creation(a), Ok(()));
        }
        assert!(!off.unknown_exceeded(&a));
    }

    #[test]
    fn a_spray_of_clients_cannot_raise_another_clients_count() {
        let ev = evictions();
        let l = Limits::new(&cfg(1, 0, 0, 64), ev.clone());
        let victim = key(7);
        l.count_unknown(key(8));
        for n in 1000..50_000 {
            l.count_unknown(key(n));
            assert!(l.unknown_exceeded(&key(n)), "own count is exact");
        }
        assert!(!l.unknown_exceeded(&victim));
        assert!(
            !l.unknown_exceeded(&key(8)),
            "evicted clients start from zero"
        );
        assert_eq!(
            ev.get(),
            49_000 + 1 - 64,
            "one eviction per new client past the bound"
        );
    }

    #[test]
    fn the_least_recently_seen_client_is_evicted() {
        let l = Limits::new(&cfg(1, 0, 0, 2), evictions());
        l.count_unknown(key(1));
        l.count_unknown(key(2));
        assert!(l.unknown_exceeded(&key(1)), "seen again: now most recent");
        l.count_unknown(key(3)); // evicts 2, the least recently seen
        assert!(l.unknown_exceeded(&key(1)));
        assert!(!l.unknown_exceeded(&key(2)));
        assert!(l.unknown_exceeded(&key(3)));
    }

    #[test]
    fn refused_creations_spend_a_stricter_budget() {
        let l = Limits::new(&cfg(0, 100, 2, 100), evictions());
        let (a, b) = (key(1), key(2));
        assert_eq!(l.admit_creation(a), Ok(()));
        l.count_refused_creation(a);
        assert_eq!(l.admit_creation(a), Ok(()));
        l.count_refused_creation(a);
        assert_eq!(l.admit_creation(a), Err(Refusal::RefusedCreations));
        assert_eq!(l.admit_creation(a), Err(Refusal::RefusedCreations));
        assert_eq!(l.admit_creation(b), Ok(()));
    }

    #[test]
    fn a_batch_takes_all_its_tokens_or_none() {
        let l = Limits::new(&cfg(0, 20, 0, 100), evictions());
        let (a, b) = (key(1), key(2));
        assert_eq!(l.admit_creations(a, 21), Err(Refusal::Creations));
        assert_eq!(
            l.creation_blocked(&a),
            None,
            "a refused batch spends nothing"
        );
        assert_eq!(l.admit_creations(a, 20), Ok(()));
        assert_eq!(l.creation_blocked(&a), Some(Refusal::Creations));
        assert_eq!(l.admit_creation(a), Err(Refusal::Creations));
        assert_eq!(l.admit_creations(a, 1), Err(Refusal::Creations));
        // Partly used: a batch fits only in what is left.
        assert_eq!(l.admit_creations(b, 15), Ok(()));
        assert_eq!(l.admit_creations(b, 6), Err(Refusal::Creations));
        assert_eq!(l.admit_creations(b, 5), Ok(()));
        assert_eq!(l.admit_creation(b), Err(Refusal::Creations));
        // Huge counts saturate instead of wrapping.
        assert_eq!(l.admit_creations(key(3), u64::MAX), Err(Refusal::Creations));
        let off = Limits::new(&cfg(0, 0, 0, 100), evictions());
        assert_eq!(off.admit_creations(a, 1_000_000), Ok(()));
        assert_eq!(off.creation_blocked(&a), None);
    }

    #[test]
    fn a_spent_refused_budget_blocks_batches_at_their_head() {
        let l = Limits::new(&cfg(0, 100, 1, 100), evictions());
        let a = key(1);
        assert_eq!(l.creation_blocked(&a), None);
        l.count_refused_creation(a);
        assert_eq!(l.creation_blocked(&a), Some(Refusal::RefusedCreations));
        assert_eq!(l.admit_creations(a, 2), Err(Refusal::RefusedCreations));
    }

    #[test]
    fn windows_start_at_the_first_event_and_expire() {
        let mut w = Window::default();
        assert_eq!(w.add(5_000, SECOND_MS), 1);
        assert_eq!(w.add(5_999, SECOND_MS), 2);
        assert_eq!(w.value(5_999, SECOND_MS), 2);
        assert_eq!(w.value(6_000, SECOND_MS), 0);
        assert_eq!(w.add(6_500, SECOND_MS), 1);
        assert_eq!(w.value(7_499, SECOND_MS), 1);
    }
}
