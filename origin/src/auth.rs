//! API callers: bearer keys (only their SHA-256 is configured), resolved
//! to a [`Caller`] (the app, its scopes and merchant binding), and a
//! per-app token-bucket creation limit.

use crate::bucket::{Bucket, Rate};
use crate::config::AppConfig;
use crate::error::ApiError;
use crate::tenancy::{Caller, Scope};
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct App {
    caller: Arc<Caller>,
    rate: Rate,
    bucket: Mutex<Bucket>,
}

/// The caller a configured app's key makes (the import command acts as
/// one without its key).
pub fn caller_of(a: &AppConfig) -> Caller {
    Caller::new(
        a.name.clone(),
        a.scopes.iter().copied(),
        a.merchants.iter().copied(),
    )
    .with_short_domain_targets(a.allow_short_domain_targets)
}

/// Authenticates callers and meters their creations.
pub struct Auth {
    by_hash: HashMap<[u8; 32], App>,
}

impl Auth {
    /// From the configured apps.
    pub fn new(apps: &[AppConfig]) -> Self {
        let now = Instant::now();
        let by_hash = apps
            .iter()
            .map(|a| {
                let rate = Rate {
                    per_sec: a.rate_per_sec,
                    burst: a.burst,
                };
                let app = App {
                    caller: Arc::new(caller_of(a)),
                    rate,
                    bucket: Mutex::new(Bucket::full(rate, now)),
                };
                (a.key_hash, app)
            })
            .collect();
        Auth { by_hash }
    }

    fn app(&self, headers: &HeaderMap) -> Result<&App, ApiError> {
        let unauthorized = || {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or unknown API key",
            )
        };
        let value = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(unauthorized)?;
        let (scheme, key) = value.trim().split_once(' ').ok_or_else(unauthorized)?;
        if !scheme.eq_ignore_ascii_case("bearer") || key.trim().is_empty() {
            return Err(unauthorized());
        }
        let hash: [u8; 32] = Sha256::digest(key.trim().as_bytes()).into();
        self.by_hash.get(&hash).ok_or_else(unauthorized)
    }

    /// The caller behind the request's key, or 401.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Caller>, ApiError> {
        self.app(headers).map(|a| Arc::clone(&a.caller))
    }

    /// Authenticates a caller allowed to create, and takes `n` creation
    /// tokens from its app's bucket: 401, 403 `insufficient_scope` or 429.
    pub fn admit_creations(&self, headers: &HeaderMap, n: u32) -> Result<Arc<Caller>, ApiError> {
        let app = self.creator(headers)?;
        let need = n.max(1);
        app.take(need, need)?;
        Ok(Arc::clone(&app.caller))
    }

    /// For a batch of `n` creations: authenticates a caller allowed to
    /// create and takes as many of `n` tokens as its bucket holds (at least
    /// one, else 429). Returns how many were granted: the items past them
    /// are refused one by one.
    pub fn admit_batch(&self, headers: &HeaderMap, n: u32) -> Result<u32, ApiError> {
        self.creator(headers)?.take(1, n.max(1))
    }

    fn creator(&self, headers: &HeaderMap) -> Result<&App, ApiError> {
        let app = self.app(headers)?;
        app.caller
            .require(Scope::LinksCreate)
            .map_err(crate::links::LinkError::from)?;
        Ok(app)
    }
}

impl App {
    /// Takes between `min` and `max` whole tokens (as many as there are),
    /// or answers 429 with the wait for `min`.
    fn take(&self, min: u32, max: u32) -> Result<u32, ApiError> {
        let mut b = self
            .bucket
            .lock()
            .map_err(|_| ApiError::unavailable("rate limiter poisoned"))?;
        let now = Instant::now();
        if let Err(wait) = b.take(self.rate, f64::from(min), now) {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "app {} is over its creation rate limit of {}/s",
                    self.caller.app, self.rate.per_sec
                ),
            )
            .retry_after(wait.as_secs_f64().ceil() as u64));
        }
        // `min` are taken; take what else is there, up to `max`.
        let extra = b
            .available(self.rate, now)
            .min(f64::from(max - min.min(max)));
        let _ = b.take(self.rate, extra, now);
        Ok(min + extra as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn auth(rate: f64, burst: f64, scopes: &[Scope]) -> Auth {
        let key_hash: [u8; 32] = Sha256::digest(b"secret-key").into();
        Auth::new(&[AppConfig {
            name: "demo".into(),
            key_hash,
            rate_per_sec: rate,
            burst,
            scopes: scopes.iter().copied().collect(),
            merchants: [55].into_iter().collect(),
            allow_short_domain_targets: false,
        }])
    }

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_str(v).unwrap(),
        );
        h
    }

    #[test]
    fn keys() {
        let a = auth(10.0, 10.0, &Scope::DEFAULT);
        let c = a.authenticate(&headers("Bearer secret-key")).unwrap();
        assert_eq!(c.app, "demo");
        assert!(c.can_see(Some("x"), Some(55)) && !c.can_see(Some("demo"), Some(91)));
        assert_eq!(
            a.authenticate(&headers("bearer secret-key")).unwrap().app,
            "demo"
        );
        for bad in ["Bearer nope", "Basic secret-key", "secret-key", "Bearer "] {
            assert_eq!(
                a.authenticate(&headers(bad)).unwrap_err().status,
                StatusCode::UNAUTHORIZED,
                "{bad}"
            );
        }
        assert_eq!(
            a.authenticate(&HeaderMap::new()).unwrap_err().kind,
            "unauthorized"
        );
    }

    #[test]
    fn burst_then_429() {
        let a = auth(0.001, 3.0, &Scope::DEFAULT);
        let h = headers("Bearer secret-key");
        for _ in 0..3 {
            assert!(a.admit_creations(&h, 1).is_ok());
        }
        let e = a.admit_creations(&h, 1).unwrap_err();
        assert_eq!(
            (e.status, e.kind),
            (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
        );
        assert!(e.retry_after.unwrap_or(0) >= 1);
    }

    #[test]
    fn creation_needs_the_scope_and_costs_no_token_without_it() {
        let a = auth(0.001, 1.0, &[Scope::LinksRead]);
        let h = headers("Bearer secret-key");
        let e = a.admit_creations(&h, 1).unwrap_err();
        assert_eq!(
            (e.status, e.kind),
            (StatusCode::FORBIDDEN, "insufficient_scope")
        );
        let a = auth(0.001, 5.0, &[Scope::Admin]);
        assert!(a.admit_creations(&h, 5).is_ok());
        assert_eq!(a.admit_creations(&h, 1).unwrap_err().kind, "rate_limited");
    }

    #[test]
    fn a_batch_takes_what_the_bucket_holds() {
        let a = auth(0.001, 5.0, &Scope::DEFAULT);
        let h = headers("Bearer secret-key");
        assert_eq!(a.admit_batch(&h, 3).unwrap(), 3);
        assert_eq!(a.admit_batch(&h, 10).unwrap(), 2);
        assert_eq!(a.admit_batch(&h, 1).unwrap_err().kind, "rate_limited");
        let r = auth(0.001, 5.0, &[Scope::LinksRead]);
        assert_eq!(r.admit_batch(&h, 1).unwrap_err().kind, "insufficient_scope");
    }
}
