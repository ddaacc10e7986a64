//! The Pingora application: routes each request, answers redirects from the
//! cache/Redis/origin record lookups in `request_filter`, and proxies API
//! routes to the origin pool.
//!
//! Routes (first match wins):
//! * URI or headers over the configured size → 414 / 431
//! * `GET|HEAD /shorturl_status` → merged status JSON
//! * `GET|HEAD /healthz` → the edge's own liveness
//! * `/internal/...` → 404 (never forwarded from clients)
//! * `/api/...` → origin pool (creations rate-limited per client IP)
//! * `GET|HEAD /{code}` → redirect or 404
//! * anything else → 404 (405 for other methods on a code path)

use crate::access_log::{AccessLog, LogLine};
use crate::cache::Answer;
use crate::config::EdgeConfig;
use crate::limits::Limits;
use crate::lookup::Resolver;
use crate::metrics::Metrics;
use crate::origin::OriginPool;
use crate::outcome::Outcome;
use crate::respond;
use crate::status::edge_status;
use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{ErrorSource, ErrorType};
use shorturl_common::code::code_from_path;
use shorturl_common::host::host_is;
use shorturl_common::time::now_unix;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// Seconds clients are told to wait after a 503 or 429.
const RETRY_AFTER_SECS: u64 = 1;

/// Shared state of the edge application.
pub struct Edge {
    pub resolver: Arc<Resolver>,
    pub origin: Arc<OriginPool>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    pub log: Arc<AccessLog>,
    pub cfg: Arc<EdgeConfig>,
}

/// Per-request state.
pub struct Ctx {
    start: Instant,
    outcome: Outcome,
    client: Option<IpAddr>,
    upstream: Option<SocketAddr>,
    connect_failures: usize,
}

fn client_ip(session: &Session) -> Option<IpAddr> {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
}

/// Total size of the request's header names and values.
fn header_bytes(req: &RequestHeader) -> usize {
    req.headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum()
}

/// A code copied out of the request (at most 32 bytes, no allocation).
struct CodeBuf {
    buf: [u8; shorturl_common::code::CUSTOM_MAX],
    len: usize,
}

impl CodeBuf {
    fn new(code: &str) -> Option<Self> {
        let bytes = code.as_bytes();
        let mut buf = [0u8; shorturl_common::code::CUSTOM_MAX];
        buf.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(CodeBuf {
            buf,
            len: bytes.len(),
        })
    }

    fn as_str(&self) -> &str {
        // Only ever built from a valid (ASCII) code.
        std::str::from_utf8(self.buf.get(..self.len).unwrap_or_default()).unwrap_or_default()
    }
}

/// Where a request goes.
enum Route {
    Code(CodeBuf),
    CodeWrongMethod,
    Api,
    Status,
    Health,
    NotFound,
}

fn route(req: &RequestHeader) -> Route {
    let get_or_head = req.method == Method::GET || req.method == Method::HEAD;
    let path = req.uri.path();
    // Checked before codes: both names are also valid custom-code shapes.
    match path {
        "/shorturl_status" if get_or_head => return Route::Status,
        "/healthz" if get_or_head => return Route::Health,
        _ => {}
    }
    if let Some(code) = code_from_path(path) {
        return match (get_or_head, CodeBuf::new(code)) {
            (true, Some(c)) => Route::Code(c),
            (true, None) => Route::NotFound,
            (false, _) => Route::CodeWrongMethod,
        };
    }
    if path == "/api" || path.starts_with("/api/") {
        return Route::Api;
    }
    Route::NotFound
}

impl Edge {
    /// True when the request is for `domain`: its normalised `Host` (or
    /// absolute-form authority) equals it. No Host, or a malformed one,
    /// matches nothing (the origin decides the same way). Compared in place:
    /// no allocation per redirect.
    fn request_is_for(req: &RequestHeader, domain: &str) -> bool {
        match req.headers.get(http::header::HOST) {
            Some(h) => h.to_str().is_ok_and(|h| host_is(h, domain)),
            None => req
                .uri
                .authority()
                .is_some_and(|a| host_is(a.as_str(), domain)),
        }
    }

    async fn redirect_or_404(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        code: &str,
    ) -> Result<bool> {
        let answer = match self.resolver.cache.get(code, ctx.start) {
            Some(e) => {
                self.metrics.local_hit.inc();
                ctx.outcome = match e.answer {
                    Answer::Found(_) => Outcome::Hit,
                    Answer::Negative => Outcome::Neg,
                    Answer::Unavailable => Outcome::Fail,
                };
                if !matches!(e.answer, Answer::Found(_)) && self.over_unknown_limit(ctx) {
                    return self.too_many(session, ctx).await;
                }
                e.answer.clone()
            }
            None => {
                self.metrics.local_miss.inc();
                if self.over_unknown_limit(ctx) {
                    return self.too_many(session, ctx).await;
                }
                let r = self.resolver.resolve(code).await;
                ctx.outcome = r.source;
                r.answer
            }
        };
        match answer {
            Answer::Found(rec)
                if !rec.is_expired_at(now_unix())
                    && Self::request_is_for(session.req_header(), &rec.domain) =>
            {
                respond::redirect(session, &self.cfg.redirect, &rec.url).await?;
            }
            Answer::Unavailable => {
                respond::error(
                    session,
                    503,
                    "unavailable",
                    "link lookup temporarily unavailable",
                    Some(RETRY_AFTER_SECS),
                )
                .await?;
            }
            _ => {
                if let Some(ip) = &ctx.client {
                    self.limits.count_unknown(ip);
                }
                respond::not_found(session, &self.cfg.redirect).await?;
            }
        }
        Ok(true)
    }

    fn over_unknown_limit(&self, ctx: &Ctx) -> bool {
        ctx.client
            .as_ref()
            .is_some_and(|ip| self.limits.unknown_exceeded(ip))
    }

    async fn too_many(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        ctx.outcome = Outcome::Limit;
        respond::error(
            session,
            429,
            "rate_limited",
            "too many requests for unknown links",
            Some(RETRY_AFTER_SECS),
        )
        .await?;
        Ok(true)
    }

    async fn forward(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let req = session.req_header();
        if req.method == Method::POST && req.uri.path().starts_with("/api/v1/links") {
            if let Some(ip) = &ctx.client {
                if !self.limits.allow_creation(ip) {
                    ctx.outcome = Outcome::Limit;
                    respond::error(
                        session,
                        429,
                        "rate_limited",
                        "too many creations",
                        Some(RETRY_AFTER_SECS),
                    )
                    .await?;
                    return Ok(true);
                }
            }
        }
        ctx.outcome = Outcome::Fwd;
        let Some(addr) = self.origin.select() else {
            self.metrics.origin_error.inc();
            respond::error(
                session,
                503,
                "unavailable",
                "no origin available",
                Some(RETRY_AFTER_SECS),
            )
            .await?;
            return Ok(true);
        };
        self.metrics.origin_forward.inc();
        ctx.upstream = Some(addr);
        session.set_read_timeout(Some(self.cfg.limits.client_timeout));
        session.set_write_timeout(Some(self.cfg.limits.client_timeout));
        Ok(false)
    }
}

#[async_trait]
impl ProxyHttp for Edge {
    type CTX = Ctx;

    /// No downstream modules: the edge never compresses (redirects have no
    /// body, API answers pass through as the origin made them), and the
    /// default disabled compression module still costs a context per request.
    fn init_downstream_modules(&self, _modules: &mut pingora::modules::http::HttpModules) {}

    fn new_ctx(&self) -> Ctx {
        Ctx {
            start: Instant::now(),
            outcome: Outcome::Local,
            client: None,
            upstream: None,
            connect_failures: 0,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        ctx.client = client_ip(session);
        // HTTP/1.1 keep-alive is unbounded by default: bound idle time.
        if session.get_keepalive().is_some() {
            session.set_keepalive(Some(self.cfg.limits.keepalive_timeout_secs));
        }
        let req = session.req_header();
        let uri_len = req.uri.path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > self.cfg.limits.max_uri_bytes {
            ctx.outcome = Outcome::Bad;
            respond::error(session, 414, "uri_too_long", "request URI too long", None).await?;
            return Ok(true);
        }
        if header_bytes(req) > self.cfg.limits.max_header_bytes {
            ctx.outcome = Outcome::Bad;
            respond::error(
                session,
                431,
                "headers_too_large",
                "request headers too large",
                None,
            )
            .await?;
            return Ok(true);
        }
        match route(req) {
            Route::Code(code) => self.redirect_or_404(session, ctx, code.as_str()).await,
            Route::CodeWrongMethod => {
                ctx.outcome = Outcome::Bad;
                respond::error(
                    session,
                    405,
                    "method_not_allowed",
                    "only GET and HEAD resolve a short link",
                    None,
                )
                .await?;
                Ok(true)
            }
            Route::Api => self.forward(session, ctx).await,
            Route::Status => {
                ctx.outcome = Outcome::Local;
                let body = edge_status(&self.metrics, &self.origin).await;
                respond::json(session, 200, Bytes::from(body), "no-store", None).await?;
                Ok(true)
            }
            Route::Health => {
                ctx.outcome = Outcome::Local;
                respond::json(
                    session,
                    200,
                    Bytes::from_static(br#"{"status":"ok"}"#),
                    "no-store",
                    None,
                )
                .await?;
                Ok(true)
            }
            Route::NotFound => {
                ctx.outcome = Outcome::Bad;
                respond::not_found(session, &self.cfg.redirect).await?;
                Ok(true)
            }
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let addr = if ctx.connect_failures == 0 {
            ctx.upstream
        } else {
            self.origin.select().or(ctx.upstream)
        };
        let Some(addr) = addr else {
            return Err(Error::explain(
                ErrorType::HTTPStatus(503),
                "no origin available",
            ));
        };
        ctx.upstream = Some(addr);
        Ok(Box::new(
            self.origin.peer(addr, self.cfg.origin.read_timeout),
        ))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        // Nothing was sent yet, so even a POST may go to another origin.
        ctx.connect_failures += 1;
        e.set_retry(ctx.connect_failures < self.origin.len());
        e
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(ip) = ctx.client {
            let xff = match upstream
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
            {
                Some(prev) => format!("{prev}, {ip}"),
                None => ip.to_string(),
            };
            upstream.insert_header("X-Forwarded-For", xff)?;
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let code = match e.etype() {
            ErrorType::HTTPStatus(c) => *c,
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => 0,
                    _ => 400,
                },
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        let forwarded = ctx.upstream.is_some();
        if forwarded && code >= 500 {
            self.metrics.origin_error.inc();
        }
        if code > 0 && session.response_written().is_none() {
            let (kind, msg) = match code {
                400 => ("bad_request", "malformed request"),
                503 => ("unavailable", "no origin available"),
                502 => ("bad_gateway", "origin failed to answer"),
                _ => ("internal", "internal error"),
            };
            let retry = (code == 502 || code == 503).then_some(RETRY_AFTER_SECS);
            if let Err(err) = respond::error(session, code, kind, msg, retry).await {
                tracing::debug!(error = %err, "cannot send error response");
            }
        }
        if forwarded {
            ctx.outcome = Outcome::Fwd;
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Ctx) {
        let took = ctx.start.elapsed();
        self.metrics.observe(ctx.outcome, took);
        let status = session
            .response_written()
            .map_or(0, |r: &ResponseHeader| r.status.as_u16());
        let req = session.req_header();
        self.log.write(&LogLine {
            client: ctx.client,
            method: req.method.as_str(),
            path: req.uri.path(),
            status,
            outcome: ctx.outcome,
            took,
        });
    }
}
