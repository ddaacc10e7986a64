//! [`EdgeState`]: what both request paths of one edge share. The fast path
//! and the proxy hold the same `Arc`, so neither keeps its own copy of the
//! cache, the limiter or the config.

use crate::access_log::AccessLog;
use crate::clicks::Clicks;
use crate::config::EdgeConfig;
use crate::geo::Geo;
use crate::limits::Limits;
use crate::lookup::Resolver;
use crate::metrics::Metrics;
use crate::tls::TlsView;
use std::sync::Arc;

/// The shared state of the redirect path (see the module documentation).
pub struct EdgeState {
    /// The in-process cache and the lookups behind it.
    pub resolver: Arc<Resolver>,
    pub metrics: Arc<Metrics>,
    /// Per-client budgets (unknown codes, creations).
    pub limits: Arc<Limits>,
    pub log: Arc<AccessLog>,
    /// Click counting: every redirect answered is recorded here.
    pub clicks: Arc<Clicks>,
    pub cfg: Arc<EdgeConfig>,
    pub tls: Arc<TlsView>,
    /// The visitor's country for the link rules.
    pub geo: Arc<Geo>,
}
