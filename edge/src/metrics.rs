//! Counters behind `/shorturl_status` and the Prometheus endpoint.
//!
//! The status counters *are* Prometheus counters (atomics underneath), so the
//! JSON and the scrape can never disagree. Everything is registered through
//! `pingora_prometheus::prometheus`, the registry that
//! `prometheus_http_service()` gathers (a separately linked `prometheus`
//! would register into a registry nobody serves).

use crate::outcome::Outcome;
use pingora_prometheus::prometheus::{
    self, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts,
};
use std::time::Duration;

/// All edge counters, resolved to label handles once at start-up so the hot
/// path only does atomic adds.
pub struct Metrics {
    pub local_hit: IntCounter,
    pub local_miss: IntCounter,
    pub redis_hit: IntCounter,
    pub redis_miss: IntCounter,
    pub redis_error: IntCounter,
    pub origin_forward: IntCounter,
    pub origin_error: IntCounter,
    pub lock_get: IntCounter,
    pub lock_error: IntCounter,
    latency: Vec<Histogram>,
}

impl Metrics {
    /// Creates the counters and registers them in the default registry.
    /// A second instance in one process (unit tests) keeps working counters
    /// that are simply not exported.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let dims = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_status_total",
                "The /shorturl_status counters, by dimension and result.",
            ),
            &["dimension", "result"],
        )?;
        let buckets = vec![
            0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
            0.25, 1.0,
        ];
        let hist = HistogramVec::new(
            HistogramOpts::new(
                "shorturl_edge_request_duration_seconds",
                "Time to answer a request, by lookup outcome.",
            )
            .buckets(buckets),
            &["outcome"],
        )?;
        let _ = prometheus::register(Box::new(dims.clone()));
        let _ = prometheus::register(Box::new(hist.clone()));
        let c = |dim: &str, res: &str| dims.with_label_values(&[dim, res]);
        let latency = Outcome::ALL
            .iter()
            .map(|o| hist.with_label_values(&[o.as_str()]))
            .collect();
        Ok(Metrics {
            local_hit: c("local", "hit"),
            local_miss: c("local", "miss"),
            redis_hit: c("redis", "hit"),
            redis_miss: c("redis", "miss"),
            redis_error: c("redis", "error"),
            origin_forward: c("origin", "forward"),
            origin_error: c("origin", "error"),
            lock_get: c("lock", "get"),
            lock_error: c("lock", "error"),
            latency,
        })
    }

    /// Records how long a request took, under its outcome.
    pub fn observe(&self, outcome: Outcome, took: Duration) {
        if let Some(h) = self.latency.get(outcome.index()) {
            h.observe(took.as_secs_f64());
        }
    }
}
