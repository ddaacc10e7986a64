//! MySQL statements on `short_code` and its companions (`link_audit`,
//! `outbox`): the source of truth for links. Every statement a request
//! waits for is bounded by `mysql.timeout_ms` and counted in the status.
//!
//! [`batch`] is the group-commit claim, [`custom`] the custom-code claim,
//! [`modify`] the one transaction every change of a link goes through,
//! [`audit`] the audit trail, [`outbox`] the invalidation outbox,
//! [`lifecycle`] the reaper's batch, [`recycle`] the recycler's batch,
//! `lease` the one-origin-at-a-time leases, [`options`] the options column
//! and the record options derived from it, [`meta`] the installation's
//! `meta` rows (keys, capacity, marks), [`search`]
//! the search statement, [`state`]
//! the row states every statement binds, [`row`] the link as read.

pub mod audit;
mod batch;
pub mod console;
mod custom;
pub mod error;
mod fanout;
pub mod imports;
pub mod key;
mod lease;
pub mod lifecycle;
pub mod meta;
mod modify;
pub mod options;
pub mod outbox;
mod owners;
pub mod recycle;
pub mod retention;
mod screening;
pub use screening::{Entry as ScreenEntry, ScanRow, ScreenedLink};
mod row;
pub mod search;
pub mod shards;
pub mod state;
pub mod webhooks;

pub use audit::{AuditAction, AuditEntry};
pub use batch::ClaimItem;
pub use custom::CustomClaim;
pub use error::DbError;
pub use key::LinkKey;
use key::BY_KEY;
pub use modify::{is_permanent, Change, Modified};
pub use options::Settings;
pub use row::LinkRow;
pub use shards::{Shard, ShardMap};
pub use state::RowState;

use crate::metrics::Metrics;
use mysql_async::prelude::*;
use mysql_async::Pool;
use shorturl_common::record::{Lookup, Record};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What a new link carries.
#[derive(Debug, Clone)]
pub struct LinkData {
    pub url: String,
    pub domain: String,
    pub app: String,
    pub client_app: Option<String>,
    pub client_version: Option<String>,
    pub kdt_id: Option<u64>,
    pub created_at: u64,
    pub expires_at: u64,
    /// The status this link is served with (the origin's `redirect.status`):
    /// recorded so recycling never reuses a code a browser may have cached
    /// for good (301/308).
    pub redirect_status: u16,
    /// The options column (`links::options::Settings`), `None`: plain.
    pub options: Option<String>,
    /// The tags column (`links::tags::Tags`), `None`: no tags.
    pub tags: Option<String>,
}

/// The columns [`LinkData::new_link_values`] fills, in its order.
pub const NEW_LINK_COLUMNS: &str =
    "state, long_url, domain, app, client_app, client_version, kdt_id, \
     created_at, updated_at, expires_at, version, redirect_status, options, tags";

/// One row's placeholders for `(id, code, NEW_LINK_COLUMNS)`, so the
/// statements that bind [`LinkData::new_link_values`] never miscount.
pub fn new_row_marks() -> String {
    let n = 2 + NEW_LINK_COLUMNS.split(',').count();
    format!("({})", vec!["?"; n].join(","))
}

/// How many values [`LinkData::new_link_values`] binds.
pub const NEW_LINK_VALUES: usize = 14;

/// A claimed row: its code and the version the new link got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub code: String,
    pub version: u64,
}

/// Row version of a link when it is created.
pub const CREATED_VERSION: u64 = 1;

impl LinkData {
    /// The record this link is cached as, created at `version`
    /// ([`CREATED_VERSION`], or above the version of a recycled code's
    /// earlier life).
    pub fn record(&self, version: u64) -> Record {
        Record {
            version,
            expires_at: self.expires_at,
            domain: self.domain.clone(),
            url: self.url.clone(),
            options: Settings::from_column(self.options.as_deref())
                .live_options()
                .map(Arc::new),
        }
    }

    /// Column values of a newly created link at `version`, in the order of
    /// [`NEW_LINK_COLUMNS`]: the single list every creation statement binds
    /// (group commit, custom-code insert and takeover), so the three never
    /// drift apart.
    pub fn new_link_values(&self, version: u64) -> [mysql_async::Value; NEW_LINK_VALUES] {
        [
            RowState::Active.into(),
            self.url.as_str().into(),
            self.domain.as_str().into(),
            self.app.as_str().into(),
            self.client_app.as_deref().into(),
            self.client_version.as_deref().into(),
            self.kdt_id.into(),
            self.created_at.into(),
            self.created_at.into(),
            self.expires_at.into(),
            version.into(),
            self.redirect_status.into(),
            self.options.as_deref().into(),
            self.tags.as_deref().into(),
        ]
    }

    /// The row this link becomes once `code` is claimed for it at `version`.
    pub fn row(&self, code: &str, version: u64) -> LinkRow {
        LinkRow {
            code: code.to_owned(),
            state: RowState::Active,
            url: Some(self.url.clone()),
            domain: Some(self.domain.clone()),
            app: Some(self.app.clone()),
            client_app: self.client_app.clone(),
            client_version: self.client_version.clone(),
            kdt_id: self.kdt_id,
            created_at: Some(self.created_at),
            updated_at: Some(self.created_at),
            expires_at: Some(self.expires_at),
            version,
            reaped_at: None,
            options: self.options.clone(),
            tags: self.tags.clone(),
        }
    }
}

/// Link statements with timeouts and status counters.
///
/// `pool` is where this store's statements go: the meta database (which is
/// the one shard when unsharded), or one shard in a view made by
/// [`Store::on`]. Link reads and changes route themselves by code
/// ([`shards`]); global tables (leases, sessions, the directory) use `meta`.
#[derive(Clone)]
pub struct Store {
    pub pool: Pool,
    /// The meta database (`mysql.url`).
    pub meta: Pool,
    pub shards: Arc<ShardMap>,
    timeout: Duration,
    metrics: Arc<Metrics>,
    /// Which apps' changes write webhook events (shared by every view).
    hooks: Arc<webhooks::Subscriptions>,
}

/// `state, long_url, domain, expires_at, version, options`.
type LookupCols = (
    u8,
    Option<String>,
    Option<String>,
    Option<u64>,
    u64,
    Option<String>,
);

/// The columns of [`LookupCols`], in order.
pub(crate) const LOOKUP_COLUMNS: &str = "state, long_url, domain, expires_at, version, options";

/// A key's [`LookupCols`]: its link's row, else, for a free code (in
/// `code_pool`, fleet scope only), a free row at the pool's version. A
/// recycled code's pool version is above its old link's, and a negative
/// carries it (protocol 3.5), so the answer is the same as when free
/// codes were rows of `short_code`. One round trip; the link wins if a
/// stale pool row shares its code (`state` 0 sorts last).
static LOOKUP_WITH_POOL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {LOOKUP_COLUMNS} FROM short_code WHERE {BY_KEY} \
         UNION ALL SELECT 0, NULL, NULL, NULL, version, NULL FROM code_pool WHERE code = ? AND ? = '' \
         ORDER BY 1 DESC LIMIT 1"
    )
});

/// What a row in `LookupCols` form resolves to at `now`: its record while
/// active and unexpired; a disabled or expired link with an expiry
/// fallback is a record of its fallback alone (protocol 3.1.1); anything
/// else is a negative.
fn lookup_of(row: Option<LookupCols>, now: u64) -> Lookup {
    match row {
        Some((state, Some(url), Some(domain), Some(expires_at), version, options)) => {
            let settings = Settings::from_column(options.as_deref());
            let live = state == RowState::Active.code() && expires_at > now;
            let ended = state == RowState::Disabled.code()
                || state == RowState::Expired.code()
                || state == RowState::Active.code();
            let options = match (live, ended) {
                (true, _) => settings.live_options(),
                (false, true) => match settings.gone_options() {
                    Some(o) => Some(o),
                    None => return Lookup::Negative(version),
                },
                (false, false) => return Lookup::Negative(version),
            };
            Lookup::Found(Record {
                version,
                expires_at,
                domain,
                url,
                options: options.map(Arc::new),
            })
        }
        Some((_, _, _, _, version, _)) => Lookup::Negative(version),
        None => Lookup::Negative(0),
    }
}

/// A code's row as resolution sees it: what it resolves to and the domain
/// it is bound to (`None`: a code never issued, or back in the pool).
#[derive(Debug, Clone, PartialEq)]
pub struct CodeState {
    pub lookup: Lookup,
    pub domain: Option<String>,
}

impl CodeState {
    fn of(row: Option<LookupCols>, now: u64) -> CodeState {
        let domain = row.as_ref().and_then(|r| r.2.clone());
        CodeState {
            lookup: lookup_of(row, now),
            domain,
        }
    }

    /// The answer for the code on `domain` (protocol 3.5): the row's on its
    /// own domain, and on every domain for a row bound to none (a negative
    /// at the code's version: a recycled code's old key holds just that);
    /// no link (`- 0`) on a domain other than the row's.
    pub fn answer_for(&self, domain: &str) -> Lookup {
        match self.domain.as_deref() {
            Some(d) if d != domain => Lookup::Negative(0),
            _ => self.lookup.clone(),
        }
    }
}

impl Store {
    /// A one-shot command's store (`reap`, `migrate-keys`): the pool of
    /// `mysql.url` and every shard of `mysql.shards`, all migrated.
    pub async fn open_all(
        cfg: &crate::config::MysqlConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(Pool, Store), mysql_async::Error> {
        let pool = crate::db::pool(cfg)?;
        crate::schema::migrate(&pool).await?;
        let perm = meta::load_permutation(&pool).await?;
        let shards = ShardMap::open(cfg, &pool, perm, None)?;
        shards.migrate().await;
        let store = Store::sharded(pool.clone(), Arc::new(shards), cfg.timeout, metrics);
        // A command's changes (the reaper's) write the events apps want.
        if let Err(e) = store.refresh_subscriptions().await {
            tracing::warn!(error = %e, "webhook endpoints not read");
        }
        Ok((pool, store))
    }

    /// Wraps the pool (unsharded: it holds every link).
    pub fn new(pool: Pool, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        let shards = Arc::new(ShardMap::single(pool.clone()));
        Store::sharded(pool, shards, timeout, metrics)
    }

    /// Over the meta database `meta` and the shards of `shards`.
    pub fn sharded(
        meta: Pool,
        shards: Arc<ShardMap>,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Store {
            pool: meta.clone(),
            meta,
            shards,
            timeout,
            metrics,
            hooks: Arc::default(),
        }
    }

    /// The bound on one operation (`mysql.timeout_ms`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `f` under the MySQL timeout, counting and logging failures
    /// (the log is the only place MySQL's own text goes).
    pub async fn bounded<T>(
        &self,
        f: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        let r = match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r,
            Err(_) => Err(DbError::Timeout(self.timeout)),
        };
        if let Err(e) = &r {
            self.metrics.mysql_error.inc();
            tracing::warn!(error = %e, "mysql operation failed");
        }
        r
    }

    /// Reads a link by key, on the shard that holds it.
    pub async fn find(&self, key: &LinkKey) -> Result<Option<LinkRow>, DbError> {
        if let Some(i) = self.shards.home_of_code(key.code()) {
            let row = self.on(i).find_here(key).await?;
            if row.as_ref().is_some_and(|r| r.state != RowState::Free) || !self.shards.sharded {
                return Ok(row);
            }
        }
        match self.directory(key).await? {
            Some(i) => self.on(i).find_here(key).await,
            None => Ok(None),
        }
    }

    /// Reads a link by key on this store's own database.
    async fn find_here(&self, key: &LinkKey) -> Result<Option<LinkRow>, DbError> {
        self.metrics.mysql_select.inc();
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let row: Option<mysql_async::Row> = conn
                .exec_first(
                    format!("SELECT {} FROM short_code WHERE {BY_KEY}", row::COLUMNS),
                    key.params(),
                )
                .await?;
            row.map(LinkRow::from_row).transpose()
        })
        .await
    }

    /// The domains of the links (not free rows) with this code, at most
    /// `limit`, across shards: how a request that names a per-domain code
    /// without its domain finds which link it means.
    pub async fn domains_of_code(&self, code: &str, limit: usize) -> Result<Vec<LinkRow>, DbError> {
        let mut out = Vec::new();
        for shard in self.every_shard() {
            shard.metrics.mysql_select.inc();
            let rows: Vec<mysql_async::Row> = shard
                .bounded(async {
                    let mut conn = shard.pool.get_conn().await?;
                    Ok(conn
                        .exec(
                            format!(
                                "SELECT {} FROM short_code WHERE code = ? AND state <> ? LIMIT {limit}",
                                row::COLUMNS
                            ),
                            (code, RowState::Free),
                        )
                        .await?)
                })
                .await?;
            for r in rows {
                out.push(LinkRow::from_row(r)?);
            }
        }
        Ok(out)
    }

    /// What MySQL says `key` resolves to (negative unless active and
    /// unexpired), with the row's version (0 for a code with no row) and
    /// domain. Sharded: the home shard first (its replica if it has one),
    /// then the directory (see [`shards`]).
    pub async fn lookup(&self, key: &LinkKey, now: u64) -> Result<CodeState, DbError> {
        if !self.shards.sharded {
            return Ok(CodeState::of(self.lookup_here(key, None).await?, now));
        }
        if let Some(i) = self.shards.home_of_code(key.code()) {
            let row = self.on(i).lookup_on_shard(i, key).await?;
            if row.as_ref().is_some_and(|r| r.0 != RowState::Free.code()) {
                return Ok(CodeState::of(row, now));
            }
        }
        match self.directory(key).await? {
            Some(i) => Ok(CodeState::of(self.on(i).lookup_here(key, None).await?, now)),
            None => Ok(CodeState {
                lookup: Lookup::Negative(0),
                domain: None,
            }),
        }
    }

    /// [`Store::lookup_here`] on shard `i`, through its replica when it has
    /// one; a replica's miss on an id that may have been issued is asked
    /// again on the primary (the replica may not have the row of a link
    /// created a moment ago yet); a replica that fails is skipped.
    async fn lookup_on_shard(
        &self,
        i: usize,
        key: &LinkKey,
    ) -> Result<Option<LookupCols>, DbError> {
        if let Some(replica) = self.shards.shards.get(i).and_then(|s| s.replica.clone()) {
            match self.lookup_here(key, Some(&replica)).await {
                Ok(Some(row)) if row.0 != RowState::Free.code() => return Ok(Some(row)),
                // Free or absent there: the replica's answer stands for an id
                // never issued; an issued one may not have reached it yet.
                Ok(row) => {
                    let id = self.shards.id_of_code(key.code()).unwrap_or(u64::MAX);
                    if !self.shards.maybe_issued(id, &self.meta).await {
                        return Ok(row);
                    }
                }
                Err(_) => {}
            }
        }
        self.lookup_here(key, None).await
    }

    /// `key`'s [`LookupCols`] on `replica`, or on this store's database.
    async fn lookup_here(
        &self,
        key: &LinkKey,
        replica: Option<&Pool>,
    ) -> Result<Option<LookupCols>, DbError> {
        self.metrics.mysql_select.inc();
        let pool = replica.unwrap_or(&self.pool);
        let row: Option<LookupCols> = self
            .bounded(async {
                let mut conn = pool.get_conn().await?;
                Ok(conn
                    .exec_first(LOOKUP_WITH_POOL.as_str(), key.pool_params())
                    .await?)
            })
            .await?;
        Ok(row)
    }

    /// Up to `limit` rows bound to a domain with ids above `after`, in id
    /// order, as resolution sees them at `now` (`migrate-keys`).
    pub async fn bound_after(
        &self,
        after: u64,
        limit: u64,
        now: u64,
    ) -> Result<Vec<(u64, String, CodeState)>, DbError> {
        type Cols = (
            u64,
            String,
            u8,
            Option<String>,
            Option<String>,
            Option<u64>,
            u64,
            Option<String>,
        );
        let rows: Vec<Cols> = self
            .bounded(async {
                let mut conn = self.pool.get_conn().await?;
                Ok(conn
                    .exec(
                        format!(
                            "SELECT id, code, {LOOKUP_COLUMNS} FROM short_code \
                             WHERE id > ? AND domain IS NOT NULL ORDER BY id LIMIT ?"
                        ),
                        (after, limit),
                    )
                    .await?)
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, code, st, url, domain, exp, v, o)| {
                (
                    id,
                    code,
                    CodeState::of(Some((st, url, domain, exp, v, o)), now),
                )
            })
            .collect())
    }

    /// How many rows are bound to a domain (the length of `migrate-keys`'
    /// progress bar).
    pub async fn count_bound(&self) -> Result<u64, DbError> {
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let n: Option<u64> = conn
                .query_first("SELECT COUNT(*) FROM short_code WHERE domain IS NOT NULL")
                .await?;
            Ok(n.unwrap_or(0))
        })
        .await
    }

    /// Cheap liveness probe.
    pub async fn ping(&self) -> Result<(), DbError> {
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            Ok(conn.query_drop("SELECT 1").await?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_link_columns_and_values_agree() {
        assert_eq!(NEW_LINK_COLUMNS.split(',').count(), NEW_LINK_VALUES);
        assert_eq!(new_row_marks().matches('?').count(), NEW_LINK_VALUES + 2);
    }
}
