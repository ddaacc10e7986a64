//! What `/healthz` says about MySQL, kept up to date by a background probe.
//!
//! Every edge checks every origin's `/healthz` once per interval. Pinging
//! MySQL inside each check made the answer as slow as MySQL: on a loaded
//! machine a check could outlast the edge's check timeout, and the edge then
//! took a perfectly good origin out of rotation. The probe pings once per
//! second per origin, whatever the number of edges, and `/healthz` answers
//! from memory at once.

use crate::background::Stop;
use crate::store::Store;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often MySQL is pinged.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The last probe's verdict.
#[derive(Debug)]
pub struct MysqlHealth(AtomicBool);

impl MysqlHealth {
    /// Healthy: the origin only serves once MySQL answered at start.
    pub fn new() -> Arc<MysqlHealth> {
        Arc::new(MysqlHealth(AtomicBool::new(true)))
    }

    /// The probe: pings MySQL every second until stopped.
    pub async fn probe(self: Arc<Self>, store: Store, stop: Stop) {
        let (this, store) = (&*self, &store);
        stop.every(PROBE_EVERY, move || async move {
            // Bounded by mysql.timeout_ms; the failure is logged by the store.
            let ok = store.ping().await.is_ok();
            this.0.store(ok, Ordering::Relaxed);
        })
        .await;
    }

    /// Whether MySQL answered the last probe.
    pub fn is_up(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
