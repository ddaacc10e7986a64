//! The two tasks every origin runs: the dispatcher (events → deliveries)
//! and the sender (deliveries → HTTP POSTs).

use super::address::Blocked;
use super::endpoints::seal_name;
use super::sign::signature;
use super::Webhooks;
use crate::links::LinkView;
use crate::store::audit::row_of_snapshot;
use crate::store::webhooks::{Attempt, Due, EventType, PendingEvent};
use crate::store::DbError;
use shorturl_common::time::{now_unix, now_unix_ms, rfc3339_ms};
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::{Host, Url};

/// How often the tasks look when nothing woke them.
const POLL: Duration = Duration::from_millis(200);
/// Events one dispatch pass takes from a shard.
const DISPATCH_BATCH: usize = 500;
/// Deliveries one origin sends at once, all endpoints together.
const MAX_SENDING: usize = 256;
/// How often subscriptions are re-read and finished deliveries pruned.
const REFRESH: Duration = Duration::from_secs(1);
const PRUNE: Duration = Duration::from_secs(60);

/// The payload of one event (the same bytes on every attempt).
fn payload(w: &Webhooks, e: &PendingEvent) -> Option<String> {
    let row = row_of_snapshot(&e.code, Some(e.data.clone()))?;
    let link = LinkView::of(&w.cfg, &row, e.at_ms / 1000);
    let mut data = serde_json::json!({ "link": link });
    if let Some(clicks) = e.extra.as_deref() {
        data["clicks"] = serde_json::from_str(clicks).ok()?;
    }
    serde_json::to_string(&serde_json::json!({
        "id": e.event_id,
        "type": e.ty,
        "created_at": rfc3339_ms(e.at_ms),
        "app": e.app,
        "data": data,
    }))
    .ok()
}

/// Why an attempt failed, short, for the delivery log (no secrets, no
/// receiver-controlled text beyond the status).
fn failure(e: &reqwest::Error) -> String {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(b) = s.downcast_ref::<Blocked>() {
            return b.to_string();
        }
        src = s.source();
    }
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "could not connect".into()
    } else {
        "request failed".into()
    }
}

impl Webhooks {
    /// The dispatcher: copies every shard's events into deliveries; wakes
    /// when a change here wrote events, else every 200 ms. Also re-reads
    /// the subscriptions every second and prunes old finished deliveries.
    pub async fn run_dispatcher(self: Arc<Self>) {
        let hooks = Arc::clone(self.store.subscriptions());
        let (mut refreshed, mut pruned) = (Instant::now(), Instant::now());
        loop {
            let more = self.dispatch_once().await;
            if refreshed.elapsed() >= REFRESH {
                refreshed = Instant::now();
                if let Err(e) = self.store.refresh_subscriptions().await {
                    tracing::debug!(error = %e, "webhooks: endpoints not re-read");
                }
                self.backlog().await;
            }
            if pruned.elapsed() >= PRUNE {
                pruned = Instant::now();
                let before = now_unix_ms()
                    .saturating_sub(self.cfg.webhooks.keep_finished.as_millis() as u64);
                if let Err(e) = self.store.prune_deliveries(before, 10_000).await {
                    tracing::debug!(error = %e, "webhooks: old deliveries not pruned");
                }
                self.close_digests().await;
            }
            if !more {
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    // The change's commit follows its notice closely.
                    _ = hooks.written.notified() => tokio::time::sleep(Duration::from_millis(2)).await,
                }
            }
        }
    }

    async fn backlog(&self) {
        if let Ok((n, oldest)) = self.store.delivery_backlog().await {
            self.metrics.pending.set(n as i64);
            let age = oldest.map_or(0, |t| now_unix_ms().saturating_sub(t));
            self.metrics.oldest_pending_age.set(age as f64 / 1000.0);
        }
    }

    /// One pass over every shard; whether a full batch was copied.
    async fn dispatch_once(&self) -> bool {
        let mut more = false;
        if self.store.subscriptions().click_digest_secs().is_some() {
            self.close_digests().await;
        }
        for shard in self.store.every_shard() {
            let r = shard
                .dispatch_events(DISPATCH_BATCH, |events| self.copy(events))
                .await;
            match r {
                Ok(n) => {
                    more |= n == DISPATCH_BATCH;
                    if n > 0 {
                        self.metrics.dispatched.inc_by(n as u64);
                        self.ready.notify_one();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "webhooks: events not dispatched; retrying"),
            }
        }
        more
    }

    /// Click digests of periods that are over become link.clicked events
    /// (before the pass that copies them; and every minute whatever the
    /// subscriptions, so no digest row outlives its app's interest).
    async fn close_digests(&self) {
        let period = self.cfg.webhooks.click_digest.as_secs().max(1);
        let current = now_unix() / period;
        for shard in self.store.every_shard() {
            if let Err(e) = shard.close_click_digests(current, period).await {
                tracing::warn!(error = %e, "webhooks: click digests not closed; retrying");
            }
        }
    }

    /// Makes `events` deliveries of the endpoints that want them now.
    async fn copy(&self, events: Vec<PendingEvent>) -> Result<(), DbError> {
        let mut apps: Vec<&str> = events.iter().map(|e| e.app.as_str()).collect();
        apps.sort_unstable();
        apps.dedup();
        let endpoints = self.store.endpoints_of(&apps).await?;
        let mut rows = Vec::new();
        for e in &events {
            let Some(ty) = EventType::parse(&e.ty) else {
                continue;
            };
            let wanted: Vec<u64> = endpoints
                .iter()
                .filter(|(_, app, m)| *app == e.app && m.has(ty))
                .map(|(id, ..)| *id)
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let Some(body) = payload(self, e) else {
                tracing::warn!(event = %e.event_id, "webhooks: unreadable event skipped");
                continue;
            };
            for id in wanted {
                rows.push((id, e, body.clone()));
            }
        }
        self.store.insert_deliveries(&rows, now_unix_ms()).await
    }

    /// The sender: leases due deliveries and sends each in its own task.
    pub async fn run_sender(self: Arc<Self>) {
        loop {
            let started = self.send_once().await;
            if started == 0 {
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = self.ready.notified() => {}
                }
            }
        }
    }

    /// Leases what this origin has room for; returns how many it started.
    async fn send_once(self: &Arc<Self>) -> usize {
        let cap = self.cfg.webhooks.max_in_flight_per_endpoint;
        let mut busy = match self.in_flight.lock() {
            Ok(m) => m.clone(),
            Err(_) => return 0,
        };
        let room = MAX_SENDING.saturating_sub(busy.values().sum());
        if room == 0 {
            return 0;
        }
        let now = now_unix_ms();
        // Past the attempt's own bound: another origin takes it over only
        // after this one surely finished or died.
        let lease = now + 2 * self.cfg.webhooks.timeout.as_millis() as u64 + 5_000;
        let dues = self
            .store
            .lease_due(now, lease, room, |endpoint| {
                let n = busy.entry(endpoint).or_default();
                (*n < cap).then(|| *n += 1).is_some()
            })
            .await;
        let dues = match dues {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "webhooks: could not lease deliveries");
                return 0;
            }
        };
        for d in &dues {
            if let Ok(mut m) = self.in_flight.lock() {
                *m.entry(d.endpoint_id).or_default() += 1;
            }
        }
        let n = dues.len();
        for d in dues {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                let endpoint = d.endpoint_id;
                me.send(d).await;
                if let Ok(mut m) = me.in_flight.lock() {
                    if let Some(c) = m.get_mut(&endpoint) {
                        *c = c.saturating_sub(1);
                        if *c == 0 {
                            m.remove(&endpoint);
                        }
                    }
                }
                // The link's next event may be due now.
                me.ready.notify_one();
            });
        }
        n
    }

    /// One attempt, recorded.
    async fn send(&self, d: Due) {
        let start = Instant::now();
        let (status, error) = match self.attempt(&d).await {
            Ok(s) if (200..300).contains(&s) => (Some(s), None),
            Ok(s) => (Some(s), Some(format!("answered {s}"))),
            Err(e) => (None, Some(e)),
        };
        let now = now_unix_ms();
        let delivered = error.is_none();
        let w = &self.cfg.webhooks;
        let retry_at = (!delivered
            && now.saturating_sub(d.created_at_ms) < w.give_up_after.as_millis() as u64)
            .then(|| now + self.backoff(d.attempts));
        let a = Attempt {
            status,
            error,
            latency_ms: start.elapsed().as_millis().min(u32::MAX as u128) as u32,
            delivered,
            retry_at_ms: retry_at,
        };
        let result = match (delivered, retry_at) {
            (true, _) => "delivered",
            (false, Some(_)) => "failed",
            (false, None) => "dead",
        };
        self.metrics.attempts.with_label_values(&[result]).inc();
        if delivered {
            self.metrics
                .delay
                .observe(now.saturating_sub(d.created_at_ms) as f64 / 1000.0);
        }
        // A record that fails leaves the lease to run out: the delivery is
        // sent again (the same id), which at least once allows.
        if let Err(e) = self.store.record_attempt(d.id, &a, now).await {
            tracing::warn!(delivery = d.id, error = %e, "webhooks: attempt not recorded; it will be repeated");
        }
    }

    fn backoff(&self, attempts: u32) -> u64 {
        let w = &self.cfg.webhooks;
        backoff_ms(
            w.retry_base.as_millis() as u64,
            w.retry_max.as_millis() as u64,
            attempts,
            rand::random(),
        )
    }

    /// POSTs the delivery; the answer's status, or why there was none.
    async fn attempt(&self, d: &Due) -> Result<u16, String> {
        let url = Url::parse(&d.url).map_err(|_| "bad url".to_owned())?;
        let literal = match url.host() {
            Some(Host::Ipv4(ip)) => Some(ip.into()),
            Some(Host::Ipv6(ip)) => Some(ip.into()),
            _ => None,
        };
        if literal.is_some_and(|ip| !self.policy.allows(ip)) {
            return Err("not a public address".into());
        }
        if let Some(Host::Domain(h)) = url.host() {
            if self.whitelist.is_listed(&h.to_ascii_lowercase()) {
                return Err("on one of this fleet's own domains".into());
            }
        }
        let keys = self
            .cfg
            .webhooks
            .keys
            .as_ref()
            .ok_or("webhooks.key not set")?;
        let secret = keys
            .open(&seal_name(&d.endpoint_public_id), &d.secret_sealed)
            .map_err(|e| format!("secret: {}", e.reason()))?;
        let secret = String::from_utf8(secret.plain).map_err(|_| "secret unreadable".to_owned())?;
        let ts = now_unix();
        let sig =
            signature(&secret, &d.event_id, ts, d.body.as_bytes()).ok_or("secret unreadable")?;
        let resp = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", &d.event_id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", sig)
            .body(d.body.clone())
            .send()
            .await
            .map_err(|e| failure(&e))?;
        Ok(resp.status().as_u16())
    }
}

/// Exponential backoff after `attempts` earlier failures: `base` doubled
/// per failure up to `max`, ±20% by `random` (so retries spread out).
fn backoff_ms(base: u64, max: u64, attempts: u32, random: u64) -> u64 {
    let ms = base.saturating_mul(1u64 << attempts.min(30)).min(max);
    let jitter = ms / 5;
    ms - jitter + random % (2 * jitter + 1)
}

#[cfg(test)]
mod tests {
    use super::backoff_ms;

    #[test]
    fn backoff_doubles_jitters_and_is_capped() {
        assert_eq!(backoff_ms(1000, 60_000, 0, 200), 1000);
        assert_eq!(backoff_ms(1000, 60_000, 0, 0), 800);
        assert_eq!(backoff_ms(1000, 60_000, 3, 1600), 8000);
        assert_eq!(backoff_ms(1000, 60_000, 3, 3200), 9600);
        assert_eq!(backoff_ms(1000, 60_000, 20, 12_000), 60_000);
        assert_eq!(backoff_ms(1000, 60_000, u32::MAX, 12_000), 60_000);
    }
}
