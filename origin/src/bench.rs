//! `shorturl-origin bench`: measurements that anchor `docs/perf.md`.
//! Not tests: nothing here asserts a speed.
//!
//! - `issuer`: ids/s handed out by the issuer over the configured
//!   backend's counter (`issuer.backend`; the counter is named `bench`).
//! - `raw-claims`: the raw capacity of the same MariaDB for durable
//!   single-row claims (per claim one transaction in one round trip that
//!   inserts the link row from the free code's `code_pool` row and deletes
//!   that row: what one creation must write, with one log flush;
//!   `concurrency` connections), the figure group commit must beat.
//! - `rollups`: click-rollup rows/s through the consumer's own `apply`
//!   (one transaction per batch with its id), `concurrency` origins'
//!   worth of batches of [`ROLLUP_LINKS`] links each (the capacity plan's
//!   input, docs/scaling.md).

use crate::config::Config;
use crate::issuer::counter;
use crate::issuer::Issuer;
use crate::metrics::Metrics;
use crate::store::RowState;
use mysql_async::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("unknown benchmark {0:?} (issuer | raw-claims | rollups)")]
    Unknown(String),
    #[error("raw-claims needs pre-generated rows (pregen first)")]
    NoRows,
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("issuer.zookeeper.hosts: required with issuer.backend: zookeeper")]
    NoZooKeeper,
    #[error("mysql: {0}")]
    Mysql(#[from] mysql_async::Error),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("applying a batch: {0}")]
    Apply(#[from] crate::store::DbError),
}

/// Links per synthetic click batch in `rollups` (an edge's 5 s of a busy
/// fleet: a few thousand distinct links).
pub const ROLLUP_LINKS: usize = 2_000;
/// Distinct codes the batches draw from: hot links repeat across batches,
/// so rows are a mix of inserts and `n = n + ...` updates, as in production.
const ROLLUP_CODES: u64 = 200_000;

/// Rows one synthetic link adds: its hour, two referrers, two devices.
const ROWS_PER_LINK: usize = 5;

fn rollup_batch(id: String, seed: u64, now: u64) -> shorturl_common::clicks::Batch {
    use shorturl_common::clicks::Device;
    use shorturl_common::clicks::{Batch, DeviceLine, HourLine, ReferrerLine};
    let hour = now / 3600 * 3600;
    let day = now / 86_400 * 86_400;
    let mut b = Batch {
        id,
        ..Batch::default()
    };
    // A fixed-step walk over the code space: distinct codes within a batch.
    let mut x = seed % ROLLUP_CODES;
    for _ in 0..ROLLUP_LINKS {
        x = (x + 7_919) % ROLLUP_CODES;
        let code = format!("b{x:05}");
        b.hours.push(HourLine {
            code: code.clone(),
            hour,
            human: 3,
            bot: 1,
        });
        for host in ["weixin.qq.com", "(direct)"] {
            b.referrers.push(ReferrerLine {
                code: code.clone(),
                day,
                host: host.into(),
                n: 2,
            });
        }
        b.devices.push(DeviceLine {
            code: code.clone(),
            day,
            device: Device::Mobile,
            n: 3,
        });
        b.devices.push(DeviceLine {
            code,
            day,
            device: Device::Bot,
            n: 1,
        });
    }
    b
}

/// Runs one measurement and prints a JSON line.
pub async fn run(
    cfg: &Config,
    what: &str,
    concurrency: usize,
    seconds: u64,
) -> Result<(), BenchError> {
    let pool = crate::db::pool(&cfg.mysql)?;
    crate::schema::migrate(&pool).await?;
    let dur = Duration::from_secs(seconds.max(1));
    // The issuer's figure depends on its counter's backend: named.
    let mut backend = String::new();
    let (count, elapsed) = match what {
        "issuer" => {
            let metrics = Arc::new(Metrics::new()?);
            // The configured backend's counter, named `bench`.
            let cache = crate::cache::Cache::new(cfg.redis.clone(), Arc::clone(&metrics))
                .map_err(BenchError::Redis)?;
            let counter = counter::open(
                cfg.issuer.backend,
                &cfg.issuer,
                "bench",
                &pool,
                cache.connection(),
                0,
            )
            .ok_or(BenchError::NoZooKeeper)?;
            backend = format!(",\"backend\":\"{}\"", counter.kind());
            let issuer = Issuer::new(
                counter,
                cfg.issuer.block,
                cfg.issuer.low_water,
                u64::MAX,
                metrics,
            );
            let n = Arc::new(AtomicU64::new(0));
            let t0 = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..concurrency {
                let (issuer, n) = (Arc::clone(&issuer), Arc::clone(&n));
                tasks.push(tokio::spawn(async move {
                    while t0.elapsed() < dur {
                        if issuer.next_id().await.is_err() {
                            break;
                        }
                        // Every id from the top down to earlier claims is a
                        // free pre-generated code (a bench database).
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
            (n.load(Ordering::Relaxed), t0.elapsed())
        }
        "raw-claims" => {
            // Claim rows from the top of the table down, so a later creation
            // benchmark on the same table is not affected by holes at the front;
            // a second run continues below the first one's claims (the only
            // reserved pre-generated rows), so it never re-claims a row.
            let mut top: u64 = crate::store::meta::capacity(&pool).await?;
            let lowest_claimed: Option<u64> = pool
                .get_conn()
                .await?
                .exec_first(
                    "SELECT MIN(id) FROM short_code WHERE state = ? AND id < ?",
                    (RowState::Reserved, crate::schema::CUSTOM_ID_BASE),
                )
                .await?
                .flatten();
            if let Some(low) = lowest_claimed {
                top = top.min(low.saturating_sub(1));
            }
            if top == 0 {
                return Err(BenchError::NoRows);
            }
            let next = Arc::new(AtomicU64::new(top));
            let n = Arc::new(AtomicU64::new(0));
            let t0 = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..concurrency {
                let (pool, next, n) = (pool.clone(), Arc::clone(&next), Arc::clone(&n));
                tasks.push(tokio::spawn(async move {
                    let Ok(mut conn) = pool.get_conn().await else { return };
                    while t0.elapsed() < dur {
                        let id = next.fetch_sub(1, Ordering::Relaxed);
                        if id == 0 {
                            break;
                        }
                        // The whole claim of one code in one round trip
                        // and one commit: the link row from the pool row,
                        // the pool row gone.
                        let r = conn
                            .query_drop(format!(
                                "START TRANSACTION; \
                                 INSERT INTO short_code (id, code, state, long_url, domain, created_at, version) \
                                 SELECT id, code, {}, 'https://bench.example/raw', 'bench', UNIX_TIMESTAMP(), \
                                 version + 1 FROM code_pool WHERE id = {id}; \
                                 DELETE FROM code_pool WHERE id = {id}; COMMIT",
                                RowState::Reserved.code()
                            ))
                            .await;
                        if r.is_err() {
                            break;
                        }
                        // Every id from the top down to earlier claims is a
                        // free pre-generated code (a bench database).
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
            (n.load(Ordering::Relaxed), t0.elapsed())
        }
        "rollups" => {
            let now = shorturl_common::time::now_unix();
            let top = cfg.clicks.referrers_per_day;
            let n = Arc::new(AtomicU64::new(0));
            let t0 = Instant::now();
            let mut tasks = Vec::new();
            for task in 0..concurrency {
                let (pool, n) = (pool.clone(), Arc::clone(&n));
                tasks.push(tokio::spawn(async move {
                    let mut seq = 0u64;
                    while t0.elapsed() < dur {
                        let id = format!("bench:{task}-{now}:{seq}");
                        let batch = rollup_batch(id, seq * 104_729 + task as u64, now);
                        seq += 1;
                        crate::clicks::apply::apply(&pool, &batch, now, top, None).await?;
                        n.fetch_add((ROLLUP_LINKS * ROWS_PER_LINK) as u64, Ordering::Relaxed);
                    }
                    Ok::<(), BenchError>(())
                }));
            }
            for t in tasks {
                if let Ok(Err(e)) = t.await {
                    return Err(e);
                }
            }
            (n.load(Ordering::Relaxed), t0.elapsed())
        }
        other => return Err(BenchError::Unknown(other.to_owned())),
    };
    let rate = count as f64 / elapsed.as_secs_f64().max(1e-9);
    println!(
        "{{\"bench\":\"{what}\"{backend},\"concurrency\":{concurrency},\"seconds\":{:.2},\"count\":{count},\"per_sec\":{rate:.0}}}",
        elapsed.as_secs_f64()
    );
    let _ = pool.disconnect().await;
    Ok(())
}
