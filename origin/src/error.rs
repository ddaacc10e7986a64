//! API errors: each is a status, a stable kind and a message, rendered as the
//! protocol's JSON error body.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use shorturl_common::error::ErrorBody;

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Any status.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            retry_after: None,
        }
    }
    /// 400.
    pub fn bad_request(kind: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, kind, message)
    }
    /// 404 `not_found`.
    pub fn not_found() -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such short link")
    }
    /// 503 `unavailable` with `Retry-After`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message).retry_after(2)
    }
    /// Adds `Retry-After`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }
}

/// A JSON response with an explicit `Content-Length`.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = json_response(
            self.status,
            ErrorBody::new(self.kind, self.message).to_json(),
        );
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
