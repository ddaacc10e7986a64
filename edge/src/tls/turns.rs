//! Turns for full handshakes (opt-in): at most `tls.handshakes_per_thread`
//! × `server.threads` handshakes in progress at once; a connection beyond
//! them waits for a turn before its handshake starts.
//!
//! Why: a handshake is the costliest thing an edge does for a connection
//! (≈ 0.3 ms of CPU: the key exchange and the signature), and the listener
//! accepts every pending connection at once. Saturated with new
//! connections, each worker's queue then holds dozens of handshakes ahead
//! of the requests of connections that have finished theirs, and those
//! requests wait: the kit's `edge-tls-handshake` read a p99 2.3–4.2× nginx's
//! at the same rate. nginx takes one new connection per event-loop turn,
//! so a connection in progress is served before the next is started.
//! Turns do the same within the process: the connections admitted but
//! waiting cost nothing (their ClientHello stays in the socket), and a
//! connection whose handshake is done is answered behind a few handshakes,
//! not behind all of them. The price (measured in `docs/perf.md`): ~9%
//! fewer handshakes a second and slower bursts of new HTTP/2 connections,
//! so the default is no turns.
//!
//! A turn is held until the handshake ends, so a client that stalls in
//! the middle of one holds its turn until `tls.handshake_timeout_secs`:
//! the wait for a turn is bounded (`tls.handshake_turn_wait_ms`), past it
//! the connection starts its handshake anyway. Clients that stall can
//! delay others' handshakes by at most that wait, never lock them out.

use pingora_prometheus::prometheus::IntCounter;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};

/// How a handshake got its turn (`shorturl_tls_handshake_turns_total{how}`).
pub struct TurnMetrics {
    /// A turn was free.
    pub immediate: IntCounter,
    /// Waited for a turn, and got one.
    pub waited: IntCounter,
    /// Waited the longest wait and started without a turn.
    pub overdue: IntCounter,
}

/// The turns of one edge's TLS listeners (every listener shares them: they
/// share the workers).
pub struct HandshakeTurns {
    /// `None`: unlimited (`tls.handshakes_per_thread: 0`).
    turns: Option<Semaphore>,
    wait: Duration,
}

/// A handshake's turn, given back when dropped.
pub enum Turn<'a> {
    Held(SemaphorePermit<'a>),
    /// Unlimited, or past the longest wait.
    Unheld,
}

impl HandshakeTurns {
    /// `turns` handshakes at once (0: unlimited), each other connection
    /// waiting at most `wait` for one.
    pub fn new(turns: usize, wait: Duration) -> HandshakeTurns {
        HandshakeTurns {
            turns: (turns > 0).then(|| Semaphore::new(turns)),
            wait,
        }
    }

    /// Waits for a turn (first come, first served), at most the longest
    /// wait.
    pub async fn take(&self, m: &TurnMetrics) -> Turn<'_> {
        let Some(s) = &self.turns else {
            return Turn::Unheld;
        };
        if let Ok(p) = s.try_acquire() {
            m.immediate.inc();
            return Turn::Held(p);
        }
        match tokio::time::timeout(self.wait, s.acquire()).await {
            Ok(Ok(p)) => {
                m.waited.inc();
                Turn::Held(p)
            }
            // Timed out (or closed, which it never is).
            _ => {
                m.overdue.inc();
                Turn::Unheld
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> TurnMetrics {
        let c = |n: &str| IntCounter::new(n, "test").unwrap_or_else(|e| panic!("{e}"));
        TurnMetrics {
            immediate: c("immediate"),
            waited: c("waited"),
            overdue: c("overdue"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_waits_for_a_turn_and_no_longer_than_the_wait() {
        let m = metrics();
        let turns = HandshakeTurns::new(2, Duration::from_millis(20));
        let a = turns.take(&m).await;
        let b = turns.take(&m).await;
        assert!(matches!((&a, &b), (Turn::Held(_), Turn::Held(_))));
        assert_eq!(m.immediate.get(), 2);
        // The third waits until a turn is given back...
        let third = turns.take(&m);
        tokio::pin!(third);
        tokio::select! {
            biased;
            _ = &mut third => panic!("a third turn while two are held"),
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
        drop(a);
        let c = third.await;
        assert!(matches!(c, Turn::Held(_)));
        assert_eq!(m.waited.get(), 1);
        // ...and past the longest wait starts without one.
        let started = tokio::time::Instant::now();
        assert!(matches!(turns.take(&m).await, Turn::Unheld));
        assert_eq!(started.elapsed(), Duration::from_millis(20));
        assert_eq!(m.overdue.get(), 1);
        drop((b, c));
        assert!(matches!(turns.take(&m).await, Turn::Held(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_turns_is_unlimited() {
        let m = metrics();
        let turns = HandshakeTurns::new(0, Duration::from_millis(20));
        let held: Vec<_> = futures_take(&turns, &m, 100).await;
        assert!(held.iter().all(|t| matches!(t, Turn::Unheld)));
        assert_eq!(m.immediate.get() + m.waited.get() + m.overdue.get(), 0);
    }

    async fn futures_take<'a>(t: &'a HandshakeTurns, m: &TurnMetrics, n: usize) -> Vec<Turn<'a>> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(t.take(m).await);
        }
        v
    }
}
