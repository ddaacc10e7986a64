//! Routing of link statements to the shard that holds a link (issue 16).
//!
//! A pre-generated code maps to its id through the inverse of the keyed
//! permutation, and the id to the shard whose range holds it: one query
//! there, no directory. A code whose row is not on that shard (a custom code
//! whose id is in no configured range, or that was created before its
//! range's shard existed) is looked up in `custom_code_dir` in the meta
//! database: one primary-key read, then one query on the shard it names.
//! Unsharded (no `mysql.shards`), everything is one shard over `mysql.url`
//! and no statement is added.

use super::{DbError, LinkKey, Store};
use crate::config::MysqlConfig;
use crate::permutation::Permutation;
use mysql_async::prelude::*;
use mysql_async::Pool;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Where shard `i`'s custom-code ids start: 2^40 + i * 2^34 (each shard
/// has 2^34 of them; shards are only ever appended, so `i` is stable).
pub fn custom_base(i: usize) -> u64 {
    crate::schema::CUSTOM_ID_BASE + ((i as u64) << 34)
}

/// One id range and the database holding it.
pub struct Shard {
    pub name: String,
    pub first_id: u64,
    pub last_id: u64,
    pub pool: Pool,
    /// Read replica for resolution, if configured (the first one listed).
    pub replica: Option<Pool>,
    /// Custom-code ids taken from this shard's `custom` counter and not
    /// used yet (`next..=last`; empty when `next > last`).
    custom_ids: std::sync::Mutex<(u64, u64)>,
}

/// Custom-code ids one counter update takes: each update of the one
/// counter row waits for the previous one's commit (its row lock), so one
/// id per update made the counter's fsync the bound of every custom
/// creation (2,600/s in `scripts/bench-import.sh` on the 2-core machine).
/// Ids of a block an origin does not use before it stops are skipped for
/// good (ids only need to be unique; 2^64 - 2^40 of them).
pub const CUSTOM_ID_BLOCK: u64 = 64;

/// The shards, in id order.
pub struct ShardMap {
    pub shards: Vec<Shard>,
    /// Whether `mysql.shards` was configured (directory and routing on).
    pub sharded: bool,
    /// Whether creations move to the next live range when one is down.
    pub skip_dead: bool,
    perm: Option<Permutation>,
    /// The shard the last claim batch wrote to: where custom codes with no
    /// home range go.
    issuing: AtomicUsize,
    /// The issuer's MySQL counter row (in meta), when it is the backend:
    /// ids above its value were never issued.
    counter: Option<String>,
    /// The counter's value as last read: every id up to it may be issued.
    high_water: AtomicU64,
}

impl Shard {
    /// A new id for a custom code on this shard (through `conn`, one of
    /// its connections): from the block in memory, else a new block of
    /// [`CUSTOM_ID_BLOCK`] from the `custom` counter (autocommit: holding
    /// the counter row's lock until a link commits would serialise every
    /// custom creation).
    pub async fn next_custom_id(
        &self,
        conn: &mut mysql_async::Conn,
    ) -> Result<u64, mysql_async::Error> {
        if let Some(id) = self.take_custom_id() {
            return Ok(id);
        }
        conn.query_drop(format!(
            "UPDATE counter SET value = LAST_INSERT_ID(value + {CUSTOM_ID_BLOCK}) WHERE name = 'custom'"
        ))
        .await?;
        let last = match conn.last_insert_id() {
            Some(v) if conn.affected_rows() == 1 => v,
            _ => {
                return Err(mysql_async::Error::Other(
                    "counter row 'custom' is missing: run `shorturl-origin migrate`".into(),
                ))
            }
        };
        let first = (last + 1 - CUSTOM_ID_BLOCK).max(crate::schema::CUSTOM_ID_BASE);
        let mut ids = self.custom_ids.lock().unwrap_or_else(|p| p.into_inner());
        // Another creation may have refilled it meanwhile: then the rest
        // of this block is skipped (never handed out twice).
        if ids.0 > ids.1 {
            *ids = (first + 1, last);
        }
        Ok(first)
    }

    fn take_custom_id(&self) -> Option<u64> {
        let mut ids = self.custom_ids.lock().unwrap_or_else(|p| p.into_inner());
        (ids.0 <= ids.1).then(|| {
            ids.0 += 1;
            ids.0 - 1
        })
    }
}

impl ShardMap {
    /// The unsharded layout: `pool` holds every id.
    pub fn single(pool: Pool) -> Self {
        ShardMap {
            shards: vec![Shard {
                name: "main".into(),
                first_id: 1,
                last_id: u64::MAX,
                pool,
                replica: None,
                custom_ids: std::sync::Mutex::new((1, 0)),
            }],
            sharded: false,
            skip_dead: false,
            perm: None,
            issuing: AtomicUsize::new(0),
            counter: None,
            high_water: AtomicU64::new(0),
        }
    }

    /// Opens a pool per shard (and replica). Unsharded, `meta` is the one
    /// shard's pool.
    /// `counter` is the issuer's MySQL counter row, if MySQL is its backend.
    pub fn open(
        cfg: &MysqlConfig,
        meta: &Pool,
        perm: Permutation,
        counter: Option<String>,
    ) -> Result<Self, mysql_async::Error> {
        if !cfg.shards.sharded {
            return Ok(ShardMap::single(meta.clone()));
        }
        let mut shards = Vec::with_capacity(cfg.shards.shards.len());
        for s in &cfg.shards.shards {
            let replica = match s.replicas.first() {
                Some(u) => Some(crate::db::pool_for(u, cfg.pool_max)?),
                None => None,
            };
            shards.push(Shard {
                name: s.name.clone(),
                first_id: s.first_id,
                last_id: s.last_id,
                pool: crate::db::pool_for(&s.url, cfg.pool_max)?,
                replica,
                custom_ids: std::sync::Mutex::new((1, 0)),
            });
        }
        Ok(ShardMap {
            shards,
            sharded: true,
            skip_dead: cfg.shards.skip_dead_shards,
            perm: Some(perm),
            issuing: AtomicUsize::new(0),
            counter,
            high_water: AtomicU64::new(0),
        })
    }

    /// The shard whose range holds `id`.
    pub fn index_of_id(&self, id: u64) -> Option<usize> {
        self.shards
            .iter()
            .position(|s| s.first_id <= id && id <= s.last_id)
    }

    /// The shard named `name`.
    pub fn index_of_name(&self, name: &str) -> Option<usize> {
        self.shards.iter().position(|s| s.name == name)
    }

    /// Whether `id` may have been issued: at most the issuer counter's
    /// value (re-read from meta when `id` is above the value last seen).
    /// Unknown (a Redis counter, or meta not answering): `true`.
    pub async fn maybe_issued(&self, id: u64, meta: &Pool) -> bool {
        if id <= self.high_water.load(Ordering::Relaxed) {
            return true;
        }
        let Some(name) = &self.counter else {
            return true;
        };
        let read = async {
            let mut conn = meta.get_conn().await?;
            conn.exec_first::<u64, _, _>("SELECT value FROM counter WHERE name = ?", (name,))
                .await
        };
        match read.await {
            Ok(v) => {
                let v = v.unwrap_or(0);
                self.high_water.fetch_max(v, Ordering::Relaxed);
                id <= v
            }
            Err(_) => true,
        }
    }

    /// The id `code` stands for under the keyed permutation, if any.
    pub fn id_of_code(&self, code: &str) -> Option<u64> {
        self.perm.as_ref()?.id_for_code(code)
    }

    /// The shard whose range holds `code`'s inverse-permutation id (its
    /// home): where a pre-generated code's row is.
    pub fn home_of_code(&self, code: &str) -> Option<usize> {
        if !self.sharded {
            return Some(0);
        }
        let id = self.perm.as_ref()?.id_for_code(code)?;
        self.index_of_id(id)
    }

    /// Starts [`ShardMap::issuing`] at the shard of the highest id issued
    /// so far (custom codes created before the first claim go there).
    pub async fn find_issuing(&self) {
        if !self.sharded {
            return;
        }
        if let Ok(high) = self.highest_used_id().await {
            if let Some(i) = self.index_of_id(high) {
                self.note_issuing(i);
            }
        }
    }

    /// Records that ids of shard `i` are being issued.
    pub fn note_issuing(&self, i: usize) {
        self.issuing.store(i, Ordering::Relaxed);
    }

    /// Where a custom code with no home range is created.
    pub fn issuing(&self) -> usize {
        self.issuing
            .load(Ordering::Relaxed)
            .min(self.shards.len() - 1)
    }

    /// The last id of every range but the last: the issuer never hands out
    /// a block across one.
    pub fn boundaries(&self) -> Vec<u64> {
        if !self.sharded {
            return Vec::new();
        }
        let n = self.shards.len();
        self.shards[..n - 1].iter().map(|s| s.last_id).collect()
    }
}

impl Store {
    /// This store with its statements sent to shard `i`.
    pub fn on(&self, i: usize) -> Store {
        let mut s = self.clone();
        if let Some(sh) = self.shards.shards.get(i) {
            s.pool = sh.pool.clone();
        }
        s
    }

    /// Each shard's store, in id order (for statements that fan out).
    pub fn every_shard(&self) -> Vec<Store> {
        (0..self.shards.shards.len()).map(|i| self.on(i)).collect()
    }

    /// The shard that `custom_code_dir` names for `code` (meta database).
    pub async fn directory(&self, key: &LinkKey) -> Result<Option<usize>, DbError> {
        if !self.shards.sharded {
            return Ok(None);
        }
        // Filed under its link name; a per-domain code filed before
        // protocol 3.6 is under its bare code (then unique in the fleet),
        // and the shard it names holds every domain's row of that code.
        let (name, bare) = (key.name(), key.code().to_owned());
        let filed: Option<String> = self
            .bounded(async {
                let mut conn = self.meta.get_conn().await?;
                Ok(conn
                    .exec_first(
                        "SELECT shard FROM custom_code_dir WHERE code IN (?, ?) \
                         ORDER BY code = ? DESC LIMIT 1",
                        (&name, &bare, &name),
                    )
                    .await?)
            })
            .await?;
        Ok(filed.and_then(|n| self.shards.index_of_name(&n)))
    }

    /// Files `code` in the directory under the issuing shard unless it is
    /// there already; returns the shard it is filed under.
    pub(super) async fn directory_file(&self, key: &LinkKey, now: u64) -> Result<usize, DbError> {
        let code = key.name();
        let want = self.shards.issuing();
        let name = self.shards.shards[want].name.clone();
        let got: Option<String> = self
            .bounded(async {
                let mut conn = self.meta.get_conn().await?;
                conn.exec_drop(
                    "INSERT IGNORE INTO custom_code_dir (code, shard, created_at) VALUES (?, ?, ?)",
                    (&code, &name, now),
                )
                .await?;
                Ok(conn
                    .exec_first("SELECT shard FROM custom_code_dir WHERE code = ?", (&code,))
                    .await?)
            })
            .await?;
        Ok(got
            .and_then(|n| self.shards.index_of_name(&n))
            .unwrap_or(want))
    }

    /// The shard holding `key`'s row, if any: its home shard when the row
    /// is there, else the one the directory names.
    pub async fn shard_of_key(&self, key: &LinkKey) -> Result<Option<usize>, DbError> {
        if !self.shards.sharded {
            return Ok(Some(0));
        }
        let code = key.code();
        if let Some(i) = self.shards.home_of_code(code) {
            let here = self.on(i);
            let found: Option<u8> = here
                .bounded(async {
                    let mut conn = here.pool.get_conn().await?;
                    Ok(conn
                        .exec_first(
                            "SELECT state FROM short_code WHERE code = ? AND state <> ?",
                            (code, super::RowState::Free),
                        )
                        .await?)
                })
                .await?;
            if found.is_some() {
                return Ok(Some(i));
            }
        }
        self.directory(key).await
    }
}

impl ShardMap {
    /// How far ids are pre-generated with no gap from id 1: through every
    /// full range, then the mark of the first range not full. A shard that
    /// does not answer counts as full (its claims fail, or are skipped,
    /// on their own), so one shard down does not stop issuing on the others.
    pub async fn capacity(&self) -> Result<u64, mysql_async::Error> {
        if !self.sharded {
            return super::meta::capacity(&self.shards[0].pool).await;
        }
        let mut cap = 0;
        for s in &self.shards {
            let mark = match super::meta::capacity(&s.pool).await {
                Ok(m) => m.clamp(s.first_id - 1, s.last_id),
                Err(e) => {
                    tracing::warn!(shard = %s.name, error = %e, "shard unreachable; counted as full");
                    s.last_id
                }
            };
            cap = mark;
            if mark < s.last_id {
                break;
            }
        }
        Ok(cap)
    }
}

impl ShardMap {
    /// The highest issued pre-generated id over every shard that answers.
    pub async fn highest_used_id(&self) -> Result<u64, mysql_async::Error> {
        let mut high = 0;
        for (k, s) in self.shards.iter().enumerate() {
            match super::meta::highest_used_id(&s.pool).await {
                Ok(v) => high = high.max(v),
                // Unsharded the one database must answer.
                Err(e) if k == 0 && !self.sharded => return Err(e),
                Err(e) => tracing::warn!(shard = %s.name, error = %e, "shard unreachable"),
            }
        }
        Ok(high)
    }

    /// Applies pending migrations on every shard (the meta database is
    /// migrated by the caller). A shard that does not answer is logged and
    /// left for the next start: the others serve meanwhile.
    pub async fn migrate(&self) {
        if !self.sharded {
            return;
        }
        for (i, s) in self.shards.iter().enumerate() {
            let r = async {
                crate::schema::migrate(&s.pool).await?;
                // Custom codes' ids come from each shard's own counter: each
                // shard numbers from its own base, so ids stay unique across
                // shards (search merges pages by `(created_at, id)`).
                let mut conn = s.pool.get_conn().await?;
                conn.exec_drop(
                    "UPDATE counter SET value = GREATEST(value, ?) WHERE name = 'custom'",
                    (custom_base(i),),
                )
                .await
            };
            if let Err(e) = r.await {
                tracing::error!(shard = %s.name, error = %e, "could not migrate a shard");
            }
        }
    }

    /// The pool figures for the status: the meta's for one shard, else
    /// capacity over the ranges and the highest id issued on any shard.
    pub async fn pool_stats(
        &self,
        meta: &Pool,
    ) -> Result<super::meta::PoolStats, mysql_async::Error> {
        let mut p = super::meta::pool_stats(meta).await?;
        if self.sharded {
            p.size = self.capacity().await?;
            p.issued = self.highest_used_id().await?.min(p.size);
        }
        Ok(p)
    }
}
