//! Destination screening's statements (protocol 4.7): the managed entries
//! (meta database), the mark of the policy the last pass applied, and the
//! pass's and the console's reads of links.

use super::{DbError, Store};
use crate::screening::Action;
use mysql_async::prelude::*;

/// One managed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub domain: String,
    pub action: Action,
    pub note: Option<String>,
    pub created_by: String,
    pub updated_at: u64,
}

/// A link as the pass reads it.
#[derive(Debug, Clone)]
pub struct ScanRow {
    pub id: u64,
    pub code: String,
    pub domain: String,
    pub url: String,
    pub options: Option<String>,
}

/// A link whose record carries `w`, for the console.
#[derive(Debug, Clone)]
pub struct ScreenedLink {
    pub code: String,
    pub domain: String,
    pub url: String,
    pub screen: String,
    pub app: String,
}

/// `meta.name` of the fingerprint of the policy the last finished pass
/// applied.
const APPLIED: &str = "screening_applied";

type EntryCols = (String, String, Option<String>, String, u64);
/// `id, code, domain, long_url, options`.
type ScanCols = (u64, String, Option<String>, Option<String>, Option<String>);
/// `code, domain, long_url, screen, app`.
type ScreenedCols = (
    String,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
);

impl Store {
    /// Every managed entry, by domain.
    pub async fn screen_entries(&self) -> Result<Vec<Entry>, DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<EntryCols> = conn
                .query(
                    "SELECT domain, action, note, created_by, updated_at FROM screen_domain \
                     ORDER BY domain",
                )
                .await?;
            Ok(rows
                .into_iter()
                .filter_map(|(domain, action, note, created_by, updated_at)| {
                    Some(Entry {
                        action: Action::parse(&action)?,
                        domain,
                        note,
                        created_by,
                        updated_at,
                    })
                })
                .collect())
        })
        .await
    }

    /// Sets the entry of `e.domain`; `true` when it is new.
    pub async fn screen_put(&self, e: &Entry) -> Result<bool, DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "INSERT INTO screen_domain (domain, action, note, created_by, updated_at) \
                 VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE action = VALUES(action), \
                 note = VALUES(note), created_by = VALUES(created_by), \
                 updated_at = VALUES(updated_at)",
                (
                    &e.domain,
                    e.action.as_str(),
                    &e.note,
                    &e.created_by,
                    e.updated_at,
                ),
            )
            .await?;
            // 1: inserted; 2: updated; 0: the same values.
            Ok(conn.affected_rows() == 1)
        })
        .await
    }

    /// Removes the entry of `domain`; `true` when there was one.
    pub async fn screen_delete(&self, domain: &str) -> Result<bool, DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop("DELETE FROM screen_domain WHERE domain = ?", (domain,))
                .await?;
            Ok(conn.affected_rows() > 0)
        })
        .await
    }

    /// The fingerprint of the policy the last finished pass applied.
    pub async fn screen_applied(&self) -> Result<Option<String>, DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            Ok(conn
                .exec_first("SELECT value FROM meta WHERE name = ?", (APPLIED,))
                .await?)
        })
        .await
    }

    /// Records that a pass applied the policy of `fingerprint`.
    pub async fn set_screen_applied(&self, fingerprint: &str) -> Result<(), DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "INSERT INTO meta (name, value) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE value = VALUES(value)",
                (APPLIED, fingerprint),
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Up to `limit` active links of this shard after id `after`, in id
    /// order (`idx_state_id`).
    pub async fn screen_scan(&self, after: u64, limit: u32) -> Result<Vec<ScanRow>, DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            let rows: Vec<ScanCols> = conn
                .exec(
                    "SELECT id, code, domain, long_url, options FROM short_code \
                     WHERE state = ? AND id > ? ORDER BY id LIMIT ?",
                    (super::state::RowState::Active.code(), after, limit),
                )
                .await?;
            Ok(rows
                .into_iter()
                .map(|(id, code, domain, url, options)| ScanRow {
                    id,
                    code,
                    domain: domain.unwrap_or_default(),
                    url: url.unwrap_or_default(),
                    options,
                })
                .collect())
        })
        .await
    }

    /// The active links whose record carries `w`, up to `limit` from every
    /// shard (`idx_screen`), blocked first.
    pub async fn screened_links(&self, limit: u32) -> Result<Vec<ScreenedLink>, DbError> {
        let per_shard = self
            .each_shard("screened links", |s| async move {
                s.quiet(async {
                    let mut conn = s.pool.get_conn().await?;
                    let rows: Vec<ScreenedCols> = conn
                        .exec(
                            "SELECT code, domain, long_url, screen, app FROM short_code \
                             WHERE screen IS NOT NULL AND state = ? \
                             ORDER BY screen, id DESC LIMIT ?",
                            (super::state::RowState::Active.code(), limit),
                        )
                        .await?;
                    Ok(rows)
                })
                .await
            })
            .await?;
        let mut out: Vec<ScreenedLink> = per_shard
            .into_iter()
            .flatten()
            .map(|(code, domain, url, screen, app)| ScreenedLink {
                code,
                domain: domain.unwrap_or_default(),
                url: url.unwrap_or_default(),
                screen,
                app: app.unwrap_or_default(),
            })
            .collect();
        out.sort_by(|a, b| a.screen.cmp(&b.screen));
        out.truncate(limit as usize);
        Ok(out)
    }
}
