//! The cache's totals as Prometheus metrics, read at scrape time (the
//! writers keep plain atomics; nothing is updated twice).

use super::Totals;
use pingora_prometheus::prometheus::{
    self,
    core::{Collector, Desc},
    proto::MetricFamily,
    IntCounter, IntGauge,
};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub(super) struct Exporter {
    totals: Arc<Totals>,
    entries: IntGauge,
    bytes: IntGauge,
    max_bytes: IntGauge,
    evictions: IntCounter,
}

impl Exporter {
    pub(super) fn new(totals: Arc<Totals>) -> Result<Exporter, prometheus::Error> {
        Ok(Exporter {
            totals,
            entries: IntGauge::new("shorturl_cache_entries", "Entries in the in-process cache.")?,
            bytes: IntGauge::new(
                "shorturl_cache_bytes",
                "Bytes the in-process cache holds: entries, index and ghost filter (at most cache.max_bytes).",
            )?,
            max_bytes: IntGauge::new("shorturl_cache_max_bytes", "The cache.max_bytes setting.")?,
            evictions: IntCounter::new(
                "shorturl_cache_evictions_total",
                "Entries evicted from the in-process cache to stay within cache.max_bytes.",
            )?,
        })
    }
}

impl Collector for Exporter {
    fn desc(&self) -> Vec<&Desc> {
        [
            self.entries.desc(),
            self.bytes.desc(),
            self.max_bytes.desc(),
            self.evictions.desc(),
        ]
        .concat()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let t = &self.totals;
        self.entries.set(t.entries.load(Relaxed));
        self.bytes.set(t.bytes.load(Relaxed));
        self.max_bytes.set(t.max_bytes as i64);
        let ev = t.evictions.load(Relaxed);
        self.evictions
            .inc_by(ev.saturating_sub(self.evictions.get()));
        [
            self.entries.collect(),
            self.bytes.collect(),
            self.max_bytes.collect(),
            self.evictions.collect(),
        ]
        .concat()
    }
}
