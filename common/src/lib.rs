//! The contract shared by the edge, the origin and the test-suite.
//!
//! Everything here is described in `docs/protocol.md`; the OpenResty module
//! re-implements the same rules in Lua, so keep this code and that document in
//! step (the protocol is versioned by [`PROTOCOL_VERSION`]).

pub mod accept;
pub mod batch_items;
pub mod cidr;
pub mod clicks;
pub mod code;
pub mod config;
pub mod conn_caps;
pub mod crawlers;
pub mod error;
pub mod failpoint;
pub mod host;
pub mod inval;
pub mod keys;
pub mod link_rules;
pub mod memo;
pub mod pages;
pub mod record;
pub mod redirect;
pub mod redis;
pub mod request_rules;
pub mod secret_key;
pub mod singleflight;
pub mod status;
pub mod time;
pub mod tls;
#[cfg(feature = "tls-seal")]
pub mod tls_seal;
pub mod unlock;

/// Version of the wire contract (record format, invalidation channel, HTTP
/// API, status JSON). 2: versioned records and invalidation messages; 3:
/// link options (rules) in protocol 3 records.
pub const PROTOCOL_VERSION: u32 = 3;
