//! Subscription generations: how the edge forgets, in one step and without
//! touching any entry, everything it cached while invalidation messages
//! may have been missed.
//!
//! Every entry is stamped with the generation that was current when its
//! lookup *started*. The invalidation subscriber opens a new generation at
//! every change of the subscription (lost, established). Losing it, it
//! later *retires* the generations before the loss (when the subscription
//! is back, or when the grace period runs out), and from then on their
//! entries read as absent. A read pays one atomic load and one compare for
//! this; no lock, no allocation, no syscall.
//!
//! The generation opened when a subscription is established is the
//! *subscribed* one: only a lookup that started in it is sure that any
//! change after its read is announced, so only its answer may be cached
//! for the full TTL (the lookup path caps the others).
//!
//! Generations are `u32` and compared by wrapping distance, so the counter
//! may wrap (it moves twice per lost subscription; entries live seconds).

use super::entry::Entry;
use std::sync::atomic::{
    AtomicU32, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Release,
};

/// A subscription generation (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation(pub(super) u32);

impl Generation {
    /// True when `self` is `other` or a later generation.
    fn at_or_after(self, other: Generation) -> bool {
        self.0.wrapping_sub(other.0) as i32 >= 0
    }
}

/// The current generation and the oldest one still live. Written only by
/// the invalidation subscriber (one task), read by every lookup and hit.
#[derive(Default)]
pub(super) struct Generations {
    current: AtomicU32,
    oldest_live: AtomicU32,
    /// The subscribed generation plus one; 0 while not subscribed.
    subscribed: AtomicU64,
}

impl Generations {
    pub(super) fn current(&self) -> Generation {
        Generation(self.current.load(Acquire))
    }

    /// Opens a new generation and returns it.
    pub(super) fn begin(&self) -> Generation {
        Generation(self.current.fetch_add(1, AcqRel).wrapping_add(1))
    }

    /// Entries of generations before `g` read as absent from now on (never
    /// moves backwards).
    pub(super) fn retire_before(&self, g: Generation) {
        if g.at_or_after(self.oldest_live()) {
            self.oldest_live.store(g.0, Release);
        }
    }

    pub(super) fn oldest_live(&self) -> Generation {
        Generation(self.oldest_live.load(Acquire))
    }

    /// Records the subscribed generation (`None`: not subscribed).
    pub(super) fn set_subscribed(&self, g: Option<Generation>) {
        self.subscribed
            .store(g.map_or(0, |g| u64::from(g.0) + 1), Release);
    }

    /// True when `g` is the subscribed generation.
    pub(super) fn is_subscribed_in(&self, g: Generation) -> bool {
        self.subscribed.load(Acquire) == u64::from(g.0) + 1
    }
}

/// What "still valid" means at one moment: the clock and the oldest live
/// generation, read once per operation.
#[derive(Clone, Copy)]
pub(super) struct Horizon {
    /// Now, on the entries' clock.
    pub(super) now: u64,
    pub(super) oldest_live: Generation,
}

impl Horizon {
    /// True when `e` may be served: within its TTL and not retired.
    #[inline]
    pub(super) fn admits(&self, e: &Entry) -> bool {
        self.now < e.fresh_until && Generation(e.gen).at_or_after(self.oldest_live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_survives_wrapping() {
        let g = |n| Generation(n);
        assert!(g(5).at_or_after(g(5)));
        assert!(g(6).at_or_after(g(5)));
        assert!(!g(4).at_or_after(g(5)));
        assert!(g(1).at_or_after(g(u32::MAX)));
        assert!(!g(u32::MAX).at_or_after(g(1)));
        let gens = Generations::default();
        gens.current.store(u32::MAX, Release);
        let next = gens.begin();
        assert_eq!(next, g(0));
        gens.retire_before(next);
        assert_eq!(gens.oldest_live(), g(0));
        // Retiring an older generation never brings entries back.
        gens.retire_before(g(u32::MAX));
        assert_eq!(gens.oldest_live(), g(0));
        assert!(!gens.is_subscribed_in(g(0)));
        gens.set_subscribed(Some(g(0)));
        assert!(gens.is_subscribed_in(g(0)) && !gens.is_subscribed_in(g(1)));
        gens.set_subscribed(None);
        assert!(!gens.is_subscribed_in(g(0)));
    }
}
