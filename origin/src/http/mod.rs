//! HTTP routing. One fallback handler matches method and path itself, so
//! every answer, including for malformed paths and wrong methods, is ours
//! (JSON errors, never a framework's plain-text rejection).
//!
//! [`api`] holds the links API handlers, [`batch`] batch creation,
//! [`stats`] the stats API,
//! [`openapi`] the API contract, [`resolve`] the record endpoint and
//! redirects, [`pages`] QR codes, previews and HTML 404 pages; this file
//! routes and answers the service paths.

mod api;
mod batch;
mod internal;
pub mod openapi;
mod pages;
mod resolve;
mod rules;
mod stats;

use crate::auth::Auth;
use crate::body::read_body_max;
use crate::error::{json_response, ApiError};
use crate::links::Links;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http::{header, HeaderValue, Method, StatusCode};
use shorturl_common::status::OriginStatus;
use shorturl_common::PROTOCOL_VERSION;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub links: Arc<Links>,
    pub auth: Arc<Auth>,
    /// `GET /api/v1/openapi.json` (see [`openapi::json`]).
    pub openapi: bytes::Bytes,
    /// The admin console (`/admin/`) and the edges' heartbeats.
    pub admin: Arc<crate::admin::Admin>,
    /// Set after SIGTERM: `/healthz` says draining.
    pub drain: Arc<crate::conn::Drain>,
    /// MySQL's health, probed in the background (`/healthz`).
    pub mysql: Arc<crate::health::MysqlHealth>,
}

/// The origin's router.
pub fn router(state: AppState) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

async fn dispatch(State(s): State<AppState>, req: Request) -> Response {
    let start = Instant::now();
    let (route, resp) = match rules::request_host(&req) {
        Ok(host) => route(&s, req, host).await,
        Err(refusal) => ("other", rules::refused(refusal)),
    };
    let class = match resp.status().as_u16() {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    s.links
        .metrics
        .requests
        .with_label_values(&[route, class])
        .observe(start.elapsed().as_secs_f64());
    resp
}

fn ok<T: serde::Serialize>(status: StatusCode, body: &T) -> Response {
    json_response(status, serde_json::to_vec(body).unwrap_or_default())
}

fn method_not_allowed(allowed: &'static str) -> Response {
    let mut r = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("use {allowed}"),
    )
    .into_response();
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allowed));
    r
}

fn no_route(path: &str) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("no API route {path}"),
    )
    .into_response()
}

fn answer(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

async fn route(s: &AppState, req: Request, host: Option<String>) -> (&'static str, Response) {
    // Split early: the body is not `Sync`, so no `&Request` may live across an await.
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let headers = &parts.headers;
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let is_read = method == Method::GET || method == Method::HEAD;
    if path == "/metrics" || path.starts_with("/internal/") {
        if let Err(refused) = internal::admit(&s.links.cfg.internal, peer, headers) {
            return ("other", refused.answer(s, &path));
        }
    }
    match path.as_str() {
        // Only to `status_allow`; anyone else gets the unknown-code 404.
        "/shorturl_status" if is_read && !status_allowed(s, peer) => ("other", not_found(s)),
        "/shorturl_status" if is_read => ("status", status(s)),
        "/healthz" if is_read => ("healthz", healthz(s)),
        "/metrics" if is_read => {
            let mut r = (StatusCode::OK, s.links.metrics.render()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            ("metrics", r)
        }
        "/shorturl_status" | "/healthz" | "/metrics" => ("other", method_not_allowed("GET, HEAD")),
        "/internal/v1/domains" if is_read => ("domains", domains(s)),
        "/internal/v1/domains" => ("other", method_not_allowed("GET, HEAD")),
        "/internal/v1/heartbeat" if method == Method::POST => {
            ("heartbeat", answer(heartbeat(s, headers, body).await))
        }
        "/internal/v1/heartbeat" => ("other", method_not_allowed("POST")),
        "/api/v1/links" if method == Method::POST => {
            ("create", answer(api::create(s, headers, body).await))
        }
        "/api/v1/links" if is_read => (
            "list",
            answer(api::list(s, headers, parts.uri.query()).await),
        ),
        "/api/v1/links" => ("other", method_not_allowed("GET, HEAD, POST")),
        // `batch` is a reserved code: this path is batch creation only.
        "/api/v1/links/batch" if method == Method::POST => {
            ("batch", answer(batch::batch(s, headers, body).await))
        }
        "/api/v1/links/batch" => ("other", method_not_allowed("POST")),
        "/api/v1/stats" if is_read => (
            "stats",
            answer(stats::tenant(s, headers, parts.uri.query()).await),
        ),
        "/api/v1/stats" => ("other", method_not_allowed("GET, HEAD")),
        "/api/v1/openapi.json" if is_read => ("openapi", openapi::response(&s.openapi)),
        "/api/v1/openapi.json" => ("other", method_not_allowed("GET, HEAD")),
        _ => {
            if let Some(rest) = path.strip_prefix("/api/v1/links/") {
                return match rest.split('/').collect::<Vec<_>>()[..] {
                    [code] => match method {
                        Method::GET | Method::HEAD => {
                            ("link", answer(api::read(s, headers, code).await))
                        }
                        Method::PATCH => ("link", answer(api::edit(s, headers, code, body).await)),
                        Method::DELETE => ("link", answer(api::delete(s, headers, code).await)),
                        _ => ("other", method_not_allowed("GET, HEAD, PATCH, DELETE")),
                    },
                    [code, "history"] if is_read => {
                        ("history", answer(api::history(s, headers, code).await))
                    }
                    [_, "history"] => ("other", method_not_allowed("GET, HEAD")),
                    [code, "stats"] if is_read => (
                        "link_stats",
                        answer(stats::link(s, headers, code, parts.uri.query()).await),
                    ),
                    [_, "stats"] => ("other", method_not_allowed("GET, HEAD")),
                    _ => ("other", no_route(&path)),
                };
            }
            if let Some(code) = path.strip_prefix("/internal/v1/records/") {
                if !is_read {
                    return ("other", method_not_allowed("GET, HEAD"));
                }
                return ("record", answer(resolve::record(s, code).await));
            }
            if path == "/admin" || path.starts_with("/admin/") {
                let req = crate::admin::Req::of(&parts, peer);
                return (
                    "admin",
                    crate::admin::handle(&s.links, &s.admin, req, body).await,
                );
            }
            if path.starts_with("/api/") || path.starts_with("/internal/") {
                return ("other", no_route(&path));
            }
            if !is_read {
                return ("other", method_not_allowed("GET, HEAD"));
            }
            if let Some((kind, code)) = crate::pages::PageKind::of_path(&path) {
                let query = parts.uri.query();
                let r = pages::page(s, kind, code, host.as_deref(), headers, query).await;
                return ("page", r);
            }
            (
                "redirect",
                resolve::redirect(s, host.as_deref(), &path, headers).await,
            )
        }
    }
}

/// The whitelist, for the edges' certificate issuer (protocol 5).
fn domains(s: &AppState) -> Response {
    let w = &s.links.whitelist;
    let body = shorturl_common::tls::DomainList {
        default_domain: w.default_domain().to_owned(),
        domains: w.domains(),
    };
    ok(StatusCode::OK, &body)
}

/// `POST /internal/v1/heartbeat`: an edge's status summary for the console.
async fn heartbeat(
    s: &AppState,
    headers: &http::HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    use shorturl_common::status::{Heartbeat, HEARTBEAT_MAX_BYTES};
    let bytes = read_body_max(headers, body, HEARTBEAT_MAX_BYTES).await?;
    let hb: Heartbeat = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request("invalid_heartbeat", format!("not a heartbeat: {e}")))?;
    s.admin
        .edges
        .record(hb)
        .map_err(|e| ApiError::bad_request("invalid_heartbeat", e.to_string()))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Whether `peer` may read `/shorturl_status` (an unknown peer may not).
fn status_allowed(s: &AppState, peer: Option<SocketAddr>) -> bool {
    peer.is_some_and(|p| s.links.cfg.status_allow.contains(p.ip()))
}

fn status(s: &AppState) -> Response {
    let m = &s.links.metrics;
    let body = OriginStatus {
        protocol: PROTOCOL_VERSION,
        service: "origin".into(),
        redis: m.redis_dim(),
        mysql: m.mysql_dim(),
        lock: m.lock_dim(),
        issuer: s.links.issuer.dim(),
        whitelist: s.links.whitelist.status(),
        outbox: m.outbox_dim(),
        pool: m.pool_dim(),
    };
    ok(StatusCode::OK, &body)
}

/// `/healthz`, from memory: 200 `ok`, 503 `degraded` (MySQL failed its
/// last probe, `health.rs`; the origin still serves what Redis holds) or,
/// after SIGTERM, 503 `draining`. The
/// `Shorturl-Health` header says the same for health checks that read only
/// the head: edges stop choosing an origin that says `draining`.
fn healthz(s: &AppState) -> Response {
    let (status, state, body): (_, _, &[u8]) = if s.drain.is_draining() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            br#"{"status":"draining"}"#,
        )
    } else if s.mysql.is_up() {
        (StatusCode::OK, "ok", br#"{"status":"ok"}"#)
    } else {
        // The failure itself is logged by the probe; the answer only says what.
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "degraded",
            br#"{"status":"degraded","mysql":"unavailable"}"#,
        )
    };
    let mut r = json_response(status, body.to_vec());
    let h = r.headers_mut();
    h.insert(HEALTH_HEADER, HeaderValue::from_static(state));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if status != StatusCode::OK {
        h.insert(header::RETRY_AFTER, HeaderValue::from(2u32));
    }
    r
}

/// The health state header (protocol, "Health and drain").
pub const HEALTH_HEADER: &str = "shorturl-health";

fn not_found(s: &AppState) -> Response {
    let mut r = ApiError::not_found().into_response();
    if let Ok(v) = HeaderValue::from_str(&s.links.cfg.redirect.not_found_cache_control) {
        r.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    r
}
