//! `shorturl-origin migrate-keys`: moves what Redis holds under the
//! pre-3.5 record keys (`su:1:link:{code}`) to the (domain, code)
//! keys edges of protocol 3.5 read (`su:1:link:{domain}/{code}`).
//!
//! Redis is a cache, so the source is MySQL, not the old values: the
//! command walks every shard's rows bound to a domain in id order and, for
//! each code that is cached under its legacy key (or every one, with
//! `--all`), writes its current state under its new key through the same
//! compare-and-set as any resolution — so it never puts an older state
//! over a newer one, whatever runs beside it, and it works on a single
//! server, a Cluster and under Sentinel alike (one key per command). Codes
//! not cached are skipped: the command warms what was warm, not the whole
//! table. It can run any number of times, and beside serving origins.
//!
//! Upgrade order (docs/protocol.md, protocol 3.5): origins first (they
//! write both forms while `redis.legacy_keys` is on), then this command,
//! then the edges, then `redis.legacy_keys: false`.

use crate::cache::Cache;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::{CodeState, DbError, Store};
use futures::future::join_all;
use indicatif::{ProgressBar, ProgressStyle};
use redis::AsyncCommands;
use serde::Serialize;
use shorturl_common::keys;
use shorturl_common::time::now_unix;
use std::sync::Arc;

/// Rows read and keys checked per step.
const BATCH: u64 = 500;

/// Why the command could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum RekeyError {
    #[error("mysql: {0}")]
    Mysql(#[from] mysql_async::Error),
    #[error("mysql: {0}")]
    Db(#[from] DbError),
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("redis is unavailable: {failed} keys could not be written (run it again)")]
    Incomplete { failed: u64 },
}

/// What a run did (printed as JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RekeyReport {
    /// Rows bound to a domain that were read.
    pub rows: u64,
    /// Of those, the ones cached under their legacy key (all with `--all`).
    pub cached: u64,
    /// New keys written (or refreshed: the same version was there).
    pub written: u64,
    /// New keys that already held a newer version (left as they were).
    pub newer: u64,
}

/// Walks every shard; `all`: write every row's key, cached or not;
/// `progress`: a bar on stderr.
pub async fn run(cfg: &Config, all: bool, progress: bool) -> Result<RekeyReport, RekeyError> {
    let metrics = Arc::new(Metrics::new()?);
    let (pool, store) = Store::open_all(&cfg.mysql, Arc::clone(&metrics)).await?;
    let cache = Cache::new(cfg.redis.clone(), metrics).map_err(RekeyError::Redis)?;
    let mut total = 0;
    for shard in store.every_shard() {
        // Only the bar's length: a count that times out does not stop it.
        total += shard.count_bound().await.unwrap_or(0);
    }
    let bar = if progress {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "migrate-keys {bar:40} {pos}/{len} links  {per_sec}  eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut report = RekeyReport::default();
    let mut failed = 0u64;
    for shard in store.every_shard() {
        let mut after = 0;
        loop {
            let rows = shard.bound_after(after, BATCH, now_unix()).await?;
            let Some((last, _, _)) = rows.last() else {
                break;
            };
            after = *last;
            report.rows += rows.len() as u64;
            let cached = if all {
                vec![true; rows.len()]
            } else {
                legacy_cached(&cache, &rows).await?
            };
            let writes = rows
                .iter()
                .zip(cached)
                .filter(|(_, c)| *c)
                .map(|((_, code, state), _)| rewrite(&cache, code, state));
            for w in join_all(writes).await {
                report.cached += 1;
                match w {
                    Ok(crate::cache::Written::Stored) => report.written += 1,
                    Ok(crate::cache::Written::Stale) => report.newer += 1,
                    Err(_) => failed += 1,
                }
            }
            bar.inc(rows.len() as u64);
        }
    }
    bar.finish_and_clear();
    pool.disconnect().await?;
    if failed > 0 {
        return Err(RekeyError::Incomplete { failed });
    }
    Ok(report)
}

/// Which of `rows` have a value under their legacy key (one `EXISTS` per
/// key, sent together: they may live on different Cluster nodes).
async fn legacy_cached(
    cache: &Cache,
    rows: &[(u64, String, CodeState)],
) -> Result<Vec<bool>, RekeyError> {
    let checks = rows.iter().map(|(_, code, _)| {
        let mut c = cache.connection();
        let key = keys::legacy_link_key(code);
        async move { c.exists::<_, bool>(key).await }
    });
    join_all(checks)
        .await
        .into_iter()
        .map(|r| r.map_err(RekeyError::Redis))
        .collect()
}

/// Writes `state` under the code's (domain, code) key, no message: the
/// edges' view of the link does not change.
async fn rewrite(
    cache: &Cache,
    code: &str,
    state: &CodeState,
) -> Result<crate::cache::Written, crate::cache::CacheDown> {
    let domain = state.domain.as_deref().ok_or(crate::cache::CacheDown)?;
    cache
        .write_link_key(domain, code, &state.lookup, crate::cache::Publish::No)
        .await
}
