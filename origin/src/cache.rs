//! Redis as a cache of link records and dedup entries.
//!
//! Redis may lose everything at any time, so every call here is bounded by a
//! tight timeout and every failure is an ordinary miss for the caller (and a
//! `redis.error` in the status). The client is a lazy, reconnecting
//! [`RedisConn`] (single server, Cluster or Sentinel): the origin starts
//! without Redis and recovers by itself when Redis comes back.
//!
//! Cluster rule (docs/protocol.md): every script and pipeline here touches
//! one key. A creation's record and its dedup entry live in different
//! slots, so they are two commands sent together, not one pipeline.
//!
//! Every write of a link record goes through one Lua script
//! ([`CAS_SCRIPT`]): it writes only if the stored value's version is not
//! newer than the one written, and publishes the invalidation message in
//! the same step when asked to. A resolution that read MySQL before a
//! change therefore cannot put the old state back, whatever the timing.
//!
//! Records are keyed by (domain, code) (protocol 3.5). With
//! `redis.legacy_keys` every write of a code's state also goes to its
//! pre-3.5 key `su:1:link:{code}`, with the legacy message, for edges of
//! the previous version: each key is its own script run (they may live on
//! different Cluster nodes), and each publishes its own form after its own
//! write, so no edge hears of a change before its key holds it.

use crate::config::RedisConfig;
use crate::metrics::Metrics;
use crate::store::CodeState;
use redis::{AsyncCommands, Script};
use shorturl_common::inval::Invalidation;
use shorturl_common::keys;
use shorturl_common::record::{Lookup, Record};
use shorturl_common::redis::{ConnOptions, RedisConn, RedisTopology};
use shorturl_common::time::now_unix;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Compare-and-set of a link record (protocol section 3.1).
/// `KEYS[1]` the link key; `ARGV` version, value, TTL seconds, channel
/// (empty: publish nothing), message. Returns 1 if written, 0 if the stored
/// value is newer. A stored value that is not a protocol 2 line (a protocol
/// 1 value, garbage) counts as version 0.
pub const CAS_SCRIPT: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then
  local v = string.match(cur, '^2 (%d+) ') or string.match(cur, '^%- (%d+)$') or '0'
  if tonumber(v) > tonumber(ARGV[1]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 1
";

/// The Redis cache.
#[derive(Clone)]
pub struct Cache {
    conn: RedisConn,
    cfg: RedisConfig,
    metrics: Arc<Metrics>,
    cas: Arc<Script>,
    /// Cluster or Sentinel: changes wait for a replica (see `write_record`).
    replicated: bool,
    /// The changes' own connection (their `WAIT` blocks it); the same as
    /// `conn` on a single server, where nothing waits.
    changes: RedisConn,
}

/// What Redis said about a code.
pub enum CacheAnswer {
    Hit(Lookup),
    Miss,
    /// Redis failed or timed out: treat as a miss, don't write back.
    Error,
}

/// What a record write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Stored (and published, when asked).
    Stored,
    /// Redis holds a newer version: nothing was written.
    Stale,
}

/// Redis failed or timed out (already counted and logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("redis is unavailable")]
pub struct CacheDown;

/// Whether a record write also announces the change to the edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// A resolution write-back: nothing changed, nobody needs telling.
    No,
    /// A change (creation, edit, delete...): publish
    /// `<version> <code> <domain>` (and `<version> <code>` on the legacy key).
    Yes,
}

/// Which record key a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot<'a> {
    /// `su:1:link:{domain}/{code}`.
    Link { domain: &'a str, code: &'a str },
    /// `su:1:link:{code}`, for edges of the previous version.
    Legacy(&'a str),
}

impl Slot<'_> {
    fn key(&self) -> String {
        match *self {
            Slot::Link { domain, code } => keys::link_key(domain, code),
            Slot::Legacy(code) => keys::legacy_link_key(code),
        }
    }

    fn code(&self) -> &str {
        match *self {
            Slot::Link { code, .. } | Slot::Legacy(code) => code,
        }
    }

    fn message(&self, version: u64) -> String {
        match *self {
            Slot::Link { domain, code } => Invalidation {
                version,
                code,
                domain,
            }
            .encode(),
            Slot::Legacy(code) => Invalidation::encode_legacy(version, code),
        }
    }
}

impl Cache {
    /// Creates the client without connecting (connection happens on first use).
    pub fn new(cfg: RedisConfig, metrics: Arc<Metrics>) -> Result<Cache, redis::RedisError> {
        let opts = ConnOptions {
            connect_timeout: cfg.timeout.max(Duration::from_millis(100)),
            response_timeout: cfg.timeout,
        };
        let conn = RedisConn::new(&cfg.topology, opts)?;
        let replicated = !matches!(cfg.topology, RedisTopology::Single { .. });
        let changes = if replicated {
            RedisConn::new(&cfg.topology, opts)?
        } else {
            conn.clone()
        };
        Ok(Cache {
            conn,
            replicated,
            changes,
            cfg,
            metrics,
            cas: Arc::new(Script::new(CAS_SCRIPT)),
        })
    }

    /// The raw connection, for the Redis issuer backend.
    pub fn connection(&self) -> RedisConn {
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

    /// Looks up the record of `code` on `domain`; with no domain (an edge
    /// of the previous version asking), its legacy key.
    pub async fn get_record(&self, domain: Option<&str>, code: &str) -> CacheAnswer {
        let mut c = self.conn.clone();
        let key = match domain {
            Some(domain) => keys::link_key(domain, code),
            None => keys::legacy_link_key(code),
        };
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

    /// The stored form of `lookup` and its TTL: a record for min(record
    /// TTL, time to expiry), a negative (also a record already expired) for
    /// the negative TTL.
    fn stored(&self, lookup: &Lookup) -> (String, u64) {
        match lookup {
            Lookup::Found(r) => match self.record_ttl(r) {
                0 => (
                    Lookup::Negative(r.version).encode(),
                    self.cfg.negative_ttl.as_secs(),
                ),
                ttl => (r.encode(), ttl),
            },
            Lookup::Negative(_) => (lookup.encode(), self.cfg.negative_ttl.as_secs()),
        }
    }

    /// The CAS script's invocation for `lookup` under `slot`.
    fn cas_invocation(&self, slot: Slot<'_>, lookup: &Lookup, publish: Publish) -> redis::Cmd {
        let (value, ttl) = self.stored(lookup);
        let version = lookup.version();
        let (channel, msg) = match publish {
            Publish::No => ("", String::new()),
            Publish::Yes => (keys::INVAL_CHANNEL, slot.message(version)),
        };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.cas.get_hash())
            .arg(1)
            .arg(slot.key())
            .arg(version)
            .arg(value)
            .arg(ttl.max(1))
            .arg(channel)
            .arg(msg);
        cmd
    }

    /// Runs `pipe` (whose commands use the CAS script); after Redis lost its
    /// script cache (a restart), loads the script and runs it once more.
    async fn run_cas<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Option<T> {
        self.run_cas_on(self.conn.clone(), pipe).await
    }

    async fn run_cas_on<T: redis::FromRedisValue>(
        &self,
        mut c: RedisConn,
        pipe: &redis::Pipeline,
    ) -> Option<T> {
        let cas = Arc::clone(&self.cas);
        self.bounded(async move {
            match pipe.query_async::<T>(&mut c).await {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    cas.prepare_invoke().load_async(&mut c).await?;
                    pipe.query_async::<T>(&mut c).await
                }
                r => r,
            }
        })
        .await
    }

    /// Writes `lookup`, the state of `code`'s row, as the record of `code`
    /// on `domain` (the row's; `None` for a row bound to none, a code never
    /// issued or back in the pool) and, with `redis.legacy_keys`, under the
    /// legacy key, each unless Redis holds a newer version there; with
    /// [`Publish::Yes`] each key's message goes out in the same step as its
    /// write. The answer is the link key's (the legacy key's without one);
    /// either write failing fails the whole.
    ///
    /// On a Cluster or under Sentinel a change ([`Publish::Yes`]) also
    /// waits (`WAIT 1`, within the Redis timeout) until a replica has it,
    /// and counts as not written otherwise: a failover that promoted a
    /// replica without it would bring the previous state back (a deleted
    /// link resurrected), and the outbox retries until a replica holds it.
    /// A master with no replica connected (`ROLE`) is not waited for.
    pub async fn write_record(
        &self,
        code: &str,
        domain: Option<&str>,
        lookup: &Lookup,
        publish: Publish,
    ) -> Result<Written, CacheDown> {
        let wait = publish == Publish::Yes && self.replicated;
        self.write_slots(code, domain, lookup, publish, wait).await
    }

    /// [`Cache::write_record`] with the replica wait chosen by the caller.
    async fn write_slots(
        &self,
        code: &str,
        domain: Option<&str>,
        lookup: &Lookup,
        publish: Publish,
        wait_replica: bool,
    ) -> Result<Written, CacheDown> {
        let link = async {
            match domain {
                Some(domain) => {
                    let slot = Slot::Link { domain, code };
                    Some(self.write(slot, lookup, publish, wait_replica).await)
                }
                None => None,
            }
        };
        let legacy = async {
            if self.cfg.legacy_keys {
                let slot = Slot::Legacy(code);
                Some(self.write(slot, lookup, publish, wait_replica).await)
            } else {
                None
            }
        };
        // A change waiting for a replica writes one key after the other:
        // `WAIT` blocks the changes' connection, and the second key's
        // budget must not be spent queued behind the first's wait.
        let (link, legacy) = if wait_replica {
            let link = link.await;
            (link, legacy.await)
        } else {
            tokio::join!(link, legacy)
        };
        match (link, legacy) {
            (Some(Err(e)), _) | (_, Some(Err(e))) => Err(e),
            (Some(w), _) | (None, Some(w)) => w,
            (None, None) => Ok(Written::Stored),
        }
    }

    async fn write(
        &self,
        slot: Slot<'_>,
        lookup: &Lookup,
        publish: Publish,
        wait_replica: bool,
    ) -> Result<Written, CacheDown> {
        let code = slot.code();
        let mut pipe = redis::pipe();
        pipe.add_command(self.cas_invocation(slot, lookup, publish));
        if !wait_replica {
            return match self.run_cas::<(i64,)>(&pipe).await {
                Some((1,)) => Ok(Written::Stored),
                Some(_) => Ok(Written::Stale),
                None => Err(CacheDown),
            };
        }
        // Half the budget, so the answer comes back within it.
        let ms = u64::try_from(self.cfg.timeout.as_millis() / 2).unwrap_or(u64::MAX);
        // ROLE lists the replicas connected now: a master left without any
        // (its replica died) cannot lose the write to a promotion, and
        // failing would only hold every change in the outbox.
        pipe.cmd("ROLE").cmd("WAIT").arg(1).arg(ms.max(1));
        // WAIT blocks its connection: the changes have one of their own.
        match self
            .run_cas_on::<(i64, (String, i64, Vec<redis::Value>), i64)>(self.changes.clone(), &pipe)
            .await
            .map(|(w, (_, _, replicas), acks)| (w, if replicas.is_empty() { 1 } else { acks }))
        {
            Some((_, 0)) => {
                self.metrics.redis_error.inc();
                tracing::debug!(code, "redis: no replica acknowledged the change");
                Err(CacheDown)
            }
            Some((1, _)) => Ok(Written::Stored),
            Some(_) => Ok(Written::Stale),
            None => Err(CacheDown),
        }
    }

    /// Writes `lookup` under the (domain, code) key alone: a key the
    /// code's row no longer names (a recycled code's old link), or a copy
    /// that changes nothing (`migrate-keys`, [`Publish::No`]).
    pub async fn write_link_key(
        &self,
        domain: &str,
        code: &str,
        lookup: &Lookup,
        publish: Publish,
    ) -> Result<Written, CacheDown> {
        let slot = Slot::Link { domain, code };
        let wait = publish == Publish::Yes && self.replicated;
        self.write(slot, lookup, publish, wait).await
    }

    /// Caches what a resolution read from MySQL (no message): the code's
    /// row under its keys, and, when the resolution asked for another
    /// domain, what that key answers ([`CodeState::answer_for`]).
    /// Best-effort.
    pub async fn put_record(&self, code: &str, asked: Option<&str>, state: &CodeState) {
        let row_domain = state.domain.as_deref();
        let other = async {
            match asked {
                Some(domain) if Some(domain) != row_domain => {
                    let slot = Slot::Link { domain, code };
                    let answer = state.answer_for(domain);
                    let _ = self.write(slot, &answer, Publish::No, false).await;
                }
                _ => {}
            }
        };
        let own = self.write_slots(code, row_domain, &state.lookup, Publish::No, false);
        let _ = tokio::join!(other, own);
    }

    /// Caches a new link's record, announces it (an edge may hold a
    /// negative for a custom code from before it existed) and, for an issued
    /// code, writes its dedup entry. The two keys may live on different
    /// Cluster nodes, so they are two commands sent at once (on one
    /// server they share the connection's pipeline). Best-effort.
    pub async fn put_created(&self, code: &str, r: &Record, dedup_key: Option<&str>) {
        let found = Lookup::Found(r.clone());
        // No replica wait: a lost creation record is only a later miss.
        let record = self.write_slots(code, Some(&r.domain), &found, Publish::Yes, false);
        // Counted as one write-back: an error of the dedup write alone
        // counts only when the record was written.
        let dedup = async {
            let k = dedup_key?;
            let mut c = self.conn.clone();
            let ttl = self.cfg.dedup_ttl.as_secs();
            match tokio::time::timeout(self.cfg.timeout, c.set_ex::<_, _, ()>(k, code, ttl)).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("timeout".to_owned()),
            }
        };
        if let (Ok(_), Some(e)) = tokio::join!(record, dedup) {
            self.metrics.redis_error.inc();
            tracing::debug!(error = %e, "redis error (dedup write)");
        }
    }

    /// Seconds a record may live in Redis: until its expiry, or the whole
    /// record TTL for one with an expiry fallback (it answers after).
    pub fn record_ttl(&self, r: &Record) -> u64 {
        let ttl = self.cfg.record_ttl.as_secs();
        if r.has_fallback() {
            return ttl;
        }
        ttl.min(r.remaining_secs(now_unix()))
    }

    /// The code of a recent creation with dedup key `key`, refreshing its TTL.
    pub async fn get_dedup(&self, key: &str) -> Option<String> {
        let mut c = self.conn.clone();
        let ttl = self.cfg.dedup_ttl.as_secs();
        // GETEX: read and refresh the one-day window in one round trip.
        let cmd = redis::cmd("GETEX").arg(key).arg("EX").arg(ttl).to_owned();
        self.bounded(async move { cmd.query_async::<Option<String>>(&mut c).await })
            .await
            .flatten()
    }
}
