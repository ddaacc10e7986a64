//! The two tasks every origin runs: the dispatcher (events → deliveries)
//! and the sender (deliveries → HTTP POSTs).

use super::address::Blocked;
use super::endpoints::seal_name;
use super::sign::signature;
use super::Webhooks;
use crate::links::LinkView;
use crate::store::audit::row_of_snapshot;
use crate::store::webhooks::{Attempt, Due, EventType, PendingEvent, Target};
use crate::store::DbError;
use shorturl_common::time::{now_unix, now_unix_ms, rfc3339_ms};
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::Url;

/// How often the tasks look when nothing woke them. With no enabled
/// endpoint anywhere they look every [`REFRESH`] instead: an idle origin
/// would otherwise send the meta database some twenty statements a second.
const POLL: Duration = Duration::from_millis(200);
/// After a change wrote events, the dispatcher waits this long before its
/// pass (10 ms of delivery delay against a pass per creation under load).
const GATHER: Duration = Duration::from_millis(10);
/// Events one dispatch pass takes from a shard.
const DISPATCH_BATCH: usize = 500;
/// Deliveries one read takes per sending slot of an endpoint: its queue.
const QUEUE_PER_SLOT: usize = 16;
/// How often a sender reads every due delivery of an endpoint, not only
/// those above the last one read: retries, resends, a link's next event.
const FULL_READ: Duration = Duration::from_secs(1);
/// An endpoint's sender lease (renewed when a third is spent): after an
/// origin dies, another sends its endpoints within this.
pub const SENDER_LEASE: Duration = Duration::from_secs(10);

/// Attempts the recorder writes at once.
const RECORD_BATCH: usize = 500;
/// How often subscriptions are re-read and finished deliveries pruned.
const REFRESH: Duration = Duration::from_secs(1);
const PRUNE: Duration = Duration::from_secs(60);

/// How long the tasks wait when nothing woke them.
fn poll(hooks: &crate::store::webhooks::Subscriptions) -> Duration {
    if hooks.is_empty() {
        REFRESH
    } else {
        POLL
    }
}

/// The `leases` row of an endpoint's sender.
fn lease_name(endpoint: u64) -> String {
    format!("webhook:{endpoint}")
}

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
    /// when a change here wrote events, else after [`poll`]. Also re-reads
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
                    _ = tokio::time::sleep(poll(&hooks)) => {}
                    // The change's commit follows its notice closely; the
                    // pause lets a busy stream of changes share one pass.
                    _ = hooks.written.notified() => tokio::time::sleep(GATHER).await,
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

    /// The sender: for every enabled endpoint whose lease this origin
    /// holds (one origin sends an endpoint's deliveries at a time, so
    /// `max_in_flight_per_endpoint` holds fleet-wide and no delivery is
    /// taken by a commit of its own), reads the due deliveries and sends
    /// each in its own task, at most `max_in_flight_per_endpoint` at once;
    /// looks again when an endpoint's queue is half drained, else after
    /// [`poll`]. Its leases are given up when it stops.
    pub async fn run_sender(self: Arc<Self>) {
        let hooks = Arc::clone(self.store.subscriptions());
        loop {
            // No enabled endpoint: nothing to send (the list is at most a
            // refresh old; a new endpoint's first delivery waits for it).
            let started = if hooks.is_empty() {
                0
            } else {
                self.send_once().await
            };
            if started == 0 {
                tokio::select! {
                    _ = tokio::time::sleep(poll(&hooks)) => {}
                    _ = self.ready.notified() => {}
                }
            }
        }
    }

    /// Gives up this origin's endpoint leases (at a stop), so another
    /// origin takes over at once.
    pub async fn release(&self) {
        let owned: Vec<u64> = self
            .owned
            .lock()
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        for id in owned {
            let _ = self
                .store
                .lease_release(&lease_name(id), &self.holder)
                .await;
        }
    }

    /// Whether this origin holds `endpoint`'s lease, renewing it when a
    /// third of it is spent.
    async fn holds(&self, endpoint: u64) -> bool {
        let now = Instant::now();
        let until = self
            .owned
            .lock()
            .ok()
            .and_then(|m| m.get(&endpoint).copied());
        if until.is_some_and(|u| u > now + SENDER_LEASE * 2 / 3) {
            return true;
        }
        match self
            .store
            .lease_acquire(&lease_name(endpoint), &self.holder, SENDER_LEASE)
            .await
        {
            Ok(h) if h == self.holder => {
                if let Ok(mut m) = self.owned.lock() {
                    // Counted from before the statement: never later than MySQL's.
                    m.insert(endpoint, now + SENDER_LEASE);
                }
                true
            }
            r => {
                if let Err(e) = r {
                    tracing::debug!(endpoint, error = %e, "webhooks: endpoint lease not renewed");
                }
                if let Ok(mut m) = self.owned.lock() {
                    m.remove(&endpoint);
                }
                // Still ours until it runs out (MySQL may be down a moment).
                until.is_some_and(|u| u > Instant::now())
            }
        }
    }

    /// The deliveries of `endpoint` this origin is sending or recording.
    fn sending(&self, endpoint: u64) -> Vec<u64> {
        self.in_flight
            .lock()
            .map(|m| {
                m.get(&endpoint)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// Reads what each held endpoint's queue has room for; how many it started.
    async fn send_once(self: &Arc<Self>) -> usize {
        let targets = match self.store.enabled_endpoints().await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(error = %e, "webhooks: endpoints not read");
                return 0;
            }
        };
        let window = self.cfg.webhooks.max_in_flight_per_endpoint * QUEUE_PER_SLOT;
        let mut started = 0;
        for t in targets {
            let skip = self.sending(t.id);
            if skip.len() > window / 2 || !self.holds(t.id).await {
                continue;
            }
            let after = self.cursor(t.id);
            let dues = match self
                .store
                .due(t.id, after, now_unix_ms(), window - skip.len(), &skip)
                .await
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::debug!(error = %e, "webhooks: due deliveries not read");
                    continue;
                }
            };
            if let Ok(mut m) = self.cursors.lock() {
                let c = m.entry(t.id).or_insert((0, Instant::now()));
                if after.is_none() {
                    c.1 = Instant::now();
                }
                if let Some(last) = dues.iter().map(|d| d.id).max() {
                    c.0 = c.0.max(last);
                }
            }
            if dues.is_empty() {
                continue;
            }
            if let Ok(mut m) = self.in_flight.lock() {
                m.entry(t.id).or_default().extend(dues.iter().map(|d| d.id));
            }
            started += dues.len();
            let slots = self.slots(t.id);
            let target = Arc::new(t);
            for d in dues {
                let (me, slots, target) =
                    (Arc::clone(self), Arc::clone(&slots), Arc::clone(&target));
                tokio::spawn(async move {
                    let permit = slots.acquire_owned().await;
                    me.send(&target, d).await;
                    drop(permit);
                });
            }
        }
        started
    }

    /// Where `endpoint`'s next read starts: after the highest delivery
    /// read so far, or everything due (`None`) once a second.
    fn cursor(&self, endpoint: u64) -> Option<u64> {
        let m = self.cursors.lock().ok()?;
        let (after, full) = m.get(&endpoint)?;
        (full.elapsed() < FULL_READ).then_some(*after)
    }

    /// The semaphore bounding deliveries to `endpoint` at once.
    fn slots(&self, endpoint: u64) -> Arc<tokio::sync::Semaphore> {
        let cap = self.cfg.webhooks.max_in_flight_per_endpoint;
        match self.slots.lock() {
            Ok(mut m) => Arc::clone(
                m.entry(endpoint)
                    .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(cap))),
            ),
            Err(_) => Arc::new(tokio::sync::Semaphore::new(cap)),
        }
    }

    /// Deliveries recorded (or given up on): no longer being sent here.
    fn finished(&self, ids: &[(u64, u64)]) {
        if let Ok(mut m) = self.in_flight.lock() {
            for (endpoint, id) in ids {
                if let Some(s) = m.get_mut(endpoint) {
                    s.remove(id);
                    if s.is_empty() {
                        m.remove(endpoint);
                    }
                }
            }
        }
        self.ready.notify_one();
    }

    /// One attempt, recorded.
    async fn send(&self, t: &Target, d: Due) {
        let start = Instant::now();
        let (status, error) = match self.attempt(t, &d).await {
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
        // Recorded by the recorder, many at once; one that cannot be
        // recorded stays pending and is sent again (the same id), which
        // at least once allows.
        if self.records.send((t.id, d.id, a)).is_err() {
            tracing::warn!(
                delivery = d.id,
                "webhooks: recorder stopped; the attempt will be repeated"
            );
        }
    }

    /// The recorder: writes attempts' results, the delivered ones of a
    /// batch in one statement (a send ends with its answer, not with a
    /// commit of its own); then the sender looks again (a link's next
    /// event may be due). Holds at most the senders' queues.
    pub async fn run_recorder(self: Arc<Self>) {
        let Some(mut rx) = self.recorded.lock().ok().and_then(|mut r| r.take()) else {
            return;
        };
        let mut batch = Vec::new();
        while rx.recv_many(&mut batch, RECORD_BATCH).await > 0 {
            let now = now_unix_ms();
            let ended: Vec<(u64, u64)> = batch.iter().map(|(e, id, _)| (*e, *id)).collect();
            let (done, failed): (Vec<_>, Vec<_>) =
                batch.drain(..).partition(|(_, _, a)| a.delivered);
            let delivered: Vec<(u64, u16, u32)> = done
                .iter()
                .map(|(_, id, a)| (*id, a.status.unwrap_or(200), a.latency_ms))
                .collect();
            if let Err(e) = self.store.record_delivered(&delivered, now).await {
                tracing::warn!(n = delivered.len(), error = %e, "webhooks: deliveries not recorded; they will be repeated");
            }
            for (_, id, a) in failed {
                if let Err(e) = self.store.record_failed(id, &a, now).await {
                    tracing::warn!(delivery = id, error = %e, "webhooks: attempt not recorded; it will be repeated");
                }
            }
            // Recorded or not, no longer held here: what was not recorded
            // is still pending and is sent again (the same id).
            self.finished(&ended);
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
    async fn attempt(&self, t: &Target, d: &Due) -> Result<u16, String> {
        let url = Url::parse(&t.url).map_err(|_| "bad url".to_owned())?;
        if let Some(why) = self.refusal(&url) {
            return Err(format!("url {why}"));
        }
        let keys = self
            .cfg
            .webhooks
            .keys
            .as_ref()
            .ok_or("webhooks.key not set")?;
        let secret = keys
            .open(&seal_name(&t.public_id), &t.secret_sealed)
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
    use super::{backoff_ms, poll, POLL, REFRESH};
    use crate::store::webhooks::{EventMask, EventType, Subscriptions};

    #[test]
    fn an_origin_without_endpoints_looks_once_a_second() {
        let hooks = Subscriptions::default();
        assert!(hooks.is_empty());
        assert_eq!(poll(&hooks), REFRESH);
        let apps = [(
            "shop".to_owned(),
            EventMask::default().with(EventType::Created),
        )];
        hooks.replace(apps.into_iter().collect());
        assert!(!hooks.is_empty());
        assert_eq!(poll(&hooks), POLL);
        hooks.replace(Default::default());
        assert_eq!(poll(&hooks), REFRESH);
    }

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
