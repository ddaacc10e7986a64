//! Deliveries (`webhook_delivery`, meta database): what the sender reads
//! and records, and what the log shows.

use crate::store::{DbError, Store};
use mysql_async::prelude::*;
use mysql_async::Value;

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
    pub delivered: bool,
    /// A failed attempt's next one; `None`: the delivery is dead.
    pub retry_at_ms: Option<u64>,
}

impl Store {
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

    /// Records a failed attempt at delivery `id`: due again at
    /// `retry_at_ms`, or dead without one (delivered ones:
    /// [`Store::record_delivered`], many at once).
    pub async fn record_failed(&self, id: u64, a: &Attempt, now_ms: u64) -> Result<(), DbError> {
        let (state, next, finished) = match a.retry_at_ms {
            Some(at) => (DeliveryState::Pending, at, None),
            None => (DeliveryState::Dead, now_ms, Some(now_ms)),
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
