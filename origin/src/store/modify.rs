//! The one transaction every change of an existing link goes through:
//! lock the row, let the domain decide, write the row with the next
//! version, the audit row and the outbox row, commit. The change, its audit
//! record and the promise to bring Redis up to date commit together or not
//! at all (MySQL down: nothing is written).

use super::audit::{self, AuditAction, AuditRow};
use super::{outbox, row, DbError, LinkRow, Store};
use mysql_async::prelude::*;
use mysql_async::TxOpts;
use shorturl_common::time::now_unix_ms;

/// What the domain decided for a locked row.
#[derive(Debug, Clone)]
pub struct Change {
    /// The row as it should become; `version` and `updated_at` are set by
    /// the store (previous version + 1, now).
    pub after: LinkRow,
    pub action: AuditAction,
}

/// What a modification did.
#[derive(Debug, Clone)]
pub enum Modified {
    /// No row has this code.
    Missing,
    /// The domain decided that nothing changes (no version bump, no audit).
    Unchanged(LinkRow),
    /// Committed: the row as it now is, its audit row and outbox row `outbox_id`.
    Changed { after: LinkRow, outbox_id: u64 },
}

impl Store {
    /// Locks the row of `code` and applies what `decide` says (the caller's
    /// domain rules: visibility, preconditions, new values). `decide`'s own
    /// error rolls back and is returned inside `Ok`, a database failure as
    /// `Err`.
    pub async fn modify<E>(
        &self,
        code: &str,
        actor: &str,
        decide: impl FnOnce(&LinkRow) -> Result<Option<Change>, E>,
    ) -> Result<Result<Modified, E>, DbError> {
        self.metrics.mysql_update.inc();
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let found: Option<mysql_async::Row> = tx
                .exec_first(
                    format!(
                        "SELECT id, {} FROM short_code WHERE code = ? FOR UPDATE",
                        row::COLUMNS
                    ),
                    (code,),
                )
                .await?;
            let Some(mut found) = found else {
                tx.rollback().await?;
                return Ok(Ok(Modified::Missing));
            };
            let id: u64 = match found.take_opt::<u64, usize>(0) {
                Some(Ok(id)) => id,
                _ => return Err(DbError::BadColumn(0)),
            };
            let before = LinkRow::from_row_at(found, 1)?;
            let change = match decide(&before) {
                Err(e) => {
                    tx.rollback().await?;
                    return Ok(Err(e));
                }
                Ok(None) => {
                    tx.rollback().await?;
                    return Ok(Ok(Modified::Unchanged(before)));
                }
                Ok(Some(c)) => c,
            };
            let now_ms = now_unix_ms();
            let mut after = change.after;
            after.version = before.version + 1;
            after.updated_at = Some(now_ms / 1000);
            tx.exec_drop(
                "UPDATE short_code SET state = ?, long_url = ?, expires_at = ?, version = ?, updated_at = ?, \
                 reaped_at = ? WHERE id = ?",
                (
                    after.state,
                    after.url.as_deref(),
                    after.expires_at,
                    after.version,
                    after.updated_at,
                    after.reaped_at,
                    id,
                ),
            )
            .await?;
            audit::insert(
                &mut tx,
                &[AuditRow {
                    code,
                    at_ms: now_ms,
                    actor,
                    action: change.action,
                    before: Some(&before),
                    after: &after,
                }],
            )
            .await?;
            let outbox_id = outbox::insert(&mut tx, code, after.version, now_ms).await?;
            tx.commit().await?;
            Ok(Ok(Modified::Changed { after, outbox_id }))
        })
        .await
    }
}
