//! HTTP routing on axum's `Router`: one route per path, each method
//! router ending in a JSON 405 naming what it allows ([`only`]), a JSON
//! `no_route` for unknown API paths and, for every other path, the
//! public fallback (redirects and pages). Every answer, including for
//! malformed paths and wrong methods, is ours (JSON errors, never a
//! framework's plain-text rejection: the extractors in [`extract`] reject
//! with [`ApiError`]).
//!
//! [`api`] holds the links API handlers, [`batch`] batch creation,
//! [`stats`] the stats API, [`openapi`] the API contract and [`reference`]
//! its browsable page, [`resolve`] the
//! record endpoint and redirects, [`pages`] QR codes, previews and HTML 404
//! pages, [`internal`] who may call the edges' routes, [`rules`] the
//! protocol's request rules; this file routes and answers the service
//! paths.

mod api;
mod batch;
mod extract;
mod imports;
mod internal;
pub mod openapi;
mod pages;
pub mod reference;
mod resolve;
mod rules;
mod screening;
mod stats;
mod unlock;
pub mod webhooks;

use crate::auth::Auth;
use crate::body::read_body_max;
use crate::error::{json_response, ApiError};
use crate::links::Links;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::{from_fn_with_state, map_response, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put, MethodRouter};
use axum::Router;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
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
    /// `GET /api/docs`, the contract as a page (see [`reference`]).
    pub reference: bytes::Bytes,
    /// The admin console (`/admin/`) and the edges' heartbeats.
    pub admin: Arc<crate::admin::Admin>,
    /// Set after SIGTERM: `/healthz` says draining.
    pub drain: Arc<crate::conn::Drain>,
    /// MySQL's health, probed in the background (`/healthz`).
    pub mysql: Arc<crate::health::MysqlHealth>,
    /// Webhook endpoints and their deliveries.
    pub webhooks: Arc<crate::webhooks::Webhooks>,
}

/// The origin's router. The routes' names label
/// `shorturl_request_duration_seconds{route}` ([`named`]): the names the
/// docs and dashboards know, not the path templates.
pub fn router(state: AppState) -> Router {
    let read = "GET, HEAD";
    let internal = Router::new()
        .route("/metrics", only(read, named("metrics", get(metrics))))
        .route(
            "/internal/v1/domains",
            only(read, named("domains", get(domains))),
        )
        .route(
            "/internal/v1/heartbeat",
            only("POST", named("heartbeat", post(heartbeat))),
        )
        .route(
            "/internal/v1/records/{code}",
            only(read, named("record", get(record))),
        )
        .route_layer(from_fn_with_state(state.clone(), admit_internal));
    let links = named("list", get(api::list)).merge(named("create", post(api::create)));
    let link = named("link", get(api::read).patch(api::edit).delete(api::delete));
    let console = crate::admin::Console {
        links: state.links.clone(),
        admin: state.admin.clone(),
        webhooks: state.webhooks.clone(),
    };
    let admin = crate::admin::router(console).layer(map_response(name_answers("admin")));
    Router::new()
        .route("/shorturl_status", only(read, named("status", get(status))))
        .route("/healthz", only(read, named("healthz", get(healthz))))
        .route("/api/v1/links", only("GET, HEAD, POST", links))
        .route(
            "/api/v1/links/batch",
            only("POST", named("batch", post(batch::batch))),
        )
        .route(
            "/api/v1/links/{code}",
            only("GET, HEAD, PATCH, DELETE", link),
        )
        .route(
            "/api/v1/imports",
            only("POST", named("import", post(imports::create))),
        )
        .route(
            "/api/v1/imports/{id}",
            only(read, named("import_job", get(imports::read))),
        )
        .route(
            "/api/v1/webhooks",
            only(
                "GET, HEAD, POST",
                named("webhooks", get(webhooks::list).post(webhooks::create)),
            ),
        )
        .route(
            "/api/v1/webhooks/{id}",
            only(
                "GET, HEAD, PATCH, DELETE",
                named(
                    "webhook",
                    get(webhooks::read)
                        .patch(webhooks::update)
                        .delete(webhooks::delete),
                ),
            ),
        )
        .route(
            "/api/v1/webhooks/{id}/deliveries",
            only(read, named("webhook_deliveries", get(webhooks::deliveries))),
        )
        .route(
            "/api/v1/webhooks/{id}/deliveries/{delivery}/resend",
            only("POST", named("webhook_resend", post(webhooks::resend))),
        )
        .route(
            "/api/v1/export/links",
            only(read, named("export", get(api::export))),
        )
        .route(
            "/api/v1/links/{code}/history",
            only(read, named("history", get(api::history))),
        )
        .route(
            "/api/v1/links/{code}/stats",
            only(read, named("link_stats", get(stats::link))),
        )
        .route(
            "/api/v1/stats",
            only(read, named("stats", get(stats::tenant))),
        )
        .route(
            "/api/v1/links/{code}/live",
            only(read, named("link_live", get(stats::link_live))),
        )
        .route(
            "/api/v1/live",
            only(read, named("live", get(stats::tenant_live))),
        )
        .route(
            "/api/v1/screening",
            only(read, named("screening", get(screening::policy))),
        )
        .route(
            "/api/v1/screening/domains/{domain}",
            only(
                "PUT, DELETE",
                named(
                    "screening_domain",
                    put(screening::put).delete(screening::delete),
                ),
            ),
        )
        .route(
            "/api/v1/screening/links",
            only(read, named("screening_links", get(screening::links))),
        )
        .route(
            "/api/v1/openapi.json",
            only(read, named("openapi", get(openapi))),
        )
        .route(
            "/api/docs",
            only(read, named("api_reference", get(api_reference))),
        )
        .merge(admin)
        .merge(internal)
        .fallback(public)
        .layer(from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// The metrics label of a route, carried on its answers.
#[derive(Debug, Clone, Copy)]
struct RouteName(&'static str);

/// Names the answers of `m` (unless its handler named them already). An
/// answer without a name counts as `other`: the refusals and fallbacks
/// outside `m` (internal admission, [`only`]'s 405, `no_route`) have none.
fn named(name: &'static str, m: MethodRouter<AppState>) -> MethodRouter<AppState> {
    m.layer(map_response(name_answers(name)))
}

/// The response mapper of [`named`] (also for the console's router).
fn name_answers(
    name: &'static str,
) -> impl Fn(Response) -> std::future::Ready<Response> + Clone + Send + Sync + 'static {
    move |mut r: Response| {
        r.extensions_mut().get_or_insert(RouteName(name));
        std::future::ready(r)
    }
}

/// `m`, answering any other method with a JSON 405 and `Allow: allow`.
fn only(allow: &'static str, m: MethodRouter<AppState>) -> MethodRouter<AppState> {
    m.fallback(move || async move { method_not_allowed(allow) })
}

/// The request's normalised host (protocol 2.1), for the public routes.
#[derive(Debug, Clone)]
struct RequestHost(Option<String>);

/// Around every route: the protocol's request rules (a refused head never
/// reaches a route), then the request's duration by route and class.
async fn observe(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    let start = Instant::now();
    let resp = match rules::request_host(&req) {
        Ok(host) => {
            req.extensions_mut().insert(RequestHost(host));
            next.run(req).await
        }
        Err(refusal) => rules::refused(refusal),
    };
    let route = resp
        .extensions()
        .get::<RouteName>()
        .map_or("other", |r| r.0);
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

/// The TCP peer, when the listener recorded it.
fn peer_of(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

/// The answer refusing a peer that may not call internal routes
/// ([`internal::admit`]); `None` when it may.
fn refusal(s: &AppState, req: &Request) -> Option<Response> {
    internal::admit(&s.links.cfg.internal, peer_of(req), req.headers())
        .err()
        .map(|refused| refused.answer(s, req.uri().path()))
}

/// Before the internal routes, whatever the method.
async fn admit_internal(State(s): State<AppState>, req: Request, next: Next) -> Response {
    match refusal(&s, &req) {
        None => next.run(req).await,
        Some(r) => r,
    }
}

/// Every path no route matched: an unknown API or internal path is a JSON
/// `no_route` (an internal one only for those who may call internal
/// routes), any other is a short link: its redirect or one of its pages.
async fn public(State(s): State<AppState>, req: Request) -> Response {
    let uri = req.uri();
    let path = uri.path();
    if path.starts_with("/internal/") {
        return refusal(&s, &req).unwrap_or_else(|| no_route(path));
    }
    if path.starts_with("/api/") {
        return no_route(path);
    }
    let host = req
        .extensions()
        .get::<RequestHost>()
        .and_then(|h| h.0.clone());
    if req.method() == Method::POST && crate::pages::PageKind::of_path(path).is_none() {
        // A password link's form (protocol 4.5).
        let (parts, body) = req.into_parts();
        let entry = unlock::EntryRequest {
            host: host.as_deref(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            peer: parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
            headers: &parts.headers,
        };
        let mut r = unlock::enter(&s, entry, body).await;
        r.extensions_mut().insert(RouteName("unlock"));
        return r;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let is_page = crate::pages::PageKind::of_path(path).is_some();
        return method_not_allowed(if is_page { "GET, HEAD" } else { CODE_METHODS });
    }
    let headers = req.headers();
    let (name, r) = if let Some((kind, code)) = crate::pages::PageKind::of_path(path) {
        let r = pages::page(&s, kind, code, host.as_deref(), headers, uri.query()).await;
        ("page", r)
    } else {
        let peer = peer_of(&req).map(|p| p.ip());
        let r = resolve::redirect(&s, host.as_deref(), path, uri.query(), peer, headers).await;
        ("redirect", r)
    };
    let mut r = r;
    r.extensions_mut().insert(RouteName(name));
    r
}

fn ok<T: serde::Serialize>(status: StatusCode, body: &T) -> Response {
    json_response(status, serde_json::to_vec(body).unwrap_or_default())
}

/// The methods of a code path: `POST` is a password link's form.
const CODE_METHODS: &str = "GET, HEAD, POST";

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

/// `GET /metrics`.
async fn metrics(State(s): State<AppState>) -> Response {
    let mut r = (StatusCode::OK, s.links.metrics.render()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// `GET /api/v1/openapi.json`.
async fn openapi(State(s): State<AppState>) -> Response {
    openapi::response(&s.openapi)
}

/// `GET /api/docs`.
async fn api_reference(State(s): State<AppState>) -> Response {
    reference::response(&s.reference)
}

/// `GET /internal/v1/records/{code}?domain=`.
async fn record(
    State(s): State<AppState>,
    extract::LinkCode(r): extract::LinkCode,
) -> Result<Response, ApiError> {
    resolve::record(&s, r.domain.as_deref(), &r.code).await
}

/// The whitelist, for the edges' certificate issuer (protocol 5).
async fn domains(State(s): State<AppState>) -> Response {
    let w = &s.links.whitelist;
    let body = shorturl_common::tls::DomainList {
        default_domain: w.default_domain().to_owned(),
        domains: w.domains(),
    };
    ok(StatusCode::OK, &body)
}

/// `POST /internal/v1/heartbeat`: an edge's status summary for the console.
async fn heartbeat(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    use shorturl_common::status::{Heartbeat, HEARTBEAT_MAX_BYTES};
    let bytes = read_body_max(&headers, body, HEARTBEAT_MAX_BYTES).await?;
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

/// `GET /shorturl_status`: only to `status_allow`; anyone else gets the
/// unknown-code 404 (counted as `other`).
async fn status(State(s): State<AppState>, req: Request) -> Response {
    if !status_allowed(&s, peer_of(&req)) {
        let mut r = not_found(&s);
        r.extensions_mut().insert(RouteName("other"));
        return r;
    }
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
async fn healthz(State(s): State<AppState>) -> Response {
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
