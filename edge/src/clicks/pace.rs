//! Short stints for the flusher on a core it shares with request threads.
//!
//! The kernel (HZ 250, no preemption, EEVDF) takes the core back from a
//! runnable thread only at a tick or at a wake-up: once the flusher has
//! the core while a saturated request thread waits (runnable, so no
//! wake-up of its own preempts anything), it keeps it until the next tick,
//! 4 ms, and every redirect queued meanwhile waits as long — counting's
//! whole p99 (issue 27). So its long pieces of work (draining the queues,
//! encoding a flush's batches) are cut into steps, and after [`STINT`] of
//! work it sleeps for [`PAUSE`]: the request thread runs, and the flusher
//! comes back at its own wake-up, when the scheduler finds it due. A yield
//! would not do: the scheduler ignores it while the request thread has had
//! more than its share of the core, exactly when the flusher is behind
//! (measured: stints of 1.5–3.3 ms through yields). On an idle core the
//! pauses only make a flush take longer.

use std::time::{Duration, Instant};

/// Longest run of flusher work between two pauses.
pub const STINT: Duration = Duration::from_micros(100);
/// A pause (the timer slack makes it ~50 µs more): twice a stint, so
/// while the flusher has work the request threads keep two thirds of the
/// core (measured: p99 1.5–1.8 ms without dimensions, 2.5 ms with, against
/// 2.6–3.6 ms with 20 µs pauses; same throughput).
pub const PAUSE: Duration = Duration::from_micros(200);

/// Times the current stint; [`Pace::step`] pauses when it is over.
#[derive(Debug)]
pub struct Pace {
    started: Instant,
    stint: Duration,
    /// Pauses so far.
    pub pauses: u64,
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
            pauses: 0,
        }
    }

    /// Starts a stint: called when the flusher wakes for its next round of
    /// work, so the time it slept is not counted as work.
    #[inline]
    pub fn begin(&mut self) {
        self.started = Instant::now();
    }

    /// Called between steps of work: gives the core away for [`PAUSE`]
    /// once the stint has lasted [`STINT`], and starts the next one.
    #[inline]
    pub fn step(&mut self) {
        if self.started.elapsed() >= self.stint {
            std::thread::sleep(PAUSE);
            self.pauses += 1;
            self.started = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_pauses_only_once_the_stint_is_over() {
        let mut p = Pace::new(Duration::from_secs(3600));
        for _ in 0..1000 {
            p.step();
        }
        assert_eq!(p.pauses, 0);
        let mut p = Pace::new(Duration::ZERO);
        p.step();
        p.step();
        assert_eq!(p.pauses, 2);
    }
}
