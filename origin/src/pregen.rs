//! `shorturl-origin pregen --count N`: fills the pool of free codes
//! (`code_pool`) with ids 1..=N.
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
use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Instant;

/// Result of a run.
#[derive(Debug, Clone, Copy)]
pub struct PregenReport {
    pub from: u64,
    pub to: u64,
    pub rows_per_sec: f64,
}

fn chunk_codes(perm: &Permutation, start: u64, end: u64) -> Vec<String> {
    (start..=end)
        .map(|id| perm.code_for_id(id).unwrap_or_default())
        .collect()
}

/// The insert of ids `start..` with `codes` (in id order), leaving out the
/// codes in `skip` (custom codes already filed on another shard).
fn chunk_sql(start: u64, codes: &[String], skip: &HashSet<String>) -> Option<String> {
    let mut sql = String::with_capacity(codes.len() * 22 + 64);
    // `version` is left to the column default, 0 (a code never issued).
    // Free codes have their own narrow table: a row here goes through two
    // indexes, not the ten of `short_code` (docs/perf.md, issue 30).
    sql.push_str("INSERT IGNORE INTO code_pool (id, code) VALUES ");
    let mut any = false;
    for (id, code) in (start..).zip(codes) {
        if skip.contains(code) {
            continue;
        }
        if any {
            sql.push(',');
        }
        any = true;
        // Codes are base62 and ids integers: nothing here needs escaping.
        let _ = write!(sql, "({id},'{code}')");
    }
    any.then_some(sql)
}

/// The codes of `codes` filed in the meta database's `custom_code_dir`.
async fn filed(dir: Option<&Pool>, codes: &[String]) -> Result<HashSet<String>, PregenError> {
    let Some(dir) = dir else {
        return Ok(HashSet::new());
    };
    let mut out = HashSet::new();
    let mut conn = dir.get_conn().await?;
    for part in codes.chunks(10_000) {
        let marks = vec!["?"; part.len()].join(",");
        let got: Vec<String> = conn
            .exec(
                format!("SELECT code FROM custom_code_dir WHERE code IN ({marks})"),
                part.to_vec(),
            )
            .await?;
        out.extend(got);
    }
    Ok(out)
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
    #[error(transparent)]
    Args(#[from] PregenArgsError),
}

/// Extends the table to `count` rows (pre-generated and recycled).
pub async fn run(
    pool: &Pool,
    perm: &Permutation,
    count: u64,
    chunk: u64,
    progress: bool,
) -> Result<PregenReport, PregenError> {
    run_range(pool, None, perm, 1, count, chunk, progress).await
}

/// Fills one shard's table (`pool`) with ids `first..=count`, leaving out
/// the custom codes filed in `dir`'s directory: a code created before its
/// range had a shard lives on the shard the directory names, and must not
/// appear twice.
pub async fn run_range(
    pool: &Pool,
    dir: Option<&Pool>,
    perm: &Permutation,
    first: u64,
    count: u64,
    chunk: u64,
    progress: bool,
) -> Result<PregenReport, PregenError> {
    if count > CODE_SPACE {
        return Err(PregenError::TooMany(count));
    }
    let mut conn = pool.get_conn().await?;
    // A shard's table starts at its range: its mark starts before it.
    let floor = first.saturating_sub(1);
    if floor > 0 {
        conn.exec_drop(
            "UPDATE meta SET value = ? WHERE name = 'pregen_done' AND CAST(value AS UNSIGNED) < ?",
            (floor.to_string(), floor),
        )
        .await?;
    }
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
        match extend(&mut conn, dir, perm, done, count, chunk, &bar).await? {
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
    dir: Option<&Pool>,
    perm: &Permutation,
    done: u64,
    count: u64,
    chunk: u64,
    bar: &ProgressBar,
) -> Result<Extended, PregenError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, u64, Vec<String>)>(2);
    let perm = perm.clone();
    let producer = std::thread::spawn(move || {
        let mut start = done + 1;
        while start <= count {
            let end = (start + chunk - 1).min(count);
            if tx
                .blocking_send((start, end, chunk_codes(&perm, start, end)))
                .is_err()
            {
                return;
            }
            start = end + 1;
        }
    });
    let mut result = Extended::Done;
    while let Some((start, end, codes)) = rx.recv().await {
        let skip = filed(dir, &codes).await?;
        let sql = chunk_sql(start, &codes, &skip);
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
        if let Some(sql) = sql {
            t.query_drop(sql).await?;
        }
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

/// Why `shorturl-origin pregen` refused its arguments.
#[derive(Debug, thiserror::Error)]
pub enum PregenArgsError {
    #[error("--count is required (no mysql.shards configured)")]
    CountRequired,
    #[error("--shard {0:?}: no shard of that name in mysql.shards")]
    NoSuchShard(String),
    #[error("--shard needs mysql.shards in the configuration")]
    NotSharded,
}

/// `shorturl-origin pregen`: one table up to `--count`, or with shards the
/// ranges of `--shard` (or of every shard), each to its last id or `--count`.
pub async fn cli(
    cfg: &crate::config::MysqlConfig,
    count: Option<u64>,
    shard: Option<&str>,
    chunk: u64,
    progress: bool,
) -> Result<(), PregenError> {
    let meta = crate::db::pool(cfg)?;
    crate::schema::migrate(&meta).await?;
    let perm = crate::store::meta::load_permutation(&meta).await?;
    let report = |name: &str, r: PregenReport| {
        if r.to == r.from {
            println!(
                "{name}short_code already holds ids up to {}; nothing to do",
                r.to
            );
        } else {
            println!(
                "{name}pregen: ids {}..={} written, {:.0} rows/s",
                r.from + 1,
                r.to,
                r.rows_per_sec
            );
        }
    };
    if !cfg.shards.sharded {
        if shard.is_some() {
            return Err(PregenArgsError::NotSharded.into());
        }
        let count = count.ok_or(PregenArgsError::CountRequired)?;
        report("", run(&meta, &perm, count, chunk, progress).await?);
        return Ok(());
    }
    if let Some(name) = shard {
        if !cfg.shards.shards.iter().any(|s| s.name == name) {
            return Err(PregenArgsError::NoSuchShard(name.to_owned()).into());
        }
    }
    for s in &cfg.shards.shards {
        if shard.is_some_and(|n| n != s.name) {
            continue;
        }
        let to = count.map_or(s.last_id, |c| c.min(s.last_id));
        if to < s.first_id {
            continue;
        }
        let pool = crate::db::pool_for(&s.url, 4)?;
        crate::schema::migrate(&pool).await?;
        let r = run_range(&pool, Some(&meta), &perm, s.first_id, to, chunk, progress).await?;
        report(&format!("shard {}: ", s.name), r);
        pool.disconnect().await?;
    }
    Ok(())
}
