//! Webhooks (issue 28; `docs/integrations.md`): an app's endpoints receive
//! its links' events, signed ([`sign`]), at least once, in order per link.
//!
//! A change writes its event row in its own transaction
//! (`store::webhooks`, next to the audit row), only for apps with an
//! endpoint for that type. Every origin runs two tasks ([`deliver`]): the
//! dispatcher copies each shard's events into one delivery per endpoint
//! on the meta database; the sender of the origin holding an endpoint's
//! lease reads its due deliveries (a link's next one only after its
//! earlier one ended) and POSTs them, at most
//! `webhooks.max_in_flight_per_endpoint` at once, so a slow endpoint holds
//! only its own slots, retrying with
//! exponential backoff until `webhooks.give_up_after_secs`, then `dead`.
//! Destinations are checked after DNS resolution ([`address`]).

pub mod address;
mod deliver;
pub mod endpoints;
pub mod sign;

use crate::config::Config;
use crate::store::Store;
use crate::whitelist::Whitelist;
use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use endpoints::{EndpointError, EndpointView};

/// An attempt to record: endpoint id, delivery id, what happened.
type Recorded = (u64, u64, crate::store::webhooks::Attempt);

/// Webhook figures (`/metrics`).
pub struct WebhookMetrics {
    /// Attempts by result: `delivered`, `failed` (will retry), `dead`.
    pub attempts: IntCounterVec,
    /// Events copied into deliveries.
    pub dispatched: IntCounter,
    pub pending: IntGauge,
    pub oldest_pending_age: Gauge,
    /// From the change's commit to the receiver's 2xx, delivered attempts.
    pub delay: Histogram,
}

impl WebhookMetrics {
    pub fn register(reg: &Registry) -> Result<WebhookMetrics, prometheus::Error> {
        let attempts = IntCounterVec::new(
            Opts::new(
                "webhook_attempts_total",
                "Webhook delivery attempts, by result (delivered, failed, dead)",
            ),
            &["result"],
        )?;
        reg.register(Box::new(attempts.clone()))?;
        let dispatched = IntCounter::new(
            "webhook_events_dispatched_total",
            "Webhook events copied from the outbox into deliveries",
        )?;
        reg.register(Box::new(dispatched.clone()))?;
        let pending = IntGauge::new(
            "webhook_deliveries_pending",
            "Webhook deliveries not yet delivered or dead",
        )?;
        reg.register(Box::new(pending.clone()))?;
        let oldest_pending_age = Gauge::new(
            "webhook_oldest_pending_age_seconds",
            "Age of the oldest pending webhook delivery",
        )?;
        reg.register(Box::new(oldest_pending_age.clone()))?;
        let delay = Histogram::with_opts(
            HistogramOpts::new(
                "webhook_delivery_delay_seconds",
                "From a change to its webhook's delivery (2xx), delivered deliveries",
            )
            .buckets(vec![
                0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 600.0,
            ]),
        )?;
        reg.register(Box::new(delay.clone()))?;
        Ok(WebhookMetrics {
            attempts,
            dispatched,
            pending,
            oldest_pending_age,
            delay,
        })
    }
}

/// Errors building the webhook service.
#[derive(Debug, thiserror::Error)]
pub enum WebhooksError {
    #[error(transparent)]
    CaFile(#[from] crate::ca_file::CaFileError),
    #[error("webhook HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    Metrics(#[from] prometheus::Error),
}

/// The webhook service: endpoint management and the two tasks.
pub struct Webhooks {
    cfg: Arc<Config>,
    store: Store,
    whitelist: Arc<Whitelist>,
    policy: Arc<address::Policy>,
    client: reqwest::Client,
    metrics: WebhookMetrics,
    /// Deliveries this origin is sending or recording, per endpoint id.
    in_flight: Mutex<HashMap<u64, std::collections::HashSet<u64>>>,
    /// Endpoints whose sender lease this origin holds, and until when.
    owned: Mutex<HashMap<u64, std::time::Instant>>,
    /// Per endpoint: the highest delivery id read, when all were last read.
    cursors: Mutex<HashMap<u64, (u64, std::time::Instant)>>,
    /// This origin's name in `leases`.
    holder: String,
    /// Sending slots per endpoint id (`max_in_flight_per_endpoint` each).
    slots: Mutex<HashMap<u64, Arc<tokio::sync::Semaphore>>>,
    /// Deliveries became due (copied, or a send ended): the sender looks.
    ready: tokio::sync::Notify,
    /// Attempts to record ([`deliver`]'s recorder takes the receiver).
    records: tokio::sync::mpsc::UnboundedSender<Recorded>,
    recorded: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Recorded>>>,
}

impl Webhooks {
    pub fn new(
        cfg: Arc<Config>,
        store: Store,
        whitelist: Arc<Whitelist>,
        registry: &Registry,
    ) -> Result<Arc<Webhooks>, WebhooksError> {
        let w = &cfg.webhooks;
        let policy = Arc::new(address::Policy {
            allow: w.allow_networks.clone(),
        });
        let mut b = reqwest::Client::builder()
            .dns_resolver(Arc::new(address::Resolver(Arc::clone(&policy))))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(w.timeout)
            .connect_timeout(w.timeout)
            .pool_max_idle_per_host(w.max_in_flight_per_endpoint)
            .user_agent(concat!("shorturl-webhooks/", env!("CARGO_PKG_VERSION")));
        if let Some(p) = &w.ca_file {
            b = crate::ca_file::trust(b, "webhooks.ca_file", p)?;
        }
        let client = b.build().map_err(WebhooksError::Client)?;
        store
            .subscriptions()
            .set_click_digest_secs(w.click_digest.as_secs());
        let (records, recorded) = tokio::sync::mpsc::unbounded_channel();
        Ok(Arc::new(Webhooks {
            records,
            recorded: Mutex::new(Some(recorded)),
            metrics: WebhookMetrics::register(registry)?,
            cfg,
            store,
            whitelist,
            policy,
            client,
            in_flight: Mutex::default(),
            owned: Mutex::default(),
            cursors: Mutex::default(),
            holder: crate::lifecycle::holder_id("webhooks"),
            slots: Mutex::default(),
            ready: tokio::sync::Notify::new(),
        }))
    }
}
