//! `POST /{code}`: a visitor's entry of a link's password (protocol 4.5).
//! The right one is answered with a `303` back to the link and the unlock
//! token in a cookie scoped to it; everything else with the form again,
//! saying why, never a 500.

use super::{pages, AppState};
use crate::error::ApiError;
use crate::form::Form;
use crate::links::options::Settings;
use crate::links::unlock::Entry;
use crate::pages::html;
use crate::store::LinkKey;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use shorturl_common::code::code_from_path;
use shorturl_common::time::now_unix;
use shorturl_common::unlock;
use std::net::SocketAddr;

/// Largest form body.
pub const MAX_FORM_BYTES: usize = 4096;

/// What the form says after a refused entry.
const ENTER: &str = "Enter the password.";
const WRONG: &str = "Wrong password.";
const CROSS_SITE: &str = "Open the link and enter the password there.";
const LIMITED: &str = "Too many attempts. Try again in a minute.";
const BUSY: &str = "Busy. Try again in a moment.";

/// The request as the entry needs it.
pub struct EntryRequest<'a> {
    pub host: Option<&'a str>,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub peer: Option<SocketAddr>,
    pub headers: &'a HeaderMap,
}

/// `POST /{code}` with the form's body.
pub async fn enter(s: &AppState, req: EntryRequest<'_>, body: Body) -> Response {
    let headers = req.headers;
    let (Some(code), Some(host)) = (code_from_path(req.path), req.host) else {
        return pages::not_found(s, headers, req.host, "", None).await;
    };
    let row = match s.links.store.find(&LinkKey::new(code, host)).await {
        Ok(r) => r,
        Err(e) => return ApiError::from(crate::links::LinkError::from(e)).into_response(),
    };
    let now = now_unix();
    let Some(row) = row.filter(|r| pages::is_live(r, host, now)) else {
        return pages::not_found(s, headers, Some(host), code, None).await;
    };
    let Some(phc) = Settings::from_column(row.options.as_deref()).password else {
        // A link without a password has no form: as the edges answer.
        return super::method_not_allowed(super::CODE_METHODS);
    };
    let unlocker = &s.links.unlock;
    let form = |status, error, retry_after| {
        let theme = s.links.cfg.pages.theme(Some(host));
        pages::uncached_html(status, html::password(theme, Some(error)), retry_after)
    };
    if cross_site(headers, host) {
        unlocker.refused("cross_site");
        return form(StatusCode::FORBIDDEN, CROSS_SITE, None);
    }
    let Some(password) = password_of(headers, body).await else {
        unlocker.refused("bad_request");
        return form(StatusCode::BAD_REQUEST, ENTER, None);
    };
    let trusted = &s.links.cfg.internal.allow;
    let client = crate::admin::client::address(trusted, headers, req.peer);
    let link = format!("{host}/{code}");
    match unlocker.enter(&link, client, phc, password).await {
        Entry::Opened => {}
        Entry::Wrong => return form(StatusCode::FORBIDDEN, WRONG, None),
        Entry::Limited => return form(StatusCode::TOO_MANY_REQUESTS, LIMITED, Some(60)),
        Entry::Busy => return form(StatusCode::TOO_MANY_REQUESTS, BUSY, Some(1)),
    }
    let ttl = unlocker.token_ttl.as_secs();
    let Some(token) = unlocker.keys.sign(host, code, row.version, now + ttl) else {
        // Passwords are refused without a key; one set before the key was
        // removed cannot be opened.
        return form(StatusCode::SERVICE_UNAVAILABLE, BUSY, Some(1));
    };
    let secure = req.peer.is_some_and(|p| trusted.contains(p.ip()))
        && headers
            .get("x-forwarded-proto")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let location = match req.query {
        Some(q) => format!("/{code}?{q}"),
        None => format!("/{code}"),
    };
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    let h = r.headers_mut();
    if let (Ok(loc), Ok(cookie)) = (
        HeaderValue::from_str(&location),
        HeaderValue::from_str(&unlock::set_cookie(&token, code, ttl, secure)),
    ) {
        h.insert(header::LOCATION, loc);
        h.insert(header::SET_COOKIE, cookie);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    r
}

/// A form sent from another site: an `Origin` that is not this host's, or
/// a browser saying so (`Sec-Fetch-Site: cross-site`). A cached form
/// carries no per-visitor token, so this is its CSRF defence.
fn cross_site(headers: &HeaderMap, host: &str) -> bool {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    let origin_host = rest.map(|r| r.rsplit_once(':').map_or(r, |(h, _)| h));
    !origin_host.is_some_and(|h| h.eq_ignore_ascii_case(host))
}

/// The `password` field of a form body of at most [`MAX_FORM_BYTES`]
/// (`None`: not a form, too large, or no non-empty password).
async fn password_of(headers: &HeaderMap, body: Body) -> Option<String> {
    let form = Form::read(headers, body, MAX_FORM_BYTES).await.ok()?;
    form.get("password")
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn forms_from_other_sites_are_refused() {
        assert!(!cross_site(&h(&[]), "s.shop55.com"));
        assert!(!cross_site(
            &h(&[("origin", "https://s.shop55.com")]),
            "s.shop55.com"
        ));
        assert!(!cross_site(
            &h(&[("origin", "http://S.shop55.com:8080")]),
            "s.shop55.com"
        ));
        assert!(cross_site(
            &h(&[("origin", "https://evil.example")]),
            "s.shop55.com"
        ));
        assert!(cross_site(&h(&[("origin", "null")]), "s.shop55.com"));
        assert!(cross_site(
            &h(&[("sec-fetch-site", "cross-site")]),
            "s.shop55.com"
        ));
        assert!(!cross_site(
            &h(&[("sec-fetch-site", "same-origin")]),
            "s.shop55.com"
        ));
    }

    #[tokio::test]
    async fn only_a_small_form_with_a_password_is_read() {
        let form = h(&[("content-type", "application/x-www-form-urlencoded")]);
        let read =
            |hs: HeaderMap, b: &'static str| async move { password_of(&hs, Body::from(b)).await };
        assert_eq!(
            read(form.clone(), "password=a%20b%26c").await.as_deref(),
            Some("a b&c")
        );
        assert_eq!(read(form.clone(), "password=").await, None);
        assert_eq!(read(form.clone(), "other=1").await, None);
        assert_eq!(
            read(h(&[("content-type", "text/plain")]), "password=x").await,
            None
        );
        let big: &'static str =
            Box::leak(format!("password={}", "a".repeat(MAX_FORM_BYTES)).into_boxed_str());
        assert_eq!(read(form, big).await, None);
    }
}
