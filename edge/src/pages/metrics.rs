//! The page cache's metrics (`shorturl_edge_pages_cache_*`, protocol
//! section 7), resolved to label handles once.

use pingora_cache::CachePhase;
use pingora_prometheus::prometheus::{self, IntCounter, IntCounterVec, IntGauge, Opts};

/// How a page request went through the cache (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageResult {
    /// Served fresh from the cache.
    Hit,
    /// Not cached: fetched from the origin (or waited for a request that did).
    Miss,
    /// Expired and refetched.
    Expired,
    /// Expired and confirmed by the origin (`304`).
    Revalidated,
    /// Expired, served anyway because the origin failed (stale-if-error).
    Stale,
    /// Not cached and the origin failed: an error answer.
    Error,
    /// The cache was not used (no host, or an answer it may not keep).
    Bypass,
}

impl PageResult {
    const ALL: [PageResult; 7] = [
        PageResult::Hit,
        PageResult::Miss,
        PageResult::Expired,
        PageResult::Revalidated,
        PageResult::Stale,
        PageResult::Error,
        PageResult::Bypass,
    ];

    fn label(self) -> &'static str {
        match self {
            PageResult::Hit => "hit",
            PageResult::Miss => "miss",
            PageResult::Expired => "expired",
            PageResult::Revalidated => "revalidated",
            PageResult::Stale => "stale",
            PageResult::Error => "error",
            PageResult::Bypass => "bypass",
        }
    }

    /// The result of a finished request from its cache phase; `failed`:
    /// the request ended in an error.
    pub fn of(phase: CachePhase, failed: bool) -> PageResult {
        match phase {
            CachePhase::Hit => PageResult::Hit,
            CachePhase::Stale | CachePhase::StaleUpdating => PageResult::Stale,
            _ if failed => PageResult::Error,
            CachePhase::Miss => PageResult::Miss,
            CachePhase::Expired => PageResult::Expired,
            CachePhase::Revalidated | CachePhase::RevalidatedNoCache(_) => PageResult::Revalidated,
            _ => PageResult::Bypass,
        }
    }
}

/// Counters and gauges of the page cache.
#[derive(Clone)]
pub struct PagesMetrics {
    results: Vec<IntCounter>,
    /// Entries removed by invalidation messages.
    pub purged_inval: IntCounter,
    /// Entries dropped because the invalidation subscription was lost.
    pub purged_flush: IntCounter,
    /// Entries evicted to stay within the byte budget.
    pub evicted: IntCounter,
    /// Answers not stored because they were over `max_entry_bytes`.
    pub too_large: IntCounter,
    /// Fills not stored because their code was purged meanwhile.
    pub discarded: IntCounter,
    /// Bytes the cached pages weigh.
    pub bytes: IntGauge,
    /// Pages cached.
    pub entries: IntGauge,
}

impl PagesMetrics {
    /// Creates and registers the metrics (a second instance in one process
    /// keeps working counters that are not exported).
    pub fn new() -> Result<PagesMetrics, prometheus::Error> {
        let results = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_pages_cache_total",
                "Page requests (QR codes, previews) by how the edge's page cache answered them.",
            ),
            &["result"],
        )?;
        let removed = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_pages_cache_removed_total",
                "Cached pages removed: purge (invalidation), flush (subscription lost), evict (byte budget).",
            ),
            &["reason"],
        )?;
        let skipped = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_pages_cache_fills_skipped_total",
                "Cacheable answers not stored: too_large, or purged while being fetched.",
            ),
            &["reason"],
        )?;
        let bytes = IntGauge::new(
            "shorturl_edge_pages_cache_bytes",
            "Bytes the edge's cached pages weigh (bodies, headers, bookkeeping).",
        )?;
        let entries = IntGauge::new(
            "shorturl_edge_pages_cache_entries",
            "Pages cached on the edge.",
        )?;
        for c in [
            Box::new(results.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(removed.clone()),
            Box::new(skipped.clone()),
            Box::new(bytes.clone()),
            Box::new(entries.clone()),
        ] {
            let _ = prometheus::register(c);
        }
        Ok(PagesMetrics {
            results: PageResult::ALL
                .iter()
                .map(|r| results.with_label_values(&[r.label()]))
                .collect(),
            purged_inval: removed.with_label_values(&["purge"]),
            purged_flush: removed.with_label_values(&["flush"]),
            evicted: removed.with_label_values(&["evict"]),
            too_large: skipped.with_label_values(&["too_large"]),
            discarded: skipped.with_label_values(&["purged"]),
            bytes,
            entries,
        })
    }

    /// Counts one page request.
    pub fn count(&self, r: PageResult) {
        if let Some(c) = self.results.get(r as usize) {
            c.inc();
        }
    }

    /// Requests counted under `r` so far.
    pub fn get(&self, r: PageResult) -> u64 {
        self.results.get(r as usize).map_or(0, |c| c.get())
    }
}
