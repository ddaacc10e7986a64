//! Counters behind `/shorturl_status` and `/metrics`, named as protocol
//! section 7 says: the status dimensions are one family,
//! `shorturl_status_total{dimension,result}`, and everything else is
//! `shorturl_<subsystem>_<name>[_unit][_total]`, with no service name (the
//! scrape's `job` says which service a series comes from).
//!
//! The Prometheus counters are the single source of truth: the status JSON
//! reads the same values, so the two views never disagree.

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};
use shorturl_common::status::{LockDim, MysqlDim, OutboxDim, PoolDim, RedisDim};

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
    /// Pages rendered for people (`kind`: svg, png, preview, html404;
    /// `result`: ok, not_modified, not_found, bad_request, error).
    pub pages: IntCounterVec,
    /// Password entries of password links (`result`: ok, wrong, limited,
    /// busy, bad_request, cross_site) and password checks run.
    pub unlock_attempts: IntCounterVec,
    pub unlock_checks: IntCounter,
    /// Destination screening (protocol 4.7): entries in the policy in
    /// force, destinations refused, links the pass changed, its last
    /// duration and refreshes that failed (the last good policy stays).
    pub screening_entries: IntGauge,
    pub screening_refused: IntCounter,
    pub screening_changed: IntCounter,
    pub screening_pass_seconds: Gauge,
    pub screening_refresh_errors: IntCounter,
    pub requests: HistogramVec,
    /// Outbox rows pending (the whole installation's, as last polled).
    pub outbox_pending: IntGauge,
    /// Outbox rows this origin applied.
    pub outbox_applied: IntCounter,
    /// Failed attempts to apply outbox rows (they are retried).
    pub outbox_failed: IntCounter,
    /// Age of the oldest pending outbox row, seconds.
    pub outbox_oldest_age: Gauge,
    /// Links this process's reaper marked expired.
    pub lifecycle_reaped: IntCounter,
    /// Unix time (seconds) this process's reaper last finished a pass.
    pub lifecycle_last_run: IntGauge,
    /// Links past their expiry and not reaped yet (as last counted by the
    /// lease holder; -1 until this process counted).
    pub lifecycle_backlog: IntGauge,
    /// 1 while this process holds the reaper's lease.
    pub lifecycle_lease_held: IntGauge,
    /// Codes this process's reaper appended to the pool again.
    pub lifecycle_recycled: IntCounter,
    /// Tombstones the recycler examined and kept, by reason.
    pub lifecycle_recycle_kept: IntCounterVec,
    /// The installation's pool, as last read from MySQL (every few
    /// seconds): rows in the pool (pre-generated and appended)...
    pub pool_size: IntGauge,
    /// ...ids up to the highest one issued...
    pub pool_issued: IntGauge,
    /// ...the rest...
    pub pool_free: IntGauge,
    /// ...and codes recycled into it so far.
    pub pool_recycled: IntGauge,
    /// Creations waiting for a claim worker (the group-commit queue): a
    /// queue that stays long says MySQL commits are the bottleneck.
    pub claim_queued: IntGauge,
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
    /// Creates and registers every metric (namespace `shorturl`).
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let r = Registry::new_custom(Some("shorturl".into()), None)?;
        let status = IntCounterVec::new(
            Opts::new(
                "status_total",
                "The /shorturl_status counters, by dimension and result.",
            ),
            &["dimension", "result"],
        )?;
        r.register(Box::new(status.clone()))?;
        let dim = |d: &str, res: &str| status.with_label_values(&[d, res]);
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
        let issuer_skipped = IntCounter::new(
            "issuer_skipped_total",
            "Issued ids whose row was not free (skipped)",
        )?;
        r.register(Box::new(issuer_skipped.clone()))?;
        let pages = IntCounterVec::new(
            Opts::new(
                "pages_total",
                "QR codes and HTML pages rendered, by kind and result",
            ),
            &["kind", "result"],
        )?;
        r.register(Box::new(pages.clone()))?;
        let unlock_attempts = IntCounterVec::new(
            Opts::new(
                "unlock_attempts_total",
                "Password entries of password-protected links, by result",
            ),
            &["result"],
        )?;
        r.register(Box::new(unlock_attempts.clone()))?;
        let unlock_checks = IntCounter::new(
            "unlock_password_checks_total",
            "Password checks (argon2id) run for password-protected links",
        )?;
        r.register(Box::new(unlock_checks.clone()))?;
        let screening_entries = IntGauge::new(
            "screening_entries",
            "Domains in the screening policy in force (files and managed entries)",
        )?;
        r.register(Box::new(screening_entries.clone()))?;
        let screening_refused = IntCounter::new(
            "screening_refused_total",
            "Creations and edits refused for a screened destination",
        )?;
        r.register(Box::new(screening_refused.clone()))?;
        let screening_changed = IntCounter::new(
            "screening_links_changed_total",
            "Links whose screening state this origin's pass changed",
        )?;
        r.register(Box::new(screening_changed.clone()))?;
        let screening_pass_seconds = Gauge::new(
            "screening_pass_seconds",
            "Duration of this origin's last screening pass over every link",
        )?;
        r.register(Box::new(screening_pass_seconds.clone()))?;
        let screening_refresh_errors = IntCounter::new(
            "screening_refresh_errors_total",
            "Screening policy refreshes that failed (the last good policy stays in force)",
        )?;
        r.register(Box::new(screening_refresh_errors.clone()))?;
        Ok(Metrics {
            screening_entries,
            screening_refused,
            screening_changed,
            screening_pass_seconds,
            screening_refresh_errors,
            unlock_attempts,
            unlock_checks,
            redis_hit: dim("redis", "hit"),
            redis_miss: dim("redis", "miss"),
            redis_error: dim("redis", "error"),
            mysql_update: dim("mysql", "update"),
            mysql_select: dim("mysql", "select"),
            mysql_error: dim("mysql", "error"),
            lock_get: dim("lock", "get"),
            lock_error: dim("lock", "error"),
            issuer_error: dim("issuer", "error"),
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
            issuer_skipped,
            creations,
            pages,
            requests,
            outbox_pending: gauge(
                &r,
                "outbox_pending",
                "Outbox rows waiting to be applied to Redis",
            )?,
            outbox_applied: counter(
                &r,
                "outbox_applied_total",
                "Outbox rows applied (Redis record written, invalidation published)",
            )?,
            outbox_failed: counter(
                &r,
                "outbox_failed_total",
                "Failed attempts to apply outbox rows (retried by the drainer)",
            )?,
            outbox_oldest_age: {
                let g = Gauge::new(
                    "outbox_oldest_age_seconds",
                    "Age of the oldest pending outbox row (0 when none)",
                )?;
                r.register(Box::new(g.clone()))?;
                g
            },
            lifecycle_reaped: counter(
                &r,
                "lifecycle_reaped_total",
                "Links the reaper marked expired (this process)",
            )?,
            lifecycle_last_run: gauge(
                &r,
                "lifecycle_last_run_timestamp_seconds",
                "Unix time the reaper last finished a pass (0: never, in this process)",
            )?,
            lifecycle_backlog: {
                let g = gauge(
                    &r,
                    "lifecycle_backlog",
                    "Links past their expiry not reaped yet (-1: not counted by this process)",
                )?;
                g.set(-1);
                g
            },
            lifecycle_lease_held: gauge(
                &r,
                "lifecycle_lease_held",
                "1 while this process holds the reaper lease",
            )?,
            lifecycle_recycled: counter(
                &r,
                "lifecycle_recycled_total",
                "Codes the recycler appended to the pool again (this process)",
            )?,
            lifecycle_recycle_kept: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "lifecycle_recycle_kept_total",
                        "Tombstones the recycler examined and kept out of the pool, by reason (this process)",
                    ),
                    &["reason"],
                )?;
                r.register(Box::new(c.clone()))?;
                c
            },
            pool_size: gauge(
                &r,
                "pool_size",
                "Codes in the pool: pre-generated and recycled rows",
            )?,
            pool_issued: gauge(&r, "pool_issued", "Pool ids up to the highest one issued")?,
            pool_free: gauge(&r, "pool_free", "Pool ids not issued yet")?,
            pool_recycled: gauge(
                &r,
                "pool_recycled",
                "Codes recycled into the pool so far (installation)",
            )?,
            claim_queued: gauge(
                &r,
                "claim_queued",
                "Creations waiting for a claim worker (group commit)",
            )?,
            registry: r,
        })
    }

    /// The `pool` status dimension.
    pub fn pool_dim(&self) -> PoolDim {
        let g = |g: &IntGauge| g.get().max(0) as u64;
        PoolDim {
            size: g(&self.pool_size),
            issued: g(&self.pool_issued),
            free: g(&self.pool_free),
            recycled: g(&self.pool_recycled),
        }
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

    /// The `outbox` status dimension.
    pub fn outbox_dim(&self) -> OutboxDim {
        OutboxDim {
            pending: self.outbox_pending.get().max(0) as u64,
            applied: self.outbox_applied.get(),
            failed: self.outbox_failed.get(),
            oldest_age_ms: (self.outbox_oldest_age.get() * 1000.0).round() as u64,
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::Metrics;

    #[test]
    fn names_follow_the_protocol_scheme() {
        let m = Metrics::new().unwrap();
        m.mysql_select.inc();
        m.creations.with_label_values(&["created"]).inc();
        let text = String::from_utf8(m.render()).unwrap();
        for line in [
            "shorturl_status_total{dimension=\"mysql\",result=\"select\"} 1",
            "shorturl_status_total{dimension=\"redis\",result=\"hit\"} 0",
            "shorturl_status_total{dimension=\"issuer\",result=\"error\"} 0",
            "shorturl_creations_total{outcome=\"created\"} 1",
            "shorturl_issuer_capacity 0",
            "shorturl_outbox_pending 0",
            "shorturl_outbox_applied_total 0",
            "shorturl_outbox_failed_total 0",
            "shorturl_outbox_oldest_age_seconds 0",
            "shorturl_lifecycle_reaped_total 0",
            "shorturl_lifecycle_last_run_timestamp_seconds 0",
            "shorturl_lifecycle_backlog -1",
            "shorturl_lifecycle_lease_held 0",
            "shorturl_lifecycle_recycled_total 0",
            "shorturl_pool_size 0",
            "shorturl_pool_issued 0",
            "shorturl_pool_free 0",
            "shorturl_pool_recycled 0",
            "shorturl_claim_queued 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(!text.contains("shorturl_origin"), "{text}");
    }
}
