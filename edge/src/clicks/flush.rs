//! The flusher: a Pingora background service that drains the request
//! threads' queues every [`DRAIN_INTERVAL`], cuts batches every
//! `clicks.flush_interval` and appends the unsent ones to the stream,
//! oldest first, retrying at every flush while Redis is unreachable.
//!
//! **Shutdown and upgrade** (pingora 0.9, `server/mod.rs`): on `SIGTERM` (or
//! `SIGQUIT` once the sockets are handed over) the shutdown watch fires,
//! then the old process keeps serving its open connections for
//! `grace_period_seconds`, and only then shuts its runtimes down, each
//! within `graceful_shutdown_timeout_seconds`, dropping their tasks. So the
//! flusher does not stop at the signal: it flushes at every drain from
//! then on, and when the runtime drops its task, a guard ([`LastFlush`])
//! drains and sends whatever is left — after the last request the process
//! answered — on a thread of its own (the runtime is going away), within
//! [`last_flush_budget`].

use super::pace::Pace;
use super::{Clicks, Harvest, SendError, SEND_TIMEOUT};
use crate::config::redis::RedisConfig;
use crate::redis_store::connect;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often the request threads' queues are emptied.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(100);

/// The last flush's budget: most of the runtime shutdown timeout (the
/// process exits when it ends), at least 200 ms, at most 5 s.
pub fn last_flush_budget(graceful_shutdown_timeout: Duration) -> Duration {
    graceful_shutdown_timeout
        .mul_f64(0.8)
        .clamp(Duration::from_millis(200), Duration::from_secs(5))
}

/// The background service.
pub struct ClickFlusher {
    clicks: Arc<Clicks>,
    redis: RedisConfig,
    flush_interval: Duration,
    last_budget: Duration,
}

impl ClickFlusher {
    /// A flusher for `clicks` to the Redis of `redis`; `last_budget` bounds
    /// the flush when the process ends.
    pub fn new(
        clicks: Arc<Clicks>,
        redis: &RedisConfig,
        flush_interval: Duration,
        last_budget: Duration,
    ) -> Result<Self, redis::RedisError> {
        // Checks the addresses now; the connection is made in the service.
        connect(redis, SEND_TIMEOUT)?;
        Ok(ClickFlusher {
            clicks,
            redis: redis.clone(),
            flush_interval,
            last_budget,
        })
    }
}

/// Sends every unsent batch, oldest first; stops at the first failure
/// (logged; the batch stays for the next flush).
async fn send_all<C>(clicks: &Clicks, conn: &mut C, failures: &mut u64, pace: &mut Pace)
where
    C: redis::aio::ConnectionLike + Send,
{
    loop {
        match clicks.send_next(conn).await {
            Ok(true) => {
                if *failures > 0 {
                    tracing::info!(failures = *failures, "click batches delivered again");
                    *failures = 0;
                }
            }
            Ok(false) => return,
            Err(e) => {
                *failures += 1;
                if *failures == 1 {
                    tracing::warn!(error = %e, "cannot append click batches; kept for retry");
                }
                return;
            }
        }
        // A long backlog must not stop the draining (the wait for Redis
        // was no work: a new stint).
        pace.begin();
        clicks.drain_paced(&mut || pace.step());
    }
}

#[async_trait]
impl BackgroundService for ClickFlusher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if !self.clicks.enabled() {
            return;
        }
        let _last = LastFlush {
            clicks: Arc::clone(&self.clicks),
            redis: self.redis.clone(),
            budget: self.last_budget,
        };
        let mut conn = match connect(&self.redis, SEND_TIMEOUT) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "click flusher: no redis client; only the last flush will try");
                None
            }
        };
        let mut tick = tokio::time::interval(DRAIN_INTERVAL.min(self.flush_interval));
        let mut next_flush = Instant::now() + self.flush_interval;
        // The tallies' harvest walks the cache: once per interval, not at
        // every early cut (which moves `next_flush`).
        let mut next_harvest = next_flush;
        let mut shutting_down = false;
        let mut failures = 0u64;
        let mut salts_retry = 0u64;
        let mut pace = Pace::default();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed(), if !shutting_down => {
                    // Requests are still served during the grace period:
                    // flush at every drain from now on.
                    shutting_down = true;
                }
            }
            pace.begin();
            // The visitor salts: at once at start (clicks before are in no
            // sketch), then whenever a day is missing, at most every second
            // while Redis fails (the batches' own retries say so).
            let now = shorturl_common::time::now_unix();
            if self.clicks.dimensions() && self.clicks.salts.stale(now) && now >= salts_retry {
                if let Some(c) = conn.as_mut() {
                    // Bounded as an append is: a frozen Redis must not
                    // stop the draining.
                    let fetched =
                        tokio::time::timeout(SEND_TIMEOUT, self.clicks.salts.refresh(c, now)).await;
                    if !matches!(fetched, Ok(Ok(()))) {
                        tracing::debug!("visitor salts not fetched");
                        salts_retry = now + 1;
                    }
                }
            }
            self.clicks.drain_paced(&mut || pace.step());
            let early = self.clicks.take_early_cut();
            let now = Instant::now();
            if shutting_down || early || now >= next_flush || now >= next_harvest {
                next_flush = now + self.flush_interval;
                // (The last flush takes every entry's: `Clicks::cut`.)
                let harvest = if shutting_down || now >= next_harvest {
                    next_harvest = now + self.flush_interval;
                    Harvest::Tallied
                } else {
                    Harvest::None
                };
                self.clicks.cut_paced(harvest, &mut || pace.step());
                if let Some(c) = conn.as_mut() {
                    send_all(&self.clicks, c, &mut failures, &mut pace).await;
                }
            }
        }
    }
}

/// Runs the last flush when the flusher's task is dropped (its runtime
/// shutting down, after the grace period).
struct LastFlush {
    clicks: Arc<Clicks>,
    /// A connection of its own is made in the last flush's runtime.
    redis: RedisConfig,
    budget: Duration,
}

impl Drop for LastFlush {
    fn drop(&mut self) {
        self.clicks.drain();
        self.clicks.cut();
        if self.clicks.is_idle() {
            return;
        }
        let clicks = Arc::clone(&self.clicks);
        let redis = self.redis.clone();
        let budget = self.budget;
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        // Dropped inside a runtime that is shutting down: a runtime of its
        // own, on a thread of its own.
        let spawned = std::thread::Builder::new()
            .name("clicks-last-flush".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match rt {
                    Ok(rt) => rt.block_on(last_flush(&clicks, &redis, budget)),
                    Err(e) => tracing::error!(error = %e, "click last flush: no runtime"),
                }
                let _ = done_tx.send(());
            });
        match spawned {
            Ok(_) => {
                let _ = done_rx.recv_timeout(budget + Duration::from_millis(100));
            }
            Err(e) => tracing::error!(error = %e, "click last flush: no thread"),
        }
    }
}

async fn last_flush(clicks: &Clicks, redis: &RedisConfig, budget: Duration) {
    let deadline = Instant::now() + budget;
    let run = async {
        let mut conn = connect(redis, budget)?;
        loop {
            clicks.drain();
            clicks.cut();
            if !clicks.send_next(&mut conn).await? {
                return Ok::<_, SendError>(());
            }
        }
    };
    match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(())) => tracing::info!("click counts flushed at exit"),
        Ok(Err(e)) => {
            tracing::error!(error = %e, lost = clicks.status().buffered, "click last flush failed")
        }
        Err(_) => {
            tracing::error!(
                lost = clicks.status().buffered,
                "click last flush timed out"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_flush_fits_in_the_runtime_shutdown() {
        let ms = |v| Duration::from_millis(v);
        assert_eq!(last_flush_budget(Duration::from_secs(1)), ms(800));
        assert_eq!(last_flush_budget(Duration::ZERO), ms(200));
        assert_eq!(last_flush_budget(Duration::from_secs(60)), ms(5000));
    }
}
