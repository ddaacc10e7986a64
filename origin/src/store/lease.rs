//! Named leases (`leases` table): work that one origin at a time does (the
//! reaper). Time is MySQL's clock (`NOW(3)`), so origins whose clocks
//! disagree still agree on when a lease ran out.

use super::{DbError, Store};
use mysql_async::prelude::*;
use std::time::Duration;

/// MySQL's clock in Unix milliseconds, as SQL.
const NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)";

impl Store {
    /// Takes the lease `name` for `holder` (if it is free, ran out, or is
    /// already `holder`'s) until `ttl` from now; returns who holds it
    /// afterwards (`holder` when taken or renewed).
    pub async fn lease_acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<String, DbError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::from(u32::MAX));
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            conn.exec_drop(
                "INSERT IGNORE INTO leases (name, holder, expires_at_ms) VALUES (?, '', 0)",
                (name,),
            )
            .await?;
            // One statement: the condition and the takeover are atomic on the row.
            conn.exec_drop(
                format!(
                    "UPDATE leases SET holder = ?, expires_at_ms = {NOW_MS} + ? \
                     WHERE name = ? AND (holder = ? OR expires_at_ms < {NOW_MS})"
                ),
                (holder, ttl_ms, name, holder),
            )
            .await?;
            let now: Option<String> = conn
                .exec_first("SELECT holder FROM leases WHERE name = ?", (name,))
                .await?;
            Ok(now.unwrap_or_default())
        })
        .await
    }

    /// Gives the lease up if `holder` has it, so another origin takes over
    /// at its next heartbeat instead of after the lease runs out.
    pub async fn lease_release(&self, name: &str, holder: &str) -> Result<(), DbError> {
        self.quiet(async {
            let mut conn = self.pool.get_conn().await?;
            conn.exec_drop(
                "UPDATE leases SET expires_at_ms = 0 WHERE name = ? AND holder = ?",
                (name, holder),
            )
            .await?;
            Ok(())
        })
        .await
    }
}
