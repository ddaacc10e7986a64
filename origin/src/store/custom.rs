//! Custom codes: a caller-chosen code becomes a link.
//!
//! No `SELECT ... FOR UPDATE`: a locking read of a missing key takes a gap
//! lock, and two creations of different codes in one gap then deadlock on
//! their inserts. Instead the write is one statement whose own condition
//! decides the race (committed together with its audit row):
//! * a free code (a row of `code_pool`): `DELETE ... WHERE id = ? AND
//!   version = ?` (0 rows: the issuer or another caller got it first, so it
//!   is taken), then the link's `INSERT` at that id;
//! * no link and no free code: a new id from the `custom` counter, then
//!   `INSERT`; a duplicate on `uk_code` (code, scope) means another caller
//!   created that code first (on this domain, for a per-domain code;
//!   protocol 3.6). A pre-generation run that files the same code as free
//!   meanwhile leaves a stale pool row, which the issuer's claim drops
//!   (`store::batch`).
//!
//! Deadlocks and lock-wait timeouts that remain (against claim batches) are
//! retried a bounded number of times.

use super::audit::{self, AuditAction, AuditRow};
use super::error::{is_lock_conflict, server_code};
use super::key::{LinkKey, BY_KEY};
use super::shards::Shard;
use super::webhooks::Subscriptions;
use super::{new_row_marks, DbError, LinkData, Store, CREATED_VERSION, NEW_LINK_COLUMNS};
use mysql_async::prelude::*;
use mysql_async::{Conn, TxOpts};
use shorturl_common::time::now_unix_ms;
use std::time::Duration;

/// Attempts of a custom claim that keeps losing lock races.
const ATTEMPTS: u32 = 5;

/// Outcome of a custom-code claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomClaim {
    /// Created at this version ([`CREATED_VERSION`], or above an earlier
    /// life of a recycled code).
    Created {
        version: u64,
    },
    Taken,
}

impl Store {
    /// Creates a link with a caller-chosen code. A pre-generated code that is
    /// still free becomes this link (and so is never issued); one in any
    /// other state, or an existing custom code, is taken.
    ///
    /// Sharded, a code whose inverse-permutation id is in a configured range
    /// is claimed on that range's shard (where `uk_code` decides a race with
    /// the pre-generated row); any other code is filed in the directory
    /// first (under the shard now issuing, unless already filed) and claimed
    /// on the shard it names.
    pub async fn claim_custom(&self, code: &str, d: &LinkData) -> Result<CustomClaim, DbError> {
        let key = LinkKey::new(code, &d.domain);
        if !self.shards.sharded {
            return self.claim_custom_here(0, &key, d).await;
        }
        // A code filed before its home range had a shard stays where it is.
        let i = match self.directory(&key).await? {
            Some(j) => j,
            None => match self.shards.home_of_code(code) {
                Some(i) => i,
                None => self.directory_file(&key, d.created_at).await?,
            },
        };
        self.on(i).claim_custom_here(i, &key, d).await
    }

    /// Whether some link (of any domain) has `code`: while edges of
    /// protocol 3.4 or older may run (`redis.legacy_keys`), a per-domain
    /// code stays unique in the fleet, since those edges key by code alone.
    pub async fn code_in_use(&self, code: &str) -> Result<bool, DbError> {
        Ok(!self.domains_of_code(code, 1).await?.is_empty())
    }

    /// The claim on shard `i` (this store is that shard's).
    async fn claim_custom_here(
        &self,
        i: usize,
        key: &LinkKey,
        d: &LinkData,
    ) -> Result<CustomClaim, DbError> {
        let shard = self.shards.shards.get(i).ok_or(DbError::NoShard(i))?;
        let code = key.code();
        self.metrics.mysql_update.inc();
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let mut attempt = 1;
            loop {
                match claim_once(&mut conn, shard, key, d, &self.hooks).await {
                    Err(e) if is_lock_conflict(&e) && attempt < ATTEMPTS => {
                        self.metrics.mysql_error.inc();
                        tracing::info!(code, attempt, error = %e, "custom code lost a lock race; retrying");
                        // A short, growing, jittered pause so the racers spread out.
                        let ms = u64::from(attempt) * 5 + rand::random::<u64>() % 10;
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        attempt += 1;
                    }
                    r => return r.map_err(DbError::from),
                }
            }
        })
        .await
    }
}

async fn claim_once(
    conn: &mut Conn,
    shard: &Shard,
    key: &LinkKey,
    d: &LinkData,
    hooks: &Subscriptions,
) -> Result<CustomClaim, mysql_async::Error> {
    let code = key.code();
    let row: Option<u64> = conn
        .exec_first(
            format!("SELECT id FROM short_code WHERE {BY_KEY}"),
            key.params(),
        )
        .await?;
    if row.is_some() {
        return Ok(CustomClaim::Taken);
    }
    // A free code (fleet scope only) is taken over at its pool id.
    let free: Option<(u64, u64)> = if key.scope().is_empty() {
        conn.exec_first("SELECT id, version FROM code_pool WHERE code = ?", (code,))
            .await?
    } else {
        None
    };
    let id = match free {
        Some(free) => Err(free),
        // Outside the transaction: holding the counter row's lock until the
        // link commits would serialise every custom creation.
        None => Ok(shard.next_custom_id(conn).await?),
    };
    let mut tx = conn.start_transaction(TxOpts::default()).await?;
    let (id, version) = match id {
        // A free pre-generated (or recycled) code: the delete's own
        // condition decides the race with the issuer and other callers
        // (0 rows: taken); the version continues above the free row's (a
        // recycled code's earlier life).
        Err((id, free_version)) => {
            tx.exec_drop(
                "DELETE FROM code_pool WHERE id = ? AND version = ?",
                (id, free_version),
            )
            .await?;
            if tx.affected_rows() != 1 {
                tx.rollback().await?;
                return Ok(CustomClaim::Taken);
            }
            (id, free_version + CREATED_VERSION)
        }
        Ok(id) => (id, CREATED_VERSION),
    };
    let r = tx
        .exec_drop(
            format!(
                "INSERT INTO short_code (id, code, {NEW_LINK_COLUMNS}) VALUES {}",
                new_row_marks()
            ),
            mysql_async::Params::Positional(
                [id.into(), code.into()]
                    .into_iter()
                    .chain(d.new_link_values(version))
                    .collect(),
            ),
        )
        .await;
    let claimed = match r {
        Ok(()) => Some(version),
        // Another caller created this code first.
        Err(mysql_async::Error::Server(s)) if s.code == 1062 && s.message.contains("uk_code") => {
            None
        }
        Err(e) => {
            tracing::debug!(code, mysql = ?server_code(&e), "custom insert failed");
            return Err(e);
        }
    };
    let Some(version) = claimed else {
        tx.rollback().await?;
        return Ok(CustomClaim::Taken);
    };
    let row = d.row(code, version);
    audit::insert(
        &mut tx,
        &[AuditRow {
            code,
            at_ms: now_unix_ms(),
            actor: &d.app,
            action: AuditAction::Create,
            before: None,
            after: &row,
        }],
        hooks,
    )
    .await?;
    tx.commit().await?;
    Ok(CustomClaim::Created { version })
}
