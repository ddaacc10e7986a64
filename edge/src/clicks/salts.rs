//! The days' salts of unique visitors (protocol 3.7, section 3.4 "Unique
//! visitors"): one per UTC day for the whole fleet, in Redis only until an
//! hour after its day. The flusher fetches today's and tomorrow's (never a
//! request); request threads read them here without a lock.

use arc_swap::ArcSwap;
use redis::aio::ConnectionLike;
use shorturl_common::clicks::day_start;
use shorturl_common::clicks::uniq::{is_salt, salt_key, SALT_LEN};
use std::fmt::Write;
use std::sync::Arc;

/// A salt: its 32 hex digits (the HMAC key).
pub type Salt = [u8; SALT_LEN];

/// How long after its day a salt is kept (clicks counted just before
/// midnight are flushed after it).
pub const AFTER_DAY_SECS: u64 = 3600;

/// The salts this edge knows, by day start.
#[derive(Default)]
pub struct Salts {
    known: ArcSwap<Vec<(u64, Salt)>>,
}

impl Salts {
    /// The salt of the day starting at `day`, if known.
    #[inline]
    pub fn get(&self, day: u64) -> Option<Salt> {
        self.known
            .load()
            .iter()
            .find(|(d, _)| *d == day)
            .map(|(_, s)| *s)
    }

    /// Whether today's or tomorrow's salt is not known yet (or one to
    /// forget is still held): [`Salts::refresh`] has work.
    pub fn stale(&self, now: u64) -> bool {
        let today = day_start(now);
        let known = self.known.load();
        let has = |day| known.iter().any(|(d, _)| *d == day);
        !has(today)
            || !has(today + 86_400)
            || known
                .iter()
                .any(|(d, _)| now >= d + 86_400 + AFTER_DAY_SECS)
    }

    /// Makes sure today's and tomorrow's salts are known (created in Redis
    /// if no edge has yet), and forgets those an hour past their day.
    pub async fn refresh<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        now: u64,
    ) -> Result<(), redis::RedisError> {
        let today = day_start(now);
        let mut known: Vec<(u64, Salt)> = self
            .known
            .load()
            .iter()
            .filter(|(d, _)| now < d + 86_400 + AFTER_DAY_SECS)
            .copied()
            .collect();
        let mut changed = known.len() != self.known.load().len();
        for day in [today, today + 86_400] {
            if known.iter().any(|(d, _)| *d == day) {
                continue;
            }
            let fresh: [u8; SALT_LEN / 2] = rand::random();
            let mut hex = String::with_capacity(SALT_LEN);
            for b in fresh {
                let _ = write!(hex, "{b:02x}");
            }
            let ttl = (day + 86_400 + AFTER_DAY_SECS).saturating_sub(now).max(1);
            let key = salt_key(day);
            let (got,): (Option<String>,) = redis::pipe()
                .cmd("SET")
                .arg(&key)
                .arg(&hex)
                .arg("NX")
                .arg("EX")
                .arg(ttl)
                .ignore()
                .cmd("GET")
                .arg(&key)
                .query_async(conn)
                .await?;
            let Some(salt) = got.filter(|s| is_salt(s.as_bytes())) else {
                tracing::warn!(
                    day,
                    "the day's visitor salt in Redis is not a salt; not counting uniques"
                );
                continue;
            };
            let mut s = [0u8; SALT_LEN];
            s.copy_from_slice(salt.as_bytes());
            known.push((day, s));
            changed = true;
        }
        if changed {
            self.known.store(Arc::new(known));
        }
        Ok(())
    }
}
