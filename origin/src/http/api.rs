//! The links API (`/api/v1/links...`): authentication, request parsing and
//! answers. The rules live in `crate::links`; this file only translates.

use super::{ok, AppState};
use crate::body::read_body_max;
use crate::error::ApiError;
use crate::links::{CreatedView, Creation, LinkError};
use crate::tenancy::{Caller, Scope};
use crate::validate::{parse_create, parse_patch, parse_search};
use axum::body::{Body, Bytes};
use axum::response::Response;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use shorturl_common::code::is_valid_code;
use shorturl_common::time::now_unix;

/// Reads a body of at most `links.max_body_bytes` (413 otherwise).
async fn read_body(s: &AppState, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    read_body_max(headers, body, s.links.cfg.links.max_body_bytes).await
}

pub(super) fn check_code(code: &str) -> Result<(), ApiError> {
    if is_valid_code(code) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_code",
            "code must be 4-32 characters of [0-9A-Za-z_-]",
        ))
    }
}

pub(super) fn require(caller: &Caller, scope: Scope) -> Result<(), ApiError> {
    caller
        .require(scope)
        .map_err(|e| ApiError::from(LinkError::from(e)))
}

/// `If-Match: "<version>"` (or a bare number; `*` matches any version).
fn if_match(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invalid_if_match",
            "If-Match must be one link version, e.g. \"3\"",
        )
    };
    let mut values = headers.get_all(header::IF_MATCH).iter();
    let Some(v) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(bad());
    }
    let s = v.to_str().map_err(|_| bad())?.trim();
    if s == "*" {
        return Ok(None);
    }
    let inner = s
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s);
    if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    inner.parse().map(Some).map_err(|_| bad())
}

/// A link answer with its version as the `ETag` (for `If-Match`).
fn with_etag(mut r: Response, version: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{version}\"")) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

/// `POST /api/v1/links`.
pub async fn create(s: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let caller = s.auth.admit_creations(headers, 1)?;
    let body = read_body(s, headers, body).await?;
    let parsed = parse_create(&body, &s.links.cfg.links)?;
    let (status, link, deduplicated) = match s.links.create(&caller, parsed).await? {
        Creation::New(l) => (StatusCode::CREATED, l, false),
        Creation::Deduplicated(l) => (StatusCode::OK, l, true),
    };
    let version = link.version;
    Ok(with_etag(
        ok(status, &CreatedView { link, deduplicated }),
        version,
    ))
}

/// `GET /api/v1/links?...`: search and list.
pub async fn list(
    s: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let caller = s.auth.authenticate(headers)?;
    require(&caller, Scope::LinksRead)?;
    let req = parse_search(query, &s.links.cfg.links)?;
    Ok(ok(StatusCode::OK, &s.links.search(&caller, &req).await?))
}

/// `GET /api/v1/links/{code}`.
pub async fn read(s: &AppState, headers: &HeaderMap, code: &str) -> Result<Response, ApiError> {
    let caller = s.auth.authenticate(headers)?;
    require(&caller, Scope::LinksRead)?;
    check_code(code)?;
    let link = s.links.info(&caller, code).await?;
    let version = link.version;
    Ok(with_etag(ok(StatusCode::OK, &link), version))
}

/// `PATCH /api/v1/links/{code}`.
pub async fn edit(
    s: &AppState,
    headers: &HeaderMap,
    code: &str,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = s.auth.authenticate(headers)?;
    require(&caller, Scope::LinksManage)?;
    check_code(code)?;
    let body = read_body(s, headers, body).await?;
    let patch = parse_patch(&body, &s.links.cfg.links, now_unix())?;
    let expected = if_match(headers)?;
    let link = s.links.edit(&caller, code, &patch, expected).await?;
    let version = link.version;
    Ok(with_etag(ok(StatusCode::OK, &link), version))
}

/// `DELETE /api/v1/links/{code}`.
pub async fn delete(s: &AppState, headers: &HeaderMap, code: &str) -> Result<Response, ApiError> {
    let caller = s.auth.authenticate(headers)?;
    require(&caller, Scope::LinksManage)?;
    check_code(code)?;
    let expected = if_match(headers)?;
    let deleted = s.links.delete(&caller, code, expected).await?;
    Ok(ok(StatusCode::OK, &deleted))
}

/// `GET /api/v1/links/{code}/history`.
pub async fn history(s: &AppState, headers: &HeaderMap, code: &str) -> Result<Response, ApiError> {
    let caller = s.auth.authenticate(headers)?;
    require(&caller, Scope::LinksRead)?;
    check_code(code)?;
    Ok(ok(StatusCode::OK, &s.links.history(&caller, code).await?))
}

#[cfg(test)]
mod tests {
    use super::if_match;
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn if_match_forms() {
        let parse = |vals: &[&str]| {
            let mut h = HeaderMap::new();
            for v in vals {
                h.append(http::header::IF_MATCH, HeaderValue::from_str(v).unwrap());
            }
            if_match(&h).map_err(|e| e.kind)
        };
        assert_eq!(parse(&[]), Ok(None));
        assert_eq!(parse(&["\"3\""]), Ok(Some(3)));
        assert_eq!(parse(&[" 12 "]), Ok(Some(12)));
        assert_eq!(parse(&["*"]), Ok(None));
        for bad in [
            &["W/\"3\""][..],
            &["\"\""],
            &["abc"],
            &["\"3"],
            &["-1"],
            &["1", "2"],
        ] {
            assert_eq!(parse(bad), Err("invalid_if_match"), "{bad:?}");
        }
    }
}
