//! Reading a request body whole, bounded: the links API (`http/`) and the
//! console's forms (`admin/form.rs`) both read theirs so. Here, below both,
//! so the console does not reach back into the router that mounts it.

use crate::error::ApiError;
use axum::body::{Body, Bytes};
use http::{header, HeaderMap, StatusCode};

/// Reads a body of at most `max` bytes (413 otherwise).
pub(crate) async fn read_body_max(
    headers: &HeaderMap,
    body: Body,
    max: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("body is larger than {max} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, max)
        .await
        .map_err(|_| too_large())
}
