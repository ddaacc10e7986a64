//! The audit trail: one `link_audit` row per change of a link, always
//! written in the change's own transaction (creations inside the group
//! commit), so a change and its record commit or fail together.

use super::row::Snapshot;
use super::webhooks::{insert_events, EventType, NewEvent, Subscriptions};
use super::{DbError, LinkKey, LinkRow, Store};
use mysql_async::prelude::*;
use mysql_async::Value;
use shorturl_common::code::link_key;

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    Create,
    /// The URL or the expiry changed.
    Edit,
    Disable,
    Enable,
    Delete,
    /// The reaper found the link past its expiry (actor `reaper`).
    Expire,
    /// An expired link was given a later expiry by its owner.
    Renew,
    /// The link's code went back to the pool (actor `reaper`): its row was
    /// archived; the rows of this code before this one are its old life's.
    Recycle,
}

impl AuditAction {
    /// The stored and reported name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Create => "create",
            AuditAction::Edit => "edit",
            AuditAction::Disable => "disable",
            AuditAction::Enable => "enable",
            AuditAction::Delete => "delete",
            AuditAction::Expire => "expire",
            AuditAction::Renew => "renew",
            AuditAction::Recycle => "recycle",
        }
    }
}

/// One audit row to write.
pub struct AuditRow<'a> {
    pub code: &'a str,
    pub at_ms: u64,
    pub actor: &'a str,
    pub action: AuditAction,
    pub before: Option<&'a LinkRow>,
    pub after: &'a LinkRow,
}

/// One change as read back, newest first in a history.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub at_ms: u64,
    pub actor: String,
    pub action: String,
    pub version: u64,
    pub before: Option<LinkRow>,
    pub after: Option<LinkRow>,
}

/// Most rows a history answer holds (newest first).
pub const HISTORY_LIMIT: usize = 1000;

impl AuditAction {
    /// The webhook event a change of this kind is.
    pub fn event(self) -> EventType {
        match self {
            AuditAction::Create => EventType::Created,
            AuditAction::Edit | AuditAction::Disable | AuditAction::Enable | AuditAction::Renew => {
                EventType::Updated
            }
            AuditAction::Delete => EventType::Deleted,
            AuditAction::Expire => EventType::Expired,
            AuditAction::Recycle => EventType::Recycled,
        }
    }
}

/// Writes `rows` with one statement on `conn` (inside the caller's
/// transaction), and the webhook events of the apps `hooks` says want
/// them with a second (same transaction: a change and its event commit
/// together; after the link's row lock, so one link's events are in order).
pub async fn insert<Q: Queryable>(
    conn: &mut Q,
    rows: &[AuditRow<'_>],
    hooks: &Subscriptions,
) -> Result<(), mysql_async::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    // Each snapshot serialized once: the audit row and the event share it.
    let snaps: Vec<(Option<String>, String)> = rows
        .iter()
        .map(|r| {
            (
                r.before.map(|b| b.snapshot().to_json()),
                r.after.snapshot().to_json(),
            )
        })
        .collect();
    insert_audit(conn, rows, &snaps).await?;
    let events: Vec<NewEvent<'_>> = rows
        .iter()
        .zip(&snaps)
        .filter_map(|(r, (before, after))| {
            let ty = r.action.event();
            // A recycled code's row is free: the link was the one before.
            let (link, data) = match r.action {
                AuditAction::Recycle => (r.before?, before.as_deref()?),
                _ => (r.after, after.as_str()),
            };
            let app = link.app.as_deref()?;
            hooks.wants(app, ty).then(|| NewEvent {
                app,
                code: r.code,
                link: link_key(r.code, link.domain.as_deref().unwrap_or("")),
                ty,
                at_ms: r.at_ms,
                data,
                extra: None,
            })
        })
        .collect();
    if !events.is_empty() {
        insert_events(conn, &events).await?;
        hooks.written.notify_one();
    }
    Ok(())
}

/// The audit rows of `rows`, with their snapshots (`before`, `after`) as JSON.
async fn insert_audit<Q: Queryable>(
    conn: &mut Q,
    rows: &[AuditRow<'_>],
    snaps: &[(Option<String>, String)],
) -> Result<(), mysql_async::Error> {
    let marks = vec!["(?,?,?,?,?,?,?)"; rows.len()].join(",");
    let mut params: Vec<Value> = Vec::with_capacity(rows.len() * 7);
    for (r, (before, after)) in rows.iter().zip(snaps) {
        // Keyed by link name: a per-domain code's rows are its domain's.
        let domain = r.after.domain.as_deref().unwrap_or("");
        params.extend([
            link_key(r.code, domain).into(),
            r.at_ms.into(),
            r.actor.into(),
            r.action.as_str().into(),
            r.after.version.into(),
            before.as_deref().into(),
            Some(after.as_str()).into(),
        ]);
    }
    conn.exec_drop(
        format!(
            "INSERT INTO link_audit (code, at_ms, actor, action, version, before_json, after_json) \
             VALUES {marks}"
        ),
        params,
    )
    .await
}

/// `at_ms, actor, action, version, before_json, after_json`.
type AuditCols = (u64, String, String, u64, Option<String>, Option<String>);

/// The link a stored snapshot (`after_json`, a webhook event's data) holds.
pub fn row_of_snapshot(code: &str, json: Option<String>) -> Option<LinkRow> {
    let snap: Snapshot = serde_json::from_str(&json?)
        .map_err(|e| tracing::warn!(code, error = %e, "unreadable audit snapshot"))
        .ok()?;
    snap.into_row(code)
}

impl Store {
    /// The changes of `code`'s current life, newest first (at most
    /// [`HISTORY_LIMIT`]): the rows after its last `recycle` row, so the
    /// owner of a recycled code never sees the old link's history.
    /// Read on the shard that holds the link (none: no history).
    pub async fn history(&self, key: &LinkKey) -> Result<Vec<AuditEntry>, DbError> {
        match self.shard_of_key(key).await? {
            Some(i) => self.on(i).history_here(key).await,
            None => Ok(Vec::new()),
        }
    }

    async fn history_here(&self, key: &LinkKey) -> Result<Vec<AuditEntry>, DbError> {
        let (name, code) = (key.name(), key.code());
        self.metrics.mysql_select.inc();
        let rows: Vec<AuditCols> = self
            .bounded(async {
                let mut conn = self.pool.get_conn().await?;
                Ok(conn
                    .exec(
                        format!(
                            "SELECT at_ms, actor, action, version, before_json, after_json FROM link_audit \
                             WHERE code = ? AND id > COALESCE((SELECT MAX(id) FROM link_audit \
                             WHERE code = ? AND action = ?), 0) ORDER BY id DESC LIMIT {HISTORY_LIMIT}"
                        ),
                        (&name, &name, AuditAction::Recycle.as_str()),
                    )
                    .await?)
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(at_ms, actor, action, version, before, after)| AuditEntry {
                    at_ms,
                    actor,
                    action,
                    version,
                    before: row_of_snapshot(code, before),
                    after: row_of_snapshot(code, after),
                },
            )
            .collect())
    }
}
