//! The recycler's statements (issue 11, item 2): read the tombstones whose
//! quarantine is over from a cursor, let the domain decide which codes are
//! reusable ([`crate::lifecycle::recycle`]), and for those, in ONE
//! transaction: archive the old row (`short_code_archive`), delete it,
//! append the code to the pool (`code_pool`) as a free row at the next id
//! past the end of the pool (`meta.pregen_done` moves with it, so the issuer hands it out
//! in turn, exactly once), with its audit (`recycle`) and outbox rows.
//!
//! The cursor (`meta.recycle_cursor`, `<ended_at>:<id>`) moves past every
//! row examined, reusable or not: a row kept (a custom code, a permanent
//! redirect, a click during the quarantine) is never read again, so each
//! pass costs the new tombstones only. A kept row stays kept for good,
//! which is the safe side (its conditions do not improve with time; a
//! renewed link that ends again gets a new `ended_at`, past the cursor).
//!
//! Lock order: candidate rows, the cursor row, the `pregen_done` row, the
//! new ids; `pregen` takes `pregen_done` before its new ids too, so the two
//! never deadlock and never write the same id.

use super::audit::{self, AuditAction, AuditRow};
use super::lifecycle::REAPER_ACTOR;
use super::row::COLUMNS;
use super::webhooks::Subscriptions;
use super::{outbox, DbError, LinkRow, RowState, Store};
use mysql_async::prelude::*;
use mysql_async::{IsolationLevel, TxOpts, Value};
use shorturl_common::time::now_unix_ms;
use std::collections::HashMap;

/// A tombstone whose quarantine is over, as the recycler reads it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its id: below `CUSTOM_ID_BASE` for a pre-generated code.
    pub id: u64,
    /// When the link ended (deleted or reaped), Unix seconds.
    pub ended_at: u64,
    /// The redirect status it was served with (`None`: unknown).
    pub redirect_status: Option<u16>,
    /// Start (Unix seconds) of the latest rollup interval (hour or day)
    /// with a click for this code; `None` when it has no click rows.
    pub last_click: Option<u64>,
    /// Until when some origin served permanent redirects
    /// (`meta.permanent_redirect_until`; `None`: never).
    pub permanent_until: Option<u64>,
    pub row: LinkRow,
}

/// What one recycle batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecycleBatch {
    /// Rows examined (the cursor moved past them).
    pub examined: usize,
    /// Codes appended to the pool again.
    pub recycled: usize,
    /// Why each kept row was kept (the domain's reason names).
    pub kept: Vec<&'static str>,
}

/// The rows a recycle batch examines: tombstones ended at or before the
/// cutoff, after the cursor (parameters: cutoff, cursor ended_at twice,
/// cursor id), a range of `idx_ended` (`FORCE INDEX`: never a scan;
/// `tests/recycle.rs` ANALYZEs it).
pub const RECYCLE_FROM: &str = "FROM short_code FORCE INDEX (idx_ended) \
     WHERE ended_at <= ? AND (ended_at > ? OR (ended_at = ? AND id > ?))";

/// The recycler's cursor as stored: `<ended_at>:<id>`.
fn parse_cursor(v: &str) -> (u64, u64) {
    v.split_once(':')
        .and_then(|(e, i)| Some((e.parse().ok()?, i.parse().ok()?)))
        .unwrap_or((0, 0))
}

/// `id, ended_at, redirect_status` and the [`LinkRow`] of a candidate.
fn parse(mut r: mysql_async::Row) -> Result<(u64, u64, Option<u16>, LinkRow), DbError> {
    let id: u64 = match r.take_opt::<u64, usize>(0) {
        Some(Ok(v)) => v,
        _ => return Err(DbError::BadColumn(0)),
    };
    let ended: u64 = match r.take_opt::<u64, usize>(1) {
        Some(Ok(v)) => v,
        _ => return Err(DbError::BadColumn(1)),
    };
    let status: Option<u16> = match r.take_opt::<Option<u16>, usize>(2) {
        Some(Ok(v)) => v,
        _ => return Err(DbError::BadColumn(2)),
    };
    Ok((id, ended, status, LinkRow::from_row_at(r, 3)?))
}

/// The columns `short_code_archive` copies from `short_code`.
const ARCHIVED: &str = "id, code, state, long_url, domain, app, client_app, client_version, kdt_id, \
                        created_at, expires_at, version, updated_at, reaped_at, ended_at, redirect_status";

/// The start of the latest click interval per code in `table` (its
/// `column`), merged into `into`: one primary-key range per code.
async fn last_clicks(
    tx: &mut mysql_async::Transaction<'_>,
    table: &str,
    column: &str,
    codes: &[&str],
    into: &mut HashMap<String, u64>,
) -> Result<(), DbError> {
    let marks = vec!["?"; codes.len()].join(",");
    let params: Vec<Value> = codes.iter().map(|c| (*c).into()).collect();
    let rows: Vec<(String, u64)> = tx
        .exec(
            format!(
                "SELECT code, MAX({column}) FROM {table} WHERE code IN ({marks}) GROUP BY code"
            ),
            params,
        )
        .await?;
    for (code, start) in rows {
        let e = into.entry(code).or_insert(start);
        *e = (*e).max(start);
    }
    Ok(())
}

impl Store {
    /// Examines at most `limit` tombstones that ended at or before `cutoff`
    /// (now minus the quarantine), in cursor order, and recycles those
    /// `decide` finds reusable (`Err(reason)` keeps one), all in one
    /// transaction. `now` is the archive time.
    pub async fn recycle_batch(
        &self,
        now: u64,
        cutoff: u64,
        limit: usize,
        decide: impl Fn(&Candidate) -> Result<(), &'static str>,
    ) -> Result<RecycleBatch, DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let mut opts = TxOpts::default();
            opts.with_isolation_level(IsolationLevel::ReadCommitted);
            let mut tx = conn.start_transaction(opts).await?;
            let cursor: Option<String> = tx
                .exec_first(
                    "SELECT value FROM meta WHERE name = 'recycle_cursor' FOR UPDATE",
                    (),
                )
                .await?;
            let (ce, ci) = parse_cursor(cursor.as_deref().unwrap_or("0:0"));
            let found: Vec<mysql_async::Row> = tx
                .exec(
                    format!(
                        "SELECT id, ended_at, redirect_status, {COLUMNS} {RECYCLE_FROM} \
                         ORDER BY ended_at, id LIMIT ? FOR UPDATE"
                    ),
                    (cutoff, ce, ce, ci, limit as u64),
                )
                .await?;
            if found.is_empty() {
                tx.rollback().await?;
                return Ok(RecycleBatch::default());
            }
            let rows: Vec<(u64, u64, Option<u16>, LinkRow)> =
                found.into_iter().map(parse).collect::<Result<_, _>>()?;
            let codes: Vec<&str> = rows.iter().map(|r| r.3.code.as_str()).collect();
            // Hourly rows are pruned after a while; the daily ones say the
            // same at a coarser grain, so both are read.
            let mut clicks: HashMap<String, u64> = HashMap::new();
            last_clicks(&mut tx, "click_hour", "hour", &codes, &mut clicks).await?;
            for table in ["click_day_device", "click_day_referrer"] {
                last_clicks(&mut tx, table, "day", &codes, &mut clicks).await?;
            }
            let permanent_until: Option<u64> = tx
                .exec_first::<String, _, _>(
                    "SELECT value FROM meta WHERE name = ?",
                    (crate::schema::PERMANENT_UNTIL,),
                )
                .await?
                .and_then(|v| v.parse().ok());
            let mut batch = RecycleBatch {
                examined: rows.len(),
                ..RecycleBatch::default()
            };
            let mut reuse: Vec<&LinkRow> = Vec::new();
            let mut reuse_ids: Vec<Value> = Vec::new();
            for (id, ended_at, redirect_status, row) in &rows {
                let c = Candidate {
                    id: *id,
                    ended_at: *ended_at,
                    redirect_status: *redirect_status,
                    last_click: clicks.get(&row.code).copied(),
                    permanent_until,
                    row: row.clone(),
                };
                match decide(&c) {
                    Ok(()) => {
                        reuse.push(row);
                        reuse_ids.push((*id).into());
                    }
                    Err(why) => batch.kept.push(why),
                }
            }
            if !reuse.is_empty() {
                append(&mut tx, now, &reuse, &reuse_ids, &self.hooks).await?;
                batch.recycled = reuse.len();
            }
            let last = rows.last().map(|r| (r.1, r.0)).unwrap_or((ce, ci));
            tx.exec_drop(
                "UPDATE meta SET value = ? WHERE name = 'recycle_cursor'",
                (format!("{}:{}", last.0, last.1),),
            )
            .await?;
            tx.commit().await?;
            Ok(batch)
        })
        .await
    }
}

/// Archives and deletes the rows `ids` (whose rows are `old`), and appends
/// their codes as free rows past the end of the pool, with their audit and
/// outbox rows, inside the caller's transaction.
async fn append(
    tx: &mut mysql_async::Transaction<'_>,
    now: u64,
    old: &[&LinkRow],
    ids: &[Value],
    hooks: &Subscriptions,
) -> Result<(), DbError> {
    let end: Option<String> = tx
        .exec_first(
            "SELECT value FROM meta WHERE name = 'pregen_done' FOR UPDATE",
            (),
        )
        .await?;
    let end: u64 = end
        .and_then(|v| v.parse().ok())
        .ok_or(DbError::Meta("pregen_done"))?;
    let marks = vec!["?"; ids.len()].join(",");
    let mut params = vec![Value::from(now)];
    params.extend(ids.iter().cloned());
    tx.exec_drop(
        format!(
            "INSERT INTO short_code_archive ({ARCHIVED}, archived_at) \
             SELECT {ARCHIVED}, ? FROM short_code WHERE id IN ({marks})"
        ),
        params,
    )
    .await?;
    tx.exec_drop(
        format!("DELETE FROM short_code WHERE id IN ({marks})"),
        ids.to_vec(),
    )
    .await?;
    // The free rows: the next ids, the same codes, a version above the old
    // link's (its records can never win over the free row's or the next
    // link's). A code already free at a later id (a custom code filed before
    // pre-generation reached its id: a stale pool row) keeps that id and
    // takes the higher version.
    let free: Vec<LinkRow> = old.iter().map(|r| freed(r)).collect();
    let mut params: Vec<Value> = Vec::with_capacity(free.len() * 3);
    for (i, r) in free.iter().enumerate() {
        params.extend([
            (end + 1 + i as u64).into(),
            r.code.as_str().into(),
            r.version.into(),
        ]);
    }
    tx.exec_drop(
        format!(
            "INSERT INTO code_pool (id, code, version) VALUES {} \
             ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))",
            vec!["(?,?,?)"; free.len()].join(",")
        ),
        params,
    )
    .await?;
    let n = free.len() as u64;
    tx.exec_drop(
        "UPDATE meta SET value = ? WHERE name = 'pregen_done'",
        ((end + n).to_string(),),
    )
    .await?;
    tx.exec_drop(
        "UPDATE meta SET value = CAST(value AS UNSIGNED) + ? WHERE name = 'recycled_total'",
        (n,),
    )
    .await?;
    let now_ms = now_unix_ms();
    let audit_rows: Vec<AuditRow<'_>> = old
        .iter()
        .zip(&free)
        .map(|(before, after)| AuditRow {
            code: &after.code,
            at_ms: now_ms,
            actor: REAPER_ACTOR,
            action: AuditAction::Recycle,
            before: Some(before),
            after,
        })
        .collect();
    audit::insert(tx, &audit_rows, hooks).await?;
    // The old link's domain: its key gets the free row's negative.
    let changes: Vec<(&str, Option<&str>, u64)> = free
        .iter()
        .zip(old)
        .map(|(r, before)| (r.code.as_str(), before.domain.as_deref(), r.version))
        .collect();
    outbox::insert_many(tx, &changes, now_ms).await?;
    Ok(())
}

/// The free row a recycled code becomes: nothing of the old link but its
/// code, one version above it.
pub fn freed(old: &LinkRow) -> LinkRow {
    LinkRow {
        code: old.code.clone(),
        state: RowState::Free,
        url: None,
        domain: None,
        app: None,
        client_app: None,
        client_version: None,
        kdt_id: None,
        created_at: None,
        updated_at: None,
        expires_at: None,
        version: old.version + 1,
        reaped_at: None,
        options: None,
        tags: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trip_and_garbage() {
        assert_eq!(parse_cursor("0:0"), (0, 0));
        assert_eq!(parse_cursor("1700000000:42"), (1_700_000_000, 42));
        assert_eq!(parse_cursor("nonsense"), (0, 0));
    }
}
