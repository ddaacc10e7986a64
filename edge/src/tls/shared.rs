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

use super::cert::{Certified, Source};
use crate::config::RedisConfig;
use shorturl_common::keys;
use shorturl_common::redis::{ConnOptions, RedisConn};
use shorturl_common::tls::CertBundle;
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
}

/// Lazily connected handle on the shared store.
pub struct SharedStore {
    conn: RedisConn,
    timeout: Duration,
}

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
    /// A store on the configured Redis; connects on first use.
    pub fn new(redis: &RedisConfig, timeout: Duration) -> Result<Arc<Self>, redis::RedisError> {
        let opts = ConnOptions {
            connect_timeout: timeout,
            response_timeout: timeout,
        };
        Ok(Arc::new(SharedStore {
            conn: RedisConn::new(&redis.topology, opts)?,
            timeout,
        }))
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
            match decode_bundle(&v) {
                Ok(c) => out.push((name, Arc::new(c))),
                Err(e) => tracing::warn!(%name, error = %e, "shared certificate skipped"),
            }
        }
        Ok(out)
    }

    /// The bundle stored for `name`, if any (not decoded).
    pub async fn bundle(&self, name: &str) -> Result<Option<CertBundle>, SharedError> {
        let v: Option<String> = self
            .run(redis::cmd("GET").arg(keys::tls_cert_key(name)))
            .await?;
        Ok(v.and_then(|v| serde_json::from_str(&v).ok()))
    }

    /// Stores a certificate for `name` and then bumps the generation, so
    /// every edge picks it up at its next poll. Three commands in this
    /// order, not a transaction: the keys may live on different Cluster
    /// nodes, and the order alone makes a new generation imply the bundle.
    pub async fn put_bundle(&self, name: &str, bundle: &CertBundle) -> Result<(), SharedError> {
        let json = serde_json::to_string(bundle).map_err(|e| SharedError::Setup(e.to_string()))?;
        self.run::<()>(redis::cmd("SET").arg(keys::tls_cert_key(name)).arg(json))
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

    /// The stored ACME account credentials (JSON) for `directory_url`.
    pub async fn account(&self, directory_url: &str) -> Result<Option<String>, SharedError> {
        self.run(redis::cmd("GET").arg(keys::acme_account_key(directory_url)))
            .await
    }

    /// Removes the ACME account credentials for `directory_url`.
    pub async fn delete_account(&self, directory_url: &str) -> Result<(), SharedError> {
        self.run(redis::cmd("DEL").arg(keys::acme_account_key(directory_url)))
            .await
    }

    /// Stores the ACME account credentials for `directory_url`.
    pub async fn put_account(&self, directory_url: &str, json: &str) -> Result<(), SharedError> {
        self.run(
            redis::cmd("SET")
                .arg(keys::acme_account_key(directory_url))
                .arg(json),
        )
        .await
    }
}

/// Decodes a stored bundle into a servable certificate.
pub fn decode_bundle(json: &str) -> Result<Certified, String> {
    let b: CertBundle = serde_json::from_str(json).map_err(|e| e.to_string())?;
    Certified::from_pem(b.cert.as_bytes(), b.key.as_bytes(), Source::Shared)
        .map_err(|e| e.to_string())
}
