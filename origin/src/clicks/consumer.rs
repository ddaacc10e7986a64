//! The click-batch consumer: a background task of every origin reading
//! `su:1:clicks` as consumer group `origins`, under a consumer name unique
//! to the process.
//!
//! Each entry is decoded strictly and applied in one MySQL transaction
//! with its batch id ([`super::apply`]); only then is it acknowledged
//! (`XACK`). So a crash between reading and acknowledging leaves the entry
//! pending, and another origin (or this one, restarted under a new name)
//! takes it over with `XAUTOCLAIM` once it has been idle for
//! `clicks.claim_idle_ms`; the batch id makes that second application a
//! no-op when the first had committed. A malformed batch is counted,
//! logged and acknowledged: it can never become readable. A batch MySQL
//! refused stays pending and is claimed again after the idle time.
//!
//! Redis down: the task reconnects with backoff (100 ms doubling to 5 s);
//! nothing is acknowledged that was not applied, so nothing is lost that
//! Redis still holds. A Redis restarted empty loses the entries it held
//! (the stream has no persistence of its own here); the group is created
//! again on the first `NOGROUP`.

use super::shard::apply_sharded;
use super::stream::{self, Entry};
use super::ClickMetrics;
use crate::config::ClicksConfig;
use crate::store::{DbError, Store};
use redis::Value;
use shorturl_common::clicks::{Batch, BatchError, CONSUMER_GROUP, STREAM_KEY};
use shorturl_common::failpoint;
use shorturl_common::redis::{ConnOptions, RedisConn, RedisTopology};
use shorturl_common::time::now_unix;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Why a consumer session ended (it reconnects after a backoff).
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Reply(#[from] stream::ReplyError),
}

/// The consumer of one origin process.
pub struct Consumer {
    redis: RedisTopology,
    /// Where batches are applied (each shard's part on its shard).
    store: Store,
    cfg: ClicksConfig,
    metrics: Arc<ClickMetrics>,
    /// `origin-<pid>-<random>`: a restarted origin is a new consumer, and
    /// its predecessor's pending entries are claimed like any dead one's.
    name: String,
}

/// What handling one entry did with MySQL.
enum Outcome {
    Done,
    /// MySQL failed: the entry stays pending.
    Failed,
}

impl Consumer {
    /// A consumer (not started).
    pub fn new(
        redis: RedisTopology,
        store: Store,
        cfg: ClicksConfig,
        metrics: Arc<ClickMetrics>,
    ) -> Consumer {
        let name = format!(
            "origin-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        Consumer {
            redis,
            store,
            cfg,
            metrics,
            name,
        }
    }

    /// This consumer's name in the group.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs until the task is aborted (at shutdown).
    pub async fn run(self) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let started = Instant::now();
            if let Err(e) = self.session().await {
                self.metrics.redis_errors.inc();
                tracing::warn!(error = %e, consumer = %self.name,
                    "click consumer: redis failed; reconnecting");
            }
            // A session that ran a while was healthy: start the backoff over.
            if started.elapsed() > Duration::from_secs(10) {
                backoff = Duration::from_millis(100);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// A connection of this session's own (its `XREADGROUP` blocks, so it
    /// shares nothing with the request path). Connects on first use.
    async fn connect(&self) -> Result<RedisConn, ConsumerError> {
        let opts = ConnOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: self.cfg.block + Duration::from_secs(5),
        };
        Ok(RedisConn::new(&self.redis, opts)?)
    }

    /// Creates the group (and the stream) if missing. From `0`: a group
    /// created after entries were added (Redis restarted, first origin)
    /// still reads them; batch ids make any re-read harmless.
    async fn ensure_group(&self, conn: &mut RedisConn) -> Result<(), ConsumerError> {
        let r: Result<Value, _> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(STREAM_KEY)
            .arg(CONSUMER_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(conn)
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// One connection's life: claim, read, apply, acknowledge, until Redis fails.
    async fn session(&self) -> Result<(), ConsumerError> {
        let mut conn = self.connect().await?;
        self.ensure_group(&mut conn).await?;
        tracing::info!(consumer = %self.name, "click consumer reading {STREAM_KEY}");
        let claim_every = (self.cfg.claim_idle / 2).max(Duration::from_millis(100));
        let mut next_claim = Instant::now();
        let mut next_pending = Instant::now();
        loop {
            if Instant::now() >= next_claim {
                self.claim(&mut conn).await?;
                next_claim = Instant::now() + claim_every;
            }
            if Instant::now() >= next_pending {
                self.poll_pending(&mut conn).await?;
                next_pending = Instant::now() + Duration::from_secs(1);
            }
            // Never block past the next claim round.
            let block = self
                .cfg
                .block
                .min(next_claim.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1));
            let r: Result<Value, redis::RedisError> = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(CONSUMER_GROUP)
                .arg(&self.name)
                .arg("COUNT")
                .arg(self.cfg.read_count)
                .arg("BLOCK")
                .arg(block.as_millis() as u64)
                .arg("STREAMS")
                .arg(STREAM_KEY)
                .arg(">")
                .query_async(&mut conn)
                .await;
            let reply = match r {
                Ok(v) => v,
                // Redis restarted empty (or the key was deleted): the group is gone.
                Err(e) if e.code() == Some("NOGROUP") => {
                    tracing::warn!("click consumer: group missing; creating it again");
                    self.ensure_group(&mut conn).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for e in stream::read_group(&reply)? {
                self.handle(&mut conn, e).await?;
            }
        }
    }

    /// Takes over the entries pending longer than `claim_idle` (their
    /// reader is dead or MySQL refused them) and handles them.
    async fn claim(&self, conn: &mut RedisConn) -> Result<(), ConsumerError> {
        let mut cursor = "0-0".to_owned();
        // Bounded: a huge backlog is taken over a few rounds at a time.
        for _ in 0..16 {
            let r: Result<Value, redis::RedisError> = redis::cmd("XAUTOCLAIM")
                .arg(STREAM_KEY)
                .arg(CONSUMER_GROUP)
                .arg(&self.name)
                .arg(self.cfg.claim_idle.as_millis() as u64)
                .arg(&cursor)
                .arg("COUNT")
                .arg(self.cfg.read_count)
                .query_async(conn)
                .await;
            let reply = match r {
                Ok(v) => v,
                Err(e) if e.code() == Some("NOGROUP") => return self.ensure_group(conn).await,
                Err(e) => return Err(e.into()),
            };
            let stream::Claimed {
                cursor: next,
                entries,
                deleted,
            } = stream::auto_claim(&reply)?;
            if deleted > 0 {
                self.metrics.trimmed.inc_by(deleted as u64);
                tracing::error!(consumer = %self.name, n = deleted,
                    "click consumer: pending batches were trimmed from the stream before being applied (lost)");
            }
            if !entries.is_empty() {
                tracing::info!(consumer = %self.name, n = entries.len(),
                    "click consumer: claimed pending batches");
            }
            let mut failed = false;
            for e in entries {
                if let Outcome::Failed = self.handle(conn, e).await? {
                    failed = true;
                }
            }
            if next == "0-0" || failed {
                break;
            }
            cursor = next;
        }
        Ok(())
    }

    async fn poll_pending(&self, conn: &mut RedisConn) -> Result<(), ConsumerError> {
        let r: Result<Value, redis::RedisError> = redis::cmd("XPENDING")
            .arg(STREAM_KEY)
            .arg(CONSUMER_GROUP)
            .query_async(conn)
            .await;
        match r {
            Ok(v) => {
                if let Some(n) = stream::pending_count(&v) {
                    self.metrics.pending.set(n);
                }
                Ok(())
            }
            Err(e) if e.code() == Some("NOGROUP") => self.ensure_group(conn).await,
            Err(e) => Err(e.into()),
        }
    }

    async fn ack(&self, conn: &mut RedisConn, id: &str) -> Result<(), ConsumerError> {
        let _: Value = redis::cmd("XACK")
            .arg(STREAM_KEY)
            .arg(CONSUMER_GROUP)
            .arg(id)
            .query_async(conn)
            .await?;
        Ok(())
    }

    /// Decodes, applies and acknowledges one entry. A Redis error ends the
    /// session (the entry stays pending); a MySQL error leaves the entry
    /// pending for a later claim.
    async fn handle(&self, conn: &mut RedisConn, e: Entry) -> Result<Outcome, ConsumerError> {
        let batch = decode(&e);
        let batch_id = e.field("id").unwrap_or("").to_owned();
        // Test failpoint: hold between reading and applying.
        if let Some(path) = failpoint::hold_path("origin.clicks.read.hold", &batch_id) {
            failpoint::hold(path).await;
        }
        let top = self.cfg.referrers_per_day;
        match batch {
            Err(err) => {
                self.metrics.malformed.inc();
                tracing::warn!(entry = %e.id, batch = %batch_id, error = %err,
                    "click consumer: malformed batch rejected whole (acknowledged, nothing applied)");
            }
            Ok(b) => {
                match apply_sharded(&self.store, &b, now_unix(), top, &self.metrics.unattributed)
                    .await
                {
                    Ok(Some(added)) => {
                        let (human, bot) = added.totals();
                        self.metrics.applied.inc();
                        self.metrics
                            .clicks
                            .with_label_values(&["human"])
                            .inc_by(human);
                        self.metrics.clicks.with_label_values(&["bot"]).inc_by(bot);
                    }
                    Ok(None) => {
                        self.metrics.duplicate.inc();
                        tracing::info!(entry = %e.id, batch = %b.id,
                        "click consumer: batch already applied; acknowledging only");
                    }
                    Err(err) => return Ok(self.failed(&e, &b.id, err).await),
                }
            }
        }
        // Test failpoint: hold after the commit, before the acknowledgement.
        if let Some(path) = failpoint::hold_path("origin.clicks.ack.hold", &batch_id) {
            failpoint::hold(path).await;
        }
        self.ack(conn, &e.id).await?;
        Ok(Outcome::Done)
    }

    async fn failed(&self, e: &Entry, batch: &str, err: DbError) -> Outcome {
        self.metrics.failed.inc();
        tracing::warn!(entry = %e.id, batch = %batch, error = %err,
            "click consumer: applying a batch failed; it stays pending and is claimed again");
        // Do not spin on a MySQL that is down.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Outcome::Failed
    }
}

/// The batch an entry carries (fields `id`, `v`, `b`).
pub fn decode(e: &Entry) -> Result<Batch, BatchError> {
    let id = e.field("id").ok_or(BatchError::MissingField("id"))?;
    let v = e.field("v").ok_or(BatchError::MissingField("v"))?;
    let b = e.field("b").ok_or(BatchError::MissingField("b"))?;
    Batch::decode(id, v, b)
}
