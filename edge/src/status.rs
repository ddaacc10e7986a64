//! `GET /shorturl_status` on the edge: its own counters (invalidation
//! subscription included) plus the origin's `mysql` and `issuer` dimensions.
//!
//! The origin's part costs an origin request, so it is shared: fetched at
//! most once per [`ORIGIN_PART_TTL`] whatever the number of callers (one
//! [`SingleFlight`] refresh at a time, its result kept for a second, a failed
//! fetch included). With the origin down the edge still answers, with
//! `null`s and `"origin_reachable": false` — at once when the health check
//! has no healthy origin, so a cached answer never hides an outage. Who may ask is decided by the
//! caller (`status_allow`).

use crate::clicks::Clicks;
use crate::metrics::Metrics;
use crate::origin::OriginPool;
use serde::Deserialize;
use shorturl_common::singleflight::SingleFlight;
use shorturl_common::status::{
    EdgeStatus, InvalDim, IssuerDim, LocalDim, LockDim, MysqlDim, OriginDim, RedisDim,
};
use shorturl_common::PROTOCOL_VERSION;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one fetch of the origin's part serves every caller.
pub const ORIGIN_PART_TTL: Duration = Duration::from_secs(1);

/// What the edge copies from the origin's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OriginPart {
    pub mysql: Option<MysqlDim>,
    pub issuer: Option<IssuerDim>,
    pub reachable: bool,
}

impl OriginPart {
    /// No origin answered.
    pub const UNREACHABLE: OriginPart = OriginPart {
        mysql: None,
        issuer: None,
        reachable: false,
    };
}

/// The two dimensions read from the origin's document (other fields ignored,
/// so the origin may add some without breaking edges).
#[derive(Deserialize)]
struct OriginDims {
    mysql: MysqlDim,
    issuer: IssuerDim,
}

type Cached = Mutex<Option<(Instant, OriginPart)>>;

/// Builds status documents, sharing the origin's part between callers.
pub struct StatusSource {
    origin: Arc<OriginPool>,
    cached: Arc<Cached>,
    flight: Arc<SingleFlight<(), OriginPart>>,
}

fn fresh(cached: &Cached) -> Option<OriginPart> {
    let c = match cached.lock() {
        Ok(c) => c,
        Err(p) => p.into_inner(),
    };
    c.as_ref()
        .filter(|(at, _)| at.elapsed() < ORIGIN_PART_TTL)
        .map(|(_, part)| *part)
}

impl StatusSource {
    /// A source asking `origin` for its part.
    pub fn new(origin: Arc<OriginPool>) -> Self {
        StatusSource {
            origin,
            cached: Arc::new(Mutex::new(None)),
            flight: SingleFlight::new(),
        }
    }

    /// The origin's part: cached, or one shared fetch. With no healthy
    /// origin (per the health check) it is unreachable at once, whatever
    /// the cache holds.
    async fn origin_part(&self) -> OriginPart {
        if self.origin.select().is_none() {
            return OriginPart::UNREACHABLE;
        }
        if let Some(p) = fresh(&self.cached) {
            return p;
        }
        let origin = Arc::clone(&self.origin);
        let cached = Arc::clone(&self.cached);
        let recheck = Arc::clone(&self.cached);
        let got = self
            .flight
            .run(
                &(),
                move || fresh(&recheck),
                move |()| async move {
                    let part = fetch(&origin).await;
                    // Published before the flight ends (SingleFlight contract).
                    match cached.lock() {
                        Ok(mut c) => *c = Some((Instant::now(), part)),
                        Err(p) => *p.into_inner() = Some((Instant::now(), part)),
                    }
                    part
                },
            )
            .await;
        got.map(|(p, _)| p).unwrap_or(OriginPart::UNREACHABLE)
    }

    /// The edge's status document (protocol section 6).
    pub async fn document(&self, m: &Metrics, clicks: &Clicks) -> EdgeStatus {
        let part = self.origin_part().await;
        build(part, m, clicks)
    }

    /// The document without asking the origin (the heartbeat goes to the
    /// origins, which know their own part): the origin's dimensions only if
    /// a recent status fetch left them, reachability from the health check.
    pub fn local_document(&self, m: &Metrics, clicks: &Clicks) -> EdgeStatus {
        let part = fresh(&self.cached).unwrap_or(OriginPart {
            reachable: self.origin.select().is_some(),
            ..OriginPart::UNREACHABLE
        });
        build(part, m, clicks)
    }
}

fn build(part: OriginPart, m: &Metrics, clicks: &Clicks) -> EdgeStatus {
    {
        EdgeStatus {
            protocol: PROTOCOL_VERSION,
            service: "edge".into(),
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
            mysql: part.mysql,
            issuer: part.issuer,
            origin_reachable: part.reachable,
            tls: None,
            inval: Some(InvalDim {
                subscribed: m.inval.subscribed.get() == 1,
                messages: m.inval.messages(),
                dropped: m.inval.dropped.get(),
                superseded: m.inval.superseded.get(),
                reconnects: m.inval.reconnects(),
            }),
            clicks: Some(clicks.status()),
            fast_path: None,
            geo: None,
        }
    }
}

async fn fetch(origin: &OriginPool) -> OriginPart {
    let dims = origin.fetch_status().await.and_then(|v| {
        serde_json::from_value::<OriginDims>(v).map_err(|_| crate::origin::OriginError::Malformed)
    });
    match dims {
        Ok(d) => OriginPart {
            mysql: Some(d.mysql),
            issuer: Some(d.issuer),
            reachable: true,
        },
        Err(e) => {
            tracing::debug!(error = %e, "origin status unavailable");
            OriginPart::UNREACHABLE
        }
    }
}
