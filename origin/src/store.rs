//! MySQL statements on `short_code`: the source of truth for links.

use crate::db::{is_duplicate, CUSTOM_ID_BASE};
use crate::metrics::Metrics;
use mysql_async::prelude::*;
use mysql_async::{Pool, TxOpts};
use shorturl_common::record::{Lookup, Record};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Row states.
pub mod state {
    pub const FREE: u8 = 0;
    pub const ACTIVE: u8 = 1;
    pub const RESERVED: u8 = 2;
    pub const DISABLED: u8 = 3;
}

/// What a new link carries.
#[derive(Debug, Clone)]
pub struct LinkData {
    pub url: String,
    pub domain: String,
    pub app: String,
    pub client_app: Option<String>,
    pub client_version: Option<String>,
    pub kdt_id: Option<u64>,
    pub created_at: u64,
    pub expires_at: u64,
}

impl LinkData {
    /// The record this link is cached as.
    pub fn record(&self) -> Record {
        Record {
            expires_at: self.expires_at,
            domain: self.domain.clone(),
            url: self.url.clone(),
        }
    }
}

/// A link as stored.
#[derive(Debug, Clone)]
pub struct LinkRow {
    pub code: String,
    pub state: u8,
    pub url: Option<String>,
    pub domain: Option<String>,
    pub app: Option<String>,
    pub client_app: Option<String>,
    pub client_version: Option<String>,
    pub kdt_id: Option<u64>,
    pub created_at: Option<u64>,
    pub expires_at: Option<u64>,
}

/// MySQL failed or timed out.
#[derive(Debug, Clone, thiserror::Error)]
#[error("mysql: {0}")]
pub struct DbError(pub String);

/// Outcome of a custom-code claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomClaim {
    Created,
    Taken,
}

/// Outcome of a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disable {
    Done { url: String, domain: String },
    NotFound,
    Forbidden,
}

/// Link statements with timeouts and status counters.
#[derive(Clone)]
pub struct Store {
    pub pool: Pool,
    timeout: Duration,
    metrics: Arc<Metrics>,
}

/// `state, long_url, domain, expires_at`.
type LookupCols = (u8, Option<String>, Option<String>, Option<u64>);
/// `state, app, long_url, domain`.
type DisableCols = (u8, Option<String>, Option<String>, Option<String>);

const UPDATE_CLAIM: &str =
    "UPDATE short_code SET state = 1, long_url = ?, domain = ?, app = ?, client_app = ?, \
     client_version = ?, kdt_id = ?, created_at = ?, expires_at = ? WHERE id = ? AND state = 0";

impl Store {
    /// Wraps the pool.
    pub fn new(pool: Pool, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Store {
            pool,
            timeout,
            metrics,
        }
    }

    /// Runs `f` under the MySQL timeout, counting failures.
    pub async fn bounded<T>(
        &self,
        f: impl Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, DbError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.metrics.mysql_error.inc();
                tracing::warn!(error = %e, "mysql error");
                Err(DbError(e.to_string()))
            }
            Err(_) => {
                self.metrics.mysql_error.inc();
                tracing::warn!("mysql timeout");
                Err(DbError("timeout".into()))
            }
        }
    }

    /// Claims each `(id, code, link)` whose row is free, in ONE transaction
    /// (group commit: one log flush for the whole batch) and in a constant
    /// number of round trips: lock the free rows of the batch, write them all
    /// with one multi-row upsert (every row exists and is locked, so it only
    /// updates), commit. The lock is on primary-key records only (`FORCE
    /// INDEX`): through the `(state, id)` index it would take next-key locks
    /// that block other origins' blocks. Returns, per item, whether the row was claimed
    /// (`false`: not free or missing, skip that id).
    pub async fn claim_batch(
        &self,
        items: &[(u64, String, Arc<LinkData>)],
    ) -> Result<Vec<bool>, DbError> {
        self.metrics.mysql_update.inc_by(items.len() as u64);
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let marks = vec!["?"; items.len()].join(",");
            let ids: Vec<mysql_async::Value> = items.iter().map(|(id, _, _)| (*id).into()).collect();
            let free: Vec<u64> = tx
                .exec(
                    format!("SELECT id FROM short_code FORCE INDEX (PRIMARY) WHERE id IN ({marks}) AND state = 0 FOR UPDATE"),
                    ids,
                )
                .await?;
            let claimed: Vec<bool> = items.iter().map(|(id, _, _)| free.contains(id)).collect();
            if !free.is_empty() {
                let rows = vec!["(?,?,1,?,?,?,?,?,?,?,?)"; free.len()].join(",");
                let mut params: Vec<mysql_async::Value> = Vec::with_capacity(free.len() * 10);
                for ((id, code, d), _) in items.iter().zip(&claimed).filter(|(_, c)| **c) {
                    params.extend([
                        (*id).into(),
                        code.as_str().into(),
                        d.url.as_str().into(),
                        d.domain.as_str().into(),
                        d.app.as_str().into(),
                        d.client_app.as_deref().into(),
                        d.client_version.as_deref().into(),
                        d.kdt_id.into(),
                        d.created_at.into(),
                        d.expires_at.into(),
                    ]);
                }
                tx.exec_drop(
                    format!(
                        "INSERT INTO short_code (id, code, state, long_url, domain, app, client_app, client_version, \
                         kdt_id, created_at, expires_at) VALUES {rows} ON DUPLICATE KEY UPDATE state = VALUES(state), \
                         long_url = VALUES(long_url), domain = VALUES(domain), app = VALUES(app), \
                         client_app = VALUES(client_app), client_version = VALUES(client_version), \
                         kdt_id = VALUES(kdt_id), created_at = VALUES(created_at), expires_at = VALUES(expires_at)"
                    ),
                    params,
                )
                .await?;
            }
            tx.commit().await?;
            Ok(claimed)
        })
        .await
    }

    /// Creates a link with a caller-chosen code. A pre-generated code that is
    /// still free becomes this link (and so is never issued); one in any
    /// other state, or an existing custom code, is taken.
    pub async fn claim_custom(&self, code: &str, d: &LinkData) -> Result<CustomClaim, DbError> {
        self.metrics.mysql_update.inc();
        let r = self
            .bounded(async {
                let mut conn = self.pool.get_conn().await?;
                let mut tx = conn.start_transaction(TxOpts::default()).await?;
                let row: Option<(u64, u8)> =
                    tx.exec_first("SELECT id, state FROM short_code WHERE code = ? FOR UPDATE", (code,)).await?;
                let outcome = match row {
                    Some((id, state::FREE)) => {
                        tx.exec_drop(
                            UPDATE_CLAIM,
                            (&d.url, &d.domain, &d.app, &d.client_app, &d.client_version, d.kdt_id, d.created_at, d.expires_at, id),
                        )
                        .await?;
                        CustomClaim::Created
                    }
                    Some(_) => CustomClaim::Taken,
                    None => {
                        tx.query_drop("UPDATE counter SET value = LAST_INSERT_ID(value + 1) WHERE name = 'custom'").await?;
                        let id = tx.last_insert_id().unwrap_or(0).max(CUSTOM_ID_BASE);
                        match tx
                            .exec_drop(
                                "INSERT INTO short_code (id, code, state, long_url, domain, app, client_app, client_version, \
                                 kdt_id, created_at, expires_at) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (id, code, &d.url, &d.domain, &d.app, &d.client_app, &d.client_version, d.kdt_id, d.created_at, d.expires_at),
                            )
                            .await
                        {
                            Ok(()) => CustomClaim::Created,
                            Err(e) if is_duplicate(&e) => CustomClaim::Taken,
                            Err(e) => return Err(e),
                        }
                    }
                };
                if outcome == CustomClaim::Created {
                    tx.commit().await?;
                } else {
                    tx.rollback().await?;
                }
                Ok(outcome)
            })
            .await;
        r
    }

    /// Reads a link by code.
    pub async fn find(&self, code: &str) -> Result<Option<LinkRow>, DbError> {
        self.metrics.mysql_select.inc();
        type Cols = (
            String,
            u8,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        );
        let row: Option<Cols> = self
            .bounded(async {
                let mut conn = self.pool.get_conn().await?;
                conn.exec_first(
                    "SELECT code, state, long_url, domain, app, client_app, client_version, kdt_id, created_at, expires_at \
                     FROM short_code WHERE code = ?",
                    (code,),
                )
                .await
            })
            .await?;
        Ok(row.map(
            |(
                code,
                state,
                url,
                domain,
                app,
                client_app,
                client_version,
                kdt_id,
                created_at,
                expires_at,
            )| LinkRow {
                code,
                state,
                url,
                domain,
                app,
                client_app,
                client_version,
                kdt_id,
                created_at,
                expires_at,
            },
        ))
    }

    /// What MySQL says `code` resolves to (negative unless active and unexpired).
    pub async fn lookup(&self, code: &str, now: u64) -> Result<Lookup, DbError> {
        self.metrics.mysql_select.inc();
        let row: Option<LookupCols> = self
            .bounded(async {
                let mut conn = self.pool.get_conn().await?;
                conn.exec_first(
                    "SELECT state, long_url, domain, expires_at FROM short_code WHERE code = ?",
                    (code,),
                )
                .await
            })
            .await?;
        Ok(match row {
            Some((state::ACTIVE, Some(url), Some(domain), Some(expires_at)))
                if expires_at > now =>
            {
                Lookup::Found(Record {
                    expires_at,
                    domain,
                    url,
                })
            }
            _ => Lookup::Negative,
        })
    }

    /// Disables `code` if it is active and belongs to `app`.
    pub async fn disable(&self, code: &str, app: &str) -> Result<Disable, DbError> {
        self.metrics.mysql_update.inc();
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let row: Option<DisableCols> = tx
                .exec_first(
                    "SELECT state, app, long_url, domain FROM short_code WHERE code = ? FOR UPDATE",
                    (code,),
                )
                .await?;
            let out = match row {
                Some((state::ACTIVE, owner, Some(url), Some(domain))) => {
                    if owner.as_deref() != Some(app) {
                        Disable::Forbidden
                    } else {
                        tx.exec_drop("UPDATE short_code SET state = 3 WHERE code = ?", (code,))
                            .await?;
                        Disable::Done { url, domain }
                    }
                }
                _ => Disable::NotFound,
            };
            tx.commit().await?;
            Ok(out)
        })
        .await
    }

    /// Cheap liveness probe.
    pub async fn ping(&self) -> Result<(), DbError> {
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            conn.query_drop("SELECT 1").await
        })
        .await
    }
}
