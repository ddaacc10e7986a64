//! Tombstones: `code → version` for links an invalidation message announced
//! recently, so a lookup that read an older state before the message
//! arrived cannot store it afterwards.
//!
//! One table per shard, kept under the shard's lock together with the
//! entries: storing an answer (checks the tombstone) and handling a message
//! (raises the tombstone, drops the entry) are atomic with respect to each
//! other, so there is no window in which a superseded answer is cached.
//!
//! Every tombstone lives the same time, so least recently raised is also
//! soonest expired: expired ones are popped from the old end on each raise,
//! and when the table is full the oldest live one goes (a table that fills
//! means more changes per lifetime than it holds; the rest still get the
//! per-entry version check). Tombstones are not part of `max_bytes`; their
//! number is bounded by [`MAX_TOMBSTONES`] over the whole cache.

use lru::LruCache;

/// Tombstones kept over all shards (about 100 bytes each at most).
pub const MAX_TOMBSTONES: usize = 1 << 16;

#[derive(Debug, Clone, Copy)]
struct Tomb {
    version: u64,
    /// Deadline on the cache's clock.
    until: u64,
}

/// One shard's tombstones.
pub(super) struct Tombstones {
    map: LruCache<Box<str>, Tomb>,
    cap: usize,
}

impl Tombstones {
    pub(super) fn new(cap: usize) -> Tombstones {
        Tombstones {
            map: LruCache::unbounded(),
            cap: cap.max(1),
        }
    }

    /// Remembers that `code` is at `version` or later until `until`. A
    /// higher version already remembered is kept; the deadline is renewed.
    /// `code` is taken owned: its bytes become the key without a copy
    /// (a storm of messages raises one a message).
    pub(super) fn raise(&mut self, code: String, version: u64, now: u64, until: u64) {
        self.expire(now);
        if let Some(t) = self.map.get_mut(code.as_str()) {
            t.version = t.version.max(version);
            t.until = until;
            return;
        }
        self.map.put(code.into_boxed_str(), Tomb { version, until });
        while self.map.len() > self.cap {
            self.map.pop_lru();
        }
    }

    /// The version remembered for `code`, if its tombstone is still live.
    pub(super) fn version(&self, code: &str, now: u64) -> Option<u64> {
        self.map
            .peek(code)
            .filter(|t| now < t.until)
            .map(|t| t.version)
    }

    fn expire(&mut self, now: u64) {
        while self.map.peek_lru().is_some_and(|(_, t)| t.until <= now) {
            self.map.pop_lru();
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Tombstones;

    #[test]
    fn versions_rise_expire_and_stay_bounded() {
        let mut t = Tombstones::new(3);
        t.raise("aaaaaa".into(), 5, 0, 100);
        t.raise("aaaaaa".into(), 3, 10, 110);
        assert_eq!(
            t.version("aaaaaa", 50),
            Some(5),
            "a lower version lowered it"
        );
        assert_eq!(t.version("aaaaaa", 109), Some(5), "deadline not renewed");
        assert_eq!(t.version("aaaaaa", 110), None);
        assert_eq!(t.version("bbbbbb", 0), None);
        // Full: the oldest goes.
        t.raise("bbbbbb".into(), 1, 20, 120);
        t.raise("cccccc".into(), 1, 21, 121);
        t.raise("dddddd".into(), 1, 22, 122);
        assert_eq!(t.len(), 3);
        assert_eq!(t.version("aaaaaa", 30), None);
        assert_eq!(t.version("dddddd", 30), Some(1));
        // Expired ones are popped as new ones arrive.
        t.raise("eeeeee".into(), 1, 121, 221);
        assert_eq!(t.len(), 2);
    }
}
