//! Resolution: Redis, then one MySQL read per (domain, code) at a time.
//!
//! A resolution asks for a code on a domain (protocol 3.5: the record key
//! is both), or, for an edge of the previous version, for the code alone
//! (its legacy key, and the code's own state).
//!
//! The answer read from MySQL is written back to Redis through the
//! compare-and-set script: a lookup that read a row before a change
//! committed can never replace the change's newer record in Redis.
//!
//! Concurrent misses for one code share one lookup through
//! [`SingleFlight`]. The leader's work reads Redis again before MySQL: a
//! caller that missed Redis just before the previous leader wrote the record
//! back, and reached the flight table just after that leader left it, finds
//! the record there instead of reading MySQL a second time. The work writes
//! its answer to Redis before the flight ends, so two waves of misses cannot
//! both reach MySQL (unless Redis itself is failing).

use super::{LinkError, Links};
use crate::cache::CacheAnswer;
use crate::store::{CodeState, DbError, LinkKey};
use shorturl_common::failpoint;
use shorturl_common::record::Lookup;
use shorturl_common::singleflight::{Role, SingleFlight};
use shorturl_common::time::now_unix;
use std::sync::Arc;

/// What a flight hands every waiter.
pub(super) type Flight = SingleFlight<String, Result<Lookup, DbError>>;

/// A new, empty flight table.
pub(super) fn flight() -> Arc<Flight> {
    SingleFlight::new()
}

impl Links {
    /// What `code` resolves to on `domain` (normalised; `None`: the code's
    /// own state, for an edge of the previous version): Redis, then MySQL
    /// (written back to Redis). Concurrent misses for one key share one
    /// MySQL lookup.
    pub async fn resolve(
        self: &Arc<Self>,
        domain: Option<&str>,
        code: &str,
    ) -> Result<Lookup, LinkError> {
        let first = self.cache.get_record(domain, code).await;
        if let CacheAnswer::Hit(l) = first {
            return Ok(l);
        }
        // Read Redis again under the flight only after a clean miss: after
        // an error, Redis is failing and a second try would cost a timeout.
        let reread = matches!(first, CacheAnswer::Miss);
        let me = Arc::clone(self);
        // `domain/code`, or the code alone (neither part holds a `/`).
        let key = match domain {
            Some(d) => format!("{d}/{code}"),
            None => code.to_owned(),
        };
        let got = self
            .flight
            .run(&key, || None, move |key| me.lookup_and_publish(key, reread))
            .await;
        match got {
            Ok((r, Role::Follower)) => {
                self.metrics.lock_get.inc();
                if r.is_err() {
                    self.metrics.lock_error.inc();
                }
                Ok(r?)
            }
            Ok((r, _)) => Ok(r?),
            Err(e) => {
                tracing::error!(code, error = %e, "lookup task failed");
                Err(LinkError::LookupAbandoned(e))
            }
        }
    }

    /// The leader's work for `key` (`domain/code` or `code`): Redis once
    /// more, else MySQL, whose answer is written back to Redis before the
    /// flight ends.
    async fn lookup_and_publish(
        self: Arc<Self>,
        key: String,
        reread: bool,
    ) -> Result<Lookup, DbError> {
        let (domain, code) = match key.split_once('/') {
            Some((d, c)) => (Some(d), c),
            None => (None, key.as_str()),
        };
        if reread {
            if let CacheAnswer::Hit(l) = self.cache.get_record(domain, code).await {
                return Ok(l);
            }
        }
        if failpoint::hit_once("origin.lookup.panic", code) {
            panic!("failpoint origin.lookup.panic: lookup of {code} dies");
        }
        let key = match domain {
            Some(d) => LinkKey::new(code, d),
            None => self.key_without_domain(code).await?,
        };
        let state: CodeState = self.store.lookup(&key, now_unix()).await?;
        if let Some(path) = failpoint::hold_path("origin.writeback.hold", code) {
            hold(path).await;
        }
        // Compare-and-set: if a change committed after the read above
        // has already reached Redis, this older answer is not written.
        self.cache.put_record(code, domain, &state).await;
        Ok(match domain {
            Some(d) => state.answer_for(d),
            None => state.lookup,
        })
    }
}

impl Links {
    /// The key an edge older than protocol 3.5 means when it asks for a
    /// code without a domain: a fleet code's, or the only row's of a
    /// per-domain code (none, or several since 3.6: no link, `- 0`).
    async fn key_without_domain(&self, code: &str) -> Result<LinkKey, DbError> {
        if let Some(k) = LinkKey::fleet(code) {
            return Ok(k);
        }
        let rows = self.store.domains_of_code(code, 2).await?;
        Ok(match rows.as_slice() {
            [only] => LinkKey::new(code, only.domain.as_deref().unwrap_or("")),
            _ => LinkKey::new(code, ""),
        })
    }
}

/// Test failpoint: waits while the file `path` exists (at most a minute),
/// after creating `<path>.held` so the test knows the lookup got here.
async fn hold(path: &str) {
    let _ = std::fs::write(format!("{path}.held"), b"");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::path::Path::new(path).exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
