//! The issuer: hands out ids (issue order) from a local block with atomics.
//!
//! The hot path is one compare-and-swap on the current block. The next block is
//! fetched in the background when the current one falls to the low-water
//! mark, so in steady state no creation waits for the durable counter; only
//! the caller that finds the block empty (rare: a burst faster than the
//! prefetch) takes the slow path, under an async mutex that never blocks the
//! hot path. Every id comes from a block that the durable counter gave this
//! process alone, so ids are never issued twice across processes, crashes
//! and restarts (an unused remainder is a gap, which is fine).
//!
//! An id is taken only once it is known to be within the table: a creation
//! refused because every code is issued consumes nothing, so when `pregen`
//! extends the table the next creation gets exactly the next id.

pub mod counter;
pub mod migrate;
pub mod zookeeper;

use crate::metrics::Metrics;
use arc_swap::ArcSwap;
use counter::{Counter, CounterError};
use shorturl_common::status::IssuerDim;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Mutex;

/// Why no id could be issued.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IssueError {
    /// The counter has passed the number of pre-generated codes.
    #[error("all {capacity} pre-generated codes have been issued; run `shorturl-origin pregen --count <more>`")]
    Exhausted { capacity: u64 },
    /// The durable counter could not be reached.
    #[error("id counter unavailable")]
    Counter(#[source] Arc<CounterError>),
}

struct Block {
    next: AtomicU64,
    end: u64,
}

/// Ids from a durable counter, a block at a time.
pub struct Issuer {
    counter: Box<dyn Counter>,
    block: u64,
    low_water: u64,
    current: ArcSwap<Block>,
    /// The prefetched next block, if any; held while fetching.
    spare: Mutex<Option<(u64, u64)>>,
    prefetching: AtomicBool,
    capacity: AtomicU64,
    highest: AtomicU64,
    /// Last ids of shard ranges (all but the last): no block crosses one.
    boundaries: Vec<u64>,
    /// The part of a fetched block past a boundary, handed out by the next
    /// fetch (only touched under `spare`'s lock, which every fetch holds).
    rest: std::sync::Mutex<Option<(u64, u64)>>,
    metrics: Arc<Metrics>,
}

impl Issuer {
    /// An issuer with no block yet; `capacity` is the table size.
    pub fn new(
        counter: Box<dyn Counter>,
        block: u64,
        low_water: u64,
        capacity: u64,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        metrics
            .issuer_capacity
            .set(i64::try_from(capacity).unwrap_or(i64::MAX));
        Arc::new(Issuer {
            counter,
            block,
            low_water,
            current: ArcSwap::from_pointee(Block {
                next: AtomicU64::new(1),
                end: 0,
            }),
            spare: Mutex::new(None),
            prefetching: AtomicBool::new(false),
            capacity: AtomicU64::new(capacity),
            highest: AtomicU64::new(0),
            boundaries: Vec::new(),
            rest: std::sync::Mutex::new(None),
            metrics,
        })
    }

    /// Like [`Issuer::new`], over shard ranges that end at `boundaries`
    /// (ascending): a block that would cross one is split there (the part
    /// past it is the next block), so every block is on one shard.
    pub fn with_boundaries(
        counter: Box<dyn Counter>,
        block: u64,
        low_water: u64,
        capacity: u64,
        boundaries: Vec<u64>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let mut me = Issuer::new(counter, block, low_water, capacity, metrics);
        if let Some(m) = Arc::get_mut(&mut me) {
            m.boundaries = boundaries;
        }
        me
    }

    /// Moves issuing past `last_id` (the end of a shard that is down): the
    /// durable counter is raised to it, so every origin's next block starts
    /// after it, and this origin drops its current and prefetched blocks.
    /// The ids skipped stay unused.
    pub async fn skip_past(self: &Arc<Self>, last_id: u64) -> Result<(), IssueError> {
        let mut spare = self.spare.lock().await;
        if let Err(e) = self.counter.raise_to(last_id).await {
            self.metrics.issuer_error.inc();
            return Err(IssueError::Counter(Arc::new(e)));
        }
        *spare = None;
        if let Ok(mut rest) = self.rest.lock() {
            *rest = None;
        }
        let cur = self.current.load_full();
        if cur.next.load(Ordering::Acquire) <= last_id {
            self.current.store(Arc::new(Block {
                next: AtomicU64::new(1),
                end: 0,
            }));
        }
        tracing::warn!(
            last_id,
            "issuer: skipped past the end of a shard that is down"
        );
        Ok(())
    }

    /// Updates the table size (after `pregen` extended it).
    pub fn set_capacity(&self, capacity: u64) {
        self.capacity.store(capacity, Ordering::Relaxed);
        self.metrics
            .issuer_capacity
            .set(i64::try_from(capacity).unwrap_or(i64::MAX));
        if capacity > self.highest.load(Ordering::Relaxed) {
            self.metrics.issuer_exhausted.set(0);
        }
    }

    fn is_exhausted(&self) -> bool {
        self.metrics.issuer_exhausted.get() == 1
    }

    /// The next id. Never returns an id above the table size, and never
    /// consumes one it refuses.
    pub async fn next_id(self: &Arc<Self>) -> Result<u64, IssueError> {
        loop {
            let blk = self.current.load_full();
            let mut id = blk.next.load(Ordering::Acquire);
            while id <= blk.end {
                let capacity = self.capacity.load(Ordering::Relaxed);
                if id > capacity {
                    return Err(self.exhausted(capacity, id));
                }
                match blk.next.compare_exchange_weak(
                    id,
                    id + 1,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        if blk.end - id == self.low_water {
                            self.prefetch();
                        }
                        self.metrics.issuer_exhausted.set(0);
                        let prev = self.highest.fetch_max(id, Ordering::Relaxed);
                        if id > prev {
                            self.metrics
                                .issuer_current
                                .set(i64::try_from(id).unwrap_or(i64::MAX));
                        }
                        return Ok(id);
                    }
                    Err(now) => id = now,
                }
            }
            // Every id after this block is past the table: refuse without
            // taking a block the table cannot use yet.
            let capacity = self.capacity.load(Ordering::Relaxed);
            if blk.end >= capacity {
                return Err(self.exhausted(capacity, blk.end + 1));
            }
            self.advance(&blk).await?;
        }
    }

    /// Marks (and logs, once) the exhaustion that refuses `id`.
    fn exhausted(&self, capacity: u64, id: u64) -> IssueError {
        if !self.is_exhausted() {
            tracing::error!(
                capacity,
                id,
                "issuer exhausted: every pre-generated code has been issued"
            );
        }
        self.metrics.issuer_exhausted.set(1);
        IssueError::Exhausted { capacity }
    }

    /// Installs the next block after `old` ran out (slow path).
    async fn advance(self: &Arc<Self>, old: &Arc<Block>) -> Result<(), IssueError> {
        let mut spare = self.spare.lock().await;
        if !Arc::ptr_eq(&self.current.load(), old) {
            return Ok(()); // another caller already advanced
        }
        let (start, end) = match spare.take() {
            Some(r) => r,
            None => self.fetch().await?,
        };
        self.current.store(Arc::new(Block {
            next: AtomicU64::new(start),
            end,
        }));
        drop(spare);
        Ok(())
    }

    fn prefetch(self: &Arc<Self>) {
        if self.prefetching.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut spare = me.spare.lock().await;
            if spare.is_none() {
                match me.fetch().await {
                    Ok(r) => *spare = Some(r),
                    Err(e) => tracing::warn!(error = %e, "prefetching the next id block failed"),
                }
            }
            me.prefetching.store(false, Ordering::Release);
        });
    }

    /// The next block: the rest of a split one, else a new one from the
    /// counter (split at a range boundary it crosses).
    async fn fetch(&self) -> Result<(u64, u64), IssueError> {
        if let Some(r) = self.rest.lock().ok().and_then(|mut r| r.take()) {
            return Ok(self.split(r));
        }
        let r = match self.counter.advance(self.block).await {
            Ok(end) if end >= self.block => return Ok(self.split((end - self.block + 1, end))),
            Ok(got) => CounterError::BelowBlock {
                got,
                block: self.block,
            },
            Err(e) => e,
        };
        self.metrics.issuer_error.inc();
        tracing::error!(backend = self.counter.kind(), error = %r, "id counter failed");
        Err(IssueError::Counter(Arc::new(r)))
    }

    /// `(start, end)` up to the first range boundary in it; the part after
    /// is kept for the next fetch.
    fn split(&self, (start, end): (u64, u64)) -> (u64, u64) {
        match self.boundaries.iter().find(|&&b| start <= b && b < end) {
            Some(&b) => {
                if let Ok(mut rest) = self.rest.lock() {
                    *rest = Some((b + 1, end));
                }
                (start, b)
            }
            None => (start, end),
        }
    }

    /// The `issuer` status dimension.
    pub fn dim(&self) -> IssuerDim {
        let current = self.highest.load(Ordering::Relaxed);
        let capacity = self.capacity.load(Ordering::Relaxed);
        IssuerDim {
            current,
            capacity,
            remaining: capacity.saturating_sub(current),
            error: self.metrics.issuer_error.get(),
            exhausted: self.is_exhausted(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use std::collections::HashSet;

    /// In-process counter for unit tests of the block logic only (the real
    /// backends are tested against real MySQL and Redis).
    struct LocalCounter(AtomicU64, AtomicU64);

    impl Counter for LocalCounter {
        fn advance(&self, n: u64) -> BoxFuture<'_, Result<u64, CounterError>> {
            self.1.fetch_add(1, Ordering::Relaxed);
            let v = self.0.fetch_add(n, Ordering::SeqCst) + n;
            Box::pin(async move { Ok(v) })
        }
        fn kind(&self) -> &'static str {
            "local"
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_ids_are_unique_and_counter_sees_one_call_per_block() {
        let m = Arc::new(Metrics::new().unwrap());
        let c = Arc::new(LocalCounter(AtomicU64::new(0), AtomicU64::new(0)));
        struct Shared(Arc<LocalCounter>);
        impl Counter for Shared {
            fn advance(&self, n: u64) -> BoxFuture<'_, Result<u64, CounterError>> {
                self.0.advance(n)
            }
            fn kind(&self) -> &'static str {
                "local"
            }
        }
        let iss = Issuer::new(Box::new(Shared(c.clone())), 100, 20, 1_000_000, m);
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let iss = iss.clone();
            tasks.push(tokio::spawn(async move {
                let mut v = Vec::new();
                for _ in 0..2500 {
                    v.push(iss.next_id().await.unwrap());
                }
                v
            }));
        }
        let mut all = HashSet::new();
        for t in tasks {
            for id in t.await.unwrap() {
                assert!(all.insert(id), "duplicate id {id}");
            }
        }
        assert_eq!(all.len(), 20_000);
        let calls = c.1.load(Ordering::Relaxed);
        assert!((200..=202).contains(&calls), "counter calls {calls}");
    }

    #[tokio::test]
    async fn blocks_split_at_shard_boundaries_and_skip_moves_past_a_range() {
        let m = Arc::new(Metrics::new().unwrap());
        let iss = Issuer::with_boundaries(
            Box::new(LocalCounter(AtomicU64::new(0), AtomicU64::new(0))),
            10,
            2,
            100,
            vec![15, 40],
            m,
        );
        // Every id in order, none lost at the boundary.
        for want in 1..=20 {
            assert_eq!(iss.next_id().await.unwrap(), want);
        }
        iss.skip_past(40).await.unwrap();
        assert_eq!(iss.next_id().await.unwrap(), 41);
    }

    #[tokio::test]
    async fn exhaustion_is_an_error_not_a_wrap() {
        let m = Arc::new(Metrics::new().unwrap());
        let iss = Issuer::new(
            Box::new(LocalCounter(AtomicU64::new(0), AtomicU64::new(0))),
            10,
            2,
            25,
            m,
        );
        for want in 1..=25 {
            assert_eq!(iss.next_id().await.unwrap(), want);
        }
        assert!(matches!(
            iss.next_id().await,
            Err(IssueError::Exhausted { capacity: 25 })
        ));
        assert!(iss.dim().exhausted);
        assert_eq!(iss.dim().remaining, 0);
    }

    #[tokio::test]
    async fn refusals_consume_no_ids_and_an_extension_resumes_at_the_next_one() {
        let m = Arc::new(Metrics::new().unwrap());
        let iss = Issuer::new(
            Box::new(LocalCounter(AtomicU64::new(0), AtomicU64::new(0))),
            10,
            2,
            5,
            m,
        );
        for want in 1..=5 {
            assert_eq!(iss.next_id().await.unwrap(), want);
        }
        for _ in 0..50 {
            assert!(matches!(
                iss.next_id().await,
                Err(IssueError::Exhausted { capacity: 5 })
            ));
        }
        iss.set_capacity(30);
        assert!(!iss.dim().exhausted);
        for want in 6..=30 {
            assert_eq!(iss.next_id().await.unwrap(), want);
        }
    }
}
