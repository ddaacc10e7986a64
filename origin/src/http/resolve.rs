//! The resolution routes: the edge's record endpoint and `GET /{code}`.

use super::{not_found, pages, AppState};
use crate::error::ApiError;
use crate::pages::PageKind;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use shorturl_common::code::code_from_path;
use shorturl_common::link_rules::{self, Visitor};
use shorturl_common::record::Lookup;
use shorturl_common::time::now_unix;
use std::borrow::Cow;
use std::net::IpAddr;

/// The edge's miss path: the record line (`2 <version> ...`, or `- <version>`
/// with a 404) of `code` on `domain` (normalised; `None`: an edge of the
/// previous version asking for the code alone), cacheable for as long as
/// it may live. `code` is valid.
pub async fn record(s: &AppState, domain: Option<&str>, code: &str) -> Result<Response, ApiError> {
    let (status, body, max_age) = match s.links.resolve(domain, code).await? {
        Lookup::Found(r) if !r.is_expired() || r.has_fallback() => {
            (StatusCode::OK, r.encode(), s.links.cache.record_ttl(&r))
        }
        other => (
            StatusCode::NOT_FOUND,
            Lookup::Negative(other.version()).encode(),
            s.links.cfg.redis.negative_ttl.as_secs(),
        ),
    };
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    if let Ok(v) = HeaderValue::from_str(&format!("max-age={max_age}")) {
        h.insert(header::CACHE_CONTROL, v);
    }
    Ok(resp)
}

/// `GET|HEAD /{code}`: protocol section 4.
/// `host` is the request's normalised host (protocol 2.1). A 404 is the
/// protocol's JSON, or the HTML page for a browser ([`pages::not_found`]).
pub async fn redirect(
    s: &AppState,
    host: Option<&str>,
    path: &str,
    query: Option<&str>,
    peer: Option<IpAddr>,
    headers: &HeaderMap,
) -> Response {
    let Some(code) = code_from_path(path) else {
        return pages::not_found(s, headers, host, "", None).await;
    };
    let Some(host) = host else {
        return pages::not_found(s, headers, None, code, None).await;
    };
    let lookup = match s.links.resolve(Some(host), code).await {
        Ok(l) => l,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let now = now_unix();
    let visitor = OriginVisitor {
        headers,
        query,
        peer,
    };
    if let Lookup::Found(r) = &lookup {
        let screen = r
            .options
            .as_ref()
            .and_then(|o| o.screened(r.is_expired_at(now)));
        if let (Some(screen), true) = (screen, r.binds(host)) {
            // A screened destination, before anything else (protocol 4.7).
            return pages::screened(s, headers, host, code, screen).await;
        }
        let guide = r
            .options
            .as_ref()
            .is_some_and(|o| o.shows_guide(r.is_expired_at(now), visitor.user_agent()));
        if guide && r.binds(host) {
            // An in-app browser that cannot open it (protocol 4.6).
            let lang = link_rules::guide_language(visitor.accept_language());
            let query = format!("lang={lang}");
            let r = pages::page(s, PageKind::Guide, code, Some(host), headers, Some(&query)).await;
            return pages::instead_of_redirect(r);
        }
        let locked = r
            .options
            .as_ref()
            .is_some_and(|o| o.locked(r.is_expired_at(now)));
        if locked && r.binds(host) {
            let cookies = headers
                .get_all(header::COOKIE)
                .iter()
                .map(HeaderValue::as_bytes);
            if !s
                .links
                .unlock
                .keys
                .opened_by(cookies, host, code, r.version, now)
            {
                return pages::locked(s, headers, host);
            }
        }
        let card = r
            .options
            .as_ref()
            .is_some_and(|o| o.shows_card(r.is_expired_at(now), visitor.user_agent()));
        if card && r.binds(host) {
            // A link-preview crawler gets the social card (protocol 4.4).
            let r = pages::page(s, PageKind::Card, code, Some(host), headers, None).await;
            return pages::instead_of_redirect(r);
        }
    }
    let no_store =
        matches!(&lookup, Lookup::Found(r) if r.options.as_ref().is_some_and(|o| o.password));
    let target = match &lookup {
        Lookup::Found(r) if r.binds(host) => match &r.options {
            None if !r.is_expired_at(now) => Some(Cow::Borrowed(r.url.as_str())),
            None => None,
            Some(o) => link_rules::choose(o, &r.url, r.is_expired_at(now), code, &visitor, now)
                .map(|c| c.url),
        },
        _ => None,
    };
    match target {
        Some(url) => {
            let policy = &s.links.cfg.redirect;
            let (Ok(loc), Ok(cc), Ok(status)) = (
                HeaderValue::from_str(&url),
                HeaderValue::from_str(&policy.cache_control),
                StatusCode::from_u16(policy.status),
            ) else {
                return not_found(s);
            };
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = status;
            let h = resp.headers_mut();
            h.insert(header::LOCATION, loc);
            h.insert(header::CACHE_CONTROL, cc);
            if no_store {
                // Opened by the visitor's cookie (protocol 4.5).
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            }
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
            resp
        }
        None => pages::not_found(s, headers, Some(host), code, Some(&lookup)).await,
    }
}

/// A request to the origin as the link rules see it. The origin has no
/// country source: a country condition never holds here (protocol 3.1.1).
struct OriginVisitor<'a> {
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    peer: Option<IpAddr>,
}

impl Visitor for OriginVisitor<'_> {
    fn user_agent(&self) -> Option<&[u8]> {
        self.headers
            .get(header::USER_AGENT)
            .map(HeaderValue::as_bytes)
    }
    fn accept_language(&self) -> Option<&[u8]> {
        self.headers
            .get(header::ACCEPT_LANGUAGE)
            .map(HeaderValue::as_bytes)
    }
    fn country(&self) -> Option<[u8; 2]> {
        None
    }
    fn query(&self) -> Option<&str> {
        self.query
    }
    fn split_key(&self) -> Option<String> {
        self.peer.map(link_rules::split_key)
    }
}
