//! Shapes of the `/shorturl_status` JSON (the four legacy dimensions plus
//! what was added since). The origin fills `redis`, `mysql`, `lock`, `issuer`;
//! the edge fills its own `local`, `redis`, `origin`, `lock` and copies the
//! origin's `mysql` and `issuer` in.

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
