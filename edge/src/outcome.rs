//! How a request was answered: the label shared by the access log and the
//! latency histogram.

/// The lookup outcome of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered from the in-process cache (a record).
    Hit,
    /// Answered 404 from a negative entry of the in-process cache.
    Neg,
    /// Resolved through Redis (by this request or a coalesced one).
    Redis,
    /// Resolved through the origin's record endpoint.
    Origin,
    /// The lookup failed (Redis and origin unavailable): 503.
    Fail,
    /// Not a code path, bad Host, or a request refused by a size limit.
    Bad,
    /// Refused by a per-IP limit: 429.
    Limit,
    /// Forwarded to the origin pool (API routes).
    Fwd,
    /// Answered locally without a lookup (status, health, internal paths).
    Local,
    /// A page (QR code, preview) through the page cache, hit or not.
    Page,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 10] = [
        Outcome::Hit,
        Outcome::Neg,
        Outcome::Redis,
        Outcome::Origin,
        Outcome::Fail,
        Outcome::Bad,
        Outcome::Limit,
        Outcome::Fwd,
        Outcome::Local,
        Outcome::Page,
    ];

    /// The label used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "HIT",
            Outcome::Neg => "NEG",
            Outcome::Redis => "REDIS",
            Outcome::Origin => "ORIGIN",
            Outcome::Fail => "FAIL",
            Outcome::Bad => "BAD",
            Outcome::Limit => "LIMIT",
            Outcome::Fwd => "FWD",
            Outcome::Local => "LOCAL",
            Outcome::Page => "PAGE",
        }
    }

    /// Index into [`Outcome::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}
