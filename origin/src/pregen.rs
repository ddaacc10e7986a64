//! `shorturl-origin pregen --count N`: fills `short_code` with ids 1..=N.
//!
//! Row `id` gets the code `P(id)` (see [`crate::permutation`]), so codes are
//! unique by construction. Work goes in chunks of multi-row
//! `INSERT IGNORE`s, each committed together with the `pregen_done` mark in
//! `meta`: an interrupted run loses at most its open chunk and a re-run
//! continues from the mark; extending to a larger N is the same operation.
//! Code computation runs on a separate thread, one chunk ahead of MySQL.
//!
//! Recycling (issue 11) appends recycled codes at the end of the table too,
//! moving the same mark under the same row lock: a chunk locks the mark
//! first, and when it moved, the run continues after it. The ids between
//! are recycled codes (P(id) of those ids is never used, which costs
//! nothing in a space of 62^6), so no id or code is ever written twice.

use crate::permutation::Permutation;
use indicatif::{ProgressBar, ProgressStyle};
use mysql_async::prelude::*;
use mysql_async::{Pool, TxOpts};
use shorturl_common::code::CODE_SPACE;
use std::fmt::Write as _;
use std::time::Instant;

/// Result of a run.
#[derive(Debug, Clone, Copy)]
pub struct PregenReport {
    pub from: u64,
    pub to: u64,
    pub rows_per_sec: f64,
}

fn chunk_sql(perm: &Permutation, start: u64, end: u64) -> String {
    let mut sql = String::with_capacity(((end - start + 1) * 22 + 64) as usize);
    // `state` is left to the column default, `RowState::Free` (checked by a test).
    sql.push_str("INSERT IGNORE INTO short_code (id, code) VALUES ");
    for id in start..=end {
        if id != start {
            sql.push(',');
        }
        // Codes are base62 and ids integers: nothing here needs escaping.
        let code = perm.code_for_id(id).unwrap_or_default();
        let _ = write!(sql, "({id},'{code}')");
    }
    sql
}

/// Why pre-generation stopped.
#[derive(Debug, thiserror::Error)]
pub enum PregenError {
    #[error("--count {0} exceeds the code space (62^6 = {CODE_SPACE})")]
    TooMany(u64),
    #[error("meta.pregen_done missing: run `shorturl-origin migrate` first")]
    NotMigrated,
    #[error("another pregen run is extending the table concurrently; stopped")]
    Concurrent,
    #[error("mysql: {0}")]
    Mysql(#[from] mysql_async::Error),
}

/// Extends the table to `count` rows (pre-generated and recycled).
pub async fn run(
    pool: &Pool,
    perm: &Permutation,
    count: u64,
    chunk: u64,
    progress: bool,
) -> Result<PregenReport, PregenError> {
    if count > CODE_SPACE {
        return Err(PregenError::TooMany(count));
    }
    let mut conn = pool.get_conn().await?;
    let from = read_mark(&mut conn).await?;
    if from >= count {
        return Ok(PregenReport {
            from,
            to: from,
            rows_per_sec: 0.0,
        });
    }
    let bar = if progress {
        ProgressBar::new(count - from)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} rows  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let mut done = from;
    // Recycling appends rows at the end too (under the same `meta` row
    // lock): when the mark moved under a run, it continues from there.
    while done < count {
        match extend(&mut conn, perm, done, count, chunk, &bar).await? {
            Extended::Done => done = count,
            Extended::Moved => {
                done = read_mark(&mut conn).await?;
                bar.set_position(done.saturating_sub(from).min(count - from));
            }
        }
    }
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    Ok(PregenReport {
        from,
        to: count,
        rows_per_sec: (count - from) as f64 / secs,
    })
}

async fn read_mark(conn: &mut mysql_async::Conn) -> Result<u64, PregenError> {
    conn.query_first::<String, _>("SELECT value FROM meta WHERE name = 'pregen_done'")
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or(PregenError::NotMigrated)
}

/// How [`extend`] ended.
enum Extended {
    /// Every chunk up to the count committed.
    Done,
    /// The mark was not where this run left it (rows appended by recycling):
    /// nothing of the chunk was written.
    Moved,
}

/// Commits chunks `done + 1 ..= count`, each with the mark.
async fn extend(
    conn: &mut mysql_async::Conn,
    perm: &Permutation,
    done: u64,
    count: u64,
    chunk: u64,
    bar: &ProgressBar,
) -> Result<Extended, PregenError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, u64, String)>(2);
    let perm = perm.clone();
    let producer = std::thread::spawn(move || {
        let mut start = done + 1;
        while start <= count {
            let end = (start + chunk - 1).min(count);
            if tx
                .blocking_send((start, end, chunk_sql(&perm, start, end)))
                .is_err()
            {
                return;
            }
            start = end + 1;
        }
    });
    let mut result = Extended::Done;
    while let Some((start, end, sql)) = rx.recv().await {
        let mut t = conn.start_transaction(TxOpts::default()).await?;
        // The mark first, locked: the rows after it are this chunk's alone
        // (recycling takes the same lock before appending).
        let mark: Option<String> = t
            .query_first("SELECT value FROM meta WHERE name = 'pregen_done' FOR UPDATE")
            .await?;
        if mark.as_deref() != Some((start - 1).to_string().as_str()) {
            t.rollback().await?;
            result = Extended::Moved;
            break;
        }
        t.query_drop(sql).await?;
        t.exec_drop(
            "UPDATE meta SET value = ? WHERE name = 'pregen_done' AND value = ?",
            (end.to_string(), (start - 1).to_string()),
        )
        .await?;
        if t.affected_rows() != 1 {
            return Err(PregenError::Concurrent);
        }
        t.commit().await?;
        bar.inc(end - start + 1);
    }
    drop(rx);
    let _ = producer.join();
    Ok(result)
}
