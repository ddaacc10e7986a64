//! The certificate store: what the handshakes select from.
//!
//! Two sources are merged into one [`Snapshot`], published with `arc-swap`
//! so a handshake reads it without a lock: the certificate directory
//! (reloaded when a file changes) and the shared store in Redis (reloaded
//! when its generation counter moves). For a name in both, the certificate
//! that expires last wins. A certificate that disappears from Redis stays
//! served (Redis is a cache and may lose everything; the issuer puts its
//! local copies back): shared certificates are only added or replaced by
//! newer ones. A Redis or directory error keeps what is loaded.

use super::cert::Certified;
use super::dir;
use super::metrics::TlsMetrics;
use super::select::Snapshot;
use super::shared::SharedStore;
use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use shorturl_common::status::CertInfo;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Parts {
    dir: Vec<(String, Arc<Certified>)>,
    shared: HashMap<String, Arc<Certified>>,
}

/// The merged, swappable set of certificates.
pub struct CertStore {
    current: ArcSwap<Snapshot>,
    default_name: String,
    parts: Mutex<Parts>,
    metrics: Arc<TlsMetrics>,
}

impl CertStore {
    /// An empty store whose default certificate is the one named `default_name`.
    pub fn new(default_name: &str, metrics: Arc<TlsMetrics>) -> Arc<Self> {
        Arc::new(CertStore {
            current: ArcSwap::from_pointee(Snapshot::default()),
            default_name: default_name.to_ascii_lowercase(),
            parts: Mutex::new(Parts::default()),
            metrics,
        })
    }

    /// The current snapshot (lock-free).
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.current.load()
    }

    fn parts(&self) -> std::sync::MutexGuard<'_, Parts> {
        match self.parts.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Replaces the directory's certificates.
    pub fn set_dir(&self, certs: Vec<(String, Arc<Certified>)>) {
        let mut p = self.parts();
        p.dir = certs;
        self.rebuild(&p);
    }

    /// Adds or replaces shared certificates (never removes one). Returns
    /// the names whose certificate changed.
    pub fn merge_shared(&self, certs: Vec<(String, Arc<Certified>)>) -> Vec<String> {
        let mut p = self.parts();
        let mut changed = Vec::new();
        for (name, cert) in certs {
            let name = name.to_ascii_lowercase();
            let newer = p
                .shared
                .get(&name)
                .is_none_or(|old| old.serial != cert.serial && cert.not_after >= old.not_after);
            if newer {
                changed.push(name.clone());
                p.shared.insert(name, cert);
            }
        }
        if !changed.is_empty() {
            self.rebuild(&p);
        }
        changed
    }

    fn rebuild(&self, p: &Parts) {
        let all = p
            .dir
            .iter()
            .cloned()
            .chain(p.shared.iter().map(|(n, c)| (n.clone(), Arc::clone(c))));
        let snap = Snapshot::build(all, &self.default_name);
        self.metrics.expiry.reset();
        for (name, c) in snap.entries() {
            self.metrics
                .expiry
                .with_label_values(&[name.as_str()])
                .set(c.not_after);
        }
        tracing::info!(
            certificates = snap.len(),
            default = ?snap.default_name(),
            "certificate store updated"
        );
        self.current.store(Arc::new(snap));
    }

    /// What the status document shows.
    pub fn infos(&self) -> (Option<String>, Vec<CertInfo>) {
        let snap = self.snapshot();
        let certs = snap
            .entries()
            .into_iter()
            .map(|(domain, c)| CertInfo {
                domain,
                issuer: c.issuer.clone(),
                expires_at_unix: c.not_after,
                source: c.source.as_str().to_owned(),
            })
            .collect();
        (snap.default_name().map(str::to_owned), certs)
    }
}

/// Keeps the store in step with the directory and Redis.
pub struct CertRefresher {
    pub store: Arc<CertStore>,
    pub dir: Option<PathBuf>,
    pub shared: Option<Arc<SharedStore>>,
    pub interval: Duration,
}

impl CertRefresher {
    /// Loads the directory now (before the listeners open).
    pub fn load_dir_now(&self) -> Option<dir::Fingerprint> {
        let d = self.dir.as_ref()?;
        let fp = dir::fingerprint(d);
        match dir::load(d) {
            Ok(certs) => self.store.set_dir(certs),
            Err(e) => {
                tracing::warn!(dir = %d.display(), error = %e, "certificate directory unreadable")
            }
        }
        fp.ok()
    }

    fn poll_dir(&self, last: &mut Option<dir::Fingerprint>) {
        let Some(d) = &self.dir else { return };
        match dir::fingerprint(d) {
            Ok(fp) if last.as_ref() != Some(&fp) => {
                *last = Some(fp);
                match dir::load(d) {
                    Ok(certs) => self.store.set_dir(certs),
                    Err(e) => {
                        tracing::warn!(dir = %d.display(), error = %e, "certificate directory unreadable")
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(dir = %d.display(), error = %e, "certificate directory unreadable")
            }
        }
    }

    async fn poll_shared(&self, last_gen: &mut Option<Option<u64>>) {
        let Some(s) = &self.shared else { return };
        let gen = match s.generation().await {
            Ok(g) => g,
            Err(e) => {
                tracing::debug!(error = %e, "shared certificate store unavailable");
                return;
            }
        };
        if *last_gen == Some(gen) {
            return;
        }
        match s.load_all().await {
            Ok(certs) => {
                let changed = self.store.merge_shared(certs);
                if !changed.is_empty() {
                    tracing::info!(?changed, "shared certificates loaded");
                }
                *last_gen = Some(gen);
            }
            Err(e) => tracing::debug!(error = %e, "shared certificate store unavailable"),
        }
    }
}

#[async_trait]
impl BackgroundService for CertRefresher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut fp = self.dir.as_ref().and_then(|d| dir::fingerprint(d).ok());
        let mut gen = None;
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            self.poll_dir(&mut fp);
            self.poll_shared(&mut gen).await;
        }
    }
}
