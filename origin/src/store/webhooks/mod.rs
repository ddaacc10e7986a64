//! Webhook statements (migration 18): the endpoints and deliveries on the
//! meta database, the `webhook_event` outbox on every shard, and which
//! apps want which events ([`Subscriptions`], read by [`super::audit`]
//! inside a change's transaction).
//!
//! An event row is inserted next to the change's audit row, in the same
//! transaction, so a committed change always has its event and a rolled
//! back one never does. [`Store::dispatch_events`] copies a shard's events
//! into one delivery per subscribed endpoint on the meta database and
//! deletes them; a crash between the two commits copies them again, and
//! `(endpoint_id, event_id)` being unique makes that a no-op.
//!
//! [`endpoints`] the endpoints, [`outbox`] the events and their copying
//! into deliveries (and the click digests), [`deliveries`] what the sender
//! reads and records and the log shows.

mod deliveries;
mod endpoints;
mod outbox;

pub use deliveries::{Attempt, DeliveryRow, DeliveryState, Due};
pub use endpoints::{EndpointPatch, EndpointRow, Target};
pub use outbox::PendingEvent;

use super::{DbError, Store};
use arc_swap::ArcSwap;
use mysql_async::prelude::*;
use mysql_async::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What happened to a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Created,
    /// The URL, expiry, options, tags or state (disabled/enabled/renewed).
    Updated,
    Deleted,
    /// The reaper found it past its expiry.
    Expired,
    /// Its code went back to the pool (the link's last event).
    Recycled,
    /// A digest: the clicks recorded in one period (`webhooks.click_digest_secs`).
    Clicked,
}

impl EventType {
    pub const ALL: [EventType; 6] = [
        EventType::Created,
        EventType::Updated,
        EventType::Deleted,
        EventType::Expired,
        EventType::Recycled,
        EventType::Clicked,
    ];

    /// The name in the API and in the payload's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Created => "link.created",
            EventType::Updated => "link.updated",
            EventType::Deleted => "link.deleted",
            EventType::Expired => "link.expired",
            EventType::Recycled => "link.recycled",
            EventType::Clicked => "link.clicked",
        }
    }

    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of event types, stored as a comma-separated list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventMask(u8);

impl EventMask {
    pub fn with(self, t: EventType) -> EventMask {
        EventMask(self.0 | t.bit())
    }

    pub fn has(self, t: EventType) -> bool {
        self.0 & t.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn types(self) -> impl Iterator<Item = EventType> {
        EventType::ALL.into_iter().filter(move |t| self.has(*t))
    }

    /// The stored column (names in [`EventType::ALL`]'s order).
    pub fn column(self) -> String {
        self.types()
            .map(EventType::as_str)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The stored column read back; unknown names are skipped (a newer
    /// origin's type, during an upgrade).
    pub fn from_column(s: &str) -> EventMask {
        s.split(',')
            .filter_map(EventType::parse)
            .fold(EventMask::default(), EventMask::with)
    }
}

/// Which apps have an enabled endpoint for which events: refreshed from
/// the meta database every second by every origin, and at once on the
/// origin that changed an endpoint. A change decides with it whether to
/// write an event row, so an app without endpoints costs nothing.
#[derive(Debug, Default)]
pub struct Subscriptions {
    apps: ArcSwap<HashMap<String, EventMask>>,
    /// Told when a change wrote events (the dispatcher wakes early).
    pub written: tokio::sync::Notify,
    /// `webhooks.click_digest_secs` (0: the default, 60).
    digest_secs: std::sync::atomic::AtomicU64,
}

impl Subscriptions {
    /// No enabled endpoint anywhere (as of the last refresh): no change
    /// writes an event and no delivery is due, so the webhook tasks look
    /// once a second instead of five times.
    pub fn is_empty(&self) -> bool {
        self.apps.load().is_empty()
    }

    pub fn wants(&self, app: &str, t: EventType) -> bool {
        let apps = self.apps.load();
        !apps.is_empty() && apps.get(app).is_some_and(|m| m.has(t))
    }

    /// Whether any app wants `t`.
    pub fn any(&self, t: EventType) -> bool {
        self.apps.load().values().any(|m| m.has(t))
    }

    pub fn set_click_digest_secs(&self, secs: u64) {
        self.digest_secs
            .store(secs, std::sync::atomic::Ordering::Relaxed);
    }

    /// The click digest's period while some app wants `link.clicked`: the
    /// click consumer then adds each batch's counts to its period's row.
    pub fn click_digest_secs(&self) -> Option<u64> {
        let s = self.digest_secs.load(std::sync::atomic::Ordering::Relaxed);
        self.any(EventType::Clicked)
            .then_some(if s == 0 { 60 } else { s })
    }

    pub fn replace(&self, apps: HashMap<String, EventMask>) {
        self.apps.store(Arc::new(apps));
    }
}

/// One event to write in a change's transaction.
pub struct NewEvent<'a> {
    pub app: &'a str,
    pub code: &'a str,
    /// The link's key (protocol 3.6): the order of its events.
    pub link: String,
    pub ty: EventType,
    pub at_ms: u64,
    /// The link's snapshot (`row::Snapshot` JSON) after the change (before
    /// it for a recycle, whose row is then free).
    pub data: &'a str,
    /// A click digest's counts (JSON).
    pub extra: Option<&'a str>,
}

/// A fresh idempotency id: `evt_` and 32 hex digits.
pub fn new_event_id() -> String {
    format!("evt_{}", hex::encode(rand::random::<[u8; 16]>()))
}

/// Writes `events` with one statement (inside the caller's transaction).
pub async fn insert_events<Q: Queryable>(
    conn: &mut Q,
    events: &[NewEvent<'_>],
) -> Result<(), mysql_async::Error> {
    if events.is_empty() {
        return Ok(());
    }
    let marks = vec!["(?,?,?,?,?,?,?,?)"; events.len()].join(",");
    let mut params: Vec<Value> = Vec::with_capacity(events.len() * 8);
    for e in events {
        params.extend([
            new_event_id().into(),
            e.app.into(),
            e.code.into(),
            e.link.as_str().into(),
            e.ty.as_str().into(),
            e.at_ms.into(),
            e.data.into(),
            e.extra.into(),
        ]);
    }
    conn.exec_drop(
        format!(
            "INSERT INTO webhook_event (event_id, app, code, link, type, at_ms, data, extra) VALUES {marks}"
        ),
        params,
    )
    .await
}

impl Store {
    /// The subscriptions every change consults.
    pub fn subscriptions(&self) -> &Arc<Subscriptions> {
        &self.hooks
    }

    /// Reads which apps want which events into [`Store::subscriptions`].
    pub async fn refresh_subscriptions(&self) -> Result<(), DbError> {
        let rows: Vec<(String, String)> = self
            .quiet(async {
                let mut conn = self.meta.get_conn().await?;
                Ok(conn
                    .query("SELECT app, events FROM webhook_endpoint WHERE enabled = 1")
                    .await?)
            })
            .await?;
        let mut apps: HashMap<String, EventMask> = HashMap::new();
        for (app, events) in rows {
            let m = apps.entry(app).or_default();
            *m = EventMask(m.0 | EventMask::from_column(&events).0);
        }
        self.hooks.replace(apps);
        Ok(())
    }
}
