//! Protocol section 2.1 at the origin: the same rule function as the edges
//! (`common::request_rules`), applied once per request before routing.

use crate::error::ApiError;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode, Uri};
use shorturl_common::request_rules::{self, Head, HostField, Refusal, Version};
use std::borrow::Cow;

/// The request target as received, for the protocol rules: origin-form
/// and `*` as they are, absolute-form rebuilt from the parsed URI.
fn raw_target(uri: &Uri) -> Cow<'_, str> {
    match (uri.scheme(), uri.path_and_query()) {
        (None, Some(pq)) => Cow::Borrowed(pq.as_str()),
        _ => Cow::Owned(uri.to_string()),
    }
}

/// The request's normalised host (`None`: no domain), or why the request
/// is refused.
pub fn request_host(req: &Request) -> Result<Option<String>, Refusal> {
    let target = raw_target(req.uri());
    let version = match req.version() {
        http::Version::HTTP_11 => Version::Http11,
        http::Version::HTTP_10 => Version::Http10,
        http::Version::HTTP_09 => Version::Http09,
        _ => Version::Other,
    };
    let headers = req.headers();
    let head = Head {
        method: req.method().as_str(),
        target: target.as_bytes(),
        version,
        host: HostField::from_values(headers.get_all(header::HOST).iter().map(|v| v.as_bytes())),
        fields: headers.len(),
    };
    Ok(request_rules::check(&head)?
        .host
        .map(str::to_ascii_lowercase))
}

/// The answer to a refused request head (a 400 closes the connection).
pub fn refused(refusal: Refusal) -> Response {
    tracing::debug!(%refusal, "request refused by the protocol rules");
    match refusal.status() {
        431 => ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            "request headers too large",
        )
        .into_response(),
        405 => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method not allowed",
        )
        .into_response(),
        _ => {
            let mut r = ApiError::bad_request("bad_request", "malformed request").into_response();
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            r
        }
    }
}
