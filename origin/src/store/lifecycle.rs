//! The reaper's statements (issue 11): find links past their expiry through
//! `idx_state_expires` (a range per state, never a scan) and mark a bounded
//! batch `expired` in one transaction with an audit row and an outbox row
//! per link, exactly as any other change (`modify`) commits. The outbox
//! drainer then writes each link's negative record to Redis and announces
//! it on the invalidation channel, as for a delete.
//!
//! Background housekeeping: bounded by `mysql.timeout_ms`, not counted in
//! the `mysql` status dimension (the `lifecycle` metrics say what it did).

use super::audit::{self, AuditAction, AuditRow};
use super::row::COLUMNS;
use super::{outbox, DbError, LinkRow, RowState, Store};
use mysql_async::prelude::*;
use mysql_async::{IsolationLevel, TxOpts, Value};
use shorturl_common::time::now_unix_ms;

/// The audit actor of the reaper's changes.
pub const REAPER_ACTOR: &str = "reaper";

/// The states the reaper takes past their expiry: links that resolve, or
/// could again once enabled. Deleted links stay deleted.
pub const REAPABLE: [RowState; 2] = [RowState::Active, RowState::Disabled];

/// The rows the reaper takes: a range of `idx_state_expires` per state
/// (parameters: the two [`REAPABLE`] states, now). Named (`FORCE INDEX`) so
/// the read never becomes a scan; `tests/lifecycle.rs` EXPLAINs it.
pub const REAP_FROM: &str = "FROM short_code FORCE INDEX (idx_state_expires) \
                             WHERE state IN (?, ?) AND expires_at <= ?";

/// `id` and the [`LinkRow`] that a reap batch read.
fn parse(mut r: mysql_async::Row) -> Result<(u64, LinkRow), DbError> {
    let id: u64 = match r.take_opt::<u64, usize>(0) {
        Some(Ok(id)) => id,
        _ => return Err(DbError::BadColumn(0)),
    };
    Ok((id, LinkRow::from_row_at(r, 1)?))
}

/// The row `before` becomes when reaped at `now` (Unix seconds).
pub fn reaped(before: &LinkRow, now: u64) -> LinkRow {
    let mut after = before.clone();
    after.state = RowState::Expired;
    after.version = before.version + 1;
    after.updated_at = Some(now);
    after.reaped_at = Some(now);
    after
}

impl Store {
    /// Marks at most `limit` links past their expiry at `now` (Unix
    /// seconds) `expired`, with their audit and outbox rows, in one
    /// transaction; returns how many. Rows another transaction holds (an
    /// owner's edit in flight) are skipped, not waited for: the next batch
    /// sees them as they are then.
    pub(super) async fn reap_batch_here(&self, now: u64, limit: usize) -> Result<usize, DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let mut opts = TxOpts::default();
            // No gap locks: creations (free rows becoming active) and edits
            // next to the range go on while a batch holds its rows.
            opts.with_isolation_level(IsolationLevel::ReadCommitted);
            let mut tx = conn.start_transaction(opts).await?;
            let found: Vec<mysql_async::Row> = tx
                .exec(
                    format!("SELECT id, {COLUMNS} {REAP_FROM} LIMIT ? FOR UPDATE SKIP LOCKED"),
                    (REAPABLE[0], REAPABLE[1], now, limit as u64),
                )
                .await?;
            if found.is_empty() {
                tx.rollback().await?;
                return Ok(0);
            }
            let rows: Vec<(u64, LinkRow)> =
                found.into_iter().map(parse).collect::<Result<_, _>>()?;
            let now_ms = now_unix_ms();
            let pairs: Vec<(&LinkRow, LinkRow)> =
                rows.iter().map(|(_, b)| (b, reaped(b, now))).collect();
            let marks = vec!["?"; rows.len()].join(",");
            let mut params: Vec<Value> =
                vec![RowState::Expired.into(), now.into(), now.into(), now.into()];
            params.extend(rows.iter().map(|(id, _)| Value::from(*id)));
            // ended_at: the recycling quarantine counts from here.
            tx.exec_drop(
                format!(
                    "UPDATE short_code SET state = ?, reaped_at = ?, updated_at = ?, ended_at = ?, \
                     version = version + 1 WHERE id IN ({marks})"
                ),
                params,
            )
            .await?;
            let audit_rows: Vec<AuditRow<'_>> = pairs
                .iter()
                .map(|(before, after)| AuditRow {
                    code: &after.code,
                    at_ms: now_ms,
                    actor: REAPER_ACTOR,
                    action: AuditAction::Expire,
                    before: Some(*before),
                    after,
                })
                .collect();
            audit::insert(&mut tx, &audit_rows, &self.hooks).await?;
            let changes: Vec<(&str, Option<&str>, u64)> = pairs
                .iter()
                .map(|(_, a)| (a.code.as_str(), a.domain.as_deref(), a.version))
                .collect();
            outbox::insert_many(&mut tx, &changes, now_ms).await?;
            tx.commit().await?;
            Ok(rows.len())
        })
        .await
    }

    /// Links past their expiry at `now` not reaped yet (a count over the
    /// same index range the reaper reads: its cost follows the backlog).
    pub(super) async fn reap_backlog_here(&self, now: u64) -> Result<u64, DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let n: Option<u64> = conn
                .exec_first(
                    format!("SELECT COUNT(*) {REAP_FROM}"),
                    (REAPABLE[0], REAPABLE[1], now),
                )
                .await?;
            Ok(n.unwrap_or(0))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaped_row_is_a_new_version_that_keeps_its_url() {
        let before = LinkRow {
            code: "abcdef".into(),
            state: RowState::Disabled,
            url: Some("https://a/".into()),
            domain: Some("sho.rt".into()),
            app: Some("demo".into()),
            client_app: None,
            client_version: None,
            kdt_id: None,
            created_at: Some(1),
            updated_at: Some(2),
            expires_at: Some(100),
            version: 4,
            reaped_at: None,
            options: None,
            tags: None,
        };
        let after = reaped(&before, 150);
        assert_eq!(
            (
                after.state,
                after.version,
                after.updated_at,
                after.reaped_at
            ),
            (RowState::Expired, 5, Some(150), Some(150))
        );
        assert_eq!(
            (&after.url, after.expires_at),
            (&before.url, before.expires_at)
        );
    }
}
