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

use super::key::BY_KEY;
use super::{DbError, LinkKey, LinkRow, Store};
use arc_swap::ArcSwap;
use mysql_async::prelude::*;
use mysql_async::{IsolationLevel, TxOpts, Value};
use shorturl_common::code::split_link_key;
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
    pub data: String,
    /// A click digest's counts (JSON).
    pub extra: Option<String>,
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
            e.data.as_str().into(),
            e.extra.as_deref().into(),
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

/// An endpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointRow {
    pub id: u64,
    pub public_id: String,
    pub app: String,
    pub url: String,
    pub events: EventMask,
    pub description: String,
    pub secret_sealed: String,
    pub enabled: bool,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

const ENDPOINT_COLUMNS: &str = "id, public_id, app, url, events, description, secret_sealed, \
                                enabled, created_at_ms, updated_at_ms";

type EndpointCols = (
    u64,
    String,
    String,
    String,
    String,
    String,
    String,
    u8,
    u64,
    u64,
);

fn endpoint_of(c: EndpointCols) -> EndpointRow {
    EndpointRow {
        id: c.0,
        public_id: c.1,
        app: c.2,
        url: c.3,
        events: EventMask::from_column(&c.4),
        description: c.5,
        secret_sealed: c.6,
        enabled: c.7 != 0,
        created_at_ms: c.8,
        updated_at_ms: c.9,
    }
}

/// What may change on an endpoint (`None`: unchanged).
#[derive(Debug, Clone, Default)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub events: Option<EventMask>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
    pub secret_sealed: Option<String>,
}

/// A delivery's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending = 0,
    Delivered = 1,
    /// Gave up after `webhooks.give_up_after_secs`.
    Dead = 2,
}

impl DeliveryState {
    pub fn name(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryState> {
        [
            DeliveryState::Pending,
            DeliveryState::Delivered,
            DeliveryState::Dead,
        ]
        .into_iter()
        .find(|d| d.name() == s)
    }

    fn of(v: u8) -> DeliveryState {
        match v {
            1 => DeliveryState::Delivered,
            2 => DeliveryState::Dead,
            _ => DeliveryState::Pending,
        }
    }
}

/// A delivery as the log shows it.
#[derive(Debug, Clone)]
pub struct DeliveryRow {
    pub id: u64,
    pub endpoint_id: u64,
    pub event_id: String,
    pub ty: String,
    pub link: String,
    pub state: DeliveryState,
    pub attempts: u32,
    pub next_at_ms: u64,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub last_latency_ms: Option<u32>,
    pub created_at_ms: u64,
    pub finished_at_ms: Option<u64>,
}

const DELIVERY_COLUMNS: &str = "id, endpoint_id, event_id, type, link, state, attempts, \
     next_at_ms, last_status, last_error, last_latency_ms, created_at_ms, finished_at_ms";

fn delivery_of(mut r: mysql_async::Row) -> Result<DeliveryRow, DbError> {
    fn take<T: FromValue>(r: &mut mysql_async::Row, i: usize) -> Result<T, DbError> {
        r.take_opt::<T, usize>(i)
            .and_then(Result::ok)
            .ok_or(DbError::BadColumn(i))
    }
    Ok(DeliveryRow {
        id: take(&mut r, 0)?,
        endpoint_id: take(&mut r, 1)?,
        event_id: take(&mut r, 2)?,
        ty: take(&mut r, 3)?,
        link: take(&mut r, 4)?,
        state: DeliveryState::of(take(&mut r, 5)?),
        attempts: take(&mut r, 6)?,
        next_at_ms: take(&mut r, 7)?,
        last_status: take(&mut r, 8)?,
        last_error: take(&mut r, 9)?,
        last_latency_ms: take(&mut r, 10)?,
        created_at_ms: take(&mut r, 11)?,
        finished_at_ms: take(&mut r, 12)?,
    })
}

/// An enabled endpoint, as the sender needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub id: u64,
    pub public_id: String,
    pub url: String,
    pub secret_sealed: String,
}

/// A delivery the sender leased.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: u64,
    pub event_id: String,
    pub body: String,
    pub attempts: u32,
    pub created_at_ms: u64,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub status: Option<u16>,
    pub error: Option<String>,
    pub latency_ms: u32,
    /// `Some(next)`: retry then; `None` with `delivered`: done.
    pub delivered: bool,
    pub retry_at_ms: Option<u64>,
}

/// One event copied out of a shard's outbox.
pub struct PendingEvent {
    pub seq: u64,
    pub event_id: String,
    pub app: String,
    pub code: String,
    pub link: String,
    pub ty: String,
    pub at_ms: u64,
    pub data: String,
    pub extra: Option<String>,
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

    pub async fn insert_endpoint(&self, e: &EndpointRow) -> Result<u64, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "INSERT INTO webhook_endpoint (public_id, app, url, events, description, secret_sealed, \
                 enabled, created_at_ms, updated_at_ms) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    e.public_id.as_str(),
                    e.app.as_str(),
                    e.url.as_str(),
                    e.events.column(),
                    e.description.as_str(),
                    e.secret_sealed.as_str(),
                    u8::from(e.enabled),
                    e.created_at_ms,
                    e.updated_at_ms,
                ),
            )
            .await?;
            Ok(conn.last_insert_id().unwrap_or(0))
        })
        .await
    }

    /// The endpoint with this public id.
    pub async fn endpoint(&self, public_id: &str) -> Result<Option<EndpointRow>, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let r: Option<EndpointCols> = conn
                .exec_first(
                    format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint WHERE public_id = ?"),
                    (public_id,),
                )
                .await?;
            Ok(r.map(endpoint_of))
        })
        .await
    }

    /// The endpoints of `app` (every app's: `None`), oldest first.
    pub async fn endpoints(&self, app: Option<&str>) -> Result<Vec<EndpointRow>, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<EndpointCols> = match app {
                Some(a) => {
                    conn.exec(
                        format!(
                            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint WHERE app = ? ORDER BY id LIMIT 1000"
                        ),
                        (a,),
                    )
                    .await?
                }
                None => {
                    conn.query(format!(
                        "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint ORDER BY id LIMIT 1000"
                    ))
                    .await?
                }
            };
            Ok(rows.into_iter().map(endpoint_of).collect())
        })
        .await
    }

    /// How many endpoints `app` has.
    pub async fn endpoint_count(&self, app: &str) -> Result<u64, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let n: Option<u64> = conn
                .exec_first(
                    "SELECT COUNT(*) FROM webhook_endpoint WHERE app = ?",
                    (app,),
                )
                .await?;
            Ok(n.unwrap_or(0))
        })
        .await
    }

    pub async fn update_endpoint(
        &self,
        id: u64,
        p: &EndpointPatch,
        at_ms: u64,
    ) -> Result<(), DbError> {
        let mut sets = vec!["updated_at_ms = ?"];
        let mut params: Vec<Value> = vec![at_ms.into()];
        if let Some(u) = &p.url {
            sets.push("url = ?");
            params.push(u.as_str().into());
        }
        if let Some(e) = p.events {
            sets.push("events = ?");
            params.push(e.column().into());
        }
        if let Some(d) = &p.description {
            sets.push("description = ?");
            params.push(d.as_str().into());
        }
        if let Some(en) = p.enabled {
            sets.push("enabled = ?");
            params.push(u8::from(en).into());
        }
        if let Some(s) = &p.secret_sealed {
            sets.push("secret_sealed = ?");
            params.push(s.as_str().into());
        }
        params.push(id.into());
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                format!(
                    "UPDATE webhook_endpoint SET {} WHERE id = ?",
                    sets.join(", ")
                ),
                params,
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Removes an endpoint and its deliveries (in one transaction).
    pub async fn delete_endpoint(&self, id: u64) -> Result<(), DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            tx.exec_drop("DELETE FROM webhook_delivery WHERE endpoint_id = ?", (id,))
                .await?;
            tx.exec_drop("DELETE FROM webhook_endpoint WHERE id = ?", (id,))
                .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Deliveries of endpoint `id`, newest first, below `before` (a
    /// delivery id) when given, in `state` when given.
    pub async fn deliveries(
        &self,
        id: u64,
        state: Option<DeliveryState>,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<DeliveryRow>, DbError> {
        let mut sql =
            format!("SELECT {DELIVERY_COLUMNS} FROM webhook_delivery WHERE endpoint_id = ?");
        let mut params: Vec<Value> = vec![id.into()];
        if let Some(s) = state {
            sql.push_str(" AND state = ?");
            params.push((s as u8).into());
        }
        if let Some(b) = before {
            sql.push_str(" AND id < ?");
            params.push(b.into());
        }
        sql.push_str(" ORDER BY id DESC LIMIT ?");
        params.push(limit.into());
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<mysql_async::Row> = conn.exec(sql, params).await?;
            rows.into_iter().map(delivery_of).collect()
        })
        .await
    }

    /// Deliveries of endpoint `id` per state: (pending, delivered, dead).
    pub async fn delivery_counts(&self, id: u64) -> Result<(u64, u64, u64), DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<(u8, u64)> = conn
                .exec(
                    "SELECT state, COUNT(*) FROM webhook_delivery WHERE endpoint_id = ? GROUP BY state",
                    (id,),
                )
                .await?;
            let mut c = (0, 0, 0);
            for (s, n) in rows {
                match DeliveryState::of(s) {
                    DeliveryState::Pending => c.0 = n,
                    DeliveryState::Delivered => c.1 = n,
                    DeliveryState::Dead => c.2 = n,
                }
            }
            Ok(c)
        })
        .await
    }

    /// Makes a delivery of endpoint `endpoint` pending again, due now
    /// (a resend); `None` when there is no such delivery.
    pub async fn resend_delivery(
        &self,
        endpoint: u64,
        id: u64,
        now_ms: u64,
    ) -> Result<Option<DeliveryRow>, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "UPDATE webhook_delivery SET state = 0, next_at_ms = ?, finished_at_ms = NULL, \
                 created_at_ms = ? WHERE id = ? AND endpoint_id = ? AND state <> 0",
                (now_ms, now_ms, id, endpoint),
            )
            .await?;
            let r: Option<mysql_async::Row> = conn
                .exec_first(
                    format!(
                        "SELECT {DELIVERY_COLUMNS} FROM webhook_delivery WHERE id = ? AND endpoint_id = ?"
                    ),
                    (id, endpoint),
                )
                .await?;
            r.map(delivery_of).transpose()
        })
        .await
    }

    /// Takes up to `n` of this shard's oldest events, hands them to `copy`
    /// (which must make them deliveries, idempotently), then deletes them;
    /// all under one transaction on the shard, so two origins never copy
    /// the same rows at once and a failed copy leaves them. Returns how
    /// many were copied.
    pub async fn dispatch_events<F, Fut>(&self, n: usize, copy: F) -> Result<usize, DbError>
    where
        F: FnOnce(Vec<PendingEvent>) -> Fut,
        Fut: std::future::Future<Output = Result<(), DbError>>,
    {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let mut opts = TxOpts::default();
            opts.with_isolation_level(IsolationLevel::ReadCommitted);
            let mut tx = conn.start_transaction(opts).await?;
            // No SKIP LOCKED: another origin's pass waits for this one, so
            // a link's events are copied in their order.
            let rows: Vec<mysql_async::Row> = tx
                .exec(
                    "SELECT id, event_id, app, code, link, type, at_ms, data, extra FROM webhook_event \
                     ORDER BY id LIMIT ? FOR UPDATE",
                    (n as u64,),
                )
                .await?;
            if rows.is_empty() {
                tx.rollback().await?;
                return Ok(0);
            }
            let mut events = Vec::with_capacity(rows.len());
            for r in rows {
                #[allow(clippy::type_complexity)]
                let (seq, event_id, app, code, link, ty, at_ms, data, extra): (
                    u64,
                    String,
                    String,
                    String,
                    String,
                    String,
                    u64,
                    String,
                    Option<String>,
                ) = mysql_async::from_row_opt(r).map_err(|_| DbError::BadColumn(0))?;
                events.push(PendingEvent {
                    seq,
                    event_id,
                    app,
                    code,
                    link,
                    ty,
                    at_ms,
                    data,
                    extra,
                });
            }
            let last = events.last().map_or(0, |e| e.seq);
            let count = events.len();
            copy(events).await?;
            tx.exec_drop("DELETE FROM webhook_event WHERE id <= ?", (last,))
                .await?;
            tx.commit().await?;
            Ok(count)
        })
        .await
    }

    /// Inserts deliveries (`INSERT IGNORE`: one per endpoint and event).
    /// Each: endpoint id, event, body.
    pub async fn insert_deliveries(
        &self,
        rows: &[(u64, &PendingEvent, String)],
        now_ms: u64,
    ) -> Result<(), DbError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            for chunk in rows.chunks(200) {
                let marks = vec!["(?,?,?,?,?,?,?,?)"; chunk.len()].join(",");
                let mut params: Vec<Value> = Vec::with_capacity(chunk.len() * 8);
                for (endpoint, e, body) in chunk {
                    params.extend([
                        (*endpoint).into(),
                        e.event_id.as_str().into(),
                        e.ty.as_str().into(),
                        e.link.as_str().into(),
                        e.seq.into(),
                        body.as_str().into(),
                        now_ms.into(),
                        now_ms.into(),
                    ]);
                }
                conn.exec_drop(
                    format!(
                        "INSERT IGNORE INTO webhook_delivery (endpoint_id, event_id, type, link, seq, body, \
                         next_at_ms, created_at_ms) VALUES {marks}"
                    ),
                    params,
                )
                .await?;
            }
            Ok(())
        })
        .await
    }

    /// The enabled endpoints of `apps`: (id, app, events).
    pub async fn endpoints_of(
        &self,
        apps: &[&str],
    ) -> Result<Vec<(u64, String, EventMask)>, DbError> {
        if apps.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; apps.len()].join(",");
        let params: Vec<Value> = apps.iter().map(|a| (*a).into()).collect();
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<(u64, String, String)> = conn
                .exec(
                    format!(
                        "SELECT id, app, events FROM webhook_endpoint WHERE enabled = 1 AND app IN ({marks})"
                    ),
                    params,
                )
                .await?;
            Ok(rows
                .into_iter()
                .map(|(id, app, ev)| (id, app, EventMask::from_column(&ev)))
                .collect())
        })
        .await
    }

    /// The enabled endpoints, for the sender.
    pub async fn enabled_endpoints(&self) -> Result<Vec<Target>, DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<(u64, String, String, String)> = conn
                .query(
                    "SELECT id, public_id, url, secret_sealed FROM webhook_endpoint WHERE enabled = 1",
                )
                .await?;
            Ok(rows
                .into_iter()
                .map(|(id, public_id, url, secret_sealed)| Target {
                    id,
                    public_id,
                    url,
                    secret_sealed,
                })
                .collect())
        })
        .await
    }

    /// Up to `n` due deliveries of `endpoint`, leaving out `skip` (being
    /// sent here) and any delivery of a link with an earlier one still
    /// pending (order per link: at most one per link). A plain read: the
    /// caller holds the endpoint's sender lease.
    ///
    /// `after: Some(id)` reads only deliveries above that id, in id order,
    /// on `(endpoint_id, id)`: an index no state change touches, so the
    /// read never walks the entries a busy queue leaves behind until
    /// InnoDB purges them (on `idx_due`, thousands: a read took 300 ms at
    /// 2,000 deliveries a second). `None` reads every due delivery, due
    /// first (retries, resends, a link's next event, late commits).
    pub async fn due(
        &self,
        endpoint: u64,
        after: Option<u64>,
        now_ms: u64,
        n: usize,
        skip: &[u64],
    ) -> Result<Vec<Due>, DbError> {
        let mut sql = String::from(
            "SELECT d.id, d.event_id, d.body, d.attempts, d.created_at_ms FROM webhook_delivery d ",
        );
        sql.push_str(if after.is_some() {
            "FORCE INDEX (idx_endpoint) WHERE d.endpoint_id = ? AND d.id > ? "
        } else {
            "WHERE d.endpoint_id = ? AND d.id > ? "
        });
        sql.push_str(
            "AND d.state = 0 AND d.next_at_ms <= ? \
             AND NOT EXISTS (SELECT 1 FROM webhook_delivery p WHERE p.endpoint_id = d.endpoint_id \
               AND p.link = d.link AND p.state = 0 AND p.seq < d.seq)",
        );
        let mut p: Vec<Value> = vec![endpoint.into(), after.unwrap_or(0).into(), now_ms.into()];
        if !skip.is_empty() {
            sql.push_str(&format!(
                " AND d.id NOT IN ({})",
                vec!["?"; skip.len()].join(",")
            ));
            p.extend(skip.iter().map(|id| Value::from(*id)));
        }
        sql.push_str(if after.is_some() {
            " ORDER BY d.id LIMIT ?"
        } else {
            " ORDER BY d.next_at_ms, d.id LIMIT ?"
        });
        p.push((n as u64).into());
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<(u64, String, String, u32, u64)> = conn.exec(sql, p).await?;
            Ok(rows
                .into_iter()
                .map(|(id, event_id, body, attempts, created_at_ms)| Due {
                    id,
                    event_id,
                    body,
                    attempts,
                    created_at_ms,
                })
                .collect())
        })
        .await
    }

    /// Records an attempt at delivery `id`: delivered,
    /// due again at `retry_at_ms`, or dead when neither.
    pub async fn record_attempt(&self, id: u64, a: &Attempt, now_ms: u64) -> Result<(), DbError> {
        let (state, next, finished) = match (a.delivered, a.retry_at_ms) {
            (true, _) => (DeliveryState::Delivered, now_ms, Some(now_ms)),
            (false, Some(at)) => (DeliveryState::Pending, at, None),
            (false, None) => (DeliveryState::Dead, now_ms, Some(now_ms)),
        };
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "UPDATE webhook_delivery SET state = ?, attempts = attempts + 1, next_at_ms = ?, \
                 last_status = ?, last_error = ?, last_latency_ms = ?, \
                 finished_at_ms = ? WHERE id = ?",
                (
                    state as u8,
                    next,
                    a.status,
                    a.error.as_deref(),
                    a.latency_ms,
                    finished,
                    id,
                ),
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Turns this shard's click digests of periods before `current` into
    /// `link.clicked` events of the apps that want them and removes them,
    /// in one transaction; returns how many digests were closed.
    pub async fn close_click_digests(
        &self,
        current: u64,
        period_secs: u64,
    ) -> Result<usize, DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let mut opts = TxOpts::default();
            opts.with_isolation_level(IsolationLevel::ReadCommitted);
            let mut tx = conn.start_transaction(opts).await?;
            let rows: Vec<(String, u64, u64, u64)> = tx
                .exec(
                    "SELECT link, period, human, bot FROM webhook_click_digest WHERE period < ? \
                     ORDER BY link, period LIMIT 500 FOR UPDATE",
                    (current,),
                )
                .await?;
            if rows.is_empty() {
                tx.rollback().await?;
                return Ok(0);
            }
            let mut links: HashMap<&str, Option<LinkRow>> = HashMap::new();
            for (name, ..) in &rows {
                if links.contains_key(name.as_str()) {
                    continue;
                }
                let row = match split_link_key(name) {
                    Some((domain, code)) => {
                        let key = LinkKey::new(code, domain.unwrap_or(""));
                        let r: Option<mysql_async::Row> = tx
                            .exec_first(
                                format!(
                                    "SELECT {} FROM short_code WHERE {BY_KEY}",
                                    super::row::COLUMNS
                                ),
                                key.params(),
                            )
                            .await?;
                        r.map(LinkRow::from_row).transpose()?
                    }
                    None => None,
                };
                links.insert(name, row);
            }
            let mut data: Vec<(String, String, Option<String>)> = Vec::new();
            let mut events = Vec::new();
            for (name, period, human, bot) in &rows {
                let Some(Some(row)) = links.get(name.as_str()) else {
                    continue;
                };
                let Some(app) = row.app.as_deref() else {
                    continue;
                };
                if !self.hooks.wants(app, EventType::Clicked) {
                    continue;
                }
                let from = period * period_secs;
                let extra = serde_json::json!({
                    "from": shorturl_common::time::rfc3339(from),
                    "to": shorturl_common::time::rfc3339(from + period_secs),
                    "human": human,
                    "bot": bot,
                })
                .to_string();
                data.push((row.snapshot().to_json(), name.clone(), Some(extra)));
                events.push((app, row.code.as_str(), (from + period_secs) * 1000));
            }
            let new: Vec<NewEvent<'_>> = events
                .iter()
                .zip(&data)
                .map(|((app, code, at_ms), (snap, link, extra))| NewEvent {
                    app,
                    code,
                    link: link.clone(),
                    ty: EventType::Clicked,
                    at_ms: *at_ms,
                    data: snap.clone(),
                    extra: extra.clone(),
                })
                .collect();
            insert_events(&mut tx, &new).await?;
            for chunk in rows.chunks(200) {
                let cond = vec!["(link = ? AND period = ?)"; chunk.len()].join(" OR ");
                let mut p: Vec<Value> = Vec::with_capacity(chunk.len() * 2);
                for (name, period, ..) in chunk {
                    p.push(name.as_str().into());
                    p.push((*period).into());
                }
                tx.exec_drop(format!("DELETE FROM webhook_click_digest WHERE {cond}"), p)
                    .await?;
            }
            tx.commit().await?;
            Ok(rows.len())
        })
        .await
    }

    /// Records delivered attempts with one statement: (id, status, latency).
    pub async fn record_delivered(
        &self,
        done: &[(u64, u16, u32)],
        now_ms: u64,
    ) -> Result<(), DbError> {
        if done.is_empty() {
            return Ok(());
        }
        let cases = vec!["WHEN ? THEN ?"; done.len()].join(" ");
        let marks = vec!["?"; done.len()].join(",");
        let mut p: Vec<Value> = vec![now_ms.into(), now_ms.into()];
        for (id, status, _) in done {
            p.push((*id).into());
            p.push((*status).into());
        }
        for (id, _, ms) in done {
            p.push((*id).into());
            p.push((*ms).into());
        }
        p.extend(done.iter().map(|(id, ..)| Value::from(*id)));
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                format!(
                    "UPDATE webhook_delivery SET state = 1, attempts = attempts + 1, next_at_ms = ?, \
                     finished_at_ms = ?, last_error = NULL, \
                     last_status = CASE id {cases} END, last_latency_ms = CASE id {cases} END \
                     WHERE id IN ({marks})"
                ),
                p,
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Pending deliveries and the creation time of the oldest (metrics).
    pub async fn delivery_backlog(&self) -> Result<(u64, Option<u64>), DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            let r: Option<(u64, Option<u64>)> = conn
                .query_first(
                    "SELECT COUNT(*), MIN(created_at_ms) FROM webhook_delivery WHERE state = 0",
                )
                .await?;
            Ok(r.unwrap_or((0, None)))
        })
        .await
    }

    /// Deletes finished deliveries older than `before_ms` (at most `n`).
    pub async fn prune_deliveries(&self, before_ms: u64, n: u32) -> Result<u64, DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "DELETE FROM webhook_delivery WHERE state <> 0 AND finished_at_ms < ? LIMIT ?",
                (before_ms, n),
            )
            .await?;
            Ok(conn.affected_rows())
        })
        .await
    }
}
