//! MySQL connection pool, versioned migrations and installation metadata.

use crate::config::MysqlConfig;
use crate::links::CursorKey;
use crate::permutation::Permutation;
use mysql_async::prelude::*;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};

/// Versioned schema migrations, applied in order, each once. A change adds
/// the next number at the end (`migrations/NNNN_name.sql`); numbers are
/// never reused or reordered, and every statement should be safe to run
/// again (`IF NOT EXISTS`), since a crash can interrupt a migration before
/// it is recorded.
pub const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "versions_audit_outbox",
        include_str!("../migrations/0002_versions_audit_outbox.sql"),
    ),
    (
        3,
        "search_indexes",
        include_str!("../migrations/0003_search_indexes.sql"),
    ),
    (
        4,
        "lifecycle",
        include_str!("../migrations/0004_lifecycle.sql"),
    ),
    (5, "clicks", include_str!("../migrations/0005_clicks.sql")),
    (6, "recycle", include_str!("../migrations/0006_recycle.sql")),
    (
        7,
        "click_retention",
        include_str!("../migrations/0007_click_retention.sql"),
    ),
    (8, "admin", include_str!("../migrations/0008_admin.sql")),
    (
        9,
        "shard_directory",
        include_str!("../migrations/0009_shard_directory.sql"),
    ),
    (
        10,
        "referrer_retention",
        include_str!("../migrations/0010_referrer_retention.sql"),
    ),
];

/// Size of the `short_code.long_url` column (bytes; the column is ASCII):
/// `links.max_url_bytes` may not exceed it.
pub const LONG_URL_MAX_BYTES: usize = 8192;

/// First id used for custom codes that are not pre-generated codes.
pub const CUSTOM_ID_BASE: u64 = 1 << 40;

/// Opens the pool (connections are made on demand).
pub fn pool(cfg: &MysqlConfig) -> Result<Pool, mysql_async::Error> {
    pool_for(&cfg.url, cfg.pool_max)
}

/// Opens a pool of at most `pool_max` connections to `url` (a shard, a
/// replica or the meta database).
pub fn pool_for(url: &str, pool_max: usize) -> Result<Pool, mysql_async::Error> {
    let opts = Opts::from_url(url)?;
    let constraints = PoolConstraints::new(pool_max.min(8), pool_max).unwrap_or_default();
    // No reset on return to the pool: a reset costs a round trip and throws
    // away the connection's prepared statements, so every statement would be
    // prepared again. The origin never leaves session state behind.
    let builder = OptsBuilder::from_opts(opts)
        .pool_opts(
            PoolOpts::default()
                .with_constraints(constraints)
                .with_reset_connection(false)
                // With the default TTL of 0 the pool keeps only `min` idle
                // connections and closes every other one on return, so each
                // statement paid a TCP connect and handshake (~9 ms).
                .with_inactive_connection_ttl(std::time::Duration::from_secs(60)),
        )
        .stmt_cache_size(Some(256))
        .tcp_nodelay(true)
        .prefer_socket(false);
    Ok(Pool::new(builder))
}

/// Applies pending migrations under a named lock, so several origins
/// starting at once do not race. Returns the versions applied.
pub async fn migrate(pool: &Pool) -> Result<Vec<u32>, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let got: Option<i64> = conn
        .query_first("SELECT GET_LOCK('shorturl_migrate', 60)")
        .await?;
    if got != Some(1) {
        return Err(mysql_async::Error::Other(
            "could not take the migration lock".into(),
        ));
    }
    let result = async {
        conn.query_drop(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INT UNSIGNED NOT NULL PRIMARY KEY, \
             name VARCHAR(255) NOT NULL, applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB",
        )
        .await?;
        let done: Vec<u32> = conn.query("SELECT version FROM schema_migrations").await?;
        let mut applied = Vec::new();
        for (version, name, sql) in MIGRATIONS {
            if done.contains(version) {
                continue;
            }
            for stmt in split_statements(sql) {
                conn.query_drop(stmt).await?;
            }
            conn.exec_drop("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (version, name)).await?;
            applied.push(*version);
        }
        // The permutation key and the key that signs search cursors are
        // created once per installation, at random.
        let key: [u8; 32] = rand::random();
        conn.exec_drop("INSERT IGNORE INTO meta (name, value) VALUES ('perm_key', ?)", (hex::encode(key),)).await?;
        let key: [u8; 32] = rand::random();
        conn.exec_drop("INSERT IGNORE INTO meta (name, value) VALUES ('cursor_key', ?)", (hex::encode(key),)).await?;
        conn.query_drop("INSERT IGNORE INTO meta (name, value) VALUES ('pregen_done', '0')").await?;
        conn.exec_drop("INSERT IGNORE INTO counter (name, value) VALUES ('custom', ?)", (CUSTOM_ID_BASE,)).await?;
        Ok::<_, mysql_async::Error>(applied)
    }
    .await;
    let _ = conn.query_drop("DO RELEASE_LOCK('shorturl_migrate')").await;
    result
}

/// Splits a migration file into statements (`;` at end of line; `--` comments dropped).
fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        let t = line.trim();
        if t.starts_with("--") || t.is_empty() {
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if t.ends_with(';') {
            out.push(cur.trim().trim_end_matches(';').to_owned());
            cur.clear();
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_owned());
    }
    out
}

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
    let issued = crate::issuer::counter::highest_used_id(pool)
        .await?
        .min(size);
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

/// The `meta` row that says until when (Unix seconds) some origin served
/// redirects with a permanent status (301/308): a link created at or before
/// it may have been served so, whatever its own `redirect_status` says (the
/// policy is per origin and may change without the link changing).
pub const PERMANENT_UNTIL: &str = "permanent_redirect_until";

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

/// True when `e` is a duplicate-key error (1062).
pub fn is_duplicate(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if s.code == 1062)
}

#[cfg(test)]
mod tests {
    use super::{split_statements, LONG_URL_MAX_BYTES, MIGRATIONS};

    #[test]
    fn migrations_are_numbered_in_order() {
        // Strictly increasing: a number reserved by a change on another
        // branch may be missing until it is merged.
        assert_eq!(MIGRATIONS.first().map(|m| m.0), Some(1));
        for w in MIGRATIONS.windows(2) {
            assert!(w[0].0 < w[1].0, "{} then {}", w[0].0, w[1].0);
        }
    }

    #[test]
    fn long_url_limit_matches_the_column() {
        let column = format!("long_url       VARCHAR({LONG_URL_MAX_BYTES})    CHARACTER SET ascii");
        assert!(
            MIGRATIONS.iter().any(|(_, _, sql)| sql.contains(&column)),
            "the long_url column changed: update LONG_URL_MAX_BYTES"
        );
    }

    #[test]
    fn splits_migration_files() {
        let s = split_statements("-- c\nCREATE TABLE a (\n x INT\n);\n\nCREATE TABLE b (y INT);\n");
        assert_eq!(
            s,
            vec![
                "CREATE TABLE a (\n x INT\n)".to_string(),
                "CREATE TABLE b (y INT)".to_string()
            ]
        );
    }
}
