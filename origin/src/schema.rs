//! The schema the origin's MySQL holds: the versioned migrations, the
//! constants tied to its columns and rows, and `migrate`, which applies
//! them. It depends on nothing else of the crate, so configuration checks
//! and statements alike can name its limits without a loop.

use mysql_async::prelude::*;
use mysql_async::Pool;

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
    (
        11,
        "link_options",
        include_str!("../migrations/0011_link_options.sql"),
    ),
    (
        12,
        "click_destinations",
        include_str!("../migrations/0012_click_destinations.sql"),
    ),
    (
        13,
        "outbox_domain",
        include_str!("../migrations/0013_outbox_domain.sql"),
    ),
    (
        14,
        "per_domain_codes",
        include_str!("../migrations/0014_per_domain_codes.sql"),
    ),
    (
        15,
        "screening",
        include_str!("../migrations/0015_screening.sql"),
    ),
    (16, "tags", include_str!("../migrations/0016_tags.sql")),
    (
        17,
        "import_jobs",
        include_str!("../migrations/0017_import_jobs.sql"),
    ),
    (
        18,
        "webhooks",
        include_str!("../migrations/0018_webhooks.sql"),
    ),
    (19, "sso", include_str!("../migrations/0019_sso.sql")),
    (
        20,
        "click_dimensions",
        include_str!("../migrations/0020_click_dimensions.sql"),
    ),
    (
        21,
        "click_uniques",
        include_str!("../migrations/0021_click_uniques.sql"),
    ),
    (
        22,
        "code_pool",
        include_str!("../migrations/0022_code_pool.sql"),
    ),
];

/// Size of the `short_code.long_url` column (bytes; the column is ASCII):
/// `links.max_url_bytes` may not exceed it.
pub const LONG_URL_MAX_BYTES: usize = 8192;

/// First id used for custom codes that are not pre-generated codes.
pub const CUSTOM_ID_BASE: u64 = 1 << 40;

/// The `meta` row that says until when (Unix seconds) some origin served
/// redirects with a permanent status (301/308): a link created at or before
/// it may have been served so, whatever its own `redirect_status` says (the
/// policy is per origin and may change without the link changing).
pub const PERMANENT_UNTIL: &str = "permanent_redirect_until";

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
