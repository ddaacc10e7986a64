//! The links API (`/api/v1/links...`): authentication, request parsing and
//! answers. The rules live in `crate::links`; this file only translates.

use super::extract::{Authorized, Body, Creator, Export, LinkCode, Manage, One, Read, Search};
use super::{ok, AppState};
use crate::error::ApiError;
use crate::links::{CreatedView, Creation};
use crate::validate::{parse_create, parse_patch};
use axum::extract::State;
use axum::response::Response;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use shorturl_common::time::now_unix;

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
pub async fn create(
    State(s): State<AppState>,
    Creator(caller): Creator,
    Body(body, ..): Body<One>,
) -> Result<Response, ApiError> {
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
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Read>,
    Search(req): Search,
) -> Result<Response, ApiError> {
    Ok(ok(StatusCode::OK, &s.links.search(&caller, &req).await?))
}

/// `GET /api/v1/export/links`: every matching link the caller may see, as
/// a CSV or NDJSON file streamed page by page (`links::export`).
pub async fn export(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Read>,
    Export(req): Export,
) -> Result<Response, ApiError> {
    Ok(crate::links::export::response(&s.links, &caller, req)?)
}

/// `GET /api/v1/links/{code}`.
pub async fn read(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Read>,
    LinkCode(code): LinkCode,
) -> Result<Response, ApiError> {
    let link = s.links.info(&caller, &code).await?;
    let version = link.version;
    Ok(with_etag(ok(StatusCode::OK, &link), version))
}

/// `PATCH /api/v1/links/{code}`.
pub async fn edit(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Manage>,
    LinkCode(code): LinkCode,
    headers: HeaderMap,
    Body(body, ..): Body<One>,
) -> Result<Response, ApiError> {
    let patch = parse_patch(&body, &s.links.cfg.links, now_unix())?;
    let expected = if_match(&headers)?;
    let link = s.links.edit(&caller, &code, &patch, expected).await?;
    let version = link.version;
    Ok(with_etag(ok(StatusCode::OK, &link), version))
}

/// `DELETE /api/v1/links/{code}`.
pub async fn delete(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Manage>,
    LinkCode(code): LinkCode,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let expected = if_match(&headers)?;
    let deleted = s.links.delete(&caller, &code, expected).await?;
    Ok(ok(StatusCode::OK, &deleted))
}

/// `GET /api/v1/links/{code}/history`.
pub async fn history(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Read>,
    LinkCode(code): LinkCode,
) -> Result<Response, ApiError> {
    Ok(ok(StatusCode::OK, &s.links.history(&caller, &code).await?))
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
