//! API errors: each is a status, a stable kind and a message, rendered as the
//! protocol's JSON error body. This is the one place domain errors
//! ([`LinkError`]) become HTTP: a dependency's failure is answered by what is
//! unavailable, never by its own text (that goes to the log where it happens).

use crate::links::LinkError;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use shorturl_common::error::ErrorBody;

/// The 503 message when MySQL failed.
pub const DATABASE_UNAVAILABLE: &str = "the link database is unavailable; retry shortly";

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
    /// 400 `invalid_code`: not a code (4-32 of `[0-9A-Za-z_-]`).
    pub fn invalid_code() -> Self {
        ApiError::bad_request(
            "invalid_code",
            "code must be 4-32 characters of [0-9A-Za-z_-]",
        )
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

impl From<LinkError> for ApiError {
    fn from(e: LinkError) -> Self {
        let unavailable = |m: &str| ApiError::unavailable(m);
        let forbidden = |kind: &'static str, e: &LinkError| {
            ApiError::new(StatusCode::FORBIDDEN, kind, e.to_string())
        };
        match e {
            LinkError::NotFound => ApiError::not_found(),
            LinkError::InsufficientScope(_) => forbidden("insufficient_scope", &e),
            LinkError::KdtIdRequired(_) => forbidden("kdt_id_required", &e),
            LinkError::ForbiddenMerchant(_) => forbidden("forbidden_merchant", &e),
            LinkError::VersionMismatch { .. } => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                "version_mismatch",
                e.to_string(),
            ),
            LinkError::PasswordsDisabled => {
                ApiError::bad_request("invalid_password", e.to_string())
            }
            LinkError::PasswordHash => unavailable("the password could not be stored; retry"),
            LinkError::InvalidCursor => ApiError::bad_request(
                "invalid_cursor",
                "cursor is not one this query returned (changed, or from other filters)",
            ),
            LinkError::DomainRequired(_) => ApiError::bad_request("domain_required", e.to_string()),
            LinkError::LinkDeleted => {
                ApiError::new(StatusCode::CONFLICT, "link_deleted", e.to_string())
            }
            LinkError::LinkExpired => {
                ApiError::new(StatusCode::CONFLICT, "link_expired", e.to_string())
            }
            LinkError::CodeUnavailable(_) => {
                ApiError::new(StatusCode::CONFLICT, "code_unavailable", e.to_string())
            }
            LinkError::CustomCodesLimited { retry_after_secs } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", e.to_string())
                    .retry_after(retry_after_secs)
            }
            LinkError::TargetIsShortDomain(_) => {
                ApiError::bad_request("url_is_short_link", e.to_string())
            }
            LinkError::DestinationBlocked(_) => {
                ApiError::bad_request("destination_blocked", e.to_string())
            }
            LinkError::DomainNotAllowed(_) => forbidden("domain_not_allowed", &e),
            LinkError::MerchantMismatch { .. } => forbidden("merchant_domain_mismatch", &e),
            LinkError::CodesExhausted { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "codes_exhausted",
                e.to_string(),
            )
            .retry_after(60),
            LinkError::Database(_) => unavailable(DATABASE_UNAVAILABLE),
            LinkError::Issuer(_) => unavailable("the id counter is unavailable; retry shortly"),
            LinkError::LookupAbandoned(_) => {
                unavailable("this short link could not be looked up; retry shortly")
            }
            LinkError::NoFreeCode { .. } => unavailable("no code could be issued; retry shortly"),
        }
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
        // A 413 is answered before the body is read: the rest of it is still
        // on the connection, so the connection cannot carry another request.
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }
}
