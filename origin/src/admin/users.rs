//! Console users: argon2id password checks (off the async threads) and the
//! sign-in rate limits (in-memory token buckets per user name and per
//! address: each origin limits on its own, so with N origins an attacker
//! gets at most N times the configured rate).

use crate::config::{AdminConfig, AdminUser};
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::{Argon2, PasswordHash, PasswordVerifier};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Why a password could not be hashed.
#[derive(Debug, thiserror::Error)]
#[error("cannot hash the password: {0}")]
pub struct HashError(String);

/// The argon2id PHC string of `password` (default parameters, random salt).
pub fn hash_password(password: &str) -> Result<String, HashError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// Whether `password` matches the PHC string `phc`.
pub fn verify(phc: &str, password: &str) -> bool {
    PasswordHash::new(phc)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A hash nobody knows the password of: checked for unknown user names so
/// that they take as long as known ones (no user-name oracle by timing).
fn decoy() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| {
        let random: [u8; 16] = rand::random();
        hash_password(&hex::encode(random)).unwrap_or_default()
    })
}

/// The configured user `name` whose password is `password`, checked on a
/// blocking thread (argon2 takes tens of milliseconds by design).
pub async fn check(
    users: Arc<Vec<AdminUser>>,
    name: String,
    password: String,
) -> Option<AdminUser> {
    tokio::task::spawn_blocking(move || {
        let user = users.iter().find(|u| u.name == name).cloned();
        let phc = user
            .as_ref()
            .map_or_else(|| decoy().to_owned(), |u| u.password_hash.clone());
        let ok = verify(&phc, &password);
        user.filter(|_| ok)
    })
    .await
    .ok()
    .flatten()
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Most keys the limiter remembers; past it, full buckets are forgotten.
const MAX_KEYS: usize = 10_000;

/// Failed sign-ins per user name and per address.
pub struct SigninLimiter {
    burst: f64,
    per_sec: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl SigninLimiter {
    /// From `admin.signin_burst` and `admin.signin_refill_per_min`.
    pub fn new(cfg: &AdminConfig) -> SigninLimiter {
        SigninLimiter {
            burst: f64::from(cfg.signin_burst),
            per_sec: f64::from(cfg.signin_refill_per_min) / 60.0,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn keys(user: &str, addr: Option<IpAddr>) -> [String; 2] {
        [
            format!("u:{user}"),
            format!("a:{}", addr.map(|a| a.to_string()).unwrap_or_default()),
        ]
    }

    fn refill(&self, b: &mut Bucket, now: Instant) {
        b.tokens =
            (b.tokens + now.duration_since(b.at).as_secs_f64() * self.per_sec).min(self.burst);
        b.at = now;
    }

    /// Whether another attempt for `user` from `addr` may be checked now
    /// (both buckets hold a token); `false` when either is empty.
    pub fn allows(&self, user: &str, addr: Option<IpAddr>) -> bool {
        let Ok(mut m) = self.buckets.lock() else {
            return false;
        };
        let now = Instant::now();
        Self::keys(user, addr).iter().all(|k| match m.get_mut(k) {
            Some(b) => {
                self.refill(b, now);
                b.tokens >= 1.0
            }
            None => true,
        })
    }

    /// Takes a token from both buckets after a failed attempt.
    pub fn failed(&self, user: &str, addr: Option<IpAddr>) {
        let Ok(mut m) = self.buckets.lock() else {
            return;
        };
        let now = Instant::now();
        if m.len() >= MAX_KEYS {
            let (burst, per_sec) = (self.burst, self.per_sec);
            m.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * per_sec < burst);
        }
        for k in Self::keys(user, addr) {
            let b = m.entry(k).or_insert(Bucket {
                tokens: self.burst,
                at: now,
            });
            self.refill(b, now);
            b.tokens = (b.tokens - 1.0).max(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_are_argon2id() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify(&h, "correct horse"));
        assert!(!verify(&h, "wrong"));
        assert!(!verify("not a hash", "x"));
    }

    #[test]
    fn failures_are_limited_per_user_and_per_address() {
        let cfg = AdminConfig {
            signin_burst: 2,
            signin_refill_per_min: 1,
            ..AdminConfig::default()
        };
        let l = SigninLimiter::new(&cfg);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(l.allows("ops", Some(a)));
        l.failed("ops", Some(a));
        l.failed("ops", Some(a));
        assert!(!l.allows("ops", Some(a)));
        // The user is locked from every address; the address for every user.
        assert!(!l.allows("ops", Some(b)));
        assert!(!l.allows("other", Some(a)));
        assert!(l.allows("other", Some(b)));
    }
}
