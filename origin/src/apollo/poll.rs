//! The background work: long polling `/notifications/v2` (a release makes
//! the feed read the namespace again) and the periodic safety-net read, both
//! backing off after failures and never touching the list in force.

use super::backoff::Backoff;
use super::feed::{now_unix, Feed};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Feed {
    /// The background work: long polling plus the periodic safety-net read.
    pub(super) async fn run(self: Arc<Self>, fetch_first: bool) {
        tokio::join!(self.poll_loop(fetch_first), self.refresh_loop());
    }

    async fn poll_loop(&self, fetch_first: bool) {
        let mut pending = fetch_first;
        let mut backoff = Backoff::new(self.cfg.backoff_initial, self.cfg.backoff_max);
        // Apollo's Java client starts at most two long polls a second; this
        // keeps a proxy that answers polls at once from making us spin.
        let min_gap = Duration::from_millis(500).min(self.cfg.backoff_initial);
        let mut last_poll: Option<Instant> = None;
        loop {
            if pending {
                match self.refresh(self.cfg.request_timeout).await {
                    Ok(()) => {
                        pending = false;
                        backoff.reset();
                    }
                    Err(e) => {
                        let wait = backoff.next_delay();
                        tracing::warn!(error = %e, retry_in = ?wait, "apollo: cannot read the namespace; keeping the list in force");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                }
            }
            if let Some(t) = last_poll {
                tokio::time::sleep_until(t + min_gap).await;
            }
            last_poll = Some(Instant::now());
            let polled = match self.server() {
                Ok(server) => {
                    let id = self.state().notification_id;
                    self.client.poll(&server, id, self.cfg.poll_timeout).await
                }
                Err(e) => Err(e),
            };
            match polled {
                Ok(None) => {
                    backoff.reset();
                    self.whitelist.note_refresh_ok(now_unix());
                }
                Ok(Some(id)) => {
                    backoff.reset();
                    self.state().notification_id = id;
                    pending = true;
                }
                Err(e) => {
                    self.failed();
                    let wait = backoff.next_delay();
                    tracing::warn!(error = %e, retry_in = ?wait, "apollo: long poll failed; keeping the list in force");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn refresh_loop(&self) {
        let period = self.cfg.refresh_interval;
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.refresh(self.cfg.request_timeout).await {
                tracing::warn!(error = %e, "apollo: periodic refresh failed; keeping the list in force");
            }
        }
    }
}
