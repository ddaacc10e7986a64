//! One coalescing primitive for every "many callers miss the same key" path
//! (the edge's record lookups, the origin's MySQL lookups).
//!
//! The first caller for a key becomes the leader: it registers the key and
//! *spawns* the work as its own task, so a caller that is cancelled (a client
//! that disconnects) can neither cancel the work nor leave a stale entry.
//! Everyone, the leader included, waits on a `watch` channel for the value.
//! The task holds a drop guard that removes the entry when the task ends in
//! any way, a panic included; waiters of a task that died get
//! [`FlightError::Abandoned`], and the next caller starts a new flight.
//!
//! The work is expected to publish its value (e.g. store it in a cache)
//! before it returns: the entry is removed *after* that, so a later caller
//! finds either the entry or, through `recheck`, the published value.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// How a caller got its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Started the work.
    Leader,
    /// Joined another caller's in-flight work.
    Follower,
    /// No flight was running and `recheck` found the value already published.
    Rechecked,
}

/// Why no value came out of a flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlightError {
    /// The work ended without a value (it panicked or its runtime shut down).
    #[error("the in-flight lookup ended without a result")]
    Abandoned,
}

type Slot<V> = watch::Receiver<Option<V>>;

/// Concurrent calls for one key share one execution of the work.
pub struct SingleFlight<K, V> {
    table: Mutex<HashMap<K, Slot<V>>>,
    /// Followers waiting on a flight right now (a gauge for ops: how many
    /// requests a slow lookup holds up).
    waiting: AtomicUsize,
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        SingleFlight {
            table: Mutex::new(HashMap::new()),
            waiting: AtomicUsize::new(0),
        }
    }
}

/// Counts a follower as waiting until it has its value or is cancelled.
struct Waiting<'a>(Option<&'a AtomicUsize>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.0 {
            w.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl<K, V> SingleFlight<K, V> {
    fn lock(&self) -> MutexGuard<'_, HashMap<K, Slot<V>>> {
        // A poisoned table is still consistent: entries are only inserted
        // and removed whole.
        match self.table.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        }
    }
}

/// Removes the leader's entry however its task ends.
struct Guard<K: Eq + Hash, V> {
    flight: Arc<SingleFlight<K, V>>,
    key: Option<K>,
}

impl<K: Eq + Hash, V> Drop for Guard<K, V> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.flight.lock().remove(&k);
        }
    }
}

impl<K, V> SingleFlight<K, V>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// An empty table.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Number of flights in progress (metrics, tests).
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    /// Number of callers waiting on another caller's flight (metrics, tests).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The value for `key`: joins the flight in progress, or, when there is
    /// none and `recheck` finds nothing, spawns `work(key)` as the leader.
    ///
    /// `recheck` runs under the table lock only when no flight is
    /// registered: it should look where the work publishes its value (a
    /// previous leader may have finished between the caller's miss and now).
    pub async fn run<Q, R, F, Fut>(
        self: &Arc<Self>,
        key: &Q,
        recheck: R,
        work: F,
    ) -> Result<(V, Role), FlightError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        R: FnOnce() -> Option<V>,
        F: FnOnce(K) -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let (mut rx, role) = {
            let mut table = self.lock();
            if let Some(rx) = table.get(key) {
                self.waiting.fetch_add(1, Ordering::Relaxed);
                (rx.clone(), Role::Follower)
            } else {
                if let Some(v) = recheck() {
                    return Ok((v, Role::Rechecked));
                }
                let (tx, rx) = watch::channel(None);
                let owned = key.to_owned();
                table.insert(owned.clone(), rx.clone());
                drop(table);
                let guard = Guard {
                    flight: Arc::clone(self),
                    key: Some(owned.clone()),
                };
                // Boxed before spawning: tokio moves a task's future by value
                // several times (spawn, bind, each stage change), and a
                // lookup's state is kilobytes; a box makes every move a
                // pointer (callgrind: ~100 KB of memcpy per edge miss before).
                let fut = Box::pin(work(owned));
                tokio::spawn(async move {
                    let v = fut.await;
                    drop(guard);
                    let _ = tx.send(Some(v));
                });
                (rx, Role::Leader)
            }
        };
        let _waiting = Waiting((role == Role::Follower).then_some(&self.waiting));
        let got = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|v| v.clone());
        got.map(|v| (v, role)).ok_or(FlightError::Abandoned)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    type Joined = Result<(u64, Role), FlightError>;

    /// One caller of `sf.run("k", …)` with `work`, as its own task.
    fn spawn_caller<F, Fut>(
        sf: &Arc<SingleFlight<String, u64>>,
        work: F,
    ) -> tokio::task::JoinHandle<Joined>
    where
        F: FnOnce(String) -> Fut + Send + 'static,
        Fut: Future<Output = u64> + Send + 'static,
    {
        let sf = Arc::clone(sf);
        tokio::spawn(async move { sf.run("k", || None, work).await })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_share_one_execution() {
        let sf: Arc<SingleFlight<String, u64>> = SingleFlight::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..200 {
            let sf = Arc::clone(&sf);
            let calls = Arc::clone(&calls);
            tasks.push(tokio::spawn(async move {
                sf.run(
                    "k",
                    || None,
                    move |_| async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        7
                    },
                )
                .await
            }));
        }
        let mut leaders = 0;
        for t in tasks {
            let (v, role) = t.await.unwrap().unwrap();
            assert_eq!(v, 7);
            leaders += usize::from(role == Role::Leader);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(leaders, 1);
        assert_eq!(sf.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_panicking_leader_leaves_no_entry_behind() {
        let sf: Arc<SingleFlight<String, u64>> = SingleFlight::new();
        let r = sf
            .run("k", || None, |_| async { panic!("test: leader dies") })
            .await;
        assert_eq!(r, Err(FlightError::Abandoned));
        assert_eq!(sf.in_flight(), 0, "dead leader left its entry");
        let r = sf.run("k", || None, |_| async { 3 }).await;
        assert_eq!(r, Ok((3, Role::Leader)));
    }

    #[tokio::test]
    async fn followers_of_a_dead_leader_are_released() {
        let sf: Arc<SingleFlight<String, u64>> = SingleFlight::new();
        let leader = spawn_caller(&sf, |_| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            panic!("test: leader dies")
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let follower = sf.run("k", || None, |_| async { 9 }).await;
        assert_eq!(follower, Err(FlightError::Abandoned));
        assert_eq!(leader.await.unwrap(), Err(FlightError::Abandoned));
        assert_eq!(sf.in_flight(), 0);
    }

    #[tokio::test]
    async fn recheck_answers_when_no_flight_runs() {
        let sf: Arc<SingleFlight<String, u64>> = SingleFlight::new();
        let r = sf
            .run(
                "k",
                || Some(5),
                |_| async { unreachable!("work must not run") },
            )
            .await;
        assert_eq!(r, Ok((5, Role::Rechecked)));
    }

    #[tokio::test]
    async fn a_cancelled_caller_does_not_cancel_the_work() {
        let sf: Arc<SingleFlight<String, u64>> = SingleFlight::new();
        let done = Arc::new(AtomicUsize::new(0));
        let d = Arc::clone(&done);
        let caller = sf.run(
            "k",
            || None,
            move |_| async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                d.fetch_add(1, Ordering::SeqCst);
                1
            },
        );
        // Drop the leader's own wait after 5 ms.
        let _ = tokio::time::timeout(Duration::from_millis(5), caller).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(done.load(Ordering::SeqCst), 1, "work was cancelled");
        assert_eq!(sf.in_flight(), 0);
    }

    /// Followers count as waiting from joining until they have the value,
    /// or until they give up (a cancelled request).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_counts_the_followers_until_they_leave() {
        let sf: Arc<SingleFlight<String, u64>> = SingleFlight::new();
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let leader = spawn_caller(&sf, |_| async move {
            let _ = gate.await;
            4
        });
        while sf.in_flight() == 0 {
            tokio::task::yield_now().await;
        }
        let followers: Vec<_> = (0..3).map(|_| spawn_caller(&sf, |_| async { 0 })).collect();
        let quitter = spawn_caller(&sf, |_| async { 0 });
        while sf.waiting() < 4 {
            tokio::task::yield_now().await;
        }
        quitter.abort();
        let _ = quitter.await;
        assert_eq!(sf.waiting(), 3, "a cancelled follower still counted");
        let _ = release.send(());
        assert_eq!(leader.await.unwrap(), Ok((4, Role::Leader)));
        for f in followers {
            assert_eq!(f.await.unwrap(), Ok((4, Role::Follower)));
        }
        assert_eq!(sf.waiting(), 0);
    }
}
