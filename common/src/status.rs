//! The `/shorturl_status` documents (protocol section 6): the four legacy
//! dimensions plus what was added since. Both services serialise these
//! types, the OpenResty module writes the same JSON, and the tests parse
//! answers back into them, so a field cannot drift on one side only.

use serde::{Deserialize, Serialize};

/// Cache dimension: hits, misses, errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisDim {
    pub hit: u64,
    pub miss: u64,
    pub error: u64,
}

/// MySQL dimension: statements that wrote, statements that read, failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MysqlDim {
    pub update: u64,
    pub select: u64,
    pub error: u64,
}

/// Miss-coalescing dimension: `get` counts lookups that waited on another
/// caller's in-flight lookup instead of issuing their own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockDim {
    pub get: u64,
    pub error: u64,
}

/// Issuer dimension: last id handed out, table size, ids left, counter errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuerDim {
    pub current: u64,
    pub capacity: u64,
    pub remaining: u64,
    pub error: u64,
    /// True once the counter has passed the table size: creations answer 503.
    pub exhausted: bool,
}

/// Edge `local` dimension: in-process cache hits and misses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalDim {
    pub hit: u64,
    pub miss: u64,
}

/// Edge `origin` dimension: requests sent to the origin and how many failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginDim {
    pub forward: u64,
    pub error: u64,
}

/// The origin's merchant-domain whitelist, as reported in its status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhitelistDim {
    /// `apollo`, `file` (last-good file) or `static-only`.
    pub source: String,
    pub size: usize,
    pub static_size: usize,
    pub dynamic_size: usize,
    pub release_key: Option<String>,
    pub last_refresh_unix: Option<u64>,
    /// Apollo values refused by validation.
    pub invalid_values: u64,
    /// Failed Apollo requests.
    pub refresh_errors: u64,
}

/// The origin's invalidation outbox (protocol section 3.2): changes whose
/// Redis record and invalidation message are still to be applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxDim {
    /// Rows waiting in the `outbox` table (the whole installation's, as
    /// last seen by this origin's drainer).
    pub pending: u64,
    /// Rows this origin applied (Redis written, message published).
    pub applied: u64,
    /// Attempts of this origin to apply a row that failed (retried).
    pub failed: u64,
    /// Age of the oldest pending row in milliseconds (0 when none).
    pub oldest_age_ms: u64,
}

/// Edge `inval` dimension: the invalidation subscription (protocol
/// section 3.2) and what its messages did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalDim {
    /// True while subscribed to `su:1:inval`.
    pub subscribed: bool,
    /// Messages received since start.
    pub messages: u64,
    /// Messages that dropped an older in-process entry.
    pub dropped: u64,
    /// Lookups that completed with a state older than a message already
    /// received, and were looked up again instead of being served.
    pub superseded: u64,
    /// Subscriptions established again after one was lost.
    pub reconnects: u64,
}

/// Edge `clicks` dimension: click counting and delivery to the stream
/// (protocol section 3.4). Counters since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClicksDim {
    /// Counting is on (`clicks.enabled`).
    pub enabled: bool,
    /// Clicks counted (human and bot), drops excluded.
    pub counted: u64,
    /// Clicks in batches the stream accepted.
    pub sent: u64,
    /// Clicks counted and not sent yet (the next flush's, and those kept
    /// while Redis is unreachable).
    pub buffered: u64,
    /// Clicks lost, every reason (`shorturl_edge_clicks_dropped_total`).
    pub dropped: u64,
    /// When the last flush left nothing unsent (`None`: not yet).
    pub last_flush_unix: Option<u64>,
}

/// The code pool of the installation (origin; issue 11): `size` rows in
/// the pool (pre-generated and recycled), `issued` ids up to the highest
/// one issued, `free` the rest, `recycled` codes appended again so far.
/// Read from MySQL every few seconds, so the same on every origin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDim {
    pub size: u64,
    pub issued: u64,
    pub free: u64,
    pub recycled: u64,
}

/// `GET /shorturl_status` on the origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginStatus {
    pub protocol: u32,
    /// Always `"origin"`.
    pub service: String,
    pub redis: RedisDim,
    pub mysql: MysqlDim,
    pub lock: LockDim,
    pub issuer: IssuerDim,
    pub whitelist: WhitelistDim,
    /// Absent in answers of protocol 1 origins.
    #[serde(default)]
    pub outbox: OutboxDim,
    /// Absent in answers of origins before issue 11's recycling.
    #[serde(default)]
    pub pool: PoolDim,
}

/// `GET /shorturl_status` on an edge (Pingora or OpenResty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeStatus {
    pub protocol: u32,
    /// Always `"edge"`.
    pub service: String,
    pub local: LocalDim,
    pub redis: RedisDim,
    pub origin: OriginDim,
    pub lock: LockDim,
    /// The origin's dimension, `None` when no origin answered recently.
    pub mysql: Option<MysqlDim>,
    /// The origin's dimension, `None` when no origin answered recently.
    pub issuer: Option<IssuerDim>,
    pub origin_reachable: bool,
    /// Certificates and handshakes, on edges with a TLS listener (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsDim>,
    /// Absent in answers of edges without an invalidation subscriber.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inval: Option<InvalDim>,
    /// Click counting; absent in answers of edges that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clicks: Option<ClicksDim>,
    /// The Pingora edge's redirect fast path (absent on the OpenResty
    /// module, which has no such split, and on edges that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FastPathDim>,
    /// The country database of the link rules (absent when none is
    /// configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo: Option<GeoDim>,
}

/// The country database an edge reads (protocol 3.1.1 and section 6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeoDim {
    /// The configured file.
    pub path: String,
    /// Its metadata's `database_type`.
    pub database_type: String,
    /// Its metadata's `build_epoch` (Unix seconds) and that day (UTC).
    pub build_epoch: u64,
    pub build_date: String,
    /// Loads (the first included) and files refused since the start.
    pub loads: u64,
    pub load_failures: u64,
}

/// Requests the fast path answered before any proxy session existed, and
/// the ones it handed to the proxy (protocol section 6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FastPathDim {
    /// Whether the fast path is on (`edge.fast_path.enabled`).
    pub enabled: bool,
    /// Redirects answered from a cached record.
    pub hit: u64,
    /// 404s answered from a cached negative entry.
    pub negative: u64,
    /// Misses it looked up itself and answered (redirect, 404 or 503).
    #[serde(default)]
    pub resolved: u64,
    /// Requests handed to the proxy.
    pub handover: u64,
}

/// One certificate an edge can serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertInfo {
    /// The name it is selected for (`*.example.com` for a wildcard).
    pub domain: String,
    /// The issuer's distinguished name (`CN=...`).
    pub issuer: String,
    /// `notAfter`, Unix seconds.
    pub expires_at_unix: i64,
    /// `dir` (the certificate directory) or `shared` (Redis).
    pub source: String,
}

/// The edge's `tls` section: what it serves and how handshakes went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsDim {
    /// The certificate served when no other matches (its name), if loaded.
    pub default_cert: Option<String>,
    pub certificates: Vec<CertInfo>,
    /// Completed handshakes.
    pub handshakes: u64,
    /// Failed handshakes (malformed hello, no shared cipher, timeout, ...).
    pub handshake_errors: u64,
    /// ACME orders by result, on the edge holding the issuer lease; `None`
    /// when ACME is off.
    pub acme: Option<AcmeDim>,
}

/// ACME issuance on this edge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcmeDim {
    /// Whether this edge holds the fleet's issuer lease now.
    pub issuer: bool,
    /// Passes this edge made over the whitelist while holding the lease.
    pub checks: u64,
    pub orders_issued: u64,
    pub orders_failed: u64,
}

/// `POST /internal/v1/heartbeat`: an edge's status summary, sent to every
/// origin every few seconds so the admin console can show each edge (one
/// silent for 30 s is shown as missing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The edge's name: stable across restarts (host name and listen
    /// address unless configured), 1-128 printable ASCII characters.
    pub node: String,
    pub status: EdgeStatus,
}

/// Largest heartbeat body an origin accepts.
pub const HEARTBEAT_MAX_BYTES: usize = 16 * 1024;
