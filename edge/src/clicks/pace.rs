//! Short stints for the flusher on a core it shares with request threads.
//!
//! The kernel (HZ 250, no preemption, EEVDF) takes the core back from a
//! runnable thread only at a tick or when it sleeps: once the flusher is
//! picked while a saturated request thread waits (runnable, not sleeping,
//! so no wake-up preempts it), it keeps the core until the next tick, 4 ms
//! — every redirect queued meanwhile waits as long, which was the whole p99
//! of counting (issue 27). So its long pieces of work (draining the queues,
//! encoding a flush's batches) are cut into steps, and after
//! [`STINT`] of work it gives the core back (`sched_yield`): a request
//! thread waits for one stint at most, and the flusher still gets its fair
//! share, in small pieces. On an idle core a yield returns at once.

use std::time::{Duration, Instant};

/// Longest run of flusher work between two yields.
pub const STINT: Duration = Duration::from_micros(100);

/// Times the current stint; [`Pace::step`] yields when it is over.
#[derive(Debug)]
pub struct Pace {
    started: Instant,
    stint: Duration,
    /// Yields so far.
    pub yields: u64,
}

impl Default for Pace {
    fn default() -> Self {
        Pace::new(STINT)
    }
}

impl Pace {
    /// A pace of `stint` per run of work.
    pub fn new(stint: Duration) -> Pace {
        Pace {
            started: Instant::now(),
            stint,
            yields: 0,
        }
    }

    /// Called between steps of work: gives the core back once the stint
    /// has lasted [`STINT`], and starts the next one.
    #[inline]
    pub fn step(&mut self) {
        if self.started.elapsed() >= self.stint {
            // `sched_yield` on Linux.
            std::thread::yield_now();
            self.yields += 1;
            self.started = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_yields_only_once_the_stint_is_over() {
        let mut p = Pace::new(Duration::from_secs(3600));
        for _ in 0..1000 {
            p.step();
        }
        assert_eq!(p.yields, 0);
        let mut p = Pace::new(Duration::ZERO);
        p.step();
        p.step();
        assert_eq!(p.yields, 2);
    }
}
