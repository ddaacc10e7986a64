//! Responses the edge writes itself, following protocol section 4: an
//! explicit `Content-Length` on every answer (without it Pingora falls back
//! to a close-delimited body and keep-alive is lost) and an explicit
//! `Cache-Control`. `respond_error` is never used for normal answers because
//! it always turns keep-alive off.

use bytes::Bytes;
use http::HeaderValue;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;
use shorturl_common::error::{ErrorBody, NOT_FOUND_BODY};
use shorturl_common::redirect::RedirectPolicy;

/// Writes the redirect to `url`; `hsts`: a `Strict-Transport-Security`
/// value (answers over TLS, when configured).
/// `no_store`: the answer was opened by the visitor's cookie (a password
/// link, protocol 4.5): no cache may keep it.
pub async fn redirect(
    session: &mut Session,
    policy: &RedirectPolicy,
    url: &str,
    hsts: Option<&HeaderValue>,
    no_store: bool,
) -> Result<()> {
    let mut h = redirect_header(policy, url, hsts)?;
    if no_store {
        h.insert_header("Cache-Control", "no-store")?;
    }
    session.write_response_header(Box::new(h), true).await
}

/// The redirect's header (the fast path serialises the same one).
pub fn redirect_header(
    policy: &RedirectPolicy,
    url: &str,
    hsts: Option<&HeaderValue>,
) -> Result<ResponseHeader> {
    let mut h = ResponseHeader::build(policy.status, Some(5))?;
    h.insert_header("Location", url)?;
    h.insert_header("Content-Length", "0")?;
    h.insert_header("Cache-Control", policy.cache_control.as_str())?;
    if let Some(v) = hsts {
        h.insert_header("Strict-Transport-Security", v.clone())?;
    }
    Ok(h)
}

/// The `308` sending a plain-HTTP request to the same URL on HTTPS.
pub async fn to_https(session: &mut Session, location: &str) -> Result<()> {
    let mut h = ResponseHeader::build(308, Some(3))?;
    h.insert_header("Location", location)?;
    h.insert_header("Content-Length", "0")?;
    h.insert_header("Cache-Control", "no-store")?;
    session.write_response_header(Box::new(h), true).await
}

/// Writes the protocol's 404 for anything that does not resolve.
pub async fn not_found(session: &mut Session, policy: &RedirectPolicy) -> Result<()> {
    not_found_with(session, policy, None).await
}

/// The protocol's 404, with `Strict-Transport-Security` when given.
pub async fn not_found_with(
    session: &mut Session,
    policy: &RedirectPolicy,
    hsts: Option<&HeaderValue>,
) -> Result<()> {
    let h = not_found_header(policy, hsts)?;
    write(session, h, Bytes::from_static(NOT_FOUND_BODY)).await
}

/// The protocol 404's header; its body is [`NOT_FOUND_BODY`] (the fast
/// path serialises the same one).
pub fn not_found_header(
    policy: &RedirectPolicy,
    hsts: Option<&HeaderValue>,
) -> Result<ResponseHeader> {
    let mut h = ResponseHeader::build(404, Some(5))?;
    h.insert_header("Content-Type", "application/json")?;
    h.insert_header("Content-Length", NOT_FOUND_BODY.len().to_string())?;
    h.insert_header("Cache-Control", policy.not_found_cache_control.as_str())?;
    if let Some(v) = hsts {
        h.insert_header("Strict-Transport-Security", v.clone())?;
    }
    Ok(h)
}

/// A `text/plain` answer (ACME challenge key authorisations).
pub async fn text(session: &mut Session, status: u16, body: Bytes) -> Result<()> {
    let mut h = ResponseHeader::build(status, Some(3))?;
    h.insert_header("Content-Type", "text/plain")?;
    h.insert_header("Content-Length", body.len().to_string())?;
    h.insert_header("Cache-Control", "no-store")?;
    write(session, h, body).await
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

/// Seconds clients are told to wait after a 503 or 429 the edge answers.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The body of the 503 for a link lookup that failed (Redis and origin
/// both unavailable).
pub fn unavailable_body() -> Vec<u8> {
    ErrorBody::new("unavailable", "link lookup temporarily unavailable").to_json()
}

/// The 503 for a link lookup that failed.
pub async fn unavailable(session: &mut Session) -> Result<()> {
    let body = Bytes::from(unavailable_body());
    json(session, 503, body, "no-store", Some(RETRY_AFTER_SECS)).await
}

/// Writes a JSON answer with `Content-Length`; HEAD gets the headers only.
pub async fn json(
    session: &mut Session,
    status: u16,
    body: Bytes,
    cache_control: &str,
    retry_after: Option<u64>,
) -> Result<()> {
    let h = json_header(status, body.len(), cache_control, retry_after)?;
    write(session, h, body).await
}

/// The head of a JSON answer of `len` bytes (also the fast path's).
pub fn json_header(
    status: u16,
    len: usize,
    cache_control: &str,
    retry_after: Option<u64>,
) -> Result<ResponseHeader> {
    let mut h = ResponseHeader::build(status, Some(5))?;
    h.insert_header("Content-Type", "application/json")?;
    h.insert_header("Content-Length", len.to_string())?;
    h.insert_header("Cache-Control", cache_control)?;
    if let Some(secs) = retry_after {
        h.insert_header("Retry-After", secs.to_string())?;
    }
    Ok(h)
}

/// Writes `h` and `body`; HEAD and empty bodies get the headers only.
async fn write(session: &mut Session, h: ResponseHeader, body: Bytes) -> Result<()> {
    let head = session.req_header().method == http::Method::HEAD;
    if head || body.is_empty() {
        session.write_response_header(Box::new(h), true).await
    } else {
        session.write_response_header(Box::new(h), false).await?;
        session.write_response_body(Some(body), true).await
    }
}
