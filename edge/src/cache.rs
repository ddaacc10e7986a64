//! The in-process cache: code → what the code resolves to, bounded by bytes.
//!
//! TinyUFO (the admission/eviction policy under `pingora-memory-cache`) keys
//! its entries by a 64-bit hash only, so every entry keeps its code and a get
//! compares it: two codes whose hashes collide can evict each other but can
//! never be answered with each other's URL. Weights are the entry's
//! approximate heap size, so `max_bytes` bounds memory rather than a count.

use shorturl_common::record::Record;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tinyufo::TinyUfo;

/// What a code resolved to, as cached.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A record (check expiry and domain binding before answering).
    Found(Arc<Record>),
    /// Known not to resolve.
    Negative,
    /// The lookup failed (Redis and origin both unavailable); remembered
    /// briefly so a storm of requests does not hammer a failing origin.
    Unavailable,
}

/// One cache entry. The code is kept to detect hash collisions.
#[derive(Debug)]
pub struct Entry {
    code: Box<str>,
    /// The cached answer.
    pub answer: Answer,
    fresh_until: Instant,
}

/// Fixed per-entry overhead added to the payload bytes (Arc, Box, TinyUFO node).
const ENTRY_OVERHEAD: usize = 96;

/// Bytes-bounded TTL cache of code lookups, safe to share between threads.
pub struct LocalCache {
    inner: TinyUfo<u64, Arc<Entry>>,
    hasher: std::hash::RandomState,
}

impl LocalCache {
    /// A cache holding at most about `max_bytes` of entries.
    pub fn new(max_bytes: usize) -> Self {
        // Estimated entry count sizes TinyUFO's frequency sketch.
        let estimated = (max_bytes / 160).max(64);
        LocalCache {
            inner: TinyUfo::new(max_bytes, estimated),
            hasher: std::hash::RandomState::new(),
        }
    }

    fn key(&self, code: &str) -> u64 {
        self.hasher.hash_one(code)
    }

    /// The fresh entry for `code`, if any. Stale entries are treated as absent.
    pub fn get(&self, code: &str, now: Instant) -> Option<Arc<Entry>> {
        let e = self.inner.get(&self.key(code))?;
        (*e.code == *code && now < e.fresh_until).then_some(e)
    }

    /// Stores `answer` for `code` for `ttl`. Positive answers are always
    /// admitted (they were just paid for); negative and failed ones go
    /// through TinyUFO's admission so an enumeration scan cannot flush the
    /// hot set.
    pub fn put(&self, code: &str, answer: Answer, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let payload = match &answer {
            Answer::Found(r) => r.domain.len() + r.url.len() + 48,
            Answer::Negative | Answer::Unavailable => 0,
        };
        let weight = (ENTRY_OVERHEAD + code.len() + payload).min(u16::MAX as usize) as u16;
        let force = matches!(answer, Answer::Found(_));
        let entry = Arc::new(Entry {
            code: code.into(),
            answer,
            fresh_until: Instant::now() + ttl,
        });
        let key = self.key(code);
        if force {
            self.inner.force_put(key, entry, weight);
        } else {
            self.inner.put(key, entry, weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(url: &str) -> Answer {
        Answer::Found(Arc::new(Record {
            expires_at: u64::MAX,
            domain: "a.com".into(),
            url: url.into(),
        }))
    }

    #[test]
    fn get_put_and_ttl() {
        let c = LocalCache::new(1 << 20);
        let now = Instant::now();
        assert!(c.get("abcdef", now).is_none());
        c.put("abcdef", rec("https://x/1"), Duration::from_secs(30));
        c.put("gone00", Answer::Negative, Duration::from_millis(1));
        let e = c.get("abcdef", Instant::now());
        assert!(
            matches!(e.as_deref().map(|e| &e.answer), Some(Answer::Found(r)) if r.url == "https://x/1")
        );
        assert!(
            c.get("gone00", Instant::now() + Duration::from_millis(5))
                .is_none(),
            "stale entry served"
        );
        // Case matters.
        assert!(c.get("ABCDEF", Instant::now()).is_none());
    }

    #[test]
    fn bounded_by_bytes() {
        // 64 KiB with ~2 KiB entries holds a few dozen, not thousands.
        let c = LocalCache::new(64 << 10);
        let url = format!("https://x/{}", "a".repeat(2000));
        for i in 0..2000 {
            c.put(&format!("code{i:04}"), rec(&url), Duration::from_secs(60));
        }
        let now = Instant::now();
        let kept = (0..2000)
            .filter(|i| c.get(&format!("code{i:04}"), now).is_some())
            .count();
        assert!(
            kept > 0 && kept <= 40,
            "kept {kept} entries of ~2 KiB in 64 KiB"
        );
    }
}
