//! [`FastPath`]: the per-connection loop (read a head, answer it or hand
//! it to the proxy, repeat while the connection is kept alive).

use super::answer::{Answers, End};
use super::parse::{parse, Parsed, Request};
use crate::access_log::{AccessLog, LogLine};
use crate::cache::AnswerRef;
use crate::clicks::record::ClickParts;
use crate::clicks::Clicks;
use crate::config::EdgeConfig;
use crate::limits::Limits;
use crate::lookup::Resolver;
use crate::metrics::Metrics;
use crate::net::{client_of_values, ClientKey};
use crate::outcome::Outcome;
use crate::proxy::Edge;
use crate::route::{route_path, Route};
use crate::tls::TlsView;
use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{Stream, ALPN};
use pingora::proxy::HttpProxy;
use pingora::server::ShutdownWatch;
use shorturl_common::time::now_unix;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// Bytes of a head the fast path reads before handing it over (a longer
/// head is the proxy's: it allows more).
const HEAD_BUF: usize = 4096;
/// Pingora's keep-alive for the first request of a connection.
const FIRST_KEEPALIVE_SECS: u64 = 60;

/// What the fast path shares with the proxy (the same instances).
pub struct Shared {
    pub resolver: Arc<Resolver>,
    pub metrics: Arc<Metrics>,
    pub limits: Arc<Limits>,
    pub log: Arc<AccessLog>,
    pub clicks: Arc<Clicks>,
    pub cfg: Arc<EdgeConfig>,
    pub tls: Arc<TlsView>,
}

/// The fast path in front of the proxy (see the module documentation).
pub struct FastPath {
    proxy: Arc<HttpProxy<Edge>>,
    s: Shared,
    answers: Answers,
    keepalive: Duration,
    /// Set when the service stops: idle connections close, answers say
    /// `Connection: close`.
    closing: AtomicBool,
    wake: Notify,
}

/// One connection's facts.
struct Conn {
    peer: Option<IpAddr>,
    tls: bool,
}

/// How one request went.
enum Step {
    /// Answered; keep the connection or not.
    Answered { keepalive: bool },
    /// The proxy's.
    HandOver,
}

impl FastPath {
    /// The fast path for `proxy`, sharing its state. Registers the
    /// redirect serialiser with the cache: records stored from now on
    /// carry their answer bytes.
    pub fn new(proxy: Arc<HttpProxy<Edge>>, s: Shared) -> Result<Self, super::AnswerError> {
        let answers = Answers::new(&s.cfg.redirect, s.tls.https.hsts.as_ref())?;
        if s.cfg.fast_path.enabled {
            s.resolver
                .cache
                .set_serialiser(super::redirect_serialiser(s.cfg.redirect.clone()));
        }
        Ok(FastPath {
            keepalive: Duration::from_secs(s.cfg.limits.keepalive_timeout_secs),
            proxy,
            s,
            answers,
            closing: AtomicBool::new(false),
            wake: Notify::new(),
        })
    }

    fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Serves an HTTP/1 connection until it closes.
    async fn serve(self: &Arc<Self>, mut stream: Stream, shutdown: &ShutdownWatch) {
        let conn = Conn {
            peer: stream
                .get_socket_digest()
                .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip())),
            tls: stream.get_ssl_digest().is_some(),
        };
        let mut buf = BytesMut::with_capacity(HEAD_BUF);
        let mut out = Vec::with_capacity(512);
        let mut settings: Option<HttpPersistentSettings> = None;
        // The first head is bounded by the connection guard's deadline;
        // after an answer, the wait for the next is the keep-alive timeout.
        let mut idle = false;
        loop {
            let step = loop {
                let read = if idle {
                    match self.read_idle(&mut stream, &mut buf).await {
                        Some(r) => r,
                        None => return,
                    }
                } else {
                    stream.read_buf(&mut buf).await
                };
                idle = false;
                match read {
                    Ok(0) | Err(_) if buf.is_empty() => return, // closed, timed out
                    Ok(0) | Err(_) => break Step::HandOver,     // the proxy's error path
                    Ok(_) => {}
                }
                match parse(&buf) {
                    Parsed::Partial if buf.len() < HEAD_BUF => continue,
                    Parsed::Plain(req) => {
                        out.clear();
                        break match self.answer(&req, &conn, &mut out) {
                            Some((status, outcome, start)) => {
                                let keepalive = req.keepalive && !self.closing();
                                if stream.write_all(&out).await.is_err()
                                    || stream.flush().await.is_err()
                                {
                                    return;
                                }
                                self.log(&req, &conn, status, outcome, start);
                                Step::Answered { keepalive }
                            }
                            None => Step::HandOver,
                        };
                    }
                    _ => break Step::HandOver,
                }
            };
            match step {
                Step::Answered { keepalive: true } => {
                    buf.clear();
                    idle = true;
                }
                Step::Answered { keepalive: false } => {
                    // As Pingora ends a session it does not keep.
                    let _ = stream.shutdown().await;
                    return;
                }
                Step::HandOver => {
                    self.s.metrics.fast_path.handover.inc();
                    let mut session = ServerSession::new_http1(stream);
                    match settings.take() {
                        Some(p) => p.apply_to_session(&mut session),
                        None => {
                            let ka = (!self.closing()).then_some(FIRST_KEEPALIVE_SECS);
                            session.set_keepalive(ka);
                            session.set_keepalive_reuses_remaining(
                                self.proxy
                                    .server_options()
                                    .and_then(|o| o.keepalive_request_limit),
                            );
                        }
                    }
                    if !buf.is_empty() {
                        session.set_pipelined_prefix(std::mem::take(&mut buf));
                    }
                    let Some(reused) = self.proxy.process_new_http(session, shutdown).await else {
                        return;
                    };
                    let (s, p) = reused.consume();
                    stream = s;
                    settings = p;
                    if buf.capacity() == 0 {
                        buf = BytesMut::with_capacity(HEAD_BUF);
                    }
                    buf.clear();
                    idle = true;
                }
            }
        }
    }

    /// Waits for the next request's first bytes: `None` when the
    /// keep-alive timeout passes or the service stops first.
    async fn read_idle(
        &self,
        stream: &mut Stream,
        buf: &mut BytesMut,
    ) -> Option<std::io::Result<usize>> {
        let stopped = self.wake.notified();
        tokio::pin!(stopped);
        stopped.as_mut().enable();
        if self.closing() {
            return None;
        }
        tokio::select! {
            biased;
            r = tokio::time::timeout(self.keepalive, stream.read_buf(buf)) => r.ok(),
            _ = stopped => None,
        }
    }

    /// Writes the answer for `req` into `out`, or `None` when the proxy
    /// must answer it. Returns the status, the outcome and when the
    /// request started (after parsing, as the proxy's context does).
    fn answer(
        &self,
        req: &Request<'_>,
        conn: &Conn,
        out: &mut Vec<u8>,
    ) -> Option<(u16, Outcome, Instant)> {
        let s = &self.s;
        let limits = &s.cfg.limits;
        if req.uri_len > limits.max_uri_bytes || req.header_bytes > limits.max_header_bytes {
            return None;
        }
        let Route::Code(code) = route_path(true, req.path) else {
            return None;
        };
        let https = &s.tls.https;
        if !conn.tls && https.may_upgrade() && req.host.is_some_and(|h| https.upgrades(h)) {
            return None;
        }
        let start = Instant::now();
        let entry = s.resolver.cache.get(code.as_str(), start)?;
        let hsts = conn.tls;
        match entry.answer() {
            AnswerRef::Found(rec) => {
                let now = now_unix();
                let bound = req.host.is_some_and(|h| h.eq_ignore_ascii_case(rec.domain));
                if rec.is_expired_at(now) || !bound {
                    return None;
                }
                let response = entry.response()?;
                s.metrics.local_hit.inc();
                let parts = ClickParts {
                    head: req.head,
                    user_agent: req.user_agent,
                    referer: req.referer,
                };
                // Counted before the answer is written (see `proxy.rs`).
                s.clicks.record_parts(parts, code.as_str(), now);
                let end = self.end(req);
                self.answers.redirect(out, response, hsts, &end);
                s.metrics.fast_path.hit.inc();
                Some((s.cfg.redirect.status, Outcome::Hit, start))
            }
            AnswerRef::Negative(_) => {
                // A browser's 404 is the origin's page: the proxy fetches it.
                let accept = req.accept.and_then(|a| std::str::from_utf8(a).ok());
                if shorturl_common::accept::prefers_html(accept) {
                    return None;
                }
                let key = self
                    .client(req, conn)
                    .map(|ip| ClientKey::new(ip, limits.ipv6_prefix_len));
                if key.is_some_and(|k| s.limits.unknown_exceeded(&k)) {
                    return None; // the proxy answers the 429
                }
                s.metrics.local_hit.inc();
                if let Some(k) = key {
                    s.limits.count_unknown(k);
                }
                let end = self.end(req);
                self.answers.not_found(out, hsts, req.head, &end);
                s.metrics.fast_path.negative.inc();
                Some((404, Outcome::Neg, start))
            }
            AnswerRef::Unavailable => None,
        }
    }

    fn end(&self, req: &Request<'_>) -> End {
        End {
            date: super::clock::date(),
            keepalive: req.keepalive && !self.closing(),
        }
    }

    fn client(&self, req: &Request<'_>, conn: &Conn) -> Option<IpAddr> {
        conn.peer
            .map(|p| client_of_values(p, req.forwarded_for(), &self.s.cfg.trusted_proxies))
    }

    /// The latency histogram and the access log, as the proxy's `logging`.
    fn log(&self, req: &Request<'_>, conn: &Conn, status: u16, outcome: Outcome, start: Instant) {
        let took = start.elapsed();
        self.s.metrics.observe(outcome, took);
        self.s.log.write(&LogLine {
            client: self.client(req, conn),
            method: req.method,
            path: req.path,
            status,
            outcome,
            took,
        });
    }
}

#[async_trait]
impl ServerApp for FastPath {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let whole = !self.s.cfg.fast_path.enabled
            || matches!(stream.selected_alpn_proto(), Some(ALPN::H2))
            || self.proxy.server_options().is_some_and(|o| o.h2c);
        if whole {
            return self.proxy.process_new(stream, shutdown).await;
        }
        self.serve(stream, shutdown).await;
        None
    }

    async fn cleanup(&self) {
        self.closing.store(true, Ordering::Release);
        self.wake.notify_waiters();
        ServerApp::cleanup(&*self.proxy).await;
    }
}
