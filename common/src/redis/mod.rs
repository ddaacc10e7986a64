//! Redis in its three deployment modes (`redis.mode`), for every Redis user
//! of the edge and the origin: one [`RedisConn`] that every command, script
//! and pipeline goes through, plus the pub/sub connection of the
//! invalidation channel. See docs/architecture.md ("Redis modes").

mod config;
mod conn;
mod manager;
mod sentinel;

pub use config::{ConnOptions, RedisMode, RedisTopology, TopologyFields};
pub use conn::RedisConn;
