//! The origin's background work under one model: every task is spawned on
//! a [`Background`] supervisor (a `JoinSet`) with a [`Stop`] signal, and one
//! call stops them all, bounded in time. A task whose work can stop
//! anywhere (each step is idempotent or taken over by another origin) runs
//! under [`Stop::cancels`] or [`Stop::every`]; a task with something to hand
//! over first (the reaper's lease) waits for [`Stop::requested`] and then
//! does it. Pingora's `BackgroundService` (a task given a shutdown watch)
//! is the model; the edge runs its own background work that way.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A task's stop signal.
#[derive(Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Resolves once the supervisor asks its tasks to stop.
    pub async fn requested(&mut self) {
        // An error means the supervisor is gone: stop as well.
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// Runs `work` until it ends or a stop is requested, whichever is first.
    pub async fn cancels(mut self, work: impl Future<Output = ()>) {
        tokio::select! {
            biased;
            _ = self.requested() => {}
            _ = work => {}
        }
    }

    /// Runs `tick` every `period` (the first at once) until a stop is
    /// requested; a tick under way when it is requested is cut short.
    pub async fn every<F, Fut>(self, period: Duration, mut tick: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = ()>,
    {
        self.cancels(async move {
            let mut t = tokio::time::interval(period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                t.tick().await;
                tick().await;
            }
        })
        .await;
    }
}

/// A set of background tasks stopped together (see the module docs).
pub struct Background {
    tasks: JoinSet<&'static str>,
    stop: watch::Sender<bool>,
}

impl Default for Background {
    fn default() -> Self {
        Background {
            tasks: JoinSet::new(),
            stop: watch::channel(false).0,
        }
    }
}

impl Background {
    /// Spawns `task` (given its stop signal) as `name`.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, task: F)
    where
        F: FnOnce(Stop) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let work = task(Stop(self.stop.subscribe()));
        self.tasks.spawn(async move {
            work.await;
            name
        });
    }

    /// How many tasks are running.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is running.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Asks every task to stop and waits up to `grace` for them; the ones
    /// still running then are aborted (named in the log).
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        let joined = tokio::time::timeout(grace, async {
            while let Some(done) = self.tasks.join_next().await {
                match done {
                    Ok(name) => tracing::debug!(task = name, "background task stopped"),
                    Err(e) if e.is_panic() => tracing::error!("a background task panicked"),
                    Err(_) => {}
                }
            }
        })
        .await;
        if joined.is_err() {
            tracing::warn!(
                left = self.tasks.len(),
                ?grace,
                "background tasks still running at shutdown: aborted"
            );
            self.tasks.abort_all();
            while self.tasks.join_next().await.is_some() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn shutdown_stops_cancellable_tasks_and_lets_others_finish_their_handover() {
        let mut bg = Background::default();
        let ticks = Arc::new(AtomicU32::new(0));
        let t = Arc::clone(&ticks);
        bg.spawn("ticker", move |stop| {
            stop.every(Duration::from_millis(5), move || {
                let t = Arc::clone(&t);
                async move {
                    t.fetch_add(1, Ordering::Relaxed);
                }
            })
        });
        let handed_over = Arc::new(AtomicU32::new(0));
        let h = Arc::clone(&handed_over);
        bg.spawn("lease holder", move |mut stop| async move {
            stop.requested().await;
            h.store(1, Ordering::Relaxed);
        });
        bg.spawn("endless", |stop| stop.cancels(std::future::pending()));
        assert_eq!(bg.len(), 3);
        while ticks.load(Ordering::Relaxed) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        bg.shutdown(Duration::from_secs(5)).await;
        assert_eq!(handed_over.load(Ordering::Relaxed), 1);
        let after = ticks.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(ticks.load(Ordering::Relaxed), after, "the ticker stopped");
    }

    #[tokio::test]
    async fn a_task_that_ignores_the_signal_is_aborted_after_the_grace() {
        let mut bg = Background::default();
        let dropped = Arc::new(AtomicU32::new(0));
        struct OnDrop(Arc<AtomicU32>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                self.0.store(1, Ordering::Relaxed);
            }
        }
        let guard = OnDrop(Arc::clone(&dropped));
        bg.spawn("stubborn", move |_stop| async move {
            let _g = guard;
            std::future::pending::<()>().await;
        });
        bg.shutdown(Duration::from_millis(10)).await;
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "aborted and dropped");
    }
}
