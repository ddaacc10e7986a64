//! Click analytics shared by the edges (which count) and the origin (which
//! applies the counts to MySQL rollups): the user-agent classification, the
//! referrer host, and the batch format on the Redis Stream
//! (`docs/protocol.md`, "Click batches"). The OpenResty module implements
//! the same rules and the same text format, so a mixed fleet counts alike.
//!
//! [`ua`] classifies user agents (bots from `common/data/bots.txt`),
//! [`referrer`] extracts the referrer host, [`batch`] encodes and strictly
//! decodes a batch, [`accum`] turns clicks into batches in memory.

pub mod accum;
pub mod batch;
pub mod dims;
pub mod referrer;
pub mod ua;
pub mod uniq;

pub use accum::{Accumulator, BatchIds, Click, Encoded};
pub use batch::{
    Batch, BatchError, DestinationLine, DeviceLine, DimLine, HourLine, ReferrerLine, UniqLine,
};
pub use dims::{Dim, Dims, DimsInput};
pub use referrer::{referrer_host, referrer_host_buf, HostBuf};
pub use ua::{device_class, device_class_bytes, is_bot, Device};

/// The Redis Stream every edge appends its batches to (fan-in) and the
/// origins read as one consumer group.
pub const STREAM_KEY: &str = "su:1:clicks";

/// `XADD ... MAXLEN ~ STREAM_MAXLEN`: bounds the stream if no origin reads
/// it (about 5 s of flushes of 10,000 edges for 100 s); entries trimmed
/// before they were read are lost, which an edge counts when `XADD` says
/// the stream was at its bound.
pub const STREAM_MAXLEN: u64 = 1_000_000;

/// The consumer group of the origins.
pub const CONSUMER_GROUP: &str = "origins";

/// The batch format version (`v` field of an entry) of a batch without
/// destination lines.
pub const BATCH_VERSION: &str = "1";

/// The version of a batch with destination lines (`t`): origins read both;
/// an origin older than this version rejects such a batch whole, so
/// origins are upgraded before edges (`docs/protocol.md`, "Click batches").
pub const BATCH_VERSION_DESTINATIONS: &str = "2";

/// The version of a batch that names a per-domain link by its link key
/// (`<domain>/<code>`, protocol 3.6): version 2 plus keys. Origins of
/// 3.6 read every version; an older one rejects such a batch whole.
pub const BATCH_VERSION_KEYS: &str = "3";

/// The version of a batch with dimension lines (`x`, protocol 3.7):
/// version 3 plus those; an origin of 3.6 or older rejects it whole.
pub const BATCH_VERSION_DIMS: &str = "4";

/// The version an edge counting dimensions writes (protocol 3.8): version
/// 4 without the lines the rest of the batch implies — a link-day's
/// `r ... -` (its clicks on no named referrer line) and `d ... bot` (its
/// hours' bot clicks). On a spread of links most link-days have one click,
/// and those two of its three lines were most of what the flusher wrote
/// and Redis stored. An origin older than 3.8 rejects it whole.
pub const BATCH_VERSION_IMPLIED: &str = "5";

/// Referrer hosts kept per link-day in one batch; the rest are summed under
/// [`OTHER_REFERRER`], so a link shared on many sites cannot blow up a batch.
pub const TOP_REFERRERS: usize = 20;

/// The referrer "host" that sums the hosts past the top [`TOP_REFERRERS`].
pub const OTHER_REFERRER: &str = "~other";

/// The referrer "host" of a click without a (parsable) `Referer`.
pub const NO_REFERRER: &str = "-";

/// Start of the UTC hour holding `unix` (the hourly rollup's key).
pub fn hour_start(unix: u64) -> u64 {
    unix - unix % 3600
}

/// Start of the UTC day holding `unix` (the daily rollups' key).
pub fn day_start(unix: u64) -> u64 {
    unix - unix % 86_400
}

#[cfg(test)]
mod tests {
    #[test]
    fn buckets() {
        assert_eq!(super::hour_start(7199), 3600);
        assert_eq!(super::day_start(86_400 * 3 + 5), 86_400 * 3);
    }
}
