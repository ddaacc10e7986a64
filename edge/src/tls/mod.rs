//! HTTPS on the edge: TLS listeners with certificates chosen by SNI, a
//! certificate store fed by a directory and by Redis, ACME issuance across
//! the fleet, HTTP-01 answers on every edge, and the HTTPS policy for plain
//! HTTP (308 upgrade, HSTS). See `docs/architecture.md`, "TLS".
//!
//! | module | concern |
//! |---|---|
//! | `config` | `edge.tls_listen`, `edge.tls`, `edge.https`, `edge.acme`, and the acceptor's settings |
//! | `cert` | one decoded certificate (leaf, chain, key, dates) |
//! | `select` | SNI selection: exact, wildcard one label up, default |
//! | `dir`, `shared`, `store` | the two sources and the merged, swapped store; `shared` seals and opens key material |
//! | `handshake` | the acceptor (TLS 1.2/1.3, ALPN, resumption) and the handshake |
//! | `https` | 308 to HTTPS and HSTS |
//! | `challenge` | HTTP-01 answers |
//! | `acme` | the lease-holding issuer |
//! | `metrics` | handshakes, expiry, orders |

pub mod acme;
pub mod cert;
pub mod challenge;
pub mod config;
pub mod dir;
pub mod handshake;
pub mod https;
pub mod metrics;
pub mod select;
pub mod shared;
pub mod store;
pub mod turns;

use crate::origin::OriginPool;
use config::TlsSettings;
use metrics::TlsMetrics;
use shared::SharedStore;
use shorturl_common::status::TlsDim;
use std::sync::Arc;
use store::{CertRefresher, CertStore};

/// The TLS parts of a running edge.
pub struct TlsRuntime {
    pub metrics: Arc<TlsMetrics>,
    /// The shared store (challenge answers are read from it even without TLS listeners).
    pub shared: Arc<SharedStore>,
    /// Present with TLS listeners.
    pub store: Option<Arc<CertStore>>,
    pub terminator: Option<Arc<handshake::Terminator>>,
    pub refresher: Option<CertRefresher>,
    pub issuer: Option<acme::Issuer>,
    acme_state: Option<Arc<acme::AcmeState>>,
}

/// Why the TLS parts could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsStartError {
    #[error("tls metrics: {0}")]
    Metrics(#[source] pingora_prometheus::prometheus::Error),
    #[error("tls: redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("tls: acceptor: {0}")]
    Acceptor(#[source] openssl::error::ErrorStack),
    #[error(transparent)]
    Acme(#[from] acme::AcmeSetupError),
}

impl TlsRuntime {
    /// Builds the TLS parts from the configuration; the certificate
    /// directory is loaded now, so the first handshakes have it.
    pub fn build(
        cfg: &TlsSettings,
        threads: usize,
        redis: &crate::config::redis::RedisConfig,
        origin: &Arc<OriginPool>,
    ) -> Result<TlsRuntime, TlsStartError> {
        let metrics = Arc::new(TlsMetrics::new().map_err(TlsStartError::Metrics)?);
        let redis_timeout = cfg
            .tls
            .as_ref()
            .map_or(std::time::Duration::from_secs(1), |t| t.redis_timeout);
        let keys = cfg.tls.as_ref().and_then(|t| t.store_keys.clone());
        let shared = SharedStore::new(redis, redis_timeout, keys, Arc::clone(&metrics))
            .map_err(TlsStartError::Redis)?;
        let mut rt = TlsRuntime {
            metrics: Arc::clone(&metrics),
            shared: Arc::clone(&shared),
            store: None,
            terminator: None,
            refresher: None,
            issuer: None,
            acme_state: None,
        };
        let Some(t) = &cfg.tls else {
            return Ok(rt);
        };
        let store = CertStore::new(&t.default_cert, Arc::clone(&metrics));
        let refresher = CertRefresher {
            store: Arc::clone(&store),
            dir: t.cert_dir.clone(),
            shared: t.shared_store.then(|| Arc::clone(&shared)),
            interval: t.reload_interval,
        };
        refresher.load_dir_now();
        let terminator = handshake::Terminator::new(
            t.acceptor.clone(),
            Arc::clone(&store),
            Arc::clone(&metrics),
            threads,
        )
        .map_err(TlsStartError::Acceptor)?;
        if let Some(a) = &cfg.acme {
            let issuer = acme::Issuer::new(
                a.clone(),
                Arc::clone(&shared),
                Arc::clone(origin),
                Arc::clone(&store),
                Arc::clone(&metrics),
            )?;
            rt.acme_state = Some(issuer.state());
            rt.issuer = Some(issuer);
        }
        rt.store = Some(store);
        rt.terminator = Some(terminator);
        rt.refresher = Some(refresher);
        Ok(rt)
    }
}

/// Status and challenge answers need the runtime after the services took
/// their parts; this is what the proxy keeps.
pub struct TlsView {
    pub shared: Arc<SharedStore>,
    pub https: https::HttpsPolicy,
    status: Box<dyn Fn() -> Option<TlsDim> + Send + Sync>,
}

impl TlsView {
    /// The view of `rt` (call before moving its services out).
    pub fn of(rt: &TlsRuntime, https: https::HttpsPolicy) -> Self {
        let store = rt.store.clone();
        let metrics = Arc::clone(&rt.metrics);
        let acme = rt.acme_state.clone();
        TlsView {
            shared: Arc::clone(&rt.shared),
            https,
            status: Box::new(move || {
                let store = store.as_ref()?;
                let (default_cert, certificates) = store.infos();
                Some(TlsDim {
                    default_cert,
                    certificates,
                    handshakes: metrics.handshakes_ok.get(),
                    handshake_errors: metrics.handshakes_error.get()
                        + metrics.handshakes_timeout.get(),
                    acme: acme.as_ref().map(|s| s.dim(&metrics)),
                })
            }),
        }
    }

    /// The `tls` section of `/shorturl_status`.
    pub fn status(&self) -> Option<TlsDim> {
        (self.status)()
    }
}
