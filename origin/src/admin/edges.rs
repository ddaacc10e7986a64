//! The edges that report in: each `POST /internal/v1/heartbeat` replaces
//! the edge's last status in memory. Each origin keeps its own table (the
//! edges send their heartbeat to every origin), so no origin depends on
//! another to show them; an edge silent for [`MISSING_AFTER`] is missing,
//! and one silent for an hour is forgotten.

use shorturl_common::status::{EdgeStatus, Heartbeat};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Silence after which an edge is shown as missing.
pub const MISSING_AFTER: Duration = Duration::from_secs(30);
/// Silence after which an edge is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Most edges remembered (a bound on what heartbeats can make us hold).
const MAX_EDGES: usize = 1000;

/// One edge as last heard.
#[derive(Debug, Clone)]
pub struct EdgeSeen {
    pub node: String,
    pub status: EdgeStatus,
    pub silent_for: Duration,
}

impl EdgeSeen {
    /// Whether the edge has been silent past [`MISSING_AFTER`].
    pub fn missing(&self) -> bool {
        self.silent_for >= MISSING_AFTER
    }
}

/// Why a heartbeat was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    #[error("node must be 1-128 printable ASCII characters")]
    Node,
    #[error("too many edges reporting")]
    Full,
}

/// The edges' last heartbeats.
#[derive(Default)]
pub struct Edges {
    seen: Mutex<BTreeMap<String, (Instant, EdgeStatus)>>,
}

impl Edges {
    /// Records `hb` as heard now.
    pub fn record(&self, hb: Heartbeat) -> Result<(), HeartbeatError> {
        if hb.node.is_empty()
            || hb.node.len() > 128
            || !hb.node.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        {
            return Err(HeartbeatError::Node);
        }
        let now = Instant::now();
        let Ok(mut m) = self.seen.lock() else {
            return Err(HeartbeatError::Full);
        };
        m.retain(|_, (at, _)| now.duration_since(*at) < FORGET_AFTER);
        if m.len() >= MAX_EDGES && !m.contains_key(&hb.node) {
            return Err(HeartbeatError::Full);
        }
        m.insert(hb.node, (now, hb.status));
        Ok(())
    }

    /// Every edge heard in the last hour, by name.
    pub fn list(&self) -> Vec<EdgeSeen> {
        let now = Instant::now();
        let Ok(m) = self.seen.lock() else {
            return Vec::new();
        };
        m.iter()
            .filter(|(_, (at, _))| now.duration_since(*at) < FORGET_AFTER)
            .map(|(node, (at, status))| EdgeSeen {
                node: node.clone(),
                status: status.clone(),
                silent_for: now.duration_since(*at),
            })
            .collect()
    }
}
