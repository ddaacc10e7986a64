//! Password checks and attempt limits, shared by the console's sign-in
//! (`admin::users`) and password-protected links (`links::unlock`).
//!
//! An attempt passes three gates before its password is checked, in this
//! order, each answered at once when closed (no queue):
//! 1. a token of the failure budget per (name, address) and of the one
//!    per address ([`SigninLimiter::take`]), taken *before* the check so
//!    concurrent attempts cannot all pass; a success gives it back;
//! 2. a permit of the bound on concurrent checks ([`Checks`]): argon2id
//!    holds ~19 MiB for tens of milliseconds, so unbounded concurrent checks
//!    are a memory exhaustion;
//! 3. the check itself, on a blocking thread, holding the permit until it
//!    returns (a client that hangs up does not free it early).
//!
//! No budget is keyed on the name alone: a stranger spending a user's (or
//! a link's) budget from their address cannot lock the real user out of
//! theirs. Everything is in memory, per origin: with N origins an attacker
//! gets at most N times the configured rates.
use crate::bucket::{Bucket, Rate};
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::{Argon2, PasswordHash, PasswordVerifier};
use prometheus::IntCounter;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// The concurrent password checks of this origin and their counter.
pub struct Checks {
    permits: Arc<Semaphore>,
    /// Password checks started (`shorturl_admin_password_checks_total`).
    pub done: IntCounter,
}

impl Checks {
    /// At most `max` checks at once; `done` counts them.
    pub fn new(max: u32, done: IntCounter) -> Checks {
        Checks {
            permits: Arc::new(Semaphore::new(max as usize)),
            done,
        }
    }

    /// A permit for one check, or `None` when `max` are running.
    pub fn try_start(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).try_acquire_owned().ok()
    }

    /// Whether `password` matches the PHC string `phc`, checked on a
    /// blocking thread (argon2 takes tens of milliseconds by design) that
    /// holds `permit` until the check ends, even if this future is
    /// dropped. Counted when it starts.
    pub async fn verify(
        &self,
        permit: OwnedSemaphorePermit,
        phc: String,
        password: String,
    ) -> bool {
        self.done.inc();
        self.run(permit, phc, password).await
    }

    /// [`Checks::verify`] without counting it (the caller counted it when
    /// it started: the console's sign-in, before a test's hold).
    pub async fn run(&self, permit: OwnedSemaphorePermit, phc: String, password: String) -> bool {
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            verify(&phc, &password)
        })
        .await
        .unwrap_or(false)
    }
}

/// An attempt budget: `burst` attempts, `per_min` more a minute.
fn rate(burst: u32, per_min: u32) -> Rate {
    Rate {
        burst: f64::from(burst),
        per_sec: f64::from(per_min) / 60.0,
    }
}

/// What a bucket is kept for.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    /// One name (a console user, a password link) from one address.
    UserAt(String, Option<IpAddr>),
    /// One address, every name.
    Address(Option<IpAddr>),
}

/// Most buckets remembered; past it, full ones are forgotten, then the
/// least recently used half (a forgotten bucket starts full again: an
/// attacker with that many addresses has that much budget anyway).
const MAX_KEYS: usize = 10_000;

/// Attempt budgets per (name, address) and per address: the console's
/// user names, and password links' `<domain>/<code>`.
pub struct SigninLimiter {
    user_at: Rate,
    address: Rate,
    buckets: Mutex<HashMap<Key, Bucket>>,
}

impl SigninLimiter {
    /// `burst` attempts per (name, address) refilled at `per_min` a
    /// minute, and `address_burst` per address at `address_per_min`.
    pub fn new(
        burst: u32,
        per_min: u32,
        address_burst: u32,
        address_per_min: u32,
    ) -> SigninLimiter {
        SigninLimiter {
            user_at: rate(burst, per_min),
            address: rate(address_burst, address_per_min),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn rated(&self, user: &str, addr: Option<IpAddr>) -> [(Key, Rate); 2] {
        [
            (Key::UserAt(user.to_owned(), addr), self.user_at),
            (Key::Address(addr), self.address),
        ]
    }

    /// Takes a token from both budgets of `user` at `addr` when both hold
    /// one (`true`); takes nothing otherwise (`false`: refuse the attempt).
    pub fn take(&self, user: &str, addr: Option<IpAddr>) -> bool {
        let Ok(mut m) = self.buckets.lock() else {
            return false;
        };
        let now = Instant::now();
        if m.len() + 2 > MAX_KEYS {
            self.forget(&mut m, now);
        }
        let keys = self.rated(user, addr);
        // Both budgets or neither.
        let both = keys
            .iter()
            .all(|(k, rate)| m.get_mut(k).is_none_or(|b| b.available(*rate, now) >= 1.0));
        if !both {
            return false;
        }
        for (k, rate) in keys {
            let b = m.entry(k).or_insert_with(|| Bucket::full(rate, now));
            let _ = b.take(rate, 1.0, now);
        }
        true
    }

    /// Gives back the token [`take`](Self::take) took (the attempt
    /// succeeded, or was refused before its password was checked).
    pub fn give_back(&self, user: &str, addr: Option<IpAddr>) {
        let Ok(mut m) = self.buckets.lock() else {
            return;
        };
        for (k, rate) in self.rated(user, addr) {
            if let Some(b) = m.get_mut(&k) {
                b.give(rate, 1.0);
            }
        }
    }

    /// Makes room: drops full buckets, then the older half.
    fn forget(&self, m: &mut HashMap<Key, Bucket>, now: Instant) {
        let (user_at, address) = (self.user_at, self.address);
        m.retain(|k, b| {
            let rate = match k {
                Key::UserAt(..) => user_at,
                Key::Address(_) => address,
            };
            b.available(rate, now) < rate.burst
        });
        if m.len() >= MAX_KEYS / 2 {
            let mut ats: Vec<Instant> = m.values().map(Bucket::used_at).collect();
            let mid = ats.len() / 2;
            let (_, median, _) = ats.select_nth_unstable(mid);
            let median = *median;
            m.retain(|_, b| b.used_at() > median);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.lock().map(|m| m.len()).unwrap_or(0)
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

    fn limiter(burst: u32, address_burst: u32) -> SigninLimiter {
        SigninLimiter::new(burst, 1, address_burst, 1)
    }

    #[test]
    fn budgets_are_per_user_and_address_and_per_address_never_per_user() {
        let l = limiter(2, 3);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(l.take("ops", Some(a)));
        assert!(l.take("ops", Some(a)));
        assert!(!l.take("ops", Some(a)), "ops at a: spent");
        // The real user from another address is not locked out.
        assert!(l.take("ops", Some(b)));
        // The address's own budget (3) covers every user name.
        assert!(l.take("other", Some(a)));
        assert!(!l.take("third", Some(a)), "address a: spent");
        assert!(l.take("third", Some(b)));
        // A refused attempt took nothing: b still has one for "ops".
        assert!(l.take("ops", Some(b)));
        assert!(!l.take("ops", Some(b)));
    }

    #[test]
    fn tokens_come_back_on_success() {
        let l = limiter(1, 5);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..10 {
            assert!(l.take("ops", Some(a)));
            l.give_back("ops", Some(a));
        }
        assert!(l.take("ops", Some(a)));
        assert!(!l.take("ops", Some(a)));
        // Never above the burst.
        l.give_back("ops", Some(a));
        l.give_back("ops", Some(a));
        assert!(l.take("ops", Some(a)));
        assert!(!l.take("ops", Some(a)));
    }

    #[test]
    fn memory_is_bounded() {
        let l = limiter(5, 20);
        for i in 0..(3 * MAX_KEYS as u32) {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(i));
            assert!(l.take("ops", Some(ip)));
        }
        assert!(l.len() <= MAX_KEYS, "{}", l.len());
    }

    #[tokio::test]
    async fn concurrent_verifications_are_bounded_and_counted() {
        let h = hash_password("pw").unwrap();
        let checks = Checks::new(1, IntCounter::new("c", "c").unwrap());
        let p = checks.try_start().unwrap();
        assert!(checks.try_start().is_none(), "a second waits for nobody");
        assert!(checks.verify(p, h.clone(), "pw".into()).await);
        let p = checks.try_start().unwrap();
        assert!(!checks.verify(p, h, "wrong".into()).await);
        assert_eq!(checks.done.get(), 2);
    }
}
