//! Retry delays after Apollo failures.

use std::time::Duration;

/// Exponential backoff: `initial`, doubling, capped at `max`.
#[derive(Debug)]
pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(super) fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    pub(super) fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub(super) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(120));
        let seq: Vec<u64> = (0..9).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(seq, [1, 2, 4, 8, 16, 32, 64, 120, 120]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }
}
