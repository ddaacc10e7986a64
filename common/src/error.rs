//! The JSON error body every 4xx/5xx uses: `{"error": "<kind>", "message": "..."}`.

use serde::{Deserialize, Serialize};

/// Error body. `error` is a stable machine-readable kind, `message` is for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable kind, e.g. `invalid_url`, `not_found`, `rate_limited`.
    pub error: String,
    /// Human-readable detail.
    pub message: String,
}

impl ErrorBody {
    /// Builds the body.
    pub fn new(error: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorBody {
            error: error.into(),
            message: message.into(),
        }
    }

    /// Serialises to JSON bytes (infallible for this shape).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self)
            .unwrap_or_else(|_| b"{\"error\":\"internal\",\"message\":\"\"}".to_vec())
    }
}
