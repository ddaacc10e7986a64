//! The admin console's statements: its sessions, and the aggregates its
//! pages show (creations and clicks per day, per merchant, per app). Every
//! aggregate reads a bounded range of an index (`EXPLAIN` checked by
//! `origin/tests/admin_indexes.rs`), never the whole table.

use super::{DbError, LinkKey, Store};
use mysql_async::prelude::*;

/// A session row as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub user: String,
    pub csrf: String,
    pub created_at: u64,
    pub last_seen_at: u64,
    /// What the OpenID provider granted, for its users (None for a
    /// configured user).
    pub sso: Option<SsoGrant>,
}

/// A provider user's role and merchant binding, as the session keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsoGrant {
    /// The role's configuration spelling.
    pub role: String,
    /// Merchant ids, comma-separated (empty: every tenant).
    pub merchants: String,
}

/// Per day (day start, Unix seconds): `(day, a, b)`.
pub type DayRows = Vec<(u64, u64, u64)>;

impl Store {
    /// Stores a new session (only the id's SHA-256).
    pub async fn session_insert(
        &self,
        id_sha256: &[u8; 32],
        user: &str,
        sso: Option<&SsoGrant>,
        csrf: &str,
        now: u64,
    ) -> Result<(), DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            c.exec_drop(
                "INSERT INTO admin_session (id_sha256, user_name, sso_role, sso_merchants, csrf, \
                 created_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    id_sha256.to_vec(),
                    user,
                    sso.map(|g| g.role.as_str()),
                    sso.map(|g| g.merchants.as_str()),
                    csrf,
                    now,
                    now,
                ),
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// The session with this id hash, if any.
    pub async fn session_find(&self, id_sha256: &[u8; 32]) -> Result<Option<SessionRow>, DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            type Row = (String, String, u64, u64, Option<String>, Option<String>);
            let row: Option<Row> = c
                .exec_first(
                    "SELECT user_name, csrf, created_at, last_seen_at, sso_role, sso_merchants \
                     FROM admin_session WHERE id_sha256 = ?",
                    (id_sha256.to_vec(),),
                )
                .await?;
            Ok(row.map(
                |(user, csrf, created_at, last_seen_at, role, merchants)| SessionRow {
                    user,
                    csrf,
                    created_at,
                    last_seen_at,
                    sso: role.map(|role| SsoGrant {
                        role,
                        merchants: merchants.unwrap_or_default(),
                    }),
                },
            ))
        })
        .await
    }

    /// Records a use of the session at `now`.
    pub async fn session_touch(&self, id_sha256: &[u8; 32], now: u64) -> Result<(), DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            c.exec_drop(
                "UPDATE admin_session SET last_seen_at = ? WHERE id_sha256 = ?",
                (now, id_sha256.to_vec()),
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Ends a session (sign-out, timeout) and purges sessions idle since
    /// before `idle_before`.
    pub async fn session_delete(
        &self,
        id_sha256: &[u8; 32],
        idle_before: u64,
    ) -> Result<(), DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            c.exec_drop(
                "DELETE FROM admin_session WHERE id_sha256 = ? OR last_seen_at < ?",
                (id_sha256.to_vec(), idle_before),
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Links created per day in `[from, to)` (day starts): `(day, n, 0)`.
    pub(super) async fn created_per_day_here(
        &self,
        from: u64,
        to: u64,
    ) -> Result<DayRows, DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            Ok(c.exec(
                "SELECT created_at - MOD(created_at, 86400) AS d, COUNT(*), 0 FROM short_code \
                 WHERE created_at >= ? AND created_at < ? GROUP BY d ORDER BY d",
                (from, to),
            )
            .await?)
        })
        .await
    }

    /// Clicks per day in `[from, to)` (day starts): `(day, human, bot)`.
    pub(super) async fn clicks_per_day_here(&self, from: u64, to: u64) -> Result<DayRows, DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            Ok(c.exec(
                "SELECT day, CAST(COALESCE(SUM(IF(class = 'bot', 0, n)), 0) AS UNSIGNED), \
                 CAST(COALESCE(SUM(IF(class = 'bot', n, 0)), 0) AS UNSIGNED) \
                 FROM click_day_device WHERE day >= ? AND day < ? GROUP BY day ORDER BY day",
                (from, to),
            )
            .await?)
        })
        .await
    }

    /// Links created since `from` (Unix seconds), optionally of one app.
    pub(super) async fn created_since_here(
        &self,
        from: u64,
        app: Option<&str>,
    ) -> Result<u64, DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            let n: Option<u64> = match app {
                Some(a) => {
                    c.exec_first(
                        "SELECT COUNT(*) FROM short_code WHERE app = ? AND created_at >= ?",
                        (a, from),
                    )
                    .await?
                }
                None => {
                    c.exec_first(
                        "SELECT COUNT(*) FROM short_code WHERE created_at >= ?",
                        (from,),
                    )
                    .await?
                }
            };
            Ok(n.unwrap_or(0))
        })
        .await
    }

    /// Links of merchant `kdt_id` (any state but free).
    pub(super) async fn merchant_links_here(&self, kdt_id: u64) -> Result<u64, DbError> {
        self.bounded(async {
            let mut c = self.pool.get_conn().await?;
            let n: Option<u64> = c
                .exec_first(
                    "SELECT COUNT(*) FROM short_code WHERE kdt_id = ?",
                    (kdt_id,),
                )
                .await?;
            Ok(n.unwrap_or(0))
        })
        .await
    }

    /// Outbox rows of `key`'s link still waiting to reach Redis and the
    /// edges, and the oldest one's creation (ms).
    pub async fn outbox_pending(
        &self,
        key: &LinkKey,
        domain: &str,
    ) -> Result<(u64, Option<u64>), DbError> {
        let here = match self.shard_of_key(key).await? {
            Some(i) => self.on(i),
            None => return Ok((0, None)),
        };
        here.bounded(async {
            let mut c = here.pool.get_conn().await?;
            let r: Option<(u64, Option<u64>)> = c
                .exec_first(
                    "SELECT COUNT(*), MIN(created_at_ms) FROM outbox WHERE code = ? AND domain = ?",
                    (key.code(), domain),
                )
                .await?;
            Ok(r.unwrap_or((0, None)))
        })
        .await
    }
}
