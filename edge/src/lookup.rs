//! The miss path: in-process cache → Redis → origin, with concurrent misses
//! for one code coalesced into a single lookup.
//!
//! The first request to miss becomes the leader: it registers the code in
//! the in-flight table and spawns the lookup as its own task, so a client
//! that disconnects (or a caller that is cancelled) can never cancel it nor
//! leave a stale lock behind. Every request for that code, the leader
//! included, then waits on a `watch` channel for the result. The task stores
//! the result in the cache *before* leaving the table, so a later request
//! finds either the table entry or the cached answer, never neither.
//! Failures are results too: all waiters get the same `Unavailable`, and it
//! is cached for `unavailable_ttl` so the next wave does not retry at once.

use crate::cache::{Answer, LocalCache};
use crate::config::CacheConfig;
use crate::metrics::Metrics;
use crate::origin::OriginPool;
use crate::outcome::Outcome;
use crate::redis_store::RedisStore;
use shorturl_common::keys::link_key;
use shorturl_common::record::Lookup;
use shorturl_common::time::now_unix;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A finished lookup: the answer and where it came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub answer: Answer,
    /// [`Outcome::Redis`], [`Outcome::Origin`] or [`Outcome::Fail`].
    pub source: Outcome,
    /// A cache lifetime imposed by the origin (`Cache-Control: max-age`).
    pub max_age: Option<Duration>,
}

type Flight = watch::Receiver<Option<Resolved>>;

/// Resolves codes through the cache, Redis and the origin.
pub struct Resolver {
    pub cache: LocalCache,
    inflight: Mutex<HashMap<Box<str>, Flight>>,
    redis: RedisStore,
    origin: Arc<OriginPool>,
    metrics: Arc<Metrics>,
    ttl: CacheConfig,
}

impl Resolver {
    /// Wires the layers together.
    pub fn new(
        ttl: CacheConfig,
        redis: RedisStore,
        origin: Arc<OriginPool>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Resolver {
            cache: LocalCache::new(ttl.max_bytes),
            inflight: Mutex::new(HashMap::new()),
            redis,
            origin,
            metrics,
            ttl,
        }
    }

    /// Resolves `code` after an in-process cache miss, joining an in-flight
    /// lookup for the same code when there is one.
    pub async fn resolve(self: &Arc<Self>, code: &str) -> Resolved {
        let (mut rx, joined) = {
            let mut table = match self.inflight.lock() {
                Ok(t) => t,
                Err(poisoned) => poisoned.into_inner(),
            };
            if let Some(rx) = table.get(code) {
                (rx.clone(), true)
            } else {
                // The previous leader may have finished between our cache
                // miss and taking the lock: its answer is in the cache now.
                if let Some(e) = self.cache.get(code, Instant::now()) {
                    let source = if matches!(e.answer, Answer::Unavailable) {
                        Outcome::Fail
                    } else {
                        Outcome::Hit
                    };
                    return Resolved {
                        answer: e.answer.clone(),
                        source,
                        max_age: None,
                    };
                }
                let (tx, rx) = watch::channel(None);
                table.insert(code.into(), rx.clone());
                let this = Arc::clone(self);
                let code: Box<str> = code.into();
                tokio::spawn(async move {
                    let resolved = this.lookup(&code).await;
                    this.cache
                        .put(&code, resolved.answer.clone(), this.ttl_for(&resolved));
                    match this.inflight.lock() {
                        Ok(mut t) => t.remove(&code),
                        Err(p) => p.into_inner().remove(&code),
                    };
                    let _ = tx.send(Some(resolved));
                });
                (rx, false)
            }
        };
        if joined {
            self.metrics.lock_get.inc();
        }
        let resolved = match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone(),
            Err(_) => None, // the lookup task died: treat as a failure
        };
        let resolved = resolved.unwrap_or(Resolved {
            answer: Answer::Unavailable,
            source: Outcome::Fail,
            max_age: None,
        });
        if joined && matches!(resolved.answer, Answer::Unavailable) {
            self.metrics.lock_error.inc();
        }
        resolved
    }

    /// How long a result may stay in the in-process cache.
    fn ttl_for(&self, r: &Resolved) -> Duration {
        let ttl = match &r.answer {
            // Expiry is checked on every answer, so a record may outlive its
            // expiry in the cache: from then on it answers 404 like a
            // negative entry, for at most the negative TTL.
            Answer::Found(rec) => {
                let left = Duration::from_secs(rec.remaining_secs(now_unix()));
                self.ttl.positive_ttl.min(left + self.ttl.negative_ttl)
            }
            Answer::Negative => self.ttl.negative_ttl,
            Answer::Unavailable => return self.ttl.unavailable_ttl,
        };
        r.max_age.map_or(ttl, |m| ttl.min(m))
    }

    /// Redis, then the origin. Never fails: failure is `Unavailable`.
    async fn lookup(&self, code: &str) -> Resolved {
        match self.redis.get(&link_key(code)).await {
            Ok(Some(v)) => match Lookup::decode(&v) {
                Ok(l) => {
                    self.metrics.redis_hit.inc();
                    return Resolved {
                        answer: to_answer(l),
                        source: Outcome::Redis,
                        max_age: None,
                    };
                }
                Err(_) => {
                    tracing::warn!(code, "malformed record in redis");
                    self.metrics.redis_error.inc();
                }
            },
            Ok(None) => self.metrics.redis_miss.inc(),
            Err(e) => {
                tracing::debug!(code, error = %e, "redis lookup failed");
                self.metrics.redis_error.inc();
            }
        }
        self.metrics.origin_forward.inc();
        match self.origin.fetch_record(code).await {
            Ok(a) => Resolved {
                answer: to_answer(a.lookup),
                source: Outcome::Origin,
                max_age: a.max_age,
            },
            Err(e) => {
                tracing::warn!(code, error = %e, "origin record fetch failed");
                self.metrics.origin_error.inc();
                Resolved {
                    answer: Answer::Unavailable,
                    source: Outcome::Fail,
                    max_age: None,
                }
            }
        }
    }
}

fn to_answer(l: Lookup) -> Answer {
    match l {
        Lookup::Found(r) => Answer::Found(Arc::new(r)),
        Lookup::Negative => Answer::Negative,
    }
}
