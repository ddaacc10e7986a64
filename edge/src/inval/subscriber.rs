//! The invalidation subscriber: a Pingora background service holding its
//! own Redis pub/sub connection to `su:1:inval` (spoken by `resp.rs`).
//!
//! * **Connection.** Made inside the service (no Tokio runtime exists
//!   before Pingora starts its services, and `-d` forks), bounded by
//!   [`CONNECT_TIMEOUT`] including the `SUBSCRIBE` confirmation. Failures
//!   are retried with a jittered backoff from [`BACKOFF_MIN`] doubling to
//!   [`BACKOFF_MAX`], forever. On a Redis Cluster any node serves (a
//!   `PUBLISH` reaches every node), so each failed attempt moves to the
//!   next seed node; on Sentinel each attempt subscribes to the master the
//!   Sentinels name at that moment.
//! * **Liveness.** A connection can die silently (a network cut sends no
//!   FIN), so the subscriber `PING`s every [`PING_INTERVAL`]; no answer
//!   within [`PING_TIMEOUT`] counts as a loss. The *last sign of life* is
//!   the latest message or answered ping.
//! * **Loss.** The cache opens a new generation at once. Entries of the
//!   generations before it are served until last sign of life +
//!   `cache.unsubscribed_grace_ms`, then retired; when the subscription is
//!   back first, they are retired then. A new subscribed generation starts
//!   with every subscription (`cache/generation.rs` says why).
//! * **Shutdown.** It keeps running through Pingora's graceful shutdown:
//!   requests are still served from the cache then.

use super::resp::{Frame, Subscription};
use crate::config::{CacheConfig, RedisConfig};
use crate::lookup::Resolver;
use crate::metrics::Metrics;
use crate::pages::store::PageStore;
use async_trait::async_trait;
use futures::future::OptionFuture;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use shorturl_common::keys::INVAL_CHANNEL;
use shorturl_common::redis::RedisConn;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Connect and `SUBSCRIBE`, confirmation included.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often an idle subscription is checked.
pub const PING_INTERVAL: Duration = Duration::from_secs(1);
/// How long a `PING` may take before the connection counts as lost.
pub const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// First wait after a failed attempt (then doubled, with jitter).
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest wait between attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Why a subscription attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum SubscribeError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Resp(#[from] super::resp::RespError),
    #[error("no subscription within {0:?}")]
    Timeout(Duration),
}

/// The subscription is down: what to retire, and when.
struct Outage {
    /// Entries stamped before this generation were cached before the loss.
    first_gen: crate::cache::Generation,
    /// When they stop being served: last sign of life + grace.
    deadline: Instant,
    retired: bool,
}

/// The background service (see the module documentation).
pub struct Subscriber {
    resolver: Arc<Resolver>,
    pages: &'static PageStore,
    metrics: Arc<Metrics>,
    conn: RedisConn,
    /// Consecutive failed subscription attempts: on a Cluster, the next
    /// attempt goes to the next seed node.
    attempts: AtomicUsize,
    tombstone_ttl: Duration,
    grace: Duration,
}

impl Subscriber {
    /// A subscriber to the Redis of `redis`, applying messages to the
    /// resolver's cache; connects when the service starts.
    pub fn new(
        resolver: Arc<Resolver>,
        pages: &'static PageStore,
        metrics: Arc<Metrics>,
        redis: &RedisConfig,
        cache: &CacheConfig,
    ) -> Result<Self, redis::RedisError> {
        Ok(Subscriber {
            resolver,
            pages,
            metrics,
            conn: crate::redis_store::connect(redis, CONNECT_TIMEOUT)?,
            attempts: AtomicUsize::new(0),
            tombstone_ttl: cache.tombstone_ttl,
            grace: cache.unsubscribed_grace,
        })
    }

    async fn connect(&self) -> Result<Subscription, SubscribeError> {
        let attempt = async {
            let n = self.attempts.fetch_add(1, Ordering::Relaxed);
            let info = self.conn.pubsub_info(n).await?;
            let sub = Subscription::open(&info, INVAL_CHANNEL).await?;
            self.attempts.store(0, Ordering::Relaxed);
            Ok::<_, SubscribeError>(sub)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(SubscribeError::Timeout(CONNECT_TIMEOUT)),
        }
    }

    /// Subscribes, serves, and resubscribes, forever.
    async fn run(&self) {
        let cache = &self.resolver.cache;
        let m = &self.metrics.inval;
        let mut outage: Option<Outage> = None;
        let mut backoff = BACKOFF_MIN;
        let mut failures = 0u64;
        let mut ever = false;
        loop {
            let pubsub = match self.during(&mut outage, self.connect()).await {
                Ok(ps) => ps,
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(error = %e, "cannot subscribe to invalidations; retrying");
                    } else {
                        tracing::debug!(error = %e, failures, "invalidation subscription attempt failed");
                    }
                    self.during(&mut outage, tokio::time::sleep(jittered(backoff)))
                        .await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            // Subscribed: every change from now on is announced to us.
            let gen = cache.begin_generation();
            if let Some(o) = outage.take() {
                if !o.retired {
                    cache.retire_before(o.first_gen);
                }
            }
            // Changes may have gone unannounced before this subscription.
            self.pages.clear();
            cache.set_subscribed(Some(gen));
            m.subscribed.set(1);
            m.subscriptions.inc();
            if ever {
                tracing::info!(
                    failures,
                    "invalidation subscription re-established; entries cached before the loss dropped"
                );
            } else {
                tracing::info!("subscribed to invalidations");
            }
            ever = true;
            backoff = BACKOFF_MIN;
            failures = 0;

            let last_alive = self.serve(pubsub).await;

            cache.set_subscribed(None);
            m.subscribed.set(0);
            let first_gen = cache.begin_generation();
            tracing::warn!(
                grace_ms = self.grace.as_millis() as u64,
                "invalidation subscription lost; cached entries are trusted until the grace runs out"
            );
            outage = Some(Outage {
                first_gen,
                deadline: last_alive + self.grace,
                retired: false,
            });
        }
    }

    /// Runs `fut`, retiring the entries of an outage when its grace runs out
    /// meanwhile.
    async fn during<F: Future>(&self, outage: &mut Option<Outage>, fut: F) -> F::Output {
        tokio::pin!(fut);
        loop {
            let deadline = outage.as_ref().filter(|o| !o.retired).map(|o| o.deadline);
            let grace_over: OptionFuture<_> = deadline.map(tokio::time::sleep_until).into();
            tokio::select! {
                out = &mut fut => return out,
                Some(()) = grace_over => {
                    if let Some(o) = outage.as_mut() {
                        o.retired = true;
                        self.resolver.cache.retire_before(o.first_gen);
                        self.pages.clear();
                        tracing::warn!("invalidation subscription still down past the grace: entries cached before the loss are no longer served");
                    }
                }
            }
        }
    }

    /// Applies messages until the connection is lost; returns its last
    /// sign of life. Each message is applied from the read buffer as it
    /// stands, without a copy.
    async fn serve(&self, mut sub: Subscription) -> Instant {
        let mut last_alive = Instant::now();
        let mut tick = tokio::time::interval_at(last_alive + PING_INTERVAL, PING_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The deadline of the PING in flight, if one is.
        let mut ping: Option<Instant> = None;
        loop {
            loop {
                match sub.frame() {
                    Ok(Some((frame, n))) => {
                        match frame {
                            Frame::Message(payload) => super::apply(
                                &self.resolver.cache,
                                self.pages,
                                &sub.bytes()[payload],
                                self.tombstone_ttl,
                                &self.metrics.inval,
                            ),
                            Frame::Pong => ping = None,
                            Frame::Ok => {}
                            Frame::Error(e) => {
                                tracing::warn!(error = %e, "invalidation subscription: redis answered an error");
                                return last_alive;
                            }
                        }
                        sub.consume(n);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "invalidation subscription: unreadable answer");
                        return last_alive;
                    }
                }
            }
            let ping_due: OptionFuture<_> = ping.map(tokio::time::sleep_until).into();
            tokio::select! {
                biased;
                // Bytes from Redis are its sign of life: read once per
                // read, not per message.
                read = sub.fill() => match read {
                    Ok(0) | Err(_) => return last_alive,
                    Ok(_) => last_alive = Instant::now(),
                },
                Some(()) = ping_due => {
                    tracing::debug!("invalidation subscription did not answer a ping");
                    return last_alive;
                }
                _ = tick.tick(), if ping.is_none() => {
                    match tokio::time::timeout(PING_TIMEOUT, sub.ping()).await {
                        Ok(Ok(())) => ping = Some(Instant::now() + PING_TIMEOUT),
                        _ => return last_alive,
                    }
                }
            }
        }
    }
}

/// `d` scaled by a random factor in [0.5, 1.0), so edges that lost Redis
/// together do not all come back in the same millisecond.
fn jittered(d: Duration) -> Duration {
    let r = RandomState::new().hash_one(d.as_nanos()) % 500;
    d.mul_f64(0.5 + r as f64 / 1000.0)
}

#[async_trait]
impl BackgroundService for Subscriber {
    async fn start(&self, _shutdown: ShutdownWatch) {
        self.run().await;
    }
}
