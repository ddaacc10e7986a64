//! Counters behind `/shorturl_status` and `/metrics`.
//!
//! The Prometheus counters are the single source of truth: the status JSON
//! reads the same values, so the two views never disagree.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};
use shorturl_common::status::{LockDim, MysqlDim, RedisDim};

/// All origin metrics.
pub struct Metrics {
    pub registry: Registry,
    pub redis_hit: IntCounter,
    pub redis_miss: IntCounter,
    pub redis_error: IntCounter,
    pub mysql_update: IntCounter,
    pub mysql_select: IntCounter,
    pub mysql_error: IntCounter,
    pub lock_get: IntCounter,
    pub lock_error: IntCounter,
    pub issuer_error: IntCounter,
    pub issuer_current: IntGauge,
    pub issuer_capacity: IntGauge,
    pub issuer_exhausted: IntGauge,
    pub issuer_skipped: IntCounter,
    pub creations: IntCounterVec,
    pub requests: HistogramVec,
}

fn counter(reg: &Registry, name: &str, help: &str) -> Result<IntCounter, prometheus::Error> {
    let c = IntCounter::new(name, help)?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(reg: &Registry, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
    let g = IntGauge::new(name, help)?;
    reg.register(Box::new(g.clone()))?;
    Ok(g)
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let r = Registry::new_custom(Some("shorturl_origin".into()), None)?;
        let creations = IntCounterVec::new(
            Opts::new("creations_total", "Creation requests by outcome"),
            &["outcome"],
        )?;
        r.register(Box::new(creations.clone()))?;
        let requests = HistogramVec::new(
            HistogramOpts::new(
                "request_duration_seconds",
                "HTTP request latency by route and status class",
            )
            .buckets(vec![
                0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
            &["route", "status"],
        )?;
        r.register(Box::new(requests.clone()))?;
        Ok(Metrics {
            redis_hit: counter(&r, "redis_hit_total", "Record lookups answered by Redis")?,
            redis_miss: counter(&r, "redis_miss_total", "Record lookups not in Redis")?,
            redis_error: counter(&r, "redis_error_total", "Redis failures and timeouts")?,
            mysql_update: counter(&r, "mysql_update_total", "Writing MySQL statements")?,
            mysql_select: counter(&r, "mysql_select_total", "Reading MySQL statements")?,
            mysql_error: counter(&r, "mysql_error_total", "MySQL failures and timeouts")?,
            lock_get: counter(
                &r,
                "lock_get_total",
                "Lookups that joined another in-flight lookup of the same code",
            )?,
            lock_error: counter(&r, "lock_error_total", "Shared lookups that failed")?,
            issuer_error: counter(
                &r,
                "issuer_error_total",
                "Failures fetching an id block from the counter",
            )?,
            issuer_current: gauge(
                &r,
                "issuer_current",
                "Highest id handed out by this process",
            )?,
            issuer_capacity: gauge(&r, "issuer_capacity", "Pre-generated codes in the table")?,
            issuer_exhausted: gauge(
                &r,
                "issuer_exhausted",
                "1 when the counter has passed the table size",
            )?,
            issuer_skipped: counter(
                &r,
                "issuer_skipped_total",
                "Issued ids whose row was not free (skipped)",
            )?,
            creations,
            requests,
            registry: r,
        })
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        buf
    }

    /// The `redis` status dimension.
    pub fn redis_dim(&self) -> RedisDim {
        RedisDim {
            hit: self.redis_hit.get(),
            miss: self.redis_miss.get(),
            error: self.redis_error.get(),
        }
    }

    /// The `mysql` status dimension.
    pub fn mysql_dim(&self) -> MysqlDim {
        MysqlDim {
            update: self.mysql_update.get(),
            select: self.mysql_select.get(),
            error: self.mysql_error.get(),
        }
    }

    /// The `lock` status dimension.
    pub fn lock_dim(&self) -> LockDim {
        LockDim {
            get: self.lock_get.get(),
            error: self.lock_error.get(),
        }
    }
}
