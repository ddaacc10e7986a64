//! API callers: bearer keys (only their SHA-256 is configured) and a
//! per-app token-bucket creation limit.

use crate::config::AppConfig;
use crate::error::ApiError;
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

struct Bucket {
    tokens: f64,
    at: Instant,
}

struct App {
    name: String,
    rate: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
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
                let app = App {
                    name: a.name.clone(),
                    rate: a.rate_per_sec,
                    burst: a.burst,
                    bucket: Mutex::new(Bucket {
                        tokens: a.burst,
                        at: now,
                    }),
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

    /// The caller's app name, or 401.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        self.app(headers).map(|a| a.name.clone())
    }

    /// Authenticates and takes one creation token, or 401/429.
    pub fn admit_creation(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        let app = self.app(headers)?;
        let mut b = app
            .bucket
            .lock()
            .map_err(|_| ApiError::unavailable("rate limiter poisoned"))?;
        let now = Instant::now();
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * app.rate).min(app.burst);
        b.at = now;
        if b.tokens < 1.0 {
            let wait = ((1.0 - b.tokens) / app.rate).ceil() as u64;
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "app {} is over its creation rate limit of {}/s",
                    app.name, app.rate
                ),
            )
            .retry_after(wait));
        }
        b.tokens -= 1.0;
        Ok(app.name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn auth(rate: f64, burst: f64) -> Auth {
        let key_hash: [u8; 32] = Sha256::digest(b"secret-key").into();
        Auth::new(&[AppConfig {
            name: "demo".into(),
            key_hash,
            rate_per_sec: rate,
            burst,
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
        let a = auth(10.0, 10.0);
        assert_eq!(
            a.authenticate(&headers("Bearer secret-key")).unwrap(),
            "demo"
        );
        assert_eq!(
            a.authenticate(&headers("bearer secret-key")).unwrap(),
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
        let a = auth(0.001, 3.0);
        let h = headers("Bearer secret-key");
        for _ in 0..3 {
            assert!(a.admit_creation(&h).is_ok());
        }
        let e = a.admit_creation(&h).unwrap_err();
        assert_eq!(
            (e.status, e.kind),
            (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
        );
        assert!(e.retry_after.unwrap_or(0) >= 1);
    }
}
