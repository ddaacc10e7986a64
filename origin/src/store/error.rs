//! Why a MySQL operation failed. The detail (MySQL's own text) is for the
//! log; the HTTP layer only ever says that the link database is unavailable.

use std::sync::Arc;
use std::time::Duration;

/// A failed or timed-out MySQL operation. `Clone` because one failed claim
/// batch answers every creation in it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DbError {
    /// The server or the connection failed.
    #[error("mysql: {0}")]
    Mysql(#[source] Arc<mysql_async::Error>),
    /// No answer within `mysql.timeout_ms`.
    #[error("mysql: no answer within {0:?}")]
    Timeout(Duration),
    /// A row holds a state this build does not know.
    #[error("short_code row {code:?} has unknown state {state}")]
    UnknownState { code: String, state: u8 },
    /// A column did not hold the type the statement expects (schema drift).
    #[error("unexpected value in result column {0}")]
    BadColumn(usize),
    /// The claim queue is closed (the origin is shutting down).
    #[error("the claim queue is closed")]
    ClaimQueueClosed,
    /// The claim worker ended without answering.
    #[error("the claim worker stopped before answering")]
    ClaimWorkerStopped,
    /// A `meta` row that `migrate` creates is missing or unreadable.
    #[error("meta.{0} missing or invalid: run `shorturl-origin migrate`")]
    Meta(&'static str),
    /// A shard index that the map does not have (a routing bug).
    #[error("no shard {0}")]
    NoShard(usize),
    /// Test failpoint `origin.claim.poison`: the batch failed as a bad row would.
    #[error("failpoint origin.claim.poison: the batch holds a poisoned item")]
    Poisoned,
}

impl From<mysql_async::Error> for DbError {
    fn from(e: mysql_async::Error) -> Self {
        DbError::Mysql(Arc::new(e))
    }
}

/// MySQL's error number, when the server refused a statement.
pub fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// Deadlock (1213) or lock-wait timeout (1205): the statement lost a lock
/// race and may simply be run again.
pub fn is_lock_conflict(e: &mysql_async::Error) -> bool {
    matches!(server_code(e), Some(1213 | 1205))
}

impl DbError {
    /// Whether one item of a group-commit batch could be the cause: the
    /// server refused a statement (a value a column cannot hold, a lost lock
    /// race), as opposed to a lost connection or a timeout, which concern the
    /// whole batch. Such a batch is retried item by item.
    pub fn may_be_item_specific(&self) -> bool {
        match self {
            DbError::Mysql(e) => server_code(e).is_some(),
            DbError::Poisoned => true,
            _ => false,
        }
    }
}
