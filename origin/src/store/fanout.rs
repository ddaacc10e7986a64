//! Statements that read or sweep every shard and add the answers up: the
//! reaper's batch and backlog, the console's counts. Unsharded there is one
//! shard and each is the plain statement.

use super::console::DayRows;
use super::retention::Pruned;
use super::{DbError, Store};
use std::collections::BTreeMap;

impl Store {
    /// Every shard's answer to `f`; a shard that fails is logged and left
    /// out, unless every shard failed (then the first error).
    pub(super) async fn each_shard<T, F, Fut>(&self, what: &str, f: F) -> Result<Vec<T>, DbError>
    where
        F: Fn(Store) -> Fut,
        Fut: std::future::Future<Output = Result<T, DbError>>,
    {
        let mut out = Vec::new();
        let mut first_err = None;
        for (i, s) in self.every_shard().into_iter().enumerate() {
            match f(s).await {
                Ok(v) => out.push(v),
                Err(e) => {
                    if let Some(sh) = self.shards.shards.get(i) {
                        tracing::warn!(shard = %sh.name, what, error = %e, "shard left out");
                    }
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }

    /// Marks at most `limit` links past their expiry at `now` `expired`
    /// (shard after shard, each batch one transaction on its shard, with its
    /// audit and outbox rows); returns how many.
    pub async fn reap_batch(&self, now: u64, limit: usize) -> Result<usize, DbError> {
        let mut done = 0;
        let mut first_err = None;
        for s in self.every_shard() {
            if done >= limit {
                break;
            }
            match s.reap_batch_here(now, limit - done).await {
                Ok(n) => done += n,
                Err(e) => {
                    tracing::warn!(error = %e, "reaping a shard failed");
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }

    /// Links past their expiry at `now` not reaped yet, over every shard.
    pub async fn reap_backlog(&self, now: u64) -> Result<u64, DbError> {
        let v = self
            .each_shard(
                "reap backlog",
                |s| async move { s.reap_backlog_here(now).await },
            )
            .await?;
        Ok(v.into_iter().sum())
    }

    /// Links created per day in `[from, to)` (day starts): `(day, n, 0)`.
    pub async fn created_per_day(&self, from: u64, to: u64) -> Result<DayRows, DbError> {
        let v = self
            .each_shard("created per day", |s| async move {
                s.created_per_day_here(from, to).await
            })
            .await?;
        let mut days: BTreeMap<u64, u64> = BTreeMap::new();
        for (d, n, _) in v.into_iter().flatten() {
            *days.entry(d).or_default() += n;
        }
        Ok(days.into_iter().map(|(d, n)| (d, n, 0)).collect())
    }

    /// Links created since `from` (Unix seconds), optionally of one app.
    pub async fn created_since(&self, from: u64, app: Option<&str>) -> Result<u64, DbError> {
        let v = self
            .each_shard("created since", |s| async move {
                s.created_since_here(from, app).await
            })
            .await?;
        Ok(v.into_iter().sum())
    }

    /// Links of merchant `kdt_id` (any state but free).
    pub async fn merchant_links(&self, kdt_id: u64) -> Result<u64, DbError> {
        let v = self
            .each_shard("merchant links", |s| async move {
                s.merchant_links_here(kdt_id).await
            })
            .await?;
        Ok(v.into_iter().sum())
    }

    /// Clicks per day in `[from, to)` (day starts): `(day, human, bot)`,
    /// over every shard's rollups.
    pub async fn clicks_per_day(&self, from: u64, to: u64) -> Result<DayRows, DbError> {
        let v = self
            .each_shard("clicks per day", |s| async move {
                s.clicks_per_day_here(from, to).await
            })
            .await?;
        let mut days: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (d, h, b) in v.into_iter().flatten() {
            let e = days.entry(d).or_default();
            e.0 += h;
            e.1 += b;
        }
        Ok(days.into_iter().map(|(d, (h, b))| (d, h, b)).collect())
    }

    /// Deletes at most `limit` rollup rows of `what` older than `before`,
    /// shard after shard; returns how many.
    pub async fn prune(&self, what: Pruned, before: u64, limit: usize) -> Result<u64, DbError> {
        let mut done = 0u64;
        for s in self.every_shard() {
            let left = limit.saturating_sub(usize::try_from(done).unwrap_or(usize::MAX));
            if left == 0 {
                break;
            }
            done += s.prune_here(what, before, left).await?;
        }
        Ok(done)
    }
}
