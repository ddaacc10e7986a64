//! The miss path: in-process cache → Redis → origin, keyed by (domain, code)
//! (protocol 3.5), with concurrent misses for one key coalesced into a
//! single lookup by
//! [`SingleFlight`](shorturl_common::singleflight::SingleFlight).
//!
//! The first request to miss becomes the leader and its lookup runs as its
//! own task, so a client that disconnects can neither cancel it nor leave a
//! stale entry, and a lookup task that panics leaves no entry either (its
//! waiters get `Unavailable`, the next request starts a new lookup). The task
//! stores the result in the cache *before* the flight ends, so a later
//! request finds either the flight or the cached answer, never neither.
//! Failures are results too: all waiters get the same `Unavailable`, and it
//! is cached for `unavailable_ttl` so the next wave does not retry at once.
//!
//! Invalidation (`crate::inval`): the answer is stored only if no message
//! announced a newer version of the code meanwhile (the cache's tombstone);
//! otherwise the code is looked up once more, and Redis already holds the
//! newer state (the origin writes it before publishing). An answer whose
//! lookup did not start while subscribed is cached at most
//! `unsubscribed_grace` (a change after its read may never be announced).
//!
//! Failpoints (tests only): `edge.lookup.panic=<code>` makes the first lookup
//! task for `<code>` panic; `edge.lookup.hold=<code>@<path>` pauses the
//! first lookup of `<code>` after its Redis (or origin) read, before the
//! answer is stored, while the file `<path>` exists (it creates
//! `<path>.held` when it starts waiting).

use crate::cache::{Answer, Entry, Generation, Key, LocalCache, Stored};
use crate::config::CacheConfig;
use crate::metrics::Metrics;
use crate::origin::OriginPool;
use crate::outcome::Outcome;
use crate::redis_store::RedisStore;
use pingora_prometheus::prometheus::{
    self,
    core::{Collector, Desc},
    proto::MetricFamily,
    IntGauge,
};
use shorturl_common::failpoint;
use shorturl_common::keys::link_key;
use shorturl_common::record::Lookup;
use shorturl_common::singleflight::{Role, SingleFlight};
use shorturl_common::time::now_unix;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A finished lookup: the answer and where it came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub answer: Answer,
    /// [`Outcome::Redis`], [`Outcome::Origin`] or [`Outcome::Fail`].
    pub source: Outcome,
    /// A cache lifetime imposed by the origin (`Cache-Control: max-age`).
    pub max_age: Option<Duration>,
    /// The cache entry holding this answer, when the cache kept it: its
    /// servable URL answers the request that looked it up.
    pub entry: Option<Arc<Entry>>,
}

impl Resolved {
    fn unavailable() -> Self {
        Resolved {
            answer: Answer::Unavailable,
            source: Outcome::Fail,
            max_age: None,
            entry: None,
        }
    }
}

/// Resolves codes through the cache, Redis and the origin.
pub struct Resolver {
    pub cache: Arc<LocalCache>,
    flight: Arc<SingleFlight<String, Resolved>>,
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
            cache: Arc::new(LocalCache::new(ttl.max_bytes)),
            flight: SingleFlight::new(),
            redis,
            origin,
            metrics,
            ttl,
        }
    }

    /// Registers `shorturl_edge_lookup_waiting`: requests waiting right now
    /// on another request's lookup (how many a slow Redis or origin holds up).
    pub fn register_metrics(&self) -> Result<(), prometheus::Error> {
        let gauge = IntGauge::new(
            "shorturl_edge_lookup_waiting",
            "Requests waiting on another request's lookup of the same code.",
        )?;
        prometheus::register(Box::new(WaitingGauge {
            flight: Arc::clone(&self.flight),
            gauge,
        }))
    }

    /// Resolves `key` after an in-process cache miss, joining an in-flight
    /// lookup for the same key when there is one. Waiters that joined are
    /// counted as `lock.get`, and as `lock.error` when the lookup failed.
    pub async fn resolve(self: &Arc<Self>, key: Key<'_>) -> Resolved {
        let this = Arc::clone(self);
        let code = key.code;
        // The flight's key: `domain/code`, the domain lower-cased (neither
        // part contains a `/`), split again by the lookup task.
        let flight_key = format!("{}/{code}", key.domain.to_ascii_lowercase());
        let got = self
            .flight
            .run(
                &flight_key,
                // The previous leader may have finished between our cache
                // miss and now: its answer is in the cache.
                || {
                    self.cache.get(key, Instant::now()).map(|e| {
                        let answer = e.to_answer();
                        Resolved {
                            source: if matches!(answer, Answer::Unavailable) {
                                Outcome::Fail
                            } else {
                                Outcome::Hit
                            },
                            answer,
                            max_age: None,
                            entry: Some(e),
                        }
                    })
                },
                move |flight_key: String| async move {
                    let (domain, code) = flight_key.split_once('/').unwrap_or_default();
                    if failpoint::hit_once("edge.lookup.panic", code) {
                        panic!("failpoint edge.lookup.panic: lookup task for {code}");
                    }
                    this.lookup_and_store(Key { domain, code }).await
                },
            )
            .await;
        match got {
            Ok((resolved, Role::Follower)) => {
                self.metrics.lock_get.inc();
                if matches!(resolved.answer, Answer::Unavailable) {
                    self.metrics.lock_error.inc();
                }
                resolved
            }
            Ok((resolved, _)) => resolved,
            Err(e) => {
                tracing::error!(code, error = %e, "record lookup task died");
                Resolved::unavailable()
            }
        }
    }

    /// Looks `key` up and stores the answer, unless an invalidation
    /// received meanwhile says it is already superseded: then once more. A
    /// second superseded answer (Redis lost the announced write) is neither
    /// stored nor served: the caller gets `Unavailable`.
    async fn lookup_and_store(&self, key: Key<'_>) -> Resolved {
        let code = key.code;
        for attempt in 0..2 {
            let gen = self.cache.generation();
            let mut resolved = self.lookup(key).await;
            if attempt == 0 {
                if let Some(path) = failpoint::hold_path("edge.lookup.hold", code) {
                    failpoint::hold(path).await;
                }
            }
            let ttl = self.ttl_for(&resolved, gen);
            let (stored, entry) = self
                .cache
                .store_entry(key, resolved.answer.clone(), ttl, gen);
            match stored {
                Stored::Superseded(by) => {
                    self.metrics.inval.superseded.inc();
                    tracing::debug!(
                        code,
                        by,
                        attempt,
                        "lookup answer superseded by an invalidation"
                    );
                }
                Stored::Cached | Stored::NotCached => {
                    resolved.entry = entry;
                    return resolved;
                }
            }
        }
        tracing::warn!(
            code,
            "redis keeps answering an older version than was announced; answering 503"
        );
        Resolved::unavailable()
    }

    /// How long a result of a lookup that started in `gen` may stay in the
    /// in-process cache.
    fn ttl_for(&self, r: &Resolved, gen: Generation) -> Duration {
        let ttl = self.ttl_by_answer(r);
        if self.cache.is_subscribed_in(gen) {
            ttl
        } else {
            // A change after the lookup's read may not be announced to
            // this edge: trust the answer only briefly.
            ttl.min(self.ttl.unsubscribed_grace)
        }
    }

    fn ttl_by_answer(&self, r: &Resolved) -> Duration {
        let ttl = match &r.answer {
            // Expiry is checked on every answer, so a record may outlive its
            // expiry in the cache: from then on it answers 404 like a
            // negative entry, for at most the negative TTL.
            Answer::Found(rec) => {
                let left = Duration::from_secs(rec.remaining_secs(now_unix()));
                self.ttl.positive_ttl.min(left + self.ttl.negative_ttl)
            }
            Answer::Negative(_) => self.ttl.negative_ttl,
            Answer::Unavailable => return self.ttl.unavailable_ttl,
        };
        r.max_age.map_or(ttl, |m| ttl.min(m))
    }

    /// Redis, then the origin. Never fails: failure is `Unavailable`.
    async fn lookup(&self, key: Key<'_>) -> Resolved {
        let Key { domain, code } = key;
        match self.redis.get(&link_key(domain, code)).await {
            Ok(Some(v)) => match Lookup::decode(&v) {
                Ok(l) => {
                    self.metrics.redis_hit.inc();
                    return Resolved {
                        answer: to_answer(l),
                        source: Outcome::Redis,
                        max_age: None,
                        entry: None,
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
        // Boxed: the origin fetch's state (an HTTP client session) is many
        // times the Redis read's, and inline it would size every lookup
        // future, Redis hits included, for the rare origin case.
        match Box::pin(self.origin.fetch_record(domain, code)).await {
            Ok(a) => Resolved {
                answer: to_answer(a.lookup),
                source: Outcome::Origin,
                max_age: a.max_age,
                entry: None,
            },
            Err(e) => {
                tracing::warn!(code, error = %e, "origin record fetch failed");
                self.metrics.origin_error.inc();
                Resolved::unavailable()
            }
        }
    }
}

fn to_answer(l: Lookup) -> Answer {
    match l {
        Lookup::Found(r) => Answer::Found(Arc::new(r)),
        Lookup::Negative(v) => Answer::Negative(v),
    }
}

/// The flight's waiters, read at scrape time.
struct WaitingGauge {
    flight: Arc<SingleFlight<String, Resolved>>,
    gauge: IntGauge,
}

impl Collector for WaitingGauge {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.gauge
            .set(i64::try_from(self.flight.waiting()).unwrap_or(i64::MAX));
        self.gauge.collect()
    }
}
