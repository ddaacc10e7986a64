//! Token buckets ([`Bucket`]), and a budget of refusals per key
//! ([`Refusals`]). A limit takes its token *before* the work it meters, so
//! concurrent requests cannot all pass a check that only one of them should.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sustained rate and burst of a bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_sec: f64,
    pub burst: f64,
}

impl Rate {
    /// `n` per minute, `n` at once.
    pub fn per_minute(n: u32) -> Rate {
        Rate {
            per_sec: f64::from(n) / 60.0,
            burst: f64::from(n),
        }
    }
}

/// One bucket's state.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            tokens: rate.burst,
            at: now,
        }
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_sec).min(rate.burst);
        self.at = now;
    }

    /// When the bucket was last taken from or refilled.
    pub fn used_at(&self) -> Instant {
        self.at
    }

    /// Whole tokens available now.
    pub fn available(&mut self, rate: Rate, now: Instant) -> f64 {
        self.refill(rate, now);
        self.tokens.floor()
    }

    /// Takes `n` tokens, or says how long until there are `n`.
    pub fn take(&mut self, rate: Rate, n: f64, now: Instant) -> Result<(), Duration> {
        self.refill(rate, now);
        if self.tokens >= n {
            self.tokens -= n;
            return Ok(());
        }
        let wait = if rate.per_sec > 0.0 {
            (n - self.tokens) / rate.per_sec
        } else {
            f64::from(u32::MAX)
        };
        Err(Duration::from_secs_f64(wait.clamp(0.0, 1e9)))
    }

    /// Gives `n` tokens back (work that turned out not to count).
    pub fn give(&mut self, rate: Rate, n: f64) {
        self.tokens = (self.tokens + n).min(rate.burst);
    }
}

/// A budget of *refusals* per key that never lets concurrent attempts
/// overspend it and never refuses an attempt that succeeds: an attempt
/// reserves a token before its work ([`Refusals::reserve`]); one that is
/// refused spends it ([`Reservation::spend`]), one that succeeds gives it
/// back (dropping the reservation). When every token is reserved by
/// attempts in flight, the next attempt waits for them instead of being
/// refused; only with no token at all and none in flight does it get the
/// wait (429).
pub struct Refusals<K> {
    rate: Rate,
    max_keys: usize,
    map: Mutex<HashMap<K, Pending>>,
    changed: tokio::sync::Notify,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    bucket: Bucket,
    in_flight: u32,
}

/// One attempt's reserved token.
pub struct Reservation<'a, K: Hash + Eq + Clone> {
    owner: &'a Refusals<K>,
    key: K,
    spent: bool,
}

impl<K: Hash + Eq + Clone> Refusals<K> {
    /// `rate` refusals per key, at most `max_keys` idle keys remembered.
    pub fn new(rate: Rate, max_keys: usize) -> Self {
        Refusals {
            rate,
            max_keys,
            map: Mutex::new(HashMap::new()),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Pending>> {
        match self.map.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Reserves a token for an attempt of `key`, waiting while all are
    /// reserved by attempts in flight; `Err(wait)` when there is none.
    pub async fn reserve(&self, key: &K) -> Result<Reservation<'_, K>, Duration> {
        loop {
            let notified = self.changed.notified();
            {
                let mut m = self.lock();
                let now = Instant::now();
                if m.len() >= self.max_keys && !m.contains_key(key) {
                    let rate = self.rate;
                    m.retain(|_, p| p.in_flight > 0 || p.bucket.available(rate, now) < rate.burst);
                }
                let p = m.entry(key.clone()).or_insert_with(|| Pending {
                    bucket: Bucket::full(self.rate, now),
                    in_flight: 0,
                });
                let free = p.bucket.available(self.rate, now) - f64::from(p.in_flight);
                if free >= 1.0 {
                    p.in_flight += 1;
                    return Ok(Reservation {
                        owner: self,
                        key: key.clone(),
                        spent: false,
                    });
                }
                if p.in_flight == 0 {
                    let mut probe = p.bucket;
                    return Err(probe.take(self.rate, 1.0, now).err().unwrap_or_default());
                }
            }
            notified.await;
        }
    }

    fn finish(&self, key: &K, spent: bool) {
        {
            let mut m = self.lock();
            if let Some(p) = m.get_mut(key) {
                p.in_flight = p.in_flight.saturating_sub(1);
                if spent {
                    let _ = p.bucket.take(self.rate, 1.0, Instant::now());
                }
            }
        }
        self.changed.notify_waiters();
    }
}

impl<K: Hash + Eq + Clone> Reservation<'_, K> {
    /// The attempt was refused: the token is spent.
    pub fn spend(mut self) {
        self.spent = true;
    }
}

impl<K: Hash + Eq + Clone> Drop for Reservation<'_, K> {
    fn drop(&mut self) {
        self.owner.finish(&self.key, self.spent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_refills_and_gives_back() {
        let rate = Rate {
            per_sec: 1.0,
            burst: 2.0,
        };
        let t0 = Instant::now();
        let mut b = Bucket::full(rate, t0);
        assert!(b.take(rate, 1.0, t0).is_ok());
        assert!(b.take(rate, 1.0, t0).is_ok());
        let wait = b.take(rate, 1.0, t0).err();
        assert_eq!(wait, Some(Duration::from_secs(1)));
        assert!(b.take(rate, 1.0, t0 + Duration::from_millis(1000)).is_ok());
        b.give(rate, 5.0);
        assert_eq!(b.available(rate, t0 + Duration::from_millis(1000)), 2.0);
    }

    #[tokio::test]
    async fn refusals_never_overspend_and_successes_wait_their_turn() {
        let r = std::sync::Arc::new(Refusals::new(Rate::per_minute(2), 10));
        // Two in flight hold both tokens; a third waits for them.
        let a = r.reserve(&"app").await.ok();
        let b = r.reserve(&"app").await.ok();
        assert!(a.is_some() && b.is_some());
        let r2 = std::sync::Arc::clone(&r);
        let third =
            tokio::spawn(async move { r2.reserve(&"app").await.map(|t| t.spend()).is_ok() });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "waits while both tokens are reserved");
        drop(a); // a success: its token comes back, the third goes on
        assert!(third.await.unwrap_or(false));
        // `b` and the third were refused: nothing left, nobody in flight.
        if let Some(b) = b {
            b.spend();
        }
        assert!(r.reserve(&"app").await.is_err());
        assert!(
            r.reserve(&"other").await.is_ok(),
            "another key's budget is its own"
        );
    }
}
