//! HTTP answers of the pages for people (`crate::pages`): QR codes, the
//! preview page, and the 404 page that browsers get instead of the JSON
//! 404 (protocol section 4.2).

use super::{not_found as json_not_found, AppState};
use crate::error::ApiError;
use crate::links::options::Settings;
use crate::pages::html::{self, CardPage, Gone, Page, Preview};
use crate::pages::qr::{self, QrParams};
use crate::pages::{accept, etag, none_match, PageKind};
use crate::store::{LinkKey, LinkRow, RowState};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use shorturl_common::code::is_valid_code;
use shorturl_common::link_rules::Screen;
use shorturl_common::record::Lookup;
use shorturl_common::time::{now_unix, rfc3339};
use std::time::Duration;

const HTML: &str = "text/html; charset=utf-8";

fn count(s: &AppState, kind: &str, result: &str) {
    s.links
        .metrics
        .pages
        .with_label_values(&[kind, result])
        .inc();
}

/// A 200 (or 304 when `If-None-Match` matches) of `body` with a strong ETag.
fn cached(
    headers: &HeaderMap,
    body: Vec<u8>,
    content_type: &'static str,
    max_age: Duration,
    csp: Option<&str>,
) -> (Response, bool) {
    let tag = etag(&body);
    let matched = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| none_match(v, &tag));
    let (status, len, body) = if matched {
        (StatusCode::NOT_MODIFIED, None, Body::empty())
    } else {
        (StatusCode::OK, Some(body.len()), Body::from(body))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Some(len) = len {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={}", max_age.as_secs())) {
        h.insert(header::CACHE_CONTROL, v);
    }
    secure(h, csp);
    (r, matched)
}

/// `nosniff`, and on HTML the page's CSP and no referrer.
fn secure(h: &mut HeaderMap, csp: Option<&str>) {
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(v) = csp.and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
}

/// `GET|HEAD /{code}.svg`, `/{code}.png` and `/{code}+`.
pub async fn page(
    s: &AppState,
    kind: PageKind,
    code: &str,
    host: Option<&str>,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Response {
    if !is_valid_code(code) {
        count(s, kind.label(), "not_found");
        return not_found(s, headers, host, code, None).await;
    }
    let params = match kind {
        PageKind::Preview
        | PageKind::Card
        | PageKind::Password
        | PageKind::Guide
        | PageKind::Warning => None,
        PageKind::Svg | PageKind::Png => match QrParams::from_query(query) {
            Ok(p) => Some(p),
            Err(e) => {
                count(s, kind.label(), "bad_request");
                let field = match e {
                    qr::QrParamError::Size => "invalid_size",
                    qr::QrParamError::Margin => "invalid_margin",
                };
                return ApiError::bad_request(field, e.to_string()).into_response();
            }
        },
    };
    let Some(host) = host else {
        count(s, kind.label(), "not_found");
        return not_found(s, headers, None, code, None).await;
    };
    let lookup = match s.links.resolve(Some(host), code).await {
        Ok(l) => l,
        Err(e) => {
            count(s, kind.label(), "error");
            return ApiError::from(e).into_response();
        }
    };
    let live = matches!(&lookup, Lookup::Found(r) if r.binds(host) && !r.is_expired_at(now_unix()));
    if !live {
        count(s, kind.label(), "not_found");
        return not_found(s, headers, Some(host), code, Some(&lookup)).await;
    }
    let pages = &s.links.cfg.pages;
    let rendered = match (kind, params) {
        (PageKind::Svg, Some(p)) => qr::svg(&qr::scan_url(&s.links.cfg.short_url(host, code)), p)
            .map(|b| (b, "image/svg+xml", pages.qr_max_age, None)),
        (PageKind::Png, Some(p)) => qr::png(&qr::scan_url(&s.links.cfg.short_url(host, code)), p)
            .map(|b| (b, "image/png", pages.qr_max_age, None)),
        (PageKind::Card, _) => return card(s, headers, host, code).await,
        (PageKind::Password, _) => return password_form(s, headers, host, code).await,
        (PageKind::Guide, _) => return guide(s, headers, host, code, query).await,
        (PageKind::Warning, _) => return warning(s, headers, host, code).await,
        _ => return preview(s, headers, host, code).await,
    };
    match rendered {
        Ok((body, ct, max_age, csp)) => {
            let (r, matched) = cached(headers, body, ct, max_age, csp);
            count(s, kind.label(), if matched { "not_modified" } else { "ok" });
            r
        }
        Err(e) => {
            tracing::error!(code, error = %e, "QR code rendering failed");
            count(s, kind.label(), "error");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "cannot render this QR code",
            )
            .into_response()
        }
    }
}

/// The row of a live link of `host` for a page of `kind`, or the answer
/// instead (the store's error, or the 404 saying why).
async fn live_row(
    s: &AppState,
    headers: &HeaderMap,
    host: &str,
    code: &str,
    kind: &str,
) -> Result<(LinkRow, Gone), Response> {
    let row = match s.links.store.find(&LinkKey::new(code, host)).await {
        Ok(r) => r,
        Err(e) => {
            count(s, kind, "error");
            return Err(ApiError::from(crate::links::LinkError::from(e)).into_response());
        }
    };
    let now = now_unix();
    let why = gone_of(row.as_ref(), host, now);
    match row.filter(|r| is_live(r, host, now)) {
        Some(r) => Ok((r, why)),
        None => {
            count(s, kind, "not_found");
            Err(html_or_json_404(s, headers, host, why))
        }
    }
}

/// The 200 (or 304) of an HTML page of `kind`, cacheable for as long as
/// the preview.
fn html_page(s: &AppState, headers: &HeaderMap, kind: &str, page: Page) -> Response {
    let (mut r, matched) = cached(
        headers,
        page.body,
        HTML,
        s.links.cfg.pages.preview_max_age,
        Some(&page.csp),
    );
    r.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static(page.referrer),
    );
    count(s, kind, if matched { "not_modified" } else { "ok" });
    r
}

/// The preview of a live link: its row for the creation date.
async fn preview(s: &AppState, headers: &HeaderMap, host: &str, code: &str) -> Response {
    let kind = PageKind::Preview.label();
    let row = match live_row(s, headers, host, code, kind).await {
        Ok((row, _)) => row,
        Err(r) => return r,
    };
    let settings = Settings::from_column(row.options.as_deref());
    if let Some(screen) = settings.o.screen {
        // The preview of a screened link is its warning (protocol 4.7).
        return html_page(s, headers, kind, warning_page(s, host, &row, screen));
    }
    if settings.password.is_some() {
        // The preview would show where a password link goes.
        return html_page(s, headers, kind, password_page(s, host));
    }
    let created = rfc3339(row.created_at.unwrap_or(0));
    let page = html::preview(
        s.links.cfg.pages.theme(Some(host)),
        &Preview {
            code,
            domain: host,
            url: row.url.as_deref().unwrap_or_default(),
            created: created.get(..10).unwrap_or(&created),
        },
    );
    html_page(s, headers, kind, page)
}

/// The social card of a live link that has one (protocol 4.4): the page
/// link-preview crawlers get instead of its redirect.
async fn card(s: &AppState, headers: &HeaderMap, host: &str, code: &str) -> Response {
    let kind = PageKind::Card.label();
    let (row, why) = match live_row(s, headers, host, code, kind).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let og = Settings::from_column(row.options.as_deref()).og;
    if og.is_empty() {
        count(s, kind, "not_found");
        return html_or_json_404(s, headers, host, why);
    }
    let page = html::card(
        s.links.cfg.pages.theme(Some(host)),
        &CardPage {
            short_url: &s.links.cfg.short_url(host, code),
            url: row.url.as_deref().unwrap_or_default(),
            title: og.title.as_deref(),
            description: og.description.as_deref(),
            image: og.image.as_deref(),
        },
    );
    html_page(s, headers, kind, page)
}

/// The in-app browser guidance of a live link with `b` (protocol 4.6), in
/// the language its query asks (`lang=zh`, else English).
async fn guide(
    s: &AppState,
    headers: &HeaderMap,
    host: &str,
    code: &str,
    query: Option<&str>,
) -> Response {
    let kind = PageKind::Guide.label();
    let row = match live_row(s, headers, host, code, kind).await {
        Ok((row, _)) => row,
        Err(r) => return r,
    };
    if Settings::from_column(row.options.as_deref())
        .o
        .guide
        .is_empty()
    {
        count(s, kind, "not_found");
        return html_or_json_404(s, headers, host, Gone::Unknown);
    }
    let lang = shorturl_common::pages::guide_lang_of_query(query);
    let page = html::guide(
        s.links.cfg.pages.theme(Some(host)),
        lang,
        &s.links.cfg.short_url(host, code),
    );
    html_page(s, headers, kind, page)
}

/// The warning of a live link with `w` (protocol 4.7), cacheable like the
/// preview: what browsers get on `/{code}`.
async fn warning(s: &AppState, headers: &HeaderMap, host: &str, code: &str) -> Response {
    let kind = PageKind::Warning.label();
    let row = match live_row(s, headers, host, code, kind).await {
        Ok((row, _)) => row,
        Err(r) => return r,
    };
    let Some(screen) = Settings::from_column(row.options.as_deref()).o.screen else {
        count(s, kind, "not_found");
        return html_or_json_404(s, headers, host, Gone::Unknown);
    };
    html_page(s, headers, kind, warning_page(s, host, &row, screen))
}

/// The warning page of `row`: the host the policy in force flags (the
/// URL's own while a pass has not caught up with a change).
fn warning_page(s: &AppState, host: &str, row: &LinkRow, screen: Screen) -> Page {
    let url = row.url.as_deref().unwrap_or_default();
    let mut settings = Settings::from_column(row.options.as_deref());
    let flagged = s
        .links
        .screening
        .policy()
        .apply(url, &mut settings)
        .map(|h| h.host)
        .or_else(|| {
            url::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
        })
        .unwrap_or_default();
    html::warning(s.links.cfg.pages.theme(Some(host)), &flagged, screen, url)
}

/// `/{code}` of a live link with `w` (protocol 4.7): the warning page for
/// a browser, else the 403 saying why; never kept by a cache.
pub async fn screened(
    s: &AppState,
    headers: &HeaderMap,
    host: &str,
    code: &str,
    screen: Screen,
) -> Response {
    if prefers_html(headers) {
        let r = page(s, PageKind::Warning, code, Some(host), headers, None).await;
        return instead_of_redirect(r);
    }
    let (error, message) = screen.refusal();
    let mut r = ApiError::new(StatusCode::FORBIDDEN, error, message).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A password link's form (protocol 4.5), cacheable like the preview: what
/// browsers get on `/{code}` without an unlock token.
async fn password_form(s: &AppState, headers: &HeaderMap, host: &str, code: &str) -> Response {
    let kind = PageKind::Password.label();
    let row = match live_row(s, headers, host, code, kind).await {
        Ok((row, _)) => row,
        Err(r) => return r,
    };
    if Settings::from_column(row.options.as_deref())
        .password
        .is_none()
    {
        count(s, kind, "not_found");
        return html_or_json_404(s, headers, host, Gone::Unknown);
    }
    html_page(s, headers, kind, password_page(s, host))
}

fn password_page(s: &AppState, host: &str) -> Page {
    html::password(s.links.cfg.pages.theme(Some(host)), None)
}

/// A page answered on `/{code}` instead of the redirect (a card, a
/// guide): the same URL answers others differently, so no cache may keep
/// it for them.
pub fn instead_of_redirect(mut r: Response) -> Response {
    if r.status() == StatusCode::OK || r.status() == StatusCode::NOT_MODIFIED {
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

/// `/{code}` of a live password link without a valid unlock token
/// (protocol 4.5): the form for a browser, the `401` for anyone else;
/// neither kept by any cache.
pub fn locked(s: &AppState, headers: &HeaderMap, host: &str) -> Response {
    if prefers_html(headers) {
        count(s, PageKind::Password.label(), "ok");
        return uncached_html(StatusCode::OK, password_page(s, host), None);
    }
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "password_required",
        "this link needs a password",
    )
    .into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// An HTML page nobody may keep (`no-store`), with `status` and, for a
/// refusal to retry later, `Retry-After`.
pub fn uncached_html(status: StatusCode, page: Page, retry_after: Option<u64>) -> Response {
    let Page {
        body,
        csp,
        referrer,
    } = page;
    let len = body.len();
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(HTML));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(secs) = retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    secure(h, Some(&csp));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static(referrer));
    r
}

pub(super) fn is_live(row: &LinkRow, host: &str, now: u64) -> bool {
    row.state == RowState::Active
        && row.domain.as_deref() == Some(host)
        && row.expires_at.is_some_and(|e| e > now)
}

/// What a 404 page may say about `row` on `host`: nothing about another
/// domain's link or a deleted one.
fn gone_of(row: Option<&LinkRow>, host: &str, now: u64) -> Gone {
    match row {
        Some(r) if r.domain.as_deref() == Some(host) => match r.state {
            RowState::Disabled => Gone::Disabled,
            RowState::Expired => Gone::Expired,
            RowState::Active if r.expires_at.is_none_or(|e| e <= now) => Gone::Expired,
            _ => Gone::Unknown,
        },
        _ => Gone::Unknown,
    }
}

/// The 404 of a link path: the protocol's JSON 404, or for a client that
/// prefers HTML the 404 page saying whether the link expired or was
/// disabled. `lookup` is what resolution said, if it ran; only a code with
/// a row (a negative of version > 0) costs a MySQL read, and only here.
pub async fn not_found(
    s: &AppState,
    headers: &HeaderMap,
    host: Option<&str>,
    code: &str,
    lookup: Option<&Lookup>,
) -> Response {
    if !prefers_html(headers) {
        return json_not_found(s);
    }
    let Some(host) = host else {
        return html_404(s, "", Gone::Unknown);
    };
    let now = now_unix();
    let why = match lookup {
        Some(Lookup::Found(r)) if r.binds(host) && r.is_expired_at(now) => Gone::Expired,
        Some(Lookup::Negative(v)) if *v > 0 && is_valid_code(code) => {
            match s.links.store.find(&LinkKey::new(code, host)).await {
                Ok(row) => gone_of(row.as_ref(), host, now),
                // Already logged by the store; the page stays a plain 404.
                Err(_) => Gone::Unknown,
            }
        }
        _ => Gone::Unknown,
    };
    html_404(s, host, why)
}

fn prefers_html(headers: &HeaderMap) -> bool {
    accept::prefers_html(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

fn html_or_json_404(s: &AppState, headers: &HeaderMap, host: &str, why: Gone) -> Response {
    if prefers_html(headers) {
        html_404(s, host, why)
    } else {
        json_not_found(s)
    }
}

/// The HTML 404 page (the client prefers HTML). It varies with `Accept`.
fn html_404(s: &AppState, host: &str, why: Gone) -> Response {
    let result = match why {
        Gone::Unknown => "unknown",
        Gone::Expired => "expired",
        Gone::Disabled => "disabled",
    };
    count(s, "html404", result);
    let Page { body, csp, .. } = html::not_found(s.links.cfg.pages.theme(Some(host)), why);
    let len = body.len();
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::NOT_FOUND;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(HTML));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(v) = HeaderValue::from_str(&s.links.cfg.redirect.not_found_cache_control) {
        h.insert(header::CACHE_CONTROL, v);
    }
    secure(h, Some(&csp));
    r
}
