//! Counters behind `/shorturl_status` and the Prometheus endpoint, named as
//! `docs/protocol.md` section 7 says (the same names on every service).
//!
//! The status counters *are* Prometheus counters (atomics underneath), so the
//! JSON and the scrape can never disagree. Everything is registered through
//! `pingora_prometheus::prometheus`, the registry that
//! `prometheus_http_service()` gathers (a separately linked `prometheus`
//! would register into a registry nobody serves).

use crate::limits::Refusal;
use crate::outcome::Outcome;
use pingora_prometheus::prometheus::{
    self, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
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
    /// Requests refused by a per-client limit, by [`Refusal`].
    limits_refused: Vec<IntCounter>,
    /// Clients pushed out of the bounded limits table.
    pub limits_evictions: IntCounter,
    /// Connections closed before reading, over `max_connections`.
    pub conn_refused_total: IntCounter,
    /// Connections closed before reading, over `max_connections_per_ip`.
    pub conn_refused_per_ip: IntCounter,
    /// Connections closed because a request head took too long.
    pub conn_header_timeouts: IntCounter,
    /// Client connections open now.
    pub conn_open: IntGauge,
    pub inval: InvalMetrics,
    pub fast_path: FastPathMetrics,
}

/// The fast path's counters (`shorturl_edge_fast_path_total{result}`):
/// requests it answered, and heads it handed to the proxy.
pub struct FastPathMetrics {
    /// Redirects answered from a cached record (`result="hit"`).
    pub hit: IntCounter,
    /// 404s answered from a cached negative entry (`result="negative"`).
    pub negative: IntCounter,
    /// Misses it looked up itself (Redis, then the origin) and answered:
    /// a redirect, a 404 or a 503 (`result="resolved"`).
    pub resolved: IntCounter,
    /// Requests handed to the proxy (`result="handover"`).
    pub handover: IntCounter,
}

/// The invalidation subscriber's counters (`shorturl_inval_*`, the same
/// names as the OpenResty module's).
pub struct InvalMetrics {
    /// Messages applied to the cache (`messages_total{result="applied"}`).
    pub applied: IntCounter,
    /// Messages that are not `<version> <code> <domain>` nor the legacy
    /// form (`{result="invalid"}`).
    pub invalid: IntCounter,
    /// Legacy `<version> <code>` messages, published for edges of the
    /// previous version during an upgrade and ignored (`{result="legacy"}`).
    pub legacy: IntCounter,
    /// Entries a message dropped (`dropped_total{cache="node"}`: the
    /// process-wide cache).
    pub dropped: IntCounter,
    /// 1 while subscribed to `su:1:inval`.
    pub subscribed: IntGauge,
    /// Subscriptions established, the first included.
    pub subscriptions: IntCounter,
    /// Lookups whose answer was older than a tombstone (looked up again).
    pub superseded: IntCounter,
}

impl InvalMetrics {
    /// Messages received, whatever they did.
    pub fn messages(&self) -> u64 {
        self.applied.get() + self.invalid.get() + self.legacy.get()
    }

    /// Subscriptions established again after one was lost.
    pub fn reconnects(&self) -> u64 {
        self.subscriptions.get().saturating_sub(1)
    }
}

impl Metrics {
    /// Creates the counters and registers them in the default registry.
    /// A second instance in one process (unit tests) keeps working counters
    /// that are simply not exported.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let dims = IntCounterVec::new(
            Opts::new(
                "shorturl_status_total",
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
                "shorturl_request_duration_seconds",
                "Time to answer a request, by lookup outcome.",
            )
            .buckets(buckets),
            &["outcome"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "shorturl_limits_refused_total",
                "Requests answered 429 by a per-client limit, by limit.",
            ),
            &["limit"],
        )?;
        let evictions = IntCounter::new(
            "shorturl_limits_evictions_total",
            "Clients evicted from the bounded per-client limits table.",
        )?;
        let conn_refused = IntCounterVec::new(
            Opts::new(
                "shorturl_connections_refused_total",
                "Connections closed before reading a byte, by cap.",
            ),
            &["reason"],
        )?;
        let header_timeouts = IntCounter::new(
            "shorturl_connections_header_timeouts_total",
            "Connections closed because a request head was not received in time.",
        )?;
        let open = IntGauge::new("shorturl_connections_open", "Client connections open now.")?;
        let inval_messages = IntCounterVec::new(
            Opts::new(
                "shorturl_inval_messages_total",
                "Invalidation messages received: applied, legacy (<version> <code>, ignored) or invalid.",
            ),
            &["result"],
        )?;
        let inval_dropped = IntCounterVec::new(
            Opts::new(
                "shorturl_inval_dropped_total",
                "In-process entries dropped by invalidation messages, by cache.",
            ),
            &["cache"],
        )?;
        let inval_subscribed = IntGauge::new(
            "shorturl_inval_subscribed",
            "1 while the edge is subscribed to the invalidation channel.",
        )?;
        let inval_subscriptions = IntCounter::new(
            "shorturl_inval_subscriptions_total",
            "Invalidation subscriptions established (the first included).",
        )?;
        let fast_path = IntCounterVec::new(
            Opts::new(
                "shorturl_edge_fast_path_total",
                "Requests the fast path answered (hit, negative, resolved) or handed to the proxy (handover).",
            ),
            &["result"],
        )?;
        let inval_superseded = IntCounter::new(
            "shorturl_inval_superseded_total",
            "Lookups whose answer was older than an invalidation already received (looked up again).",
        )?;
        for c in [
            Box::new(dims.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(hist.clone()),
            Box::new(refused.clone()),
            Box::new(evictions.clone()),
            Box::new(conn_refused.clone()),
            Box::new(header_timeouts.clone()),
            Box::new(open.clone()),
            Box::new(inval_messages.clone()),
            Box::new(inval_dropped.clone()),
            Box::new(inval_subscribed.clone()),
            Box::new(inval_subscriptions.clone()),
            Box::new(inval_superseded.clone()),
            Box::new(fast_path.clone()),
        ] {
            let _ = prometheus::register(c);
        }
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
            limits_refused: Refusal::ALL
                .iter()
                .map(|r| refused.with_label_values(&[r.label()]))
                .collect(),
            limits_evictions: evictions,
            conn_refused_total: conn_refused.with_label_values(&["max_connections"]),
            conn_refused_per_ip: conn_refused.with_label_values(&["max_connections_per_ip"]),
            conn_header_timeouts: header_timeouts,
            conn_open: open,
            inval: InvalMetrics {
                applied: inval_messages.with_label_values(&["applied"]),
                invalid: inval_messages.with_label_values(&["invalid"]),
                legacy: inval_messages.with_label_values(&["legacy"]),
                dropped: inval_dropped.with_label_values(&["node"]),
                subscribed: inval_subscribed,
                subscriptions: inval_subscriptions,
                superseded: inval_superseded,
            },
            fast_path: FastPathMetrics {
                hit: fast_path.with_label_values(&["hit"]),
                negative: fast_path.with_label_values(&["negative"]),
                resolved: fast_path.with_label_values(&["resolved"]),
                handover: fast_path.with_label_values(&["handover"]),
            },
        })
    }

    /// Counts a request refused by a per-client limit.
    pub fn limited(&self, r: Refusal) {
        if let Some(c) = self.limits_refused.get(r as usize) {
            c.inc();
        }
    }

    /// Records how long a request took, under its outcome.
    pub fn observe(&self, outcome: Outcome, took: Duration) {
        if let Some(h) = self.latency.get(outcome.index()) {
            h.observe(took.as_secs_f64());
        }
    }
}
