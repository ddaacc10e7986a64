//! HTTP routing. One fallback handler matches method and path itself, so
//! every answer, including for malformed paths and wrong methods, is ours
//! (JSON errors, never a framework's plain-text rejection).

use crate::auth::Auth;
use crate::error::{json_response, ApiError};
use crate::links::Links;
use crate::validate::parse_create;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::json;
use shorturl_common::code::{code_from_path, is_valid_code};
use shorturl_common::host::normalize_host;
use shorturl_common::record::Lookup;
use shorturl_common::time::now_unix;
use shorturl_common::PROTOCOL_VERSION;
use std::sync::Arc;
use std::time::Instant;

/// Shared state of the handlers.
#[derive(Clone)]
pub struct AppState {
    pub links: Arc<Links>,
    pub auth: Arc<Auth>,
}

/// The origin's router.
pub fn router(state: AppState) -> Router {
    Router::new().fallback(dispatch).with_state(state)
}

async fn dispatch(State(s): State<AppState>, req: Request) -> Response {
    let start = Instant::now();
    let (route, resp) = route(&s, req).await;
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

async fn route(s: &AppState, req: Request) -> (&'static str, Response) {
    // Split early: the body is not `Sync`, so no `&Request` may live across an await.
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let headers = &parts.headers;
    let is_read = method == Method::GET || method == Method::HEAD;
    match path.as_str() {
        "/shorturl_status" if is_read => ("status", status(s)),
        "/healthz" if is_read => ("healthz", healthz(s).await),
        "/metrics" if is_read => {
            let mut r = (StatusCode::OK, s.links.metrics.render()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            ("metrics", r)
        }
        "/shorturl_status" | "/healthz" | "/metrics" => ("other", method_not_allowed("GET, HEAD")),
        "/api/v1/links" if method == Method::POST => (
            "create",
            create(s, headers, body)
                .await
                .unwrap_or_else(|e| e.into_response()),
        ),
        "/api/v1/links" => ("other", method_not_allowed("POST")),
        _ => {
            if let Some(code) = path.strip_prefix("/api/v1/links/") {
                let r = match method {
                    Method::GET | Method::HEAD => info(s, headers, code).await,
                    Method::DELETE => disable(s, headers, code).await,
                    _ => return ("other", method_not_allowed("GET, HEAD, DELETE")),
                };
                return ("link", r.unwrap_or_else(|e| e.into_response()));
            }
            if let Some(code) = path.strip_prefix("/internal/v1/records/") {
                if !is_read {
                    return ("other", method_not_allowed("GET, HEAD"));
                }
                return (
                    "record",
                    record(s, code).await.unwrap_or_else(|e| e.into_response()),
                );
            }
            if path.starts_with("/api/") || path.starts_with("/internal/") {
                return (
                    "other",
                    ApiError::new(
                        StatusCode::NOT_FOUND,
                        "no_route",
                        format!("no API route {path}"),
                    )
                    .into_response(),
                );
            }
            if !is_read {
                return ("other", method_not_allowed("GET, HEAD"));
            }
            ("redirect", redirect(s, headers, &path).await)
        }
    }
}

fn status(s: &AppState) -> Response {
    let m = &s.links.metrics;
    let body = json!({
        "protocol": PROTOCOL_VERSION,
        "service": "origin",
        "redis": m.redis_dim(),
        "mysql": m.mysql_dim(),
        "lock": m.lock_dim(),
        "issuer": s.links.issuer.dim(),
        "whitelist": s.links.whitelist.status(),
    });
    ok(StatusCode::OK, &body)
}

async fn healthz(s: &AppState) -> Response {
    match s.links.store.ping().await {
        Ok(()) => ok(StatusCode::OK, &json!({"status": "ok"})),
        Err(e) => {
            let mut r = ok(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"status": "degraded", "mysql": e.to_string()}),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(2u32));
            r
        }
    }
}

async fn create(s: &AppState, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let app = s.auth.admit_creation(headers)?;
    let max = s.links.cfg.links.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("body is larger than {max} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let body = axum::body::to_bytes(body, max)
        .await
        .map_err(|_| too_large())?;
    let parsed = parse_create(&body, &s.links.cfg.links)?;
    let (status, created) = s.links.create(app, parsed).await?;
    Ok(ok(status, &created))
}

fn check_code(code: &str) -> Result<(), ApiError> {
    if is_valid_code(code) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "invalid_code",
            "code must be 4-32 characters of [0-9A-Za-z_-]",
        ))
    }
}

async fn info(s: &AppState, headers: &HeaderMap, code: &str) -> Result<Response, ApiError> {
    s.auth.authenticate(headers)?;
    check_code(code)?;
    Ok(ok(StatusCode::OK, &s.links.info(code).await?))
}

async fn disable(s: &AppState, headers: &HeaderMap, code: &str) -> Result<Response, ApiError> {
    let app = s.auth.authenticate(headers)?;
    check_code(code)?;
    s.links.disable(code, &app).await?;
    Ok(ok(
        StatusCode::OK,
        &json!({"code": code, "state": "disabled"}),
    ))
}

/// The edge's miss path: the record line, cacheable for as long as it may live.
async fn record(s: &AppState, code: &str) -> Result<Response, ApiError> {
    check_code(code)?;
    let (status, body, max_age) = match s.links.resolve(code).await? {
        Lookup::Found(r) if !r.is_expired() => {
            (StatusCode::OK, r.encode(), s.links.cache.record_ttl(&r))
        }
        _ => (
            StatusCode::NOT_FOUND,
            "-".to_owned(),
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

fn not_found(s: &AppState) -> Response {
    let mut r = ApiError::not_found().into_response();
    if let Ok(v) = HeaderValue::from_str(&s.links.cfg.redirect.not_found_cache_control) {
        r.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    r
}

/// `GET|HEAD /{code}`: protocol section 4.
async fn redirect(s: &AppState, headers: &HeaderMap, path: &str) -> Response {
    let Some(code) = code_from_path(path) else {
        return not_found(s);
    };
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(normalize_host)
    else {
        return not_found(s);
    };
    let lookup = match s.links.resolve(code).await {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    match lookup {
        Lookup::Found(r) if r.binds(&host) && !r.is_expired_at(now_unix()) => {
            let policy = &s.links.cfg.redirect;
            let (Ok(loc), Ok(cc), Ok(status)) = (
                HeaderValue::from_str(&r.url),
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
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
            resp
        }
        _ => not_found(s),
    }
}
