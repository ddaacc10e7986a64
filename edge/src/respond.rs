//! Responses the edge writes itself, following protocol section 4: an
//! explicit `Content-Length` on every answer (without it Pingora falls back
//! to a close-delimited body and keep-alive is lost) and an explicit
//! `Cache-Control`. `respond_error` is never used for normal answers because
//! it always turns keep-alive off.

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;
use shorturl_common::error::ErrorBody;
use shorturl_common::redirect::RedirectPolicy;

/// `{"error":"not_found",...}`, the one 404 body for unknown codes, bad
/// paths, Host mismatches and expired links alike.
pub const NOT_FOUND_BODY: &[u8] = br#"{"error":"not_found","message":"no such short link"}"#;

/// Writes the redirect to `url`.
pub async fn redirect(session: &mut Session, policy: &RedirectPolicy, url: &str) -> Result<()> {
    let mut h = ResponseHeader::build(policy.status, Some(4))?;
    h.insert_header("Location", url)?;
    h.insert_header("Content-Length", "0")?;
    h.insert_header("Cache-Control", policy.cache_control.as_str())?;
    session.write_response_header(Box::new(h), true).await
}

/// Writes the protocol's 404 for anything that does not resolve.
pub async fn not_found(session: &mut Session, policy: &RedirectPolicy) -> Result<()> {
    json(
        session,
        404,
        Bytes::from_static(NOT_FOUND_BODY),
        &policy.not_found_cache_control,
        None,
    )
    .await
}

/// Writes a JSON error `{"error": kind, "message": message}`.
pub async fn error(
    session: &mut Session,
    status: u16,
    kind: &str,
    message: &str,
    retry_after: Option<u64>,
) -> Result<()> {
    let body = Bytes::from(ErrorBody::new(kind, message).to_json());
    json(session, status, body, "no-store", retry_after).await
}

/// Writes a JSON answer with `Content-Length`; HEAD gets the headers only.
pub async fn json(
    session: &mut Session,
    status: u16,
    body: Bytes,
    cache_control: &str,
    retry_after: Option<u64>,
) -> Result<()> {
    let mut h = ResponseHeader::build(status, Some(5))?;
    h.insert_header("Content-Type", "application/json")?;
    h.insert_header("Content-Length", body.len().to_string())?;
    h.insert_header("Cache-Control", cache_control)?;
    if let Some(secs) = retry_after {
        h.insert_header("Retry-After", secs.to_string())?;
    }
    let head = session.req_header().method == http::Method::HEAD;
    if head || body.is_empty() {
        session.write_response_header(Box::new(h), true).await
    } else {
        session.write_response_header(Box::new(h), false).await?;
        session.write_response_body(Some(body), true).await
    }
}
