//! The contract shared by the edge, the origin and the test-suite.
//!
//! Everything here is described in `docs/protocol.md`; the OpenResty module
//! re-implements the same rules in Lua, so keep this code and that document in
//! step (the protocol is versioned by [`PROTOCOL_VERSION`]).

pub mod code;
pub mod error;
pub mod host;
pub mod keys;
pub mod record;
pub mod redirect;
pub mod status;
pub mod time;

/// Version of the wire contract (Redis keys, record format, HTTP API, status JSON).
pub const PROTOCOL_VERSION: u32 = 1;
