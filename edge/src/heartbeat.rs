//! The edge's heartbeat: every `edge.heartbeat_interval_ms` (default 10 s)
//! its status document goes to every configured origin
//! (`POST /internal/v1/heartbeat`, the same trust as the edge's other
//! internal calls), so each origin's admin console lists the edge; one
//! silent for 30 s is shown as missing. Off the request path entirely.

use crate::clicks::Clicks;
use crate::metrics::Metrics;
use crate::origin::OriginPool;
use crate::status::StatusSource;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use shorturl_common::status::Heartbeat;
use std::sync::Arc;
use std::time::Duration;

/// Sends the heartbeats.
pub struct HeartbeatSender {
    pub node: String,
    pub interval: Duration,
    pub origin: Arc<OriginPool>,
    pub status: StatusSource,
    pub metrics: Arc<Metrics>,
    pub clicks: Arc<Clicks>,
}

#[async_trait]
impl BackgroundService for HeartbeatSender {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if self.interval.is_zero() {
            return;
        }
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let hb = Heartbeat {
                node: self.node.clone(),
                status: self.status.local_document(&self.metrics, &self.clicks),
            };
            let Ok(body) = serde_json::to_vec(&hb) else {
                continue;
            };
            let budget = self.interval.min(Duration::from_secs(2));
            for addr in self.origin.servers() {
                if let Err(e) = self
                    .origin
                    .post(addr, "/internal/v1/heartbeat", &body, budget)
                    .await
                {
                    tracing::debug!(origin = %addr, error = %e, "heartbeat not delivered");
                }
            }
        }
    }
}
