//! The outbox (`webhook_event`, every shard): events copied into
//! deliveries, and click digests (`webhook_click_digest`) turned into
//! events once their period is over.

use super::{insert_events, EventMask, EventType, NewEvent};
use crate::store::key::BY_KEY;
use crate::store::{DbError, LinkKey, LinkRow, Store};
use mysql_async::prelude::*;
use mysql_async::{IsolationLevel, TxOpts, Value};
use shorturl_common::code::split_link_key;
use std::collections::HashMap;

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
                                    crate::store::row::COLUMNS
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
                    data: snap,
                    extra: extra.as_deref(),
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
}
