//! The page cache's storage: a `pingora-cache` [`Storage`] over one bounded
//! in-memory LRU (`pingora-cache`'s own `MemCache` is documented as
//! test-only and never evicts).
//!
//! * **Budget.** Every entry is weighed (body, headers, key, bookkeeping);
//!   past `max_bytes` the least recently used entries go. An answer over
//!   `max_entry_bytes` is passed through and never stored.
//! * **Purge by code.** Each entry is filed under its code (the key's
//!   `user_tag`), so an invalidation of a code removes every variant of it
//!   (every host, format, size and margin) at once ([`PageStore::purge_code`]).
//! * **Fills that race a purge.** A fill records the store's epoch when it
//!   starts; if its code was purged (or everything was dropped) after that,
//!   the finished fill is discarded instead of bringing the old page back.
//!   Purges of the last [`PURGE_MEMORY`] are remembered for that, and fills
//!   never take longer (the origin read timeout is far shorter). They are
//!   kept in the order they happened, so forgetting the expired ones costs
//!   amortised O(1) per message (a scan of the whole table per message made
//!   a burst of invalidations quadratic: issue 30); at most
//!   [`MAX_PURGES_REMEMBERED`] are kept, and a fill that started before a
//!   purge forgotten early is discarded as if it had been purged.
//!
//! The lock is a plain mutex held for a map operation, never across an
//! `await`; a page hit costs one lock and a header clone.

use super::metrics::PagesMetrics;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora_cache::key::{CacheHashKey, HashBinary};
use pingora_cache::storage::{
    HandleHit, HandleMiss, HitHandler, MissFinishType, MissHandler, PurgeOutcome, PurgeTarget,
    PurgeType, Storage,
};
use pingora_cache::trace::SpanHandle;
use pingora_cache::{CacheKey, CacheMeta};
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// How long a purge is remembered against fills that started before it.
pub const PURGE_MEMORY: Duration = Duration::from_secs(60);
/// Purges remembered at most (about 100 bytes each); past it the oldest
/// are forgotten early, conservatively (see the module documentation).
pub const MAX_PURGES_REMEMBERED: usize = 1 << 16;
/// Weight of an entry besides its body and headers.
const ENTRY_OVERHEAD: usize = 256;

/// What is kept of a [`CacheMeta`] (it is not `Clone`; rebuilding it from
/// these parts avoids serialising headers on every hit).
struct Meta {
    fresh_until: SystemTime,
    created: SystemTime,
    stale_while_revalidate: u32,
    stale_if_error: u32,
    header: ResponseHeader,
}

impl Meta {
    fn of(m: &CacheMeta) -> Meta {
        Meta {
            fresh_until: m.fresh_until(),
            created: m.updated(),
            stale_while_revalidate: m.stale_while_revalidate_sec(),
            stale_if_error: m.stale_if_error_sec(),
            header: m.response_header_copy(),
        }
    }

    fn to_meta(&self) -> CacheMeta {
        CacheMeta::new(
            self.fresh_until,
            self.created,
            self.stale_while_revalidate,
            self.stale_if_error,
            self.header.clone(),
        )
    }

    fn weight(&self) -> usize {
        self.header
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 16)
            .sum()
    }
}

struct Entry {
    code: Box<str>,
    meta: Meta,
    body: Bytes,
    weight: usize,
}

struct Inner {
    /// Unbounded by count: evicted by weight.
    lru: lru::LruCache<HashBinary, Arc<Entry>>,
    by_code: HashMap<Box<str>, HashSet<HashBinary>>,
    bytes: usize,
    /// Bumped by every purge and clear.
    epoch: u64,
    /// Code → (epoch of its last purge, when), least recent purge first.
    purged: lru::LruCache<Box<str>, (u64, Instant)>,
    /// Newest epoch of a purge forgotten before its [`PURGE_MEMORY`] was
    /// up: fills that started before it are discarded.
    forgotten: u64,
    /// Epoch of the last clear.
    cleared: u64,
}

impl Inner {
    fn remove(&mut self, hash: &HashBinary) -> Option<Arc<Entry>> {
        let e = self.lru.pop(hash)?;
        self.bytes = self.bytes.saturating_sub(e.weight);
        if let Some(set) = self.by_code.get_mut(&e.code) {
            set.remove(hash);
            if set.is_empty() {
                self.by_code.remove(&e.code);
            }
        }
        Some(e)
    }
}

/// The bounded page store (see the module documentation).
pub struct PageStore {
    inner: Mutex<Inner>,
    max_bytes: usize,
    max_entry_bytes: usize,
    metrics: PagesMetrics,
}

impl PageStore {
    /// An empty store of `max_bytes`, storing answers up to `max_entry_bytes`.
    pub fn new(max_bytes: usize, max_entry_bytes: usize, metrics: PagesMetrics) -> PageStore {
        PageStore {
            inner: Mutex::new(Inner {
                lru: lru::LruCache::unbounded(),
                by_code: HashMap::new(),
                bytes: 0,
                epoch: 0,
                purged: lru::LruCache::unbounded(),
                forgotten: 0,
                cleared: 0,
            }),
            max_bytes,
            max_entry_bytes,
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent maps (every
        // update is a single insert/remove pair), so a poisoned lock is
        // still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, inner: &Inner) {
        self.metrics.bytes.set(inner.bytes as i64);
        self.metrics.entries.set(inner.lru.len() as i64);
    }

    /// Removes every cached page of `code` (all hosts and variants);
    /// returns how many. Fills of `code` in flight are discarded.
    pub fn purge_code(&self, code: &str) -> usize {
        let mut inner = self.lock();
        inner.epoch += 1;
        let epoch = inner.epoch;
        let now = Instant::now();
        while inner
            .purged
            .peek_lru()
            .is_some_and(|(_, (_, at))| now.duration_since(*at) >= PURGE_MEMORY)
        {
            inner.purged.pop_lru();
        }
        inner.purged.put(code.into(), (epoch, now));
        while inner.purged.len() > MAX_PURGES_REMEMBERED {
            if let Some((_, (e, _))) = inner.purged.pop_lru() {
                inner.forgotten = inner.forgotten.max(e);
            }
        }
        let hashes: Vec<HashBinary> = inner
            .by_code
            .get(code)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        let n = hashes.iter().filter(|h| inner.remove(h).is_some()).count();
        self.publish(&inner);
        drop(inner);
        self.metrics.purged_inval.inc_by(n as u64);
        n
    }

    /// Drops every page (the invalidation subscription was lost or came
    /// back: changes may have gone unannounced); returns how many.
    pub fn clear(&self) -> usize {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.cleared = inner.epoch;
        inner.purged.clear();
        let n = inner.lru.len();
        inner.lru.clear();
        inner.by_code.clear();
        inner.bytes = 0;
        self.publish(&inner);
        drop(inner);
        self.metrics.purged_flush.inc_by(n as u64);
        n
    }

    /// Bytes the cached pages weigh now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Pages cached now.
    pub fn entries(&self) -> usize {
        self.lock().lru.len()
    }

    /// Purges remembered now.
    #[cfg(test)]
    pub fn purges_remembered(&self) -> usize {
        self.lock().purged.len()
    }

    fn commit(&self, hash: HashBinary, entry: Entry, started: u64) -> bool {
        let mut inner = self.lock();
        let purged_since = inner
            .purged
            .peek(&entry.code)
            .is_some_and(|(e, _)| *e > started);
        if inner.cleared > started || inner.forgotten > started || purged_since {
            return false;
        }
        inner.remove(&hash);
        inner.bytes += entry.weight;
        inner
            .by_code
            .entry(entry.code.clone())
            .or_default()
            .insert(hash);
        inner.lru.put(hash, Arc::new(entry));
        let mut evicted = 0u64;
        while inner.bytes > self.max_bytes {
            let Some((h, _)) = inner.lru.peek_lru().map(|(h, e)| (*h, e.weight)) else {
                break;
            };
            inner.remove(&h);
            evicted += 1;
        }
        self.publish(&inner);
        drop(inner);
        self.metrics.evicted.inc_by(evicted);
        true
    }
}

/// A hit: the whole body in one chunk.
struct Hit {
    body: Option<Bytes>,
    len: usize,
}

#[async_trait]
impl HandleHit for Hit {
    async fn read_body(&mut self) -> Result<Option<Bytes>> {
        Ok(self.body.take())
    }

    async fn finish(
        self: Box<Self>,
        _storage: &'static (dyn Storage + Sync),
        _key: &CacheKey,
        _trace: &SpanHandle,
    ) -> Result<()> {
        Ok(())
    }

    fn get_eviction_weight(&self) -> usize {
        self.len
    }

    fn as_any(&self) -> &(dyn Any + Send + Sync) {
        self
    }

    fn as_any_mut(&mut self) -> &mut (dyn Any + Send + Sync) {
        self
    }
}

/// A fill: buffers the body, stores it on `finish` (unless too large or
/// purged meanwhile).
struct Fill {
    store: &'static PageStore,
    hash: HashBinary,
    code: Box<str>,
    meta: Option<Meta>,
    body: BytesMut,
    too_large: bool,
    started: u64,
}

#[async_trait]
impl HandleMiss for Fill {
    async fn write_body(&mut self, data: Bytes, _eof: bool) -> Result<()> {
        if self.too_large || self.body.len() + data.len() > self.store.max_entry_bytes {
            self.too_large = true;
            self.body = BytesMut::new();
        } else {
            self.body.extend_from_slice(&data);
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<MissFinishType> {
        let Some(meta) = self.meta.take() else {
            return Ok(MissFinishType::Created(0));
        };
        if self.too_large {
            self.store.metrics.too_large.inc();
            return Ok(MissFinishType::Created(0));
        }
        let body = std::mem::take(&mut self.body).freeze();
        let weight = body.len() + meta.weight() + self.code.len() + ENTRY_OVERHEAD;
        let size = body.len();
        let entry = Entry {
            code: std::mem::take(&mut self.code),
            meta,
            body,
            weight,
        };
        if !self.store.commit(self.hash, entry, self.started) {
            self.store.metrics.discarded.inc();
        }
        Ok(MissFinishType::Created(size))
    }
}

#[async_trait]
impl Storage for PageStore {
    async fn lookup(
        &'static self,
        key: &CacheKey,
        _trace: &SpanHandle,
    ) -> Result<Option<(CacheMeta, HitHandler)>> {
        let hash = key.combined_bin();
        let Some(entry) = self.lock().lru.get(&hash).cloned() else {
            return Ok(None);
        };
        let hit = Hit {
            body: Some(entry.body.clone()),
            len: entry.body.len(),
        };
        Ok(Some((entry.meta.to_meta(), Box::new(hit))))
    }

    async fn get_miss_handler(
        &'static self,
        key: &CacheKey,
        meta: &CacheMeta,
        _trace: &SpanHandle,
    ) -> Result<MissHandler> {
        Ok(Box::new(Fill {
            store: self,
            hash: key.combined_bin(),
            code: key.user_tag.as_str().into(),
            meta: Some(Meta::of(meta)),
            body: BytesMut::new(),
            too_large: false,
            started: self.lock().epoch,
        }))
    }

    async fn purge(
        &'static self,
        target: PurgeTarget<'_>,
        purge_type: PurgeType,
        _trace: &SpanHandle,
    ) -> Result<PurgeOutcome> {
        let hash = target.key().combined_bin();
        let mut inner = self.lock();
        let removed = inner.remove(&hash).is_some();
        self.publish(&inner);
        drop(inner);
        if !removed {
            return Ok(PurgeOutcome::NotFound);
        }
        match purge_type {
            PurgeType::Eviction => self.metrics.evicted.inc(),
            PurgeType::Invalidation => self.metrics.purged_inval.inc(),
        }
        Ok(PurgeOutcome::Purged(None))
    }

    async fn update_meta(
        &'static self,
        key: &CacheKey,
        meta: &CacheMeta,
        _trace: &SpanHandle,
    ) -> Result<bool> {
        let hash = key.combined_bin();
        let mut inner = self.lock();
        let Some(old) = inner.lru.peek(&hash).cloned() else {
            return Ok(false);
        };
        let new_meta = Meta::of(meta);
        let weight = old.body.len() + new_meta.weight() + old.code.len() + ENTRY_OVERHEAD;
        inner.bytes = inner.bytes.saturating_sub(old.weight) + weight;
        inner.lru.put(
            hash,
            Arc::new(Entry {
                code: old.code.clone(),
                meta: new_meta,
                body: old.body.clone(),
                weight,
            }),
        );
        self.publish(&inner);
        Ok(true)
    }

    fn as_any(&self) -> &(dyn Any + Send + Sync + 'static) {
        self
    }
}
