//! [`FastPath`]: the per-connection loop (read a head, answer it or hand
//! it to the proxy, repeat while the connection is kept alive).

use super::answer::{Answers, End};
use super::parse::{parse, Parsed, Request};
use crate::access_log::LogLine;
use crate::cache::{AnswerRef, Frame, Key, RecordRef};
use crate::clicks::record::{ClickParts, Client};
use crate::decide::{self, decide, Facts, Source, Target, Verdict};
use crate::net::{client_of_values_repeated, ClientKey};
use crate::outcome::Outcome;
use crate::proxy::Edge;
use crate::route::{route_path, CodeBuf, Route};
use crate::state::EdgeState;
use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{Stream, ALPN};
use pingora::proxy::HttpProxy;
use pingora::server::ShutdownWatch;
use shorturl_common::link_rules::{self, Destination, Visitor};
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

/// The fast path in front of the proxy (see the module documentation).
pub struct FastPath {
    proxy: Arc<HttpProxy<Edge>>,
    /// The proxy's own state (`Edge::state`).
    s: Arc<EdgeState>,
    answers: Answers,
    /// The redirect's head around its URL (shared with the cache), and
    /// made whole when a lookup's answer was not cached.
    frame: Arc<Frame>,
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

/// What the fast path makes of a plain request before any I/O.
enum Decision {
    /// Answered into the output buffer: status, outcome, start.
    Answered(u16, Outcome, Instant),
    /// The code is not in memory: looked up here (`answer_miss`).
    Miss(CodeBuf, Instant),
    /// The proxy's.
    HandOver,
}

/// How one request went.
enum Step {
    /// Answered; keep the connection or not.
    Answered { keepalive: bool },
    /// The proxy's.
    HandOver,
}

impl FastPath {
    /// The fast path for `proxy`, sharing its state `s` (the `Arc` the
    /// proxy's `Edge` holds). Registers the redirect's frame with the
    /// cache: records stored from now on are answered around their URL.
    pub fn new(proxy: Arc<HttpProxy<Edge>>, s: Arc<EdgeState>) -> Result<Self, super::AnswerError> {
        let answers = Answers::new(&s.cfg.redirect, s.tls.https.hsts.as_ref())?;
        let frame = Arc::new(super::redirect_frame(s.cfg.redirect.clone())?);
        if s.cfg.fast_path.enabled {
            s.resolver.cache.set_frame(Arc::clone(&frame));
        }
        Ok(FastPath {
            frame,
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
                match parse(&buf, self.s.geo.header()) {
                    Parsed::Partial if buf.len() < HEAD_BUF => continue,
                    Parsed::Plain(req) => {
                        out.clear();
                        let answered = match self.answer(&req, &conn, &mut out) {
                            Decision::Answered(status, outcome, start) => {
                                Some((status, outcome, start))
                            }
                            Decision::Miss(code, start) => {
                                self.answer_miss(&req, &conn, code.as_str(), start, &mut out)
                                    .await
                            }
                            Decision::HandOver => None,
                        };
                        break match answered {
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

    /// Writes the answer for `req` into `out` from the in-process cache,
    /// or says it is a miss or the proxy's. The start is taken after
    /// parsing, as the proxy's context takes it. From memory the fast path
    /// renders a live record's redirect and a negative entry's 404; the
    /// rarer verdicts (a browser's 404 page, a 429, an expired or another
    /// domain's record, a remembered failure) are the proxy's, which
    /// decides the same way.
    fn answer(&self, req: &Request<'_>, conn: &Conn, out: &mut Vec<u8>) -> Decision {
        let s = &self.s;
        let limits = &s.cfg.limits;
        if req.uri_len > limits.max_uri_bytes || req.header_bytes > limits.max_header_bytes {
            return Decision::HandOver;
        }
        let Route::Code(code) = route_path(true, req.path) else {
            return Decision::HandOver;
        };
        let https = &s.tls.https;
        if !conn.tls && https.may_upgrade() && req.host.is_some_and(|h| https.upgrades(h)) {
            return Decision::HandOver;
        }
        let Some(domain) = req.host else {
            // For no domain: the proxy's (a 404 without a lookup).
            return Decision::HandOver;
        };
        let start = Instant::now();
        let key = Key {
            domain,
            code: code.as_str(),
        };
        let cache = &s.resolver.cache;
        let Some(entry) = cache.get(key, start) else {
            return Decision::Miss(code, start);
        };
        let facts = self.facts(req, conn);
        let now = now_unix();
        let answer = entry.answer();
        match decide(
            answer,
            code.as_str(),
            Source::Memory,
            &facts,
            &s.limits,
            now,
        ) {
            Verdict::Redirect(rec, Target::Link) => {
                if !entry.servable() {
                    return Decision::HandOver;
                }
                s.metrics.local_hit.inc();
                let dest = Target::Link.destination(&rec);
                let head = self.frame.around(rec.url.as_bytes());
                let parts = self.click_parts(req, &facts, dest, rec.url);
                s.clicks.record_hit(parts, (cache, &entry), now);
                self.answers
                    .redirect_parts(out, head, facts.conn.tls, &self.end(req));
                s.metrics.fast_path.hit.inc();
                Decision::Answered(s.cfg.redirect.status, Outcome::Hit, start)
            }
            Verdict::Redirect(rec, Target::Chosen(url, dest)) => {
                // The head with the chosen URL in the record's place.
                if !entry.servable() {
                    return Decision::HandOver;
                }
                s.metrics.local_hit.inc();
                let click = ((code.as_str(), rec.domain), Some(dest), &*url);
                let head = self.frame.around(url.as_bytes());
                self.redirect(req, &facts, click, now, head, out);
                s.metrics.fast_path.hit.inc();
                Decision::Answered(s.cfg.redirect.status, Outcome::Hit, start)
            }
            Verdict::NotFound { page: false } if matches!(answer, AnswerRef::Negative(_)) => {
                s.metrics.local_hit.inc();
                self.not_found(req, conn, &facts, out);
                s.metrics.fast_path.negative.inc();
                Decision::Answered(404, Outcome::Neg, start)
            }
            _ => Decision::HandOver,
        }
    }

    /// A code not in memory: looked up here as the proxy would (Redis, then
    /// the origin, joined with concurrent lookups of the code; the answer
    /// stored in the cache) and answered the proxy's way — a redirect, the
    /// 404 (expired, another domain's, unknown) or the 503 (lookup failed).
    /// Handed over (`None`): a client over its unknown-code limit (the
    /// 429), and a browser's 404 (the origin's page; the proxy then finds
    /// the answer stored by this lookup).
    async fn answer_miss(
        &self,
        req: &Request<'_>,
        conn: &Conn,
        code: &str,
        start: Instant,
        out: &mut Vec<u8>,
    ) -> Option<(u16, Outcome, Instant)> {
        let s = &self.s;
        let domain = req.host?;
        let facts = self.facts(req, conn);
        if !decide::admit_lookup(&facts, &s.limits) {
            return None;
        }
        let resolved = s.resolver.resolve(Key { domain, code }).await;
        let now = now_unix();
        let status = match decide(
            resolved.answer.view(),
            code,
            Source::Lookup,
            &facts,
            &s.limits,
            now,
        ) {
            Verdict::Redirect(rec, target) => {
                // The frame around the URL the lookup stored, else a head
                // made here (the cache may not have kept the entry, or the
                // rules chose another URL).
                let made;
                let servable = resolved.entry.as_ref().is_some_and(|e| e.servable());
                let head = match &target {
                    Target::Link if servable => self.frame.around(rec.url.as_bytes()),
                    _ => {
                        made = self.frame.serialise(target.url(&rec))?;
                        [&made[..], &[], &[]]
                    }
                };
                let click = (
                    (code, rec.domain),
                    target.destination(&rec),
                    target.url(&rec),
                );
                self.redirect(req, &facts, click, now, head, out);
                s.cfg.redirect.status
            }
            Verdict::Unavailable => {
                self.answers.unavailable(out, req.head, &self.end(req));
                503
            }
            Verdict::NotFound { page: false } => {
                self.not_found(req, conn, &facts, out);
                404
            }
            Verdict::NotFound { page: true }
            | Verdict::TooMany
            | Verdict::Card(_)
            | Verdict::Locked { .. }
            | Verdict::Guide { .. }
            | Verdict::Screened { .. } => return None,
        };
        s.metrics.local_miss.inc();
        s.metrics.fast_path.resolved.inc();
        Some((status, resolved.source, start))
    }

    /// Counts the click and appends the redirect (`head`: the frame around
    /// a URL, or a head made whole; `location`: that URL).
    fn redirect(
        &self,
        req: &Request<'_>,
        facts: &FastFacts<'_>,
        (link, destination, location): ((&str, &str), Option<Destination>, &str),
        now: u64,
        head: [&[u8]; 3],
        out: &mut Vec<u8>,
    ) {
        let parts = self.click_parts(req, facts, destination, location);
        // Counted before the answer is written (see `proxy.rs`).
        self.s.clicks.record_parts(parts, link, now);
        self.answers
            .redirect_parts(out, head, facts.conn.tls, &self.end(req));
    }

    /// What counting reads of a redirect (the dimensions' inputs only
    /// when it counts them).
    fn click_parts<'a>(
        &self,
        req: &'a Request<'a>,
        facts: &'a FastFacts<'a>,
        destination: Option<Destination>,
        location: &'a str,
    ) -> ClickParts<'a> {
        let mut parts = ClickParts {
            head: req.head,
            user_agent: req.user_agent,
            referer: req.referer,
            destination,
            ..ClickParts::default()
        };
        if self.s.clicks.dimensions() {
            parts.accept_language = req.accept_language;
            parts.query = req.query.map(str::as_bytes);
            parts.location = Some(location);
            parts.client = Some(facts);
        }
        parts
    }

    /// Counts the unknown code against the client and appends the 404.
    fn not_found(&self, req: &Request<'_>, conn: &Conn, facts: &FastFacts<'_>, out: &mut Vec<u8>) {
        decide::spend(facts, &self.s.limits);
        self.answers
            .not_found(out, conn.tls, req.head, &self.end(req));
    }

    fn facts<'a>(&'a self, req: &'a Request<'a>, conn: &'a Conn) -> FastFacts<'a> {
        FastFacts {
            fp: self,
            req,
            conn,
            client: std::cell::OnceCell::new(),
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
            .map(|p| client_of_values_repeated(p, req.forwarded_for(), &self.s.cfg.trusted_proxies))
    }

    /// The latency histogram and the access log, as the proxy's `logging`.
    fn log(&self, req: &Request<'_>, conn: &Conn, status: u16, outcome: Outcome, start: Instant) {
        let took = start.elapsed();
        self.s.metrics.observe(outcome, took);
        if !self.s.log.enabled() {
            return;
        }
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

/// A fast-path request as the redirect decision sees it.
struct FastFacts<'a> {
    fp: &'a FastPath,
    req: &'a Request<'a>,
    conn: &'a Conn,
    /// The client behind the trusted proxies, parsed once (the country,
    /// the split and the limits may each ask).
    client: std::cell::OnceCell<Option<IpAddr>>,
}

impl FastFacts<'_> {
    fn client_ip(&self) -> Option<IpAddr> {
        *self
            .client
            .get_or_init(|| self.fp.client(self.req, self.conn))
    }
}

impl Client for FastFacts<'_> {
    fn country(&self) -> Option<[u8; 2]> {
        Visitor::country(self)
    }
    fn address(&self) -> Option<IpAddr> {
        self.client_ip()
    }
    fn city(&self) -> Option<std::sync::Arc<str>> {
        self.fp.s.geo.city(self.client_ip())
    }
}

impl Visitor for FastFacts<'_> {
    fn user_agent(&self) -> Option<&[u8]> {
        self.req.user_agent
    }

    fn accept_language(&self) -> Option<&[u8]> {
        self.req.accept_language
    }

    fn country(&self) -> Option<[u8; 2]> {
        let s = &self.fp.s;
        let trusted = self
            .conn
            .peer
            .is_some_and(|p| s.cfg.trusted_proxies.contains(p));
        let header = self.req.country.filter(|_| trusted);
        s.geo.country(header, self.client_ip())
    }

    fn query(&self) -> Option<&str> {
        self.req.query
    }

    fn split_key(&self) -> Option<String> {
        self.client_ip().map(link_rules::split_key)
    }
}

impl Facts for FastFacts<'_> {
    fn host(&self) -> Option<&str> {
        self.req.host
    }

    fn client(&self) -> Option<ClientKey> {
        self.client_ip()
            .map(|ip| ClientKey::new(ip, self.fp.s.cfg.limits.ipv6_prefix_len))
    }

    fn prefers_html(&self) -> bool {
        let accept = self.req.accept.and_then(|a| std::str::from_utf8(a).ok());
        shorturl_common::accept::prefers_html(accept)
    }

    /// The fast path reads no cookies: a password link is the proxy's,
    /// which opens its token in process (no origin round trip either way).
    fn unlocked(&self, _: &RecordRef<'_>, _: &str, _: u64) -> bool {
        false
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
