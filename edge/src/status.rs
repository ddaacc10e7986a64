//! `GET /shorturl_status` on the edge: its own counters plus the origin's
//! `mysql` and `issuer` dimensions, fetched with a short timeout so the edge
//! answers (with `null`s and `"origin_reachable": false`) when the origin is
//! down.

use crate::metrics::Metrics;
use crate::origin::OriginPool;
use serde::Serialize;
use shorturl_common::status::{LockDim, RedisDim};
use shorturl_common::PROTOCOL_VERSION;

/// `local` dimension: in-process cache hits and misses.
#[derive(Debug, Serialize)]
pub struct LocalDim {
    pub hit: u64,
    pub miss: u64,
}

/// `origin` dimension: requests sent to the origin and how many failed.
#[derive(Debug, Serialize)]
pub struct OriginDim {
    pub forward: u64,
    pub error: u64,
}

/// The edge's status document (protocol section 6).
#[derive(Debug, Serialize)]
pub struct EdgeStatus {
    pub protocol: u32,
    pub service: &'static str,
    pub local: LocalDim,
    pub redis: RedisDim,
    pub origin: OriginDim,
    pub lock: LockDim,
    pub mysql: serde_json::Value,
    pub issuer: serde_json::Value,
    pub origin_reachable: bool,
}

/// Builds the status JSON, asking one healthy origin for its dimensions.
pub async fn edge_status(m: &Metrics, origin: &OriginPool) -> Vec<u8> {
    let (mysql, issuer, reachable) = match origin.fetch_status().await {
        Ok(mut v) => {
            let mysql = v
                .get_mut("mysql")
                .map(serde_json::Value::take)
                .unwrap_or_default();
            let issuer = v
                .get_mut("issuer")
                .map(serde_json::Value::take)
                .unwrap_or_default();
            (mysql, issuer, true)
        }
        Err(e) => {
            tracing::debug!(error = %e, "origin status unavailable");
            (serde_json::Value::Null, serde_json::Value::Null, false)
        }
    };
    let s = EdgeStatus {
        protocol: PROTOCOL_VERSION,
        service: "edge",
        local: LocalDim {
            hit: m.local_hit.get(),
            miss: m.local_miss.get(),
        },
        redis: RedisDim {
            hit: m.redis_hit.get(),
            miss: m.redis_miss.get(),
            error: m.redis_error.get(),
        },
        origin: OriginDim {
            forward: m.origin_forward.get(),
            error: m.origin_error.get(),
        },
        lock: LockDim {
            get: m.lock_get.get(),
            error: m.lock_error.get(),
        },
        mysql,
        issuer,
        origin_reachable: reachable,
    };
    serde_json::to_vec(&s).unwrap_or_else(|_| b"{}".to_vec())
}
