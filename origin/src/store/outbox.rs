//! The `outbox` table: changes whose Redis side (the record and the
//! invalidation message) is still to be applied. A row is inserted in the
//! change's own transaction and deleted once applied. Applying re-reads the
//! link's current row, so it is idempotent and order-insensitive: applying
//! an old row writes the newest state.
//!
//! These statements are background housekeeping: they are bounded by
//! `mysql.timeout_ms` but not counted in the `mysql` status dimension (the
//! drainer polls several times a second and would drown the request
//! counts); their outcome is in the `outbox` dimension instead.

use super::{lookup_of, DbError, LookupCols, Store, LOOKUP_COLUMNS};
use futures::future::BoxFuture;
use mysql_async::prelude::*;
use mysql_async::{IsolationLevel, TxOpts, Value};
use shorturl_common::code::is_fleet_code;
use shorturl_common::record::Lookup;
use shorturl_common::time::now_unix;
use std::collections::HashMap;

/// `code` and the [`LookupCols`] of its row.
type CodeLookupCols = (
    String,
    u8,
    Option<String>,
    Option<String>,
    Option<u64>,
    u64,
    Option<String>,
);

/// Which rows an apply takes.
#[derive(Debug, Clone, Copy)]
pub enum Take {
    /// The row a request just committed.
    One(u64),
    /// The oldest pending rows, at most this many.
    Oldest(usize),
}

/// What an apply pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Rows taken (locked) by this pass.
    pub taken: usize,
    /// Rows applied and deleted.
    pub applied: usize,
    /// Whether applying stopped at a row that failed (it stays pending).
    pub failed: bool,
}

/// Pending rows: how many, and when the oldest was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub pending: u64,
    pub oldest_ms: Option<u64>,
}

/// Brings Redis up to date with one link's current state; `true` when done.
pub trait Applier: Sync {
    /// Writes `state` as the record of `code` on `domain` (the row's; `None`
    /// when bound to none) and announces it; when the change was about
    /// another domain's key (`was`: a recycled code's old link), that key
    /// gets the negative of the code's version, announced too.
    fn apply<'a>(
        &'a self,
        code: &'a str,
        domain: Option<&'a str>,
        state: &'a Lookup,
        was: Option<&'a str>,
    ) -> BoxFuture<'a, bool>;
}

/// Inserts an outbox row in the caller's transaction; returns its id.
/// `domain`: the domain of the link the change is about.
pub async fn insert(
    conn: &mut mysql_async::Transaction<'_>,
    code: &str,
    domain: Option<&str>,
    version: u64,
    at_ms: u64,
) -> Result<u64, mysql_async::Error> {
    conn.exec_drop(
        "INSERT INTO outbox (code, domain, version, created_at_ms) VALUES (?, ?, ?, ?)",
        (code, domain, version, at_ms),
    )
    .await?;
    conn.last_insert_id()
        .ok_or_else(|| mysql_async::Error::Other("outbox insert returned no id".into()))
}

/// Inserts one outbox row per `(code, domain, version)` with one statement,
/// in the caller's transaction (a reap batch).
pub async fn insert_many(
    conn: &mut mysql_async::Transaction<'_>,
    rows: &[(&str, Option<&str>, u64)],
    at_ms: u64,
) -> Result<(), mysql_async::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let marks = vec!["(?,?,?,?)"; rows.len()].join(",");
    let mut params: Vec<Value> = Vec::with_capacity(rows.len() * 4);
    for (code, domain, version) in rows {
        params.extend([
            (*code).into(),
            (*domain).into(),
            (*version).into(),
            at_ms.into(),
        ]);
    }
    conn.exec_drop(
        format!("INSERT INTO outbox (code, domain, version, created_at_ms) VALUES {marks}"),
        params,
    )
    .await
}

impl Store {
    /// Runs `f` under the MySQL timeout without counting it in the `mysql`
    /// status dimension (background housekeeping).
    pub(crate) async fn quiet<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r,
            Err(_) => Err(DbError::Timeout(self.timeout)),
        }
    }

    /// How many rows are pending and the age of the oldest.
    pub async fn outbox_backlog(&self) -> Result<Backlog, DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let row: Option<(u64, Option<u64>)> = conn
                .query_first("SELECT COUNT(*), MIN(created_at_ms) FROM outbox")
                .await?;
            let (pending, oldest_ms) = row.unwrap_or((0, None));
            Ok(Backlog { pending, oldest_ms })
        })
        .await
    }

    /// Takes rows (the oldest with `FOR UPDATE SKIP LOCKED`: rows another
    /// origin or request is applying are left to it; one row by id waiting
    /// for whoever holds it, so a request never answers before its change
    /// reached Redis, by its own hand or a drainer's), reads each code's current state and
    /// hands it to `applier` in row order; rows whose code it applied
    /// are deleted in the same transaction. Stops at the first refusal (the
    /// rest stay pending for the next pass, oldest first).
    pub async fn outbox_apply(&self, take: Take, applier: &dyn Applier) -> Result<Pass, DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let mut opts = TxOpts::default();
            // Each read sees the latest committed row, not a snapshot.
            opts.with_isolation_level(IsolationLevel::ReadCommitted);
            let mut tx = conn.start_transaction(opts).await?;
            let rows: Vec<(u64, String, Option<String>)> = match take {
                // Waits if a drainer holds the row: when this returns, the
                // row was applied (and deleted) by whoever had it, or is ours.
                Take::One(id) => {
                    tx.exec("SELECT id, code, domain FROM outbox WHERE id = ? FOR UPDATE", (id,))
                        .await?
                }
                Take::Oldest(n) => {
                    tx.exec(
                        "SELECT id, code, domain FROM outbox ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
                        (n as u64,),
                    )
                    .await?
                }
            };
            let mut pass = Pass {
                taken: rows.len(),
                ..Pass::default()
            };
            if rows.is_empty() {
                tx.rollback().await?;
                return Ok(pass);
            }
            let mut codes: Vec<&str> = rows.iter().map(|(_, c, _)| c.as_str()).collect();
            codes.sort_unstable();
            codes.dedup();
            let marks = vec!["?"; codes.len()].join(",");
            let mut params: Vec<Value> = codes.iter().map(|c| (*c).into()).collect();
            params.extend(codes.iter().map(|c| (*c).into()));
            // A free code's row is in `code_pool` (a recycled code's, at a
            // version above its old link's), unless a link has its code.
            let current: Vec<CodeLookupCols> = tx
                .exec(
                    format!(
                        "SELECT code, {LOOKUP_COLUMNS} FROM short_code WHERE code IN ({marks}) \
                         UNION ALL SELECT p.code, 0, NULL, NULL, NULL, p.version, NULL FROM code_pool p \
                         WHERE p.code IN ({marks}) AND NOT EXISTS \
                         (SELECT 1 FROM short_code s WHERE s.code = p.code AND s.code_scope = '')"
                    ),
                    params,
                )
                .await?;
            let now = now_unix();
            // A code's rows: one for a fleet code, one per domain for a
            // per-domain code (protocol 3.6), told apart by the domain
            // the outbox row names.
            let mut state: HashMap<String, Vec<(Option<String>, Lookup)>> = HashMap::new();
            for (code, s, url, domain, exp, v, o) in current {
                let cols: LookupCols = (s, url, domain.clone(), exp, v, o);
                state
                    .entry(code)
                    .or_default()
                    .push((domain, lookup_of(Some(cols), now)));
            }
            let mut done: HashMap<(&str, Option<&str>), bool> = HashMap::new();
            let none = (None, Lookup::Negative(0));
            let mut delete: Vec<Value> = Vec::new();
            for (id, code, was) in &rows {
                let key = (code.as_str(), was.as_deref());
                let ok = match done.get(&key) {
                    Some(ok) => *ok,
                    None => {
                        let (domain, l) = row_of(&state, code, was.as_deref()).unwrap_or(&none);
                        let ok = applier
                            .apply(code, domain.as_deref(), l, was.as_deref())
                            .await;
                        done.insert(key, ok);
                        ok
                    }
                };
                if !ok {
                    pass.failed = true;
                    break;
                }
                delete.push((*id).into());
            }
            if !delete.is_empty() {
                let marks = vec!["?"; delete.len()].join(",");
                pass.applied = delete.len();
                tx.exec_drop(format!("DELETE FROM outbox WHERE id IN ({marks})"), delete)
                    .await?;
            }
            tx.commit().await?;
            Ok(pass)
        })
        .await
    }
}

/// The current row of `code` an outbox row (naming `was`, its domain when
/// written) is about: the code's only row for a fleet code, the row on
/// `was` for a per-domain code.
fn row_of<'a>(
    state: &'a HashMap<String, Vec<(Option<String>, Lookup)>>,
    code: &str,
    was: Option<&str>,
) -> Option<&'a (Option<String>, Lookup)> {
    let rows = state.get(code)?;
    if is_fleet_code(code) {
        return rows.first();
    }
    match was {
        Some(w) => rows.iter().find(|(d, _)| d.as_deref() == Some(w)),
        // Written before outbox rows named their domain (protocol 3.5),
        // when a code had one row.
        None => rows.first(),
    }
}
