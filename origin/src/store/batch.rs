//! The group-commit statement: many issued ids claimed in one transaction.

use super::audit::{self, AuditAction, AuditRow};
use super::CREATED_VERSION;
use super::{new_row_marks, Claimed, DbError, LinkData, Store, NEW_LINK_COLUMNS, NEW_LINK_VALUES};
use mysql_async::prelude::*;
use mysql_async::TxOpts;
use shorturl_common::failpoint;
use shorturl_common::time::now_unix_ms;
use std::sync::Arc;

/// One claim: issued id and the link it becomes.
pub type ClaimItem = (u64, Arc<LinkData>);

impl Store {
    /// Claims each `(id, link)` whose code is still free (in `code_pool`),
    /// in ONE transaction (group commit: one log flush for the whole batch)
    /// and in a constant number of round trips: take the batch's free rows
    /// out of the pool (`DELETE … RETURNING`, primary-key records only, so
    /// other origins' blocks are never locked), insert the links with one
    /// multi-row insert, one multi-row insert of their audit rows, commit.
    /// Returns, per item, the claimed code and the link's version (`None`:
    /// not free or missing, skip that id). The code is the pool row's, not
    /// computed from the id: a recycled code sits at an id past the
    /// pre-generated ones. The version continues above the free row's (0
    /// for a pre-generated code, above the old link's for a recycled one),
    /// so no record of an earlier life of the code can win a
    /// compare-and-set against the new link's. On error nothing of the
    /// batch is written.
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
            match claim_tx(&mut conn, items, &self.hooks, Stale::Trust).await? {
                Some(claimed) => Ok(claimed),
                // A free row whose code or id is already a link's (a custom
                // code filed before pre-generation reached it): once more,
                // leaving out the stale rows, which go.
                None => {
                    tracing::warn!(
                        items = items.len(),
                        "a claim met a free code that is already a link's; claiming again without it"
                    );
                    claim_tx(&mut conn, items, &self.hooks, Stale::Check)
                        .await?
                        .ok_or(DbError::Meta("code_pool"))
                }
            }
        })
        .await
    }
}

/// Whether a claim reads `short_code` for the batch's free rows first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stale {
    /// No: a duplicate key on the insert rolls back and answers `None`.
    Trust,
    /// Yes, and free rows already used are deleted, not claimed.
    Check,
}

/// The claim transaction: take the batch's free rows out of `code_pool`
/// (`DELETE … RETURNING`, which locks them: a racing custom takeover or
/// issuer waits, then finds nothing), insert the links (one multi-row
/// insert into `short_code`, through its indexes once), their audit rows,
/// commit. `None`: with [`Stale::Trust`], a free row turned out stale and
/// nothing was written.
async fn claim_tx(
    conn: &mut mysql_async::Conn,
    items: &[ClaimItem],
    hooks: &super::webhooks::Subscriptions,
    stale: Stale,
) -> Result<Option<Vec<Option<Claimed>>>, DbError> {
    let mut tx = conn.start_transaction(TxOpts::default()).await?;
    let marks = vec!["?"; items.len()].join(",");
    let ids: Vec<mysql_async::Value> = items.iter().map(|(id, _)| (*id).into()).collect();
    let mut free: Vec<(u64, String, u64)> = tx
        .exec(
            format!("DELETE FROM code_pool WHERE id IN ({marks}) RETURNING id, code, version"),
            ids.clone(),
        )
        .await?;
    if stale == Stale::Check && !free.is_empty() {
        let codes = vec!["?"; free.len()].join(",");
        let mut params = ids;
        params.extend(free.iter().map(|(_, c, _)| c.as_str().into()));
        let used: Vec<(u64, String)> = tx
            .exec(
                format!(
                    "SELECT id, code FROM short_code WHERE id IN ({marks}) \
                     OR (code IN ({codes}) AND code_scope = '')"
                ),
                params,
            )
            .await?;
        free.retain(|(id, code, _)| !used.iter().any(|(i, c)| i == id || c == code));
    }
    let claimed: Vec<Option<Claimed>> = items
        .iter()
        .map(|(id, _)| {
            free.iter()
                .find(|(f, _, _)| f == id)
                .map(|(_, code, v)| Claimed {
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
            params.extend(d.new_link_values(c.version));
        }
        let inserted = tx
            .exec_drop(
                format!("INSERT INTO short_code (id, code, {NEW_LINK_COLUMNS}) VALUES {rows}"),
                params,
            )
            .await;
        match inserted {
            Ok(()) => {}
            Err(mysql_async::Error::Server(e)) if e.code == 1062 && stale == Stale::Trust => {
                tx.rollback().await?;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
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
        audit::insert(&mut tx, &audit_rows, hooks).await?;
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
    Ok(Some(claimed))
}
