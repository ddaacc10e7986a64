//! The shared TLS store in Redis (protocol section 3.3): certificate
//! bundles every edge reads, HTTP-01 challenge answers every edge serves,
//! the issuer lease and the ACME account.
//!
//! Its own connection (a [`RedisConn`] in the configured mode, connected
//! on first use because no Tokio runtime exists before Pingora starts),
//! with a budget of its own (`tls.redis_timeout_ms`): none of this is on
//! the redirect path.
//!
//! The keys live in different Cluster slots, so no write here spans two
//! keys atomically: a certificate is written in the order bundle, name,
//! generation, which is enough (an edge acts on a new generation, and by
//! then the bundle and the name are there).
//!
//! Key material (a bundle's private key, the ACME account) is sealed with
//! the store key on the way in and opened on the way out
//! (`shorturl_common::tls_seal`); a value that does not open is refused
//! (counted, logged with its key id) and a plaintext one from before
//! sealing is used and counted, until the issuer re-seals it ([`SharedStore::reseal`]).

use super::cert::{CertError, Certified, Source};
use super::metrics::TlsMetrics;
use crate::config::redis::RedisConfig;
use shorturl_common::keys;
use shorturl_common::redis::{ConnOptions, RedisConn};
use shorturl_common::tls::CertBundle;
use shorturl_common::tls_seal::{KeyUse, OpenError, SealError, StoreKeys};
use std::sync::Arc;
use std::time::Duration;

/// Why a shared-store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("redis timed out")]
    Timeout,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis client setup: {0}")]
    Setup(String),
    #[error("no store key to seal with (edge.tls.store_key)")]
    NoKey,
    #[error("{0}")]
    Seal(#[from] SealError),
    /// A stored value that does not open with this edge's keys.
    #[error("{0}")]
    Refused(OpenError),
}

/// Why a stored bundle is not used.
#[derive(Debug, thiserror::Error)]
enum BundleError {
    /// Its private key did not open (logged and counted by [`SharedStore::open`]).
    #[error("{0}")]
    Refused(OpenError),
    #[error("not a bundle: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Cert(#[from] CertError),
}

/// Lazily connected handle on the shared store.
pub struct SharedStore {
    conn: RedisConn,
    timeout: Duration,
    keys: Option<StoreKeys>,
    metrics: Arc<TlsMetrics>,
}

/// What [`SharedStore::reseal`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resealed {
    /// Values with key material looked at (bundles and the account).
    pub values: usize,
    /// Of those, re-sealed under the current key.
    pub resealed: usize,
    /// Of those, refused (left as they are).
    pub refused: usize,
}

/// Replaces `KEYS[1]` by `ARGV[2]` only if it still holds `ARGV[1]` (a
/// re-seal never overwrites a value written meanwhile).
const REPLACE_IF_SAME: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

/// Renews the lease only if `KEYS[1]` still holds `ARGV[1]`.
const RENEW_LEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// Releases the lease only if `KEYS[1]` still holds `ARGV[1]`.
const RELEASE_LEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

impl SharedStore {
    /// A store on the configured Redis; connects on first use. `keys`
    /// seal and open key material (required to write any).
    pub fn new(
        redis: &RedisConfig,
        timeout: Duration,
        keys: Option<StoreKeys>,
        metrics: Arc<TlsMetrics>,
    ) -> Result<Arc<Self>, redis::RedisError> {
        let opts = ConnOptions {
            connect_timeout: timeout,
            response_timeout: timeout,
        };
        Ok(Arc::new(SharedStore {
            conn: RedisConn::new(&redis.topology, opts)?,
            timeout,
            keys,
            metrics,
        }))
    }

    /// Opens the key material stored at `redis_key`, counting plaintext
    /// values and logging and counting refused ones (by key id, never the key).
    fn open(&self, redis_key: &str, value: &str) -> Result<(String, KeyUse), OpenError> {
        let opened = match &self.keys {
            Some(k) => k.open(redis_key, value),
            // No keys (no shared-store reader configured): plaintext only.
            None if value.starts_with("enc") => Err(OpenError::UnknownKey("-".into())),
            None => Ok(shorturl_common::tls_seal::Opened {
                plain: value.as_bytes().to_vec(),
                key: KeyUse::Plaintext,
            }),
        };
        let result = opened.and_then(|o| {
            String::from_utf8(o.plain)
                .map(|p| (p, o.key))
                .map_err(|_| OpenError::Malformed)
        });
        match &result {
            Ok((_, KeyUse::Plaintext)) => self.metrics.store_plaintext.inc(),
            Ok(_) => {}
            Err(e) => {
                self.metrics
                    .store_refused
                    .with_label_values(&[e.reason()])
                    .inc();
                tracing::warn!(key = %redis_key, reason = e.reason(), error = %e, "shared-store value refused");
            }
        }
        result
    }

    /// The id of the current store key (`None`: no key configured).
    pub fn key_id(&self) -> Option<&str> {
        self.keys.as_ref().map(StoreKeys::current_id)
    }

    fn seal(&self, redis_key: &str, plain: &str) -> Result<String, SharedError> {
        let keys = self.keys.as_ref().ok_or(SharedError::NoKey)?;
        Ok(keys.seal(redis_key, plain.as_bytes())?)
    }

    /// A stored bundle with its key opened, and how the key was stored.
    fn open_bundle(&self, name: &str, json: &str) -> Result<(CertBundle, KeyUse), BundleError> {
        let mut b: CertBundle = serde_json::from_str(json)?;
        let (key, used) = self
            .open(&keys::tls_cert_key(name), &b.key)
            .map_err(BundleError::Refused)?;
        b.key = key;
        Ok((b, used))
    }

    fn conn(&self) -> Result<RedisConn, SharedError> {
        Ok(self.conn.clone())
    }

    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, SharedError> {
        let mut conn = self.conn()?;
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut conn)).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(SharedError::Timeout),
        }
    }

    /// The store's generation (`None` when never written).
    pub async fn generation(&self) -> Result<Option<u64>, SharedError> {
        self.run(redis::cmd("GET").arg(keys::TLS_GEN)).await
    }

    /// Every certificate of the store. A bundle that does not decode is
    /// logged and skipped.
    pub async fn load_all(&self) -> Result<Vec<(String, Arc<Certified>)>, SharedError> {
        let names: Vec<String> = self
            .run(redis::cmd("SMEMBERS").arg(keys::TLS_NAMES))
            .await?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        for n in &names {
            cmd.arg(keys::tls_cert_key(n));
        }
        let values: Vec<Option<String>> = self.run(&cmd).await?;
        let mut out = Vec::new();
        for (name, value) in names.into_iter().zip(values) {
            let Some(v) = value else { continue };
            let decoded = self.open_bundle(&name, &v).and_then(|(b, _)| {
                Ok(Certified::from_pem(
                    b.cert.as_bytes(),
                    b.key.as_bytes(),
                    Source::Shared,
                )?)
            });
            match decoded {
                Ok(c) => out.push((name, Arc::new(c))),
                // Logged and counted where it was refused.
                Err(BundleError::Refused(_)) => {}
                Err(e) => tracing::warn!(%name, error = %e, "shared certificate skipped"),
            }
        }
        Ok(out)
    }

    /// The bundle stored for `name` with its private key opened (PEM);
    /// `None` when there is none or it was refused.
    pub async fn bundle(&self, name: &str) -> Result<Option<CertBundle>, SharedError> {
        let v: Option<String> = self
            .run(redis::cmd("GET").arg(keys::tls_cert_key(name)))
            .await?;
        Ok(v.and_then(|v| self.open_bundle(name, &v).ok().map(|(b, _)| b)))
    }

    /// Stores a certificate for `name` (its private key sealed) and then
    /// bumps the generation, so every edge picks it up at its next poll.
    /// Three commands in this order, not a transaction: the keys may live
    /// on different Cluster nodes, and the order alone makes a new
    /// generation imply the bundle.
    pub async fn put_bundle(&self, name: &str, bundle: &CertBundle) -> Result<(), SharedError> {
        let redis_key = keys::tls_cert_key(name);
        let sealed = CertBundle {
            key: self.seal(&redis_key, &bundle.key)?,
            ..bundle.clone()
        };
        let json = serde_json::to_string(&sealed).map_err(|e| SharedError::Setup(e.to_string()))?;
        self.run::<()>(redis::cmd("SET").arg(redis_key).arg(json))
            .await?;
        self.run::<()>(redis::cmd("SADD").arg(keys::TLS_NAMES).arg(name))
            .await?;
        self.run::<()>(redis::cmd("INCR").arg(keys::TLS_GEN)).await
    }

    /// The key authorisation for an HTTP-01 `token`, if one is pending.
    pub async fn challenge(&self, token: &str) -> Result<Option<String>, SharedError> {
        self.run(redis::cmd("GET").arg(keys::acme_challenge_key(token)))
            .await
    }

    /// Publishes a challenge answer for `ttl`.
    pub async fn put_challenge(
        &self,
        token: &str,
        key_auth: &str,
        ttl: Duration,
    ) -> Result<(), SharedError> {
        self.run(
            redis::cmd("SET")
                .arg(keys::acme_challenge_key(token))
                .arg(key_auth)
                .arg("PX")
                .arg(ttl.as_millis() as u64),
        )
        .await
    }

    /// Removes a challenge answer.
    pub async fn delete_challenge(&self, token: &str) -> Result<(), SharedError> {
        self.run(redis::cmd("DEL").arg(keys::acme_challenge_key(token)))
            .await
    }

    /// Takes the issuer lease for `node` if nobody holds it, or renews it if
    /// `node` does. True when `node` holds it afterwards.
    pub async fn hold_lease(&self, node: &str, ttl: Duration) -> Result<bool, SharedError> {
        let ms = ttl.as_millis() as u64;
        let renewed: i64 = self
            .run(
                redis::cmd("EVAL")
                    .arg(RENEW_LEASE)
                    .arg(1)
                    .arg(keys::ACME_LEASE)
                    .arg(node)
                    .arg(ms),
            )
            .await?;
        if renewed == 1 {
            return Ok(true);
        }
        let took: Option<String> = self
            .run(
                redis::cmd("SET")
                    .arg(keys::ACME_LEASE)
                    .arg(node)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms),
            )
            .await?;
        Ok(took.is_some())
    }

    /// Gives the lease up if `node` holds it (shutdown).
    pub async fn release_lease(&self, node: &str) -> Result<(), SharedError> {
        self.run::<i64>(
            redis::cmd("EVAL")
                .arg(RELEASE_LEASE)
                .arg(1)
                .arg(keys::ACME_LEASE)
                .arg(node),
        )
        .await
        .map(|_| ())
    }

    /// The stored ACME account credentials (JSON) for `directory_url`,
    /// opened; [`SharedError::Refused`] when they do not open.
    pub async fn account(&self, directory_url: &str) -> Result<Option<String>, SharedError> {
        let redis_key = keys::acme_account_key(directory_url);
        let v: Option<String> = self.run(redis::cmd("GET").arg(&redis_key)).await?;
        match v {
            None => Ok(None),
            Some(v) => self
                .open(&redis_key, &v)
                .map(|(json, _)| Some(json))
                .map_err(SharedError::Refused),
        }
    }

    /// Removes the ACME account credentials for `directory_url`.
    pub async fn delete_account(&self, directory_url: &str) -> Result<(), SharedError> {
        self.run(redis::cmd("DEL").arg(keys::acme_account_key(directory_url)))
            .await
    }

    /// Stores the ACME account credentials for `directory_url`, sealed.
    pub async fn put_account(&self, directory_url: &str, json: &str) -> Result<(), SharedError> {
        let redis_key = keys::acme_account_key(directory_url);
        let sealed = self.seal(&redis_key, json)?;
        self.run(redis::cmd("SET").arg(redis_key).arg(sealed)).await
    }

    /// Re-seals under the current store key every bundle and the account
    /// of `directory_url` that is stored in plaintext or under an old key
    /// (the issuer, after taking the lease and then periodically: how a
    /// rotation or the upgrade to sealed values completes). Each value is
    /// replaced only if unchanged since it was read; the generation moves
    /// when a bundle was re-sealed, so edges that could not open it retry.
    pub async fn reseal(&self, directory_url: &str) -> Result<Resealed, SharedError> {
        let mut done = Resealed::default();
        let names: Vec<String> = self
            .run(redis::cmd("SMEMBERS").arg(keys::TLS_NAMES))
            .await?;
        let mut bundles = 0;
        for name in names {
            let redis_key = keys::tls_cert_key(&name);
            let Some(v) = self
                .run::<Option<String>>(redis::cmd("GET").arg(&redis_key))
                .await?
            else {
                continue;
            };
            done.values += 1;
            let (b, used) = match self.open_bundle(&name, &v) {
                Ok(x) => x,
                Err(_) => {
                    done.refused += 1;
                    continue;
                }
            };
            if used == KeyUse::Current {
                continue;
            }
            let sealed = CertBundle {
                key: self.seal(&redis_key, &b.key)?,
                ..b
            };
            let json =
                serde_json::to_string(&sealed).map_err(|e| SharedError::Setup(e.to_string()))?;
            if self.replace_if_same(&redis_key, &v, &json).await? {
                done.resealed += 1;
                bundles += 1;
            }
        }
        let redis_key = keys::acme_account_key(directory_url);
        if let Some(v) = self
            .run::<Option<String>>(redis::cmd("GET").arg(&redis_key))
            .await?
        {
            done.values += 1;
            match self.open(&redis_key, &v) {
                Ok((_, KeyUse::Current)) => {}
                Ok((json, _)) => {
                    let sealed = self.seal(&redis_key, &json)?;
                    if self.replace_if_same(&redis_key, &v, &sealed).await? {
                        done.resealed += 1;
                    }
                }
                Err(_) => done.refused += 1,
            }
        }
        if bundles > 0 {
            self.run::<()>(redis::cmd("INCR").arg(keys::TLS_GEN))
                .await?;
        }
        self.metrics.store_resealed.inc_by(done.resealed as u64);
        Ok(done)
    }

    async fn replace_if_same(&self, key: &str, old: &str, new: &str) -> Result<bool, SharedError> {
        let n: i64 = self
            .run(
                redis::cmd("EVAL")
                    .arg(REPLACE_IF_SAME)
                    .arg(1)
                    .arg(key)
                    .arg(old)
                    .arg(new),
            )
            .await?;
        Ok(n == 1)
    }
}
