//! The group-commit statement: many issued ids claimed in one transaction.

use super::audit::{self, AuditAction, AuditRow};
use super::CREATED_VERSION;
use super::{
    new_row_marks, Claimed, DbError, LinkData, RowState, Store, NEW_LINK_COLUMNS, NEW_LINK_VALUES,
};
use mysql_async::prelude::*;
use mysql_async::TxOpts;
use shorturl_common::failpoint;
use shorturl_common::time::now_unix_ms;
use std::sync::Arc;

/// One claim: issued id and the link it becomes.
pub type ClaimItem = (u64, Arc<LinkData>);

impl Store {
    /// Claims each `(id, code, link)` whose row is free, in ONE transaction
    /// (group commit: one log flush for the whole batch) and in a constant
    /// number of round trips: lock the free rows of the batch, write them all
    /// with one multi-row upsert (every row exists and is locked, so it only
    /// updates), one multi-row insert of their audit rows, commit. The lock is on primary-key records only (`FORCE
    /// INDEX`): through the `(state, id)` index it would take next-key locks
    /// that block other origins' blocks. Returns, per item, the claimed
    /// row's code and the link's version (`None`: not free or missing, skip
    /// that id). The code is the row's, not computed from the id: a recycled
    /// code sits at an id past the pre-generated ones. The version continues
    /// above the free row's (0 for a pre-generated row, above the old
    /// link's for a recycled one), so no record of an earlier life of the
    /// code can win a compare-and-set against the new link's. On error
    /// nothing of the batch is written.
    ///
    /// Sharded, each shard's items are claimed in that shard's own
    /// transaction (an id in no range is not free); the first failure fails
    /// the call, so callers group items by shard first ([`Store::shard_of_id`]).
    pub async fn claim_batch(&self, items: &[ClaimItem]) -> Result<Vec<Option<Claimed>>, DbError> {
        if !self.shards.sharded {
            return self.claim_batch_here(items).await;
        }
        let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (k, (id, _)) in items.iter().enumerate() {
            if let Some(i) = self.shards.index_of_id(*id) {
                groups.entry(i).or_default().push(k);
            }
        }
        let mut out = vec![None; items.len()];
        for (i, idx) in groups {
            let part: Vec<ClaimItem> = idx.iter().map(|&k| items[k].clone()).collect();
            let got = self.on(i).claim_batch_here(&part).await?;
            self.shards.note_issuing(i);
            for (k, c) in idx.into_iter().zip(got) {
                out[k] = c;
            }
        }
        Ok(out)
    }

    /// The shard whose range holds `id` (0 unsharded).
    pub fn shard_of_id(&self, id: u64) -> Option<usize> {
        self.shards.index_of_id(id)
    }

    async fn claim_batch_here(&self, items: &[ClaimItem]) -> Result<Vec<Option<Claimed>>, DbError> {
        self.metrics.mysql_update.inc_by(items.len() as u64);
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            let marks = vec!["?"; items.len()].join(",");
            let mut params: Vec<mysql_async::Value> =
                items.iter().map(|(id, _)| (*id).into()).collect();
            params.push(RowState::Free.into());
            let free: Vec<(u64, String, u64)> = tx
                .exec(
                    format!(
                        "SELECT id, code, version FROM short_code FORCE INDEX (PRIMARY) WHERE id IN ({marks}) \
                         AND state = ? FOR UPDATE"
                    ),
                    params,
                )
                .await?;
            let claimed: Vec<Option<Claimed>> = items
                .iter()
                .map(|(id, _)| {
                    free.iter().find(|(f, _, _)| f == id).map(|(_, code, v)| Claimed {
                        code: code.clone(),
                        version: v + CREATED_VERSION,
                    })
                })
                .collect();
            if !free.is_empty() {
                let rows = vec![new_row_marks(); free.len()].join(",");
                let mut params: Vec<mysql_async::Value> =
                    Vec::with_capacity(free.len() * (NEW_LINK_VALUES + 2));
                let mut created = Vec::with_capacity(free.len());
                for ((id, d), c) in items.iter().zip(&claimed) {
                    let Some(c) = c else { continue };
                    created.push((c.code.as_str(), d.app.as_str(), d.row(&c.code, c.version)));
                    params.push((*id).into());
                    params.push(c.code.as_str().into());
                    params.extend(d.new_link_values());
                }
                tx.exec_drop(
                    format!(
                        "INSERT INTO short_code (id, code, {NEW_LINK_COLUMNS}) VALUES {rows} ON DUPLICATE KEY UPDATE \
                         state = VALUES(state), long_url = VALUES(long_url), domain = VALUES(domain), app = VALUES(app), \
                         client_app = VALUES(client_app), client_version = VALUES(client_version), \
                         kdt_id = VALUES(kdt_id), created_at = VALUES(created_at), updated_at = VALUES(updated_at), \
                         expires_at = VALUES(expires_at), version = version + VALUES(version), \
                         redirect_status = VALUES(redirect_status), options = VALUES(options), tags = VALUES(tags)"
                    ),
                    params,
                )
                .await?;
                let at_ms = now_unix_ms();
                let audit_rows: Vec<AuditRow<'_>> = created
                    .iter()
                    .map(|(code, app, row)| AuditRow {
                        code,
                        at_ms,
                        actor: app,
                        action: AuditAction::Create,
                        before: None,
                        after: row,
                    })
                    .collect();
                audit::insert(&mut tx, &audit_rows, &self.hooks).await?;
            }
            // Test hook: the batch fails after its writes, as a row the
            // server refuses would, and must leave nothing behind.
            if items
                .iter()
                .any(|(_, d)| failpoint::hit_contains("origin.claim.poison", &d.url))
            {
                tx.rollback().await?;
                return Err(DbError::Poisoned);
            }
            tx.commit().await?;
            Ok(claimed)
        })
        .await
    }
}
