//! One batch into the rollups, in one MySQL transaction with its id.
//!
//! The id goes in first: if it is already there the batch was applied
//! (by this or another origin, before a crash or a lost acknowledgement)
//! and nothing else is written. A concurrent application of the same batch
//! waits on that row's lock and then finds it. The counts are added with
//! `ON DUPLICATE KEY UPDATE n = n + VALUES(n)`, so rows of many batches
//! and edges sum up.

use crate::db::is_duplicate;
use crate::store::DbError;
use mysql_async::prelude::*;
use mysql_async::{Pool, Transaction, TxOpts, Value};
use shorturl_common::clicks::Batch;
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

/// Applies `batch` (already decoded and validated) at `now` (Unix seconds).
pub async fn apply(pool: &Pool, batch: &Batch, now: u64) -> Result<Applied, DbError> {
    let work = async {
        let mut conn = pool.get_conn().await?;
        let mut tx = conn.start_transaction(TxOpts::default()).await?;
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
        upsert(
            &mut tx,
            "INSERT INTO click_hour (code, hour, human, bot)",
            "ON DUPLICATE KEY UPDATE human = human + VALUES(human), bot = bot + VALUES(bot)",
            &batch.hours,
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
        upsert(
            &mut tx,
            "INSERT INTO click_day_referrer (code, day, host, n)",
            "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
            &batch.referrers,
            |l| {
                [
                    l.code.as_str().into(),
                    l.day.into(),
                    l.host.as_str().into(),
                    l.n.into(),
                ]
            },
        )
        .await?;
        upsert(
            &mut tx,
            "INSERT INTO click_day_device (code, day, class, n)",
            "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
            &batch.devices,
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
        tx.commit().await?;
        Ok::<_, DbError>(Applied::Applied)
    };
    match tokio::time::timeout(APPLY_TIMEOUT, work).await {
        Ok(r) => r,
        Err(_) => Err(DbError::Timeout(APPLY_TIMEOUT)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders() {
        assert_eq!(super::values(2, 3), "(?, ?, ?), (?, ?, ?)");
    }
}
