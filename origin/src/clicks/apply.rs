//! One batch into the rollups, in one MySQL transaction with its id.
//!
//! The id goes in first: if it is already there the batch was applied
//! (by this or another origin, before a crash or a lost acknowledgement)
//! and nothing else is written. A concurrent application of the same batch
//! waits on that row's lock and then finds it. The counts are added with
//! `ON DUPLICATE KEY UPDATE n = n + VALUES(n)`, so rows of many batches
//! and edges sum up.
//!
//! Referrer lines are merged with the link-day's stored rows first, so
//! that it keeps at most N named hosts and `~other` ([`super::referrers`])
//! however many origins apply batches at once. Each link-day is locked by
//! upserting its `~other` row (`n + 0`; removed again at the end if it
//! stays 0): every applier does that first, so one at a time holds a
//! link-day, and what it then reads (READ COMMITTED: the latest committed
//! rows, no gap locks) nobody else changes before it commits. Every row
//! is locked in one global order — the batch id, hour rows, link-day
//! locks, device rows, each sorted by key — so appliers wait for each
//! other instead of deadlocking; a lock race that remains (deadlock, lock
//! wait timeout) rolls the transaction back and the batch is applied
//! again, a bounded number of times.

use super::referrers::fold;
use crate::db::is_duplicate;
use crate::store::error::is_lock_conflict;
use crate::store::DbError;
use mysql_async::prelude::*;
use mysql_async::{IsolationLevel, Pool, Transaction, TxOpts, Value};
use shorturl_common::clicks::{Batch, ReferrerLine, OTHER_REFERRER};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What applying a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The counts were added.
    Applied,
    /// The batch id was already recorded: nothing was added.
    Duplicate,
}

/// Rows per multi-row `INSERT` (bounds the statement and its placeholders).
const ROWS_PER_INSERT: usize = 500;

/// Link-days per locking read of stored referrer rows.
const LINK_DAYS_PER_READ: usize = 500;

/// Attempts at a batch that keeps losing lock races to other appliers.
const ATTEMPTS: u32 = 5;

/// Bound on one batch's transaction (a batch may hold 100,000 lines, far
/// more than one API statement, hence not `mysql.timeout_ms`).
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(60);

fn values(rows: usize, cols: usize) -> String {
    let one = format!("({})", vec!["?"; cols].join(", "));
    vec![one; rows].join(", ")
}

/// Adds `rows` to one rollup: a multi-row `head VALUES (...) tail` per
/// [`ROWS_PER_INSERT`] rows, each row's four values from `values_of`.
async fn upsert<T>(
    tx: &mut Transaction<'_>,
    head: &str,
    tail: &str,
    rows: &[T],
    values_of: impl Fn(&T) -> [Value; 4],
) -> Result<(), mysql_async::Error> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!("{head} VALUES {} {tail}", values(chunk.len(), 4));
        let p: Vec<Value> = chunk.iter().flat_map(&values_of).collect();
        tx.exec_drop(sql, p).await?;
    }
    Ok(())
}

/// A referrer row's key and count: `(code, day, host, n)`.
type ReferrerRow = (String, u64, String, u64);

/// The referrer writes of one batch after folding.
#[derive(Default)]
struct ReferrerWrites {
    add: Vec<ReferrerRow>,
    /// `(code, day, hosts)` whose rows go (folded into `~other`).
    delete: Vec<(String, u64, Vec<String>)>,
    /// Link-days whose `~other` row only the lock created (it stays 0).
    unlock: Vec<(String, u64)>,
}

/// `(code = ? AND day = ?) OR ...` over `keys`, and its parameters.
fn link_days(keys: &[(&str, u64)]) -> (String, Vec<Value>) {
    let cond = vec!["(code = ? AND day = ?)"; keys.len()].join(" OR ");
    let p = keys
        .iter()
        .flat_map(|(code, day)| [(*code).into(), (*day).into()])
        .collect();
    (cond, p)
}

/// Locks every link-day of `lines` (its `~other` row), reads its stored
/// rows and folds the lines into them (at most `top` named hosts each).
async fn fold_referrers(
    tx: &mut Transaction<'_>,
    lines: &[ReferrerLine],
    top: usize,
) -> Result<ReferrerWrites, mysql_async::Error> {
    // Sorted: every applier locks link-days in the same order.
    let mut incoming: BTreeMap<(&str, u64), Vec<(String, u64)>> = BTreeMap::new();
    for l in lines {
        incoming
            .entry((l.code.as_str(), l.day))
            .or_default()
            .push((l.host.clone(), l.n));
    }
    let keys: Vec<(&str, u64)> = incoming.keys().copied().collect();
    upsert(
        tx,
        "INSERT INTO click_day_referrer (code, day, host, n)",
        "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
        &keys,
        |(code, day)| {
            [
                (*code).into(),
                (*day).into(),
                OTHER_REFERRER.into(),
                0u64.into(),
            ]
        },
    )
    .await?;
    let mut stored: HashMap<(String, u64), Vec<(String, u64)>> = HashMap::new();
    for chunk in keys.chunks(LINK_DAYS_PER_READ) {
        let (cond, p) = link_days(chunk);
        let rows: Vec<ReferrerRow> = tx
            .exec(
                format!("SELECT code, day, host, n FROM click_day_referrer WHERE {cond}"),
                p,
            )
            .await?;
        for (code, day, host, n) in rows {
            stored.entry((code, day)).or_default().push((host, n));
        }
    }
    let mut out = ReferrerWrites::default();
    for ((code, day), lines) in incoming {
        let here = stored
            .get(&(code.to_owned(), day))
            .map_or(&[][..], Vec::as_slice);
        let f = fold(here, &lines, top);
        let other_stored: u64 = here
            .iter()
            .filter(|(h, _)| h == OTHER_REFERRER)
            .map(|(_, n)| n)
            .sum();
        if other_stored == 0 && !f.add.iter().any(|(h, _)| h == OTHER_REFERRER) {
            out.unlock.push((code.to_owned(), day));
        }
        out.add.extend(
            f.add
                .into_iter()
                .map(|(host, n)| (code.to_owned(), day, host, n)),
        );
        if !f.delete.is_empty() {
            out.delete.push((code.to_owned(), day, f.delete));
        }
    }
    Ok(out)
}

/// Applies `batch` (already decoded and validated) at `now` (Unix seconds),
/// keeping at most `referrers_per_day` named referrer hosts per link-day;
/// with `digest` (a period in seconds, while some app wants `link.clicked`)
/// also adds each link's counts to its webhook click digest of the period.
pub async fn apply(
    pool: &Pool,
    batch: &Batch,
    now: u64,
    referrers_per_day: usize,
    digest: Option<u64>,
) -> Result<Applied, DbError> {
    let work = async {
        let mut attempt = 1;
        loop {
            match apply_once(pool, batch, now, referrers_per_day, digest).await {
                Err(e) if is_lock_conflict(&e) && attempt < ATTEMPTS => {
                    tracing::debug!(batch = %batch.id, attempt, error = %e, "click batch lost a lock race; applying it again");
                    tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt))).await;
                    attempt += 1;
                }
                r => return r.map_err(DbError::from),
            }
        }
    };
    match tokio::time::timeout(APPLY_TIMEOUT, work).await {
        Ok(r) => r,
        Err(_) => Err(DbError::Timeout(APPLY_TIMEOUT)),
    }
}

/// One attempt at [`apply`], in one transaction (rolled back when it fails).
async fn apply_once(
    pool: &Pool,
    batch: &Batch,
    now: u64,
    referrers_per_day: usize,
    digest: Option<u64>,
) -> Result<Applied, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let mut opts = TxOpts::default();
    // Each read sees the latest committed rows (a link-day is read after
    // its lock is held), and searches take no gap locks.
    opts.with_isolation_level(IsolationLevel::ReadCommitted);
    let mut tx = conn.start_transaction(opts).await?;
    let first = tx
        .exec_drop(
            "INSERT INTO click_batches (id, applied_at) VALUES (?, ?)",
            (batch.id.as_str(), now),
        )
        .await;
    match first {
        Err(e) if is_duplicate(&e) => {
            tx.rollback().await?;
            return Ok(Applied::Duplicate);
        }
        r => r?,
    }
    let mut hours: Vec<_> = batch.hours.iter().collect();
    hours.sort_by(|a, b| (&a.code, a.hour).cmp(&(&b.code, b.hour)));
    upsert(
        &mut tx,
        "INSERT INTO click_hour (code, hour, human, bot)",
        "ON DUPLICATE KEY UPDATE human = human + VALUES(human), bot = bot + VALUES(bot)",
        &hours,
        |l| {
            [
                l.code.as_str().into(),
                l.hour.into(),
                l.human.into(),
                l.bot.into(),
            ]
        },
    )
    .await?;
    let refs = fold_referrers(&mut tx, &batch.referrers, referrers_per_day).await?;
    upsert(
        &mut tx,
        "INSERT INTO click_day_referrer (code, day, host, n)",
        "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
        &refs.add,
        |(code, day, host, n)| {
            [
                code.as_str().into(),
                (*day).into(),
                host.as_str().into(),
                (*n).into(),
            ]
        },
    )
    .await?;
    for (code, day, hosts) in &refs.delete {
        let marks = vec!["?"; hosts.len()].join(", ");
        let mut p: Vec<Value> = vec![code.as_str().into(), (*day).into()];
        p.extend(hosts.iter().map(|h| Value::from(h.as_str())));
        tx.exec_drop(
            format!(
                "DELETE FROM click_day_referrer WHERE code = ? AND day = ? AND host IN ({marks})"
            ),
            p,
        )
        .await?;
    }
    for chunk in refs.unlock.chunks(LINK_DAYS_PER_READ) {
        let keys: Vec<(&str, u64)> = chunk.iter().map(|(c, d)| (c.as_str(), *d)).collect();
        let (cond, mut p) = link_days(&keys);
        p.push(OTHER_REFERRER.into());
        tx.exec_drop(
            format!("DELETE FROM click_day_referrer WHERE ({cond}) AND host = ? AND n = 0"),
            p,
        )
        .await?;
    }
    let mut devices: Vec<_> = batch.devices.iter().collect();
    devices.sort_by(|a, b| {
        (&a.code, a.day, a.device.as_str()).cmp(&(&b.code, b.day, b.device.as_str()))
    });
    upsert(
        &mut tx,
        "INSERT INTO click_day_device (code, day, class, n)",
        "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
        &devices,
        |l| {
            [
                l.code.as_str().into(),
                l.day.into(),
                l.device.as_str().into(),
                l.n.into(),
            ]
        },
    )
    .await?;
    let mut dests: Vec<(&str, u64, String, u64)> = batch
        .destinations
        .iter()
        .map(|l| (l.code.as_str(), l.day, l.destination.label(), l.n))
        .collect();
    dests.sort();
    if let Some(period) = digest.filter(|p| *p > 0) {
        // Per link (sorted: the global lock order), this batch's clicks.
        let mut per: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for l in &batch.hours {
            let e = per.entry(l.code.as_str()).or_default();
            e.0 += l.human;
            e.1 += l.bot;
        }
        let lines: Vec<(&str, u64, u64)> = per.into_iter().map(|(c, (h, b))| (c, h, b)).collect();
        upsert(
            &mut tx,
            "INSERT INTO webhook_click_digest (link, period, human, bot)",
            "ON DUPLICATE KEY UPDATE human = human + VALUES(human), bot = bot + VALUES(bot)",
            &lines,
            |(code, human, bot)| {
                [
                    (*code).into(),
                    (now / period).into(),
                    (*human).into(),
                    (*bot).into(),
                ]
            },
        )
        .await?;
    }
    upsert(
        &mut tx,
        "INSERT INTO click_day_destination (code, day, dest, n)",
        "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
        &dests,
        |(code, day, dest, n)| {
            [
                (*code).into(),
                (*day).into(),
                dest.as_str().into(),
                (*n).into(),
            ]
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Applied::Applied)
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders() {
        assert_eq!(super::values(2, 3), "(?, ?, ?), (?, ?, ?)");
    }
}
