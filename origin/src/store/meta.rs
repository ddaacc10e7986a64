//! The installation's state in the `meta` table, and the pool reads that
//! go with it: the permutation and cursor-signing keys (created by
//! [`crate::schema::migrate`]), the pre-generated capacity, how far the
//! pool was issued, and the permanent-redirect mark. Here, beside the other
//! statements, rather than in `db`, so the pool module needs no type from
//! above it.

use crate::cursor::CursorKey;
use crate::permutation::Permutation;
use crate::schema::{CUSTOM_ID_BASE, PERMANENT_UNTIL};
use mysql_async::prelude::*;
use mysql_async::Pool;

/// Reads the installation's permutation key (created by `migrate`).
pub async fn load_permutation(pool: &Pool) -> Result<Permutation, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let key: Option<String> = conn
        .query_first("SELECT value FROM meta WHERE name = 'perm_key'")
        .await?;
    key.as_deref()
        .and_then(Permutation::from_hex)
        .ok_or_else(|| {
            mysql_async::Error::Other(
                "meta.perm_key missing or invalid: run `shorturl-origin migrate`".into(),
            )
        })
}

/// Reads the installation's cursor-signing key (created by `migrate`).
pub async fn load_cursor_key(pool: &Pool) -> Result<CursorKey, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let key: Option<String> = conn
        .query_first("SELECT value FROM meta WHERE name = 'cursor_key'")
        .await?;
    key.as_deref().and_then(CursorKey::from_hex).ok_or_else(|| {
        mysql_async::Error::Other(
            "meta.cursor_key missing or invalid: run `shorturl-origin migrate`".into(),
        )
    })
}

/// Number of pre-generated codes (ids 1..=n are in the table).
pub async fn capacity(pool: &Pool) -> Result<u64, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let v: Option<String> = conn
        .query_first("SELECT value FROM meta WHERE name = 'pregen_done'")
        .await?;
    Ok(v.and_then(|s| s.parse().ok()).unwrap_or(0))
}

/// The pool as MySQL says: rows in it, ids up to the highest issued, codes
/// recycled into it so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub size: u64,
    pub issued: u64,
    pub recycled: u64,
}

/// Reads [`PoolStats`] (a few index dives and two `meta` rows).
pub async fn pool_stats(pool: &Pool) -> Result<PoolStats, mysql_async::Error> {
    let size = capacity(pool).await?;
    let issued = highest_used_id(pool).await?.min(size);
    let mut conn = pool.get_conn().await?;
    let recycled: Option<String> = conn
        .query_first("SELECT value FROM meta WHERE name = 'recycled_total'")
        .await?;
    Ok(PoolStats {
        size,
        issued,
        recycled: recycled.and_then(|s| s.parse().ok()).unwrap_or(0),
    })
}

/// Highest pre-generated id of a link (free codes are not in
/// `short_code`): the floor for a lost Redis counter, and how far the pool
/// was issued. One dive into the primary key, never a scan.
pub async fn highest_used_id(pool: &Pool) -> Result<u64, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let v: Option<Option<u64>> = conn
        .exec_first(
            "SELECT MAX(id) FROM short_code WHERE id < ?",
            (CUSTOM_ID_BASE,),
        )
        .await?;
    Ok(v.flatten().unwrap_or(0))
}

/// Moves [`PERMANENT_UNTIL`] forward to `until` (never back).
pub async fn mark_permanent_until(pool: &Pool, until: u64) -> Result<(), mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    conn.exec_drop(
        "INSERT INTO meta (name, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE \
         value = GREATEST(CAST(value AS UNSIGNED), CAST(VALUES(value) AS UNSIGNED))",
        (PERMANENT_UNTIL, until.to_string()),
    )
    .await
}
