//! ACME issuance (RFC 8555) across the fleet.
//!
//! Every edge with `acme.enabled` runs an [`Issuer`], but only the holder of
//! the Redis lease (`su:1:acme:lease`, `SET NX PX`, renewed every pass and
//! taken over by another edge once it expires) orders anything, so the CA
//! sees one client. Each pass (`acme.check_interval_secs`):
//!
//! 1. hold or take the lease; stop here without it;
//! 2. the names: the origin's whitelist (`GET /internal/v1/domains`:
//!    default domain, static list and merchant domains, Apollo's included),
//!    refreshed every `acme.whitelist_interval_secs`; never a name that is
//!    not on it. Names no public CA issues for (no dot, IP literals) are
//!    skipped;
//! 3. per name, a certificate is needed when none is served, or the served
//!    one is two thirds into its lifetime. Before ordering, the shared store
//!    and the local copy are checked (a restart or a lost Redis never
//!    re-orders a valid certificate);
//! 4. orders run one at a time; a failure backs off exponentially per name
//!    (`retry_min_secs` doubling up to `retry_max_secs`), which keeps
//!    within the CA's limits on failed validations.
//!
//! A new certificate goes to Redis (every edge loads it within
//! `tls.reload_interval_ms`), to the local copy, and straight into this
//! edge's store.
//!
//! On taking the lease, and then every [`RESEAL_INTERVAL`], the issuer
//! re-seals whatever key material in the shared store is in plaintext or
//! under an old store key (`SharedStore::reseal`): that is how the upgrade
//! to sealed values and a key rotation complete.

mod account;
mod client;
mod local;
mod order;

use super::cert::{Certified, Source};
use super::config::AcmeConfig;
use super::metrics::TlsMetrics;
use super::shared::{SharedError, SharedStore};
use super::store::CertStore;
use crate::origin::OriginPool;
use async_trait::async_trait;
use client::AcmeHttp;
use instant_acme::Account;
use local::LocalState;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use shorturl_common::status::AcmeDim;
use shorturl_common::time::now_unix;
use shorturl_common::tls::CertBundle;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an ACME step failed (logged; the order is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum AcmeFailure {
    #[error("ACME: {0}")]
    Acme(#[from] instant_acme::Error),
    #[error("shared store: {0}")]
    Shared(#[from] SharedError),
    #[error("local state: {0}")]
    Io(#[from] std::io::Error),
    #[error("openssl: {0}")]
    Openssl(#[from] openssl::error::ErrorStack),
    #[error("account credentials: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Invalid(String),
}

impl AcmeFailure {
    /// The CA does not know the stored account (it lost its state).
    fn unknown_account(&self) -> bool {
        match self {
            AcmeFailure::Acme(instant_acme::Error::Api(p)) => p
                .r#type
                .as_deref()
                .is_some_and(|t| t.ends_with(":accountDoesNotExist")),
            _ => false,
        }
    }
}

/// Whether a public CA could issue for `name` at all.
pub fn eligible(name: &str) -> bool {
    name.contains('.') && name.parse::<IpAddr>().is_err() && !name.ends_with(".localhost")
}

/// How often the lease holder re-seals the shared store (besides right
/// after it took the lease).
pub const RESEAL_INTERVAL: Duration = Duration::from_secs(3600);

/// Exponential backoff per name.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: HashMap<String, (u32, Instant)>,
}

impl Backoff {
    /// Whether `name` may be tried now.
    pub fn ready(&self, name: &str, now: Instant) -> bool {
        self.failures.get(name).is_none_or(|(_, at)| now >= *at)
    }

    /// Records a failure; returns the wait before the next attempt.
    pub fn failed(&mut self, name: &str, now: Instant, min: Duration, max: Duration) -> Duration {
        let n = self.failures.get(name).map_or(0, |(n, _)| *n) + 1;
        let wait = min.saturating_mul(1u32 << (n - 1).min(20)).min(max);
        self.failures.insert(name.to_owned(), (n, now + wait));
        wait
    }

    /// Forgets the failures of `name`.
    pub fn succeeded(&mut self, name: &str) {
        self.failures.remove(name);
    }
}

/// What `/shorturl_status` shows about ACME.
#[derive(Debug, Default)]
pub struct AcmeState {
    holding: AtomicBool,
    checks: AtomicU64,
}

/// The ACME background service.
pub struct Issuer {
    cfg: AcmeConfig,
    shared: Arc<SharedStore>,
    origin: Arc<OriginPool>,
    store: Arc<CertStore>,
    metrics: Arc<TlsMetrics>,
    state: Arc<AcmeState>,
    node: String,
    http: AcmeHttp,
    local: LocalState,
}

#[derive(Default)]
struct Work {
    account: Option<Account>,
    names: Vec<String>,
    names_at: Option<Instant>,
    backoff: Backoff,
    /// Last re-seal pass while holding the lease (`None`: due).
    resealed_at: Option<Instant>,
}

/// This process's name in the lease: host name and process id.
fn node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), std::process::id())
}

/// The ACME client could not be set up (its CA roots or TLS context).
#[derive(Debug, thiserror::Error)]
#[error("edge.acme: {0}")]
pub struct AcmeSetupError(#[source] client::BoxError);

impl Issuer {
    /// An issuer; `store` is this edge's certificate store.
    pub fn new(
        cfg: AcmeConfig,
        shared: Arc<SharedStore>,
        origin: Arc<OriginPool>,
        store: Arc<CertStore>,
        metrics: Arc<TlsMetrics>,
    ) -> Result<Self, AcmeSetupError> {
        let http = AcmeHttp::new(cfg.ca_roots.as_deref(), Duration::from_secs(30))
            .map_err(AcmeSetupError)?;
        Ok(Issuer {
            local: LocalState::new(cfg.state_dir.clone()),
            cfg,
            shared,
            origin,
            store,
            metrics,
            state: Arc::new(AcmeState::default()),
            node: node_id(),
            http,
        })
    }

    /// Status handle.
    pub fn state(&self) -> Arc<AcmeState> {
        Arc::clone(&self.state)
    }

    async fn pass(&self, w: &mut Work) {
        let holding = match self.shared.hold_lease(&self.node, self.cfg.lease_ttl).await {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "ACME lease unavailable");
                false
            }
        };
        if holding != self.state.holding.swap(holding, Ordering::Relaxed) {
            tracing::info!(node = %self.node, holding, "ACME issuer lease");
            w.resealed_at = None;
        }
        if !holding {
            return;
        }
        if w.resealed_at.is_none_or(|t| t.elapsed() >= RESEAL_INTERVAL) {
            self.reseal(w).await;
        }
        if w.names_at
            .is_none_or(|t| t.elapsed() >= self.cfg.whitelist_interval)
        {
            match self.origin.fetch_domains(Duration::from_secs(5)).await {
                Ok(list) => {
                    w.names = list.domains.into_iter().filter(|d| eligible(d)).collect();
                    w.names_at = Some(Instant::now());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ACME: whitelist unavailable, keeping the last one")
                }
            }
        }
        let names = w.names.clone();
        for name in names {
            if !w.backoff.ready(&name, Instant::now()) || !self.needs_order(&name).await {
                continue;
            }
            // Still ours? (another edge may have taken over after a stall)
            if !matches!(
                self.shared.hold_lease(&self.node, self.cfg.lease_ttl).await,
                Ok(true)
            ) {
                self.state.holding.store(false, Ordering::Relaxed);
                return;
            }
            match self.issue(w, &name).await {
                Ok(b) => {
                    self.metrics.orders_issued.inc();
                    w.backoff.succeeded(&name);
                    tracing::info!(%name, not_after = b.not_after, "certificate issued");
                }
                Err(e) => {
                    self.metrics.orders_failed.inc();
                    if e.unknown_account() {
                        w.account = None;
                        if let Err(f) =
                            account::forget(&self.shared, &self.local, &self.cfg.directory_url)
                                .await
                        {
                            tracing::warn!(error = %f, "cannot forget the ACME account");
                        }
                    }
                    let wait = w.backoff.failed(
                        &name,
                        Instant::now(),
                        self.cfg.retry_min,
                        self.cfg.retry_max,
                    );
                    tracing::warn!(%name, error = %e, retry_in = ?wait, "certificate order failed");
                }
            }
        }
        self.state.checks.fetch_add(1, Ordering::Relaxed);
    }

    async fn reseal(&self, w: &mut Work) {
        match self.shared.reseal(&self.cfg.directory_url).await {
            Ok(r) => {
                w.resealed_at = Some(Instant::now());
                // Operators wait for this line (refused = 0) after a rotation
                // before dropping the old key.
                tracing::info!(
                    key_id = self.shared.key_id().unwrap_or("-"),
                    values = r.values,
                    resealed = r.resealed,
                    refused = r.refused,
                    "shared store sealed under the current key"
                );
            }
            Err(e) => tracing::warn!(error = %e, "shared store re-seal failed; retried next pass"),
        }
    }

    /// False when a certificate for `name` that is not yet due for renewal
    /// is served, or found in the shared store or the local copy (then it
    /// is loaded, and put back into Redis if Redis lost it).
    async fn needs_order(&self, name: &str) -> bool {
        let now = now_unix() as i64;
        let fresh = |c: &Certified| now < c.renew_at() && now >= c.not_before;
        if self.store.snapshot().get(name).is_some_and(|c| fresh(c)) {
            return false;
        }
        if let Ok(Some(b)) = self.shared.bundle(name).await {
            if let Ok(c) = Certified::from_pem(b.cert.as_bytes(), b.key.as_bytes(), Source::Shared)
            {
                if fresh(&c) {
                    self.store
                        .merge_shared(vec![(name.to_owned(), Arc::new(c))]);
                    return false;
                }
            }
        }
        if let Some((cert, key)) = self.local.read_cert(name) {
            if let Ok(c) = Certified::from_pem(cert.as_bytes(), key.as_bytes(), Source::Shared) {
                if fresh(&c) {
                    let b = CertBundle {
                        cert,
                        key,
                        not_after: c.not_after,
                    };
                    if let Err(e) = self.shared.put_bundle(name, &b).await {
                        tracing::warn!(%name, error = %e, "cannot restore the certificate to the shared store");
                    }
                    self.store
                        .merge_shared(vec![(name.to_owned(), Arc::new(c))]);
                    return false;
                }
            }
        }
        true
    }

    async fn issue(&self, w: &mut Work, name: &str) -> Result<CertBundle, AcmeFailure> {
        if w.account.is_none() {
            w.account = Some(
                account::load_or_create(
                    &self.http,
                    &self.shared,
                    &self.local,
                    &self.cfg.directory_url,
                    &self.cfg.contact,
                )
                .await?,
            );
        }
        let Some(acct) = w.account.as_ref() else {
            return Err(AcmeFailure::Invalid("no ACME account".into()));
        };
        let bundle = order::order(acct, &self.shared, name, self.cfg.order_timeout).await?;
        // The local copy first: Redis may be gone at any moment.
        self.local.write_cert(name, &bundle)?;
        self.shared.put_bundle(name, &bundle).await?;
        let cert = Certified::from_pem(
            bundle.cert.as_bytes(),
            bundle.key.as_bytes(),
            Source::Shared,
        )
        .map_err(|e| AcmeFailure::Invalid(e.to_string()))?;
        self.store
            .merge_shared(vec![(name.to_owned(), Arc::new(cert))]);
        Ok(bundle)
    }
}

#[async_trait]
impl BackgroundService for Issuer {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tick = tokio::time::interval(self.cfg.check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut w = Work::default();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            tokio::select! {
                _ = self.pass(&mut w) => {}
                _ = shutdown.changed() => break,
            }
        }
        if self.state.holding.load(Ordering::Relaxed) {
            if let Err(e) = self.shared.release_lease(&self.node).await {
                tracing::debug!(error = %e, "ACME lease left to expire");
            }
        }
    }
}

impl AcmeState {
    /// The `acme` part of the status, with the order counters.
    pub fn dim(&self, m: &TlsMetrics) -> AcmeDim {
        AcmeDim {
            issuer: self.holding.load(Ordering::Relaxed),
            checks: self.checks.load(Ordering::Relaxed),
            orders_issued: m.orders_issued.get(),
            orders_failed: m.orders_failed.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_a_public_ca_could_issue_for() {
        assert!(eligible("s.shop55.com"));
        for n in ["localhost", "127.0.0.1", "::1", "a.localhost"] {
            assert!(!eligible(n), "{n}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_per_name() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        let (min, max) = (Duration::from_secs(10), Duration::from_secs(60));
        assert!(b.ready("a", t0));
        assert_eq!(b.failed("a", t0, min, max), Duration::from_secs(10));
        assert!(!b.ready("a", t0) && b.ready("b", t0));
        assert!(b.ready("a", t0 + Duration::from_secs(10)));
        assert_eq!(b.failed("a", t0, min, max), Duration::from_secs(20));
        assert_eq!(b.failed("a", t0, min, max), Duration::from_secs(40));
        assert_eq!(b.failed("a", t0, min, max), Duration::from_secs(60));
        assert_eq!(b.failed("a", t0, min, max), Duration::from_secs(60));
        b.succeeded("a");
        assert!(b.ready("a", t0));
        assert_eq!(b.failed("a", t0, min, max), Duration::from_secs(10));
    }
}
