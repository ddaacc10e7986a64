//! The one transaction every change of an existing link goes through:
//! lock the row, let the domain decide, write the row with the next
//! version, the audit row and the outbox row, commit. The change, its audit
//! record and the promise to bring Redis up to date commit together or not
//! at all (MySQL down: nothing is written).

use super::audit::{self, AuditAction, AuditRow};
use super::key::{LinkKey, BY_KEY};
use super::{outbox, row, DbError, LinkRow, RowState, Store};
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
    /// Committed: the row as it now is, its audit row and outbox row
    /// `outbox_id` on shard `shard` (each shard has its own outbox).
    Changed {
        after: LinkRow,
        outbox_id: u64,
        shard: usize,
    },
}

/// Whether a link in `state` has ended (never resolves again unless renewed).
fn ended(state: RowState) -> bool {
    matches!(state, RowState::Deleted | RowState::Expired)
}

/// `ended_at` after a change from `before` to `after` at `now`: set when
/// the link ends (again on every such change, so the quarantine restarts),
/// kept while it stays ended, cleared when it lives again.
pub fn ended_at(before: RowState, after: RowState, old: Option<u64>, now: u64) -> Option<u64> {
    match (ended(before), ended(after)) {
        (_, true) if before != after => Some(now),
        (true, true) => old.or(Some(now)),
        _ => None,
    }
}

/// Whether a redirect status lets browsers cache the redirect for good.
pub fn is_permanent(status: u16) -> bool {
    matches!(status, 301 | 308)
}

impl Store {
    /// Locks the row of `key` and applies what `decide` says (the caller's
    /// domain rules: visibility, preconditions, new values). `decide`'s own
    /// error rolls back and is returned inside `Ok`, a database failure as
    /// `Err`. `serving` is the redirect status the link is served with from
    /// now on (the origin's policy): a permanent one is recorded for good,
    /// an unknown (NULL) record stays unknown.
    ///
    /// The transaction runs on the shard that holds the link.
    pub async fn modify<E>(
        &self,
        key: &LinkKey,
        actor: &str,
        serving: u16,
        decide: impl FnOnce(&LinkRow) -> Result<Option<Change>, E>,
    ) -> Result<Result<Modified, E>, DbError> {
        match self.shard_of_key(key).await? {
            Some(i) => self.on(i).modify_here(i, key, actor, serving, decide).await,
            None => Ok(Ok(Modified::Missing)),
        }
    }

    async fn modify_here<E>(
        &self,
        shard: usize,
        key: &LinkKey,
        actor: &str,
        serving: u16,
        decide: impl FnOnce(&LinkRow) -> Result<Option<Change>, E>,
    ) -> Result<Result<Modified, E>, DbError> {
        self.metrics.mysql_update.inc();
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let found: Option<mysql_async::Row> = tx
                .exec_first(
                    format!(
                        "SELECT id, ended_at, {} FROM short_code WHERE {BY_KEY} FOR UPDATE",
                        row::COLUMNS
                    ),
                    key.params(),
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
            let old_ended: Option<u64> = match found.take_opt::<Option<u64>, usize>(1) {
                Some(Ok(v)) => v,
                _ => return Err(DbError::BadColumn(1)),
            };
            let before = LinkRow::from_row_at(found, 2)?;
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
            let ended_now = ended_at(before.state, after.state, old_ended, now_ms / 1000);
            let params: Vec<mysql_async::Value> = vec![
                after.state.into(),
                after.url.as_deref().into(),
                after.expires_at.into(),
                after.version.into(),
                after.updated_at.into(),
                after.reaped_at.into(),
                after.options.as_deref().into(),
                after.tags.as_deref().into(),
                ended_now.into(),
                is_permanent(serving).into(),
                serving.into(),
                id.into(),
            ];
            tx.exec_drop(
                "UPDATE short_code SET state = ?, long_url = ?, expires_at = ?, version = ?, updated_at = ?, \
                 reaped_at = ?, options = ?, tags = ?, ended_at = ?, redirect_status = CASE WHEN ? AND redirect_status IS NOT NULL \
                 THEN ? ELSE redirect_status END WHERE id = ?",
                params,
            )
            .await?;
            audit::insert(
                &mut tx,
                &[AuditRow {
                    code: key.code(),
                    at_ms: now_ms,
                    actor,
                    action: change.action,
                    before: Some(&before),
                    after: &after,
                }],
                &self.hooks,
            )
            .await?;
            let domain = after.domain.as_deref();
            let outbox_id = outbox::insert(&mut tx, key.code(), domain, after.version, now_ms).await?;
            tx.commit().await?;
            Ok(Ok(Modified::Changed {
                after,
                outbox_id,
                shard,
            }))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_at_follows_the_end_of_a_link() {
        use RowState::*;
        assert_eq!(ended_at(Active, Deleted, None, 50), Some(50));
        assert_eq!(ended_at(Disabled, Expired, None, 50), Some(50));
        // Deleting an expired link restarts its quarantine.
        assert_eq!(ended_at(Expired, Deleted, Some(10), 50), Some(50));
        assert_eq!(ended_at(Deleted, Deleted, Some(10), 50), Some(10));
        assert_eq!(ended_at(Expired, Active, Some(10), 50), None);
        assert_eq!(ended_at(Active, Disabled, None, 50), None);
        assert!(is_permanent(301) && is_permanent(308));
        assert!(!is_permanent(302) && !is_permanent(307));
    }
}
