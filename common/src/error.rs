//! The JSON error body every 4xx/5xx uses: `{"error": "<kind>", "message": "..."}`.

use serde::{Deserialize, Serialize};

/// The one 404 body for unknown codes, bad paths, Host mismatches and
/// expired or disabled links alike (protocol section 4).
pub const NOT_FOUND_BODY: &[u8] = br#"{"error":"not_found","message":"no such short link"}"#;

/// The 400 body for a malformed request (protocol section 2.1).
pub const BAD_REQUEST_BODY: &[u8] = br#"{"error":"bad_request","message":"malformed request"}"#;

/// Error body. `error` is a stable machine-readable kind, `message` is for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable kind, e.g. `invalid_url`, `not_found`, `rate_limited`.
    pub error: String,
    /// Human-readable detail. Never carries a dependency's error text.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_bodies_are_error_bodies() {
        for (body, kind) in [
            (NOT_FOUND_BODY, "not_found"),
            (BAD_REQUEST_BODY, "bad_request"),
        ] {
            let parsed: Result<ErrorBody, _> = serde_json::from_slice(body);
            assert_eq!(parsed.map(|b| b.error).ok().as_deref(), Some(kind));
        }
    }
}
