//! The link lifecycle (issue 11): the reaper.
//!
//! Links past `expires_at` answer 404 from the moment they expire (the
//! edge and the origin compare the expiry on every lookup), but their rows
//! would stay `active` in MySQL for ever. The reaper marks them `expired`
//! (a tombstone: the row, its URL and owner stay for the audit trail), in
//! batches of `lifecycle.reap_batch` at most `lifecycle.reap_rate_per_sec`,
//! each batch one transaction with its audit and outbox rows
//! ([`Store::reap_batch`]); the outbox drainer then replaces each Redis
//! record with a negative one and announces it, as for a delete.
//!
//! One origin at a time reaps: the one holding the `reaper` lease in MySQL
//! ([`Store::lease_acquire`]), renewed every third of `lifecycle.lease_ttl_secs`.
//! When its holder dies, another origin takes it over once it ran out. Two
//! reapers at once (a holder stalled past its lease) would still be
//! correct: batches skip each other's locked rows and re-check the state,
//! so a link is reaped once; the lease keeps MySQL's load bounded.
//!
//! The same lease runs the click retention after each pass
//! ([`crate::clicks::retention`]), so one origin at a time prunes.
//!
//! [`cli`] is `shorturl-origin reap`, a manual run under the same lease;
//! [`recycle`] the opt-in recycling of codes that every pass ends with.

pub mod cli;
pub mod recycle;

use crate::clicks::retention::Retention;
use crate::config::LifecycleConfig;
use crate::metrics::Metrics;
use crate::store::{DbError, Store};
use shorturl_common::time::now_unix;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The lease's name in the `leases` table.
pub const LEASE_NAME: &str = "reaper";

/// Why a reap pass stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ReapError {
    /// Another process holds the lease (a manual run while an origin reaps).
    #[error("the reaper lease is held by {0}")]
    LeaseHeld(String),
    /// The lease ran out and another process took it during the pass.
    #[error("the reaper lease was taken over by {0} during the pass")]
    LeaseLost(String),
    /// MySQL failed or timed out.
    #[error("reaper: {0}")]
    Database(#[from] DbError),
}

/// A lease holder's name: the process id first (operators and tests find
/// the process), then a tag and a random part (two runs never share one).
pub fn holder_id(tag: &str) -> String {
    format!("{}/{tag}/{:08x}", std::process::id(), rand::random::<u32>())
}

/// The reaper of one process.
pub struct Reaper {
    store: Store,
    cfg: LifecycleConfig,
    metrics: Arc<Metrics>,
    holder: String,
    /// Click retention, run after each pass while the lease is held.
    retention: Option<Arc<Retention>>,
}

impl Reaper {
    /// A reaper named `holder` (see [`holder_id`]).
    pub fn new(
        store: Store,
        cfg: LifecycleConfig,
        metrics: Arc<Metrics>,
        holder: String,
    ) -> Reaper {
        Reaper {
            store,
            cfg,
            metrics,
            holder,
            retention: None,
        }
    }

    /// Runs `r` after each pass of [`Reaper::run`] (under the lease).
    pub fn with_retention(mut self, r: Arc<Retention>) -> Reaper {
        self.retention = Some(r);
        self
    }

    /// This reaper's lease holder name.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes or renews the lease. `Ok(())` while this process holds it,
    /// [`ReapError::LeaseHeld`] naming the holder otherwise.
    pub async fn hold(&self) -> Result<(), ReapError> {
        let r = self
            .store
            .lease_acquire(LEASE_NAME, &self.holder, self.cfg.lease_ttl)
            .await;
        let r = match r {
            Ok(h) if h == self.holder => Ok(()),
            Ok(h) => Err(ReapError::LeaseHeld(h)),
            Err(e) => Err(ReapError::Database(e)),
        };
        self.metrics.lifecycle_lease_held.set(i64::from(r.is_ok()));
        r
    }

    /// Gives the lease up (shutdown, end of a manual run).
    pub async fn release(&self) {
        self.metrics.lifecycle_lease_held.set(0);
        if let Err(e) = self.store.lease_release(LEASE_NAME, &self.holder).await {
            tracing::warn!(error = %e, "reaper: could not release the lease; it runs out by itself");
        }
    }

    /// Reaps until no link is past its expiry, at most
    /// `reap_rate_per_sec`, renewing the lease between batches (the caller
    /// holds it). `progress` gets the running total after each batch.
    /// Returns how many links were reaped.
    pub async fn pass(&self, progress: &mut (dyn FnMut(u64) + Send)) -> Result<u64, ReapError> {
        let rate = f64::from(self.cfg.reap_rate_per_sec);
        let mut total = 0u64;
        let mut renewed = Instant::now();
        loop {
            self.renew_if_due(&mut renewed).await?;
            let start = Instant::now();
            let n = self
                .store
                .reap_batch(now_unix(), self.cfg.reap_batch)
                .await?;
            total += n as u64;
            self.metrics.lifecycle_reaped.inc_by(n as u64);
            progress(total);
            if n < self.cfg.reap_batch {
                break;
            }
            // The rate bound: a batch of n rows takes at least n / rate.
            tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / rate)).await;
        }
        if self.cfg.recycle {
            let n = self.recycle_pass(&mut renewed).await?;
            if n > 0 {
                tracing::info!(recycled = n, "reaper: codes appended to the pool again");
            }
        }
        self.metrics
            .lifecycle_last_run
            .set(i64::try_from(now_unix()).unwrap_or(i64::MAX));
        self.refresh_backlog().await;
        Ok(total)
    }

    /// Renews the lease once a heartbeat passed since `renewed` (inside a
    /// pass: losing it stops the pass).
    async fn renew_if_due(&self, renewed: &mut Instant) -> Result<(), ReapError> {
        if renewed.elapsed() >= self.cfg.heartbeat() {
            self.hold().await.map_err(|e| match e {
                ReapError::LeaseHeld(h) => ReapError::LeaseLost(h),
                e => e,
            })?;
            *renewed = Instant::now();
        }
        Ok(())
    }

    /// Counts the links past their expiry not reaped yet (the metric).
    pub async fn refresh_backlog(&self) {
        match self.store.reap_backlog(now_unix()).await {
            Ok(n) => self
                .metrics
                .lifecycle_backlog
                .set(i64::try_from(n).unwrap_or(i64::MAX)),
            Err(e) => tracing::debug!(error = %e, "reaper: backlog count failed"),
        }
    }

    /// The background task of `serve`: while this process holds the lease,
    /// a pass every `reap_interval` (the first at once, also right after a
    /// takeover); otherwise, try to take it at every heartbeat. Runs until
    /// the task is aborted.
    pub async fn run(self: Arc<Self>) {
        let mut next_pass = Instant::now();
        let mut held = false;
        loop {
            match self.hold().await {
                Ok(()) => {
                    if !held {
                        tracing::info!(holder = %self.holder, "reaper: lease taken");
                        // A takeover reaps at once: the last holder may have died mid-pass.
                        next_pass = Instant::now();
                    }
                    held = true;
                }
                Err(e) => {
                    if held {
                        tracing::warn!(error = %e, "reaper: lease lost");
                    }
                    held = false;
                }
            }
            if held && Instant::now() >= next_pass {
                match self.pass(&mut |_: u64| {}).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(reaped = n, "reaper: links marked expired"),
                    Err(e) => tracing::warn!(error = %e, "reaper: pass stopped"),
                }
                if let Some(r) = &self.retention {
                    r.run_once(now_unix()).await;
                }
                next_pass = Instant::now() + self.cfg.reap_interval;
                continue;
            }
            let mut pause = self.cfg.heartbeat();
            if held {
                pause = pause.min(next_pass.saturating_duration_since(Instant::now()));
            }
            tokio::time::sleep(pause).await;
        }
    }
}
