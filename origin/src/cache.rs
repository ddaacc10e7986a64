//! Redis as a cache of link records and dedup entries.
//!
//! Redis may lose everything at any time, so every call here is bounded by a
//! tight timeout and every failure is an ordinary miss for the caller (and a
//! `redis.error` in the status). The client is a lazy, reconnecting
//! `ConnectionManager`: the origin starts without Redis and recovers by
//! itself when Redis comes back.

use crate::config::RedisConfig;
use crate::metrics::Metrics;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use shorturl_common::keys;
use shorturl_common::record::{Lookup, Record};
use shorturl_common::time::now_unix;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// The Redis cache.
#[derive(Clone)]
pub struct Cache {
    conn: ConnectionManager,
    cfg: RedisConfig,
    metrics: Arc<Metrics>,
}

/// What Redis said about a code.
pub enum CacheAnswer {
    Hit(Lookup),
    Miss,
    /// Redis failed or timed out: treat as a miss, don't write back.
    Error,
}

impl Cache {
    /// Creates the client without connecting (connection happens on first use).
    pub fn new(cfg: RedisConfig, metrics: Arc<Metrics>) -> Result<Cache, redis::RedisError> {
        let client = redis::Client::open(cfg.url.as_str())?;
        let mcfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.timeout.max(Duration::from_millis(100))))
            .set_response_timeout(Some(cfg.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, mcfg)?;
        Ok(Cache { conn, cfg, metrics })
    }

    /// The raw connection, for the Redis issuer backend.
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    async fn bounded<T>(&self, f: impl Future<Output = redis::RedisResult<T>>) -> Option<T> {
        match tokio::time::timeout(self.cfg.timeout, f).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.metrics.redis_error.inc();
                tracing::debug!(error = %e, "redis error");
                None
            }
            Err(_) => {
                self.metrics.redis_error.inc();
                tracing::debug!("redis timeout");
                None
            }
        }
    }

    /// Looks up the record of `code`.
    pub async fn get_record(&self, code: &str) -> CacheAnswer {
        let mut c = self.conn.clone();
        let key = keys::link_key(code);
        match self.bounded(c.get::<_, Option<String>>(key)).await {
            None => CacheAnswer::Error,
            Some(None) => {
                self.metrics.redis_miss.inc();
                CacheAnswer::Miss
            }
            Some(Some(v)) => match Lookup::decode(&v) {
                Ok(l) => {
                    self.metrics.redis_hit.inc();
                    CacheAnswer::Hit(l)
                }
                Err(_) => {
                    self.metrics.redis_error.inc();
                    tracing::warn!(code, "malformed record in redis");
                    CacheAnswer::Error
                }
            },
        }
    }

    /// Caches `lookup` for `code`: a record for min(record TTL, time to
    /// expiry), a negative for the negative TTL. Best-effort.
    pub async fn put_record(&self, code: &str, lookup: &Lookup) {
        let ttl = match lookup {
            Lookup::Found(r) => self.record_ttl(r),
            Lookup::Negative => self.cfg.negative_ttl.as_secs(),
        };
        if ttl == 0 {
            return;
        }
        let mut c = self.conn.clone();
        let _ = self
            .bounded(c.set_ex::<_, _, ()>(keys::link_key(code), lookup.encode(), ttl))
            .await;
    }

    /// Caches a new link's record and its dedup entry in one round trip.
    pub async fn put_created(&self, code: &str, r: &Record, url: &str) {
        let ttl = self.record_ttl(r);
        let mut pipe = redis::pipe();
        if ttl > 0 {
            pipe.set_ex(keys::link_key(code), r.encode(), ttl).ignore();
        }
        pipe.set_ex(
            keys::dedup_key(&r.domain, url),
            code,
            self.cfg.dedup_ttl.as_secs(),
        )
        .ignore();
        let mut c = self.conn.clone();
        let _ = self.bounded(pipe.query_async::<()>(&mut c)).await;
    }

    /// Seconds a record may live in Redis.
    pub fn record_ttl(&self, r: &Record) -> u64 {
        self.cfg
            .record_ttl
            .as_secs()
            .min(r.remaining_secs(now_unix()))
    }

    /// The code of a recent creation of `(domain, url)`, refreshing its TTL.
    pub async fn get_dedup(&self, domain: &str, url: &str) -> Option<String> {
        let mut c = self.conn.clone();
        let key = keys::dedup_key(domain, url);
        let ttl = self.cfg.dedup_ttl.as_secs();
        // GETEX: read and refresh the one-day window in one round trip.
        let cmd = redis::cmd("GETEX").arg(&key).arg("EX").arg(ttl).to_owned();
        self.bounded(async move { cmd.query_async::<Option<String>>(&mut c).await })
            .await
            .flatten()
    }

    /// Forgets the dedup entry of `(domain, url)` (after a delete).
    pub async fn del_dedup(&self, domain: &str, url: &str) {
        let mut c = self.conn.clone();
        let _ = self
            .bounded(c.del::<_, ()>(keys::dedup_key(domain, url)))
            .await;
    }
}
