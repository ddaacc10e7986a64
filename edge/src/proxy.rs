//! The Pingora application: checks sizes, resolves the client address,
//! routes each request (`route.rs`), answers redirects from the
//! cache/Redis/origin record lookups in `request_filter`, and proxies API
//! routes to the origin pool.
//!
//! * a head the protocol rules refuse (section 2.1, `request_rules.rs`) → 400 / 405 / 431
//! * URI or headers over the configured size → 414 / 431
//! * `/shorturl_status` → merged status JSON for `status_allow` clients,
//!   the protocol 404 for everyone else
//! * `/api/...` → origin pool (creations limited per client, see `limits.rs`;
//!   a batch spends one creation per item, counted as its body streams:
//!   `request_body_filter`)
//! * `/.well-known/acme-challenge/{token}` → the HTTP-01 answer from the shared store
//! * codes → redirect, 404, 429 or 503; over plain HTTP on a domain in
//!   `https.redirect`, a 308 to the same URL on https instead (`tls::https`)
//! * pages (`/{code}.svg|.png`, `/{code}+`) → the code looked up and
//!   decided as for a redirect (`look_up`, `decide`: 404, 429 or 503 the
//!   same way); a live record's page → the origin pool through the page
//!   cache (`pages`): `request_cache_filter`, `cache_key_callback`,
//!   `response_cache_filter` and `should_serve_stale` act only on them

use crate::access_log::LogLine;
use crate::cache::{AnswerRef, Entry, Key, RecordRef};
use crate::clicks::record::{ClickParts, Client};
use crate::decide::{self, decide, Facts, Source, Verdict};
use crate::limits::Refusal;
use crate::lookup::Resolved;
use crate::net::{client_of, forwarded_for, ClientKey};
use crate::origin::OriginPool;
use crate::outcome::Outcome;
use crate::pages::metrics::PageResult;
use crate::pages::PageCache;
use crate::request_rules::{self, HostAt};
use crate::respond;
use crate::route::{route, CodeBuf, Route};
use crate::state::EdgeState;
use crate::status::StatusSource;
use crate::tls::https;
use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{ErrorSource, ErrorType};
use pingora_cache::{CacheKey, RespCacheable};
use shorturl_common::batch_items::ItemCounter;
use shorturl_common::link_rules::{self, Destination, Visitor};
use shorturl_common::pages::PageKind;
use shorturl_common::status::FastPathDim;
use shorturl_common::time::now_unix;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// The Pingora application: the shared redirect state plus what only the
/// proxy uses.
pub struct Edge {
    /// Shared with the fast path (the same instance).
    pub state: Arc<EdgeState>,
    pub origin: Arc<OriginPool>,
    pub status: StatusSource,
    /// The cache of QR codes and previews.
    pub pages: &'static PageCache,
}

/// A page request's state.
pub struct PageCtx {
    /// Its cache key; `None`: not cacheable (proxied as is).
    key: Option<CacheKey>,
    /// A browser's 404 on a plain code: the origin's 404 page, or the
    /// JSON 404 when the origin cannot answer.
    html404: bool,
    /// The origin's path for it when not the request's (a social card
    /// answered on `/{code}` is the origin's `/{code}.card`).
    upstream_path: Option<String>,
    /// Answered on `/{code}` for this visitor only (a card, a password
    /// form, a guide): the client's copy says `no-store`, the cached one
    /// keeps its own.
    no_store: bool,
}

/// Where a looked-up code's answer lives: a cached entry, or the result
/// of a fresh lookup (no copy of either).
enum Looked {
    Cached(Arc<Entry>),
    Resolved(Resolved),
    /// A request without a Host (HTTP/1.0): for no domain, so no link —
    /// answered as a negative from memory, without a lookup.
    NoDomain,
}

impl Looked {
    fn answer(&self) -> AnswerRef<'_> {
        match self {
            Looked::Cached(e) => e.answer(),
            Looked::Resolved(r) => r.answer.view(),
            Looked::NoDomain => AnswerRef::Negative(0),
        }
    }

    fn source(&self) -> Source {
        match self {
            Looked::Cached(_) | Looked::NoDomain => Source::Memory,
            Looked::Resolved(_) => Source::Lookup,
        }
    }
}

/// A proxied request as the redirect decision sees it.
struct ProxyFacts<'a> {
    edge: &'a Edge,
    req: &'a RequestHeader,
    ctx: &'a Ctx,
}

impl Client for ProxyFacts<'_> {
    fn country(&self) -> Option<[u8; 2]> {
        Visitor::country(self)
    }
    fn address(&self) -> Option<IpAddr> {
        self.ctx.client
    }
    fn city(&self) -> Option<std::sync::Arc<str>> {
        self.edge.state.geo.city(self.ctx.client)
    }
}

impl Visitor for ProxyFacts<'_> {
    fn user_agent(&self) -> Option<&[u8]> {
        self.req
            .headers
            .get(http::header::USER_AGENT)
            .map(|v| v.as_bytes())
    }

    fn accept_language(&self) -> Option<&[u8]> {
        self.req
            .headers
            .get(http::header::ACCEPT_LANGUAGE)
            .map(|v| v.as_bytes())
    }

    fn country(&self) -> Option<[u8; 2]> {
        let s = &self.edge.state;
        let trusted = self
            .ctx
            .peer
            .is_some_and(|p| s.cfg.trusted_proxies.contains(p));
        let header = s
            .geo
            .header()
            .filter(|_| trusted)
            .and_then(|h| self.req.headers.get(h))
            .map(|v| v.as_bytes());
        s.geo.country(header, self.ctx.client)
    }

    fn query(&self) -> Option<&str> {
        self.req.uri.query()
    }

    fn split_key(&self) -> Option<String> {
        self.ctx.client.map(link_rules::split_key)
    }
}

impl Facts for ProxyFacts<'_> {
    fn host(&self) -> Option<&str> {
        self.ctx.host.and_then(|h| h.get(self.req))
    }

    fn client(&self) -> Option<ClientKey> {
        self.edge.client_key(self.ctx)
    }

    fn prefers_html(&self) -> bool {
        prefers_html(self.req)
    }

    fn unlocked(&self, rec: &RecordRef<'_>, code: &str, now: u64) -> bool {
        let cookies = self.req.headers.get_all(http::header::COOKIE);
        self.edge.state.cfg.unlock.opened_by(
            cookies.iter().map(|v| v.as_bytes()),
            rec.domain,
            code,
            rec.version,
            now,
        )
    }
}

/// Per-request state.
pub struct Ctx {
    start: Instant,
    outcome: Outcome,
    /// The TCP peer.
    peer: Option<IpAddr>,
    /// The client: the peer, or the client behind a trusted proxy.
    client: Option<IpAddr>,
    /// A creation was forwarded: its answer may count as refused.
    creation: bool,
    /// A password entry was forwarded (`POST /{code}`).
    unlock: bool,
    /// Its body's bytes so far (a chunked one is refused past the bound).
    unlock_bytes: u64,
    /// Where the request's host is (protocol 2.1); `None`: no domain.
    host: Option<HostAt>,
    upstream: Option<SocketAddr>,
    connect_failures: usize,
    /// Over TLS (only looked at when an HTTPS policy is configured).
    tls: bool,
    /// Set on page requests only.
    page: Option<Box<PageCtx>>,
    /// Set on batch creations only: their items are counted as the body
    /// streams, and admitted before its end goes to the origin.
    batch: Option<Box<BatchBody>>,
    /// Why a creation was refused after forwarding began (a batch over the
    /// limit): `fail_to_proxy` says it.
    refusal: Option<Refusal>,
}

/// A batch creation's body on its way to the origin.
#[derive(Default)]
pub struct BatchBody {
    items: ItemCounter,
    /// The latest piece read, not yet forwarded: the origin cannot have
    /// the whole batch before its items are admitted.
    held: Option<Bytes>,
}

/// The path of a batch creation (protocol section 5).
const BATCH_PATH: &str = "/api/v1/links/batch";
/// Largest password form an edge passes on (protocol 4.5; the origin
/// reads no more either).
const MAX_UNLOCK_BODY: u64 = 4096;
/// The 413's message for a larger one, by `Content-Length` or chunked.
const UNLOCK_TOO_LARGE: &str = "body is larger than 4096 bytes";

/// Whether the client prefers HTML to JSON (`common::accept`).
fn prefers_html(req: &RequestHeader) -> bool {
    shorturl_common::accept::prefers_html(
        req.headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    )
}

fn peer_ip(session: &Session) -> Option<IpAddr> {
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

impl Edge {
    fn facts<'a>(&'a self, req: &'a RequestHeader, ctx: &'a Ctx) -> ProxyFacts<'a> {
        ProxyFacts {
            edge: self,
            req,
            ctx,
        }
    }

    /// The record lookup every code route shares, redirects and pages
    /// (protocol 4 and 4.3): the in-process cache, else Redis and the
    /// origin (coalesced, stored, negatives included) once the client's
    /// unknown-code budget admits it. Sets the request's outcome; `None`:
    /// not admitted (429).
    async fn look_up(&self, req: &RequestHeader, ctx: &mut Ctx, code: &str) -> Option<Looked> {
        let st = &self.state;
        let Some(domain) = ctx.host.and_then(|h| h.get(req)) else {
            st.metrics.local_hit.inc();
            ctx.outcome = Outcome::Neg;
            return Some(Looked::NoDomain);
        };
        let key = Key { domain, code };
        if let Some(e) = st.resolver.cache.get(key, ctx.start) {
            st.metrics.local_hit.inc();
            ctx.outcome = match e.answer() {
                AnswerRef::Found(_) => Outcome::Hit,
                AnswerRef::Negative(_) => Outcome::Neg,
                AnswerRef::Unavailable => Outcome::Fail,
            };
            return Some(Looked::Cached(e));
        }
        st.metrics.local_miss.inc();
        if !decide::admit_lookup(&self.facts(req, ctx), &st.limits) {
            return None;
        }
        let resolved = st.resolver.resolve(key).await;
        ctx.outcome = resolved.source;
        Some(Looked::Resolved(resolved))
    }

    /// What [`decide`] says of `looked` for this request at `now` (`None`:
    /// the lookup was not admitted).
    fn verdict<'l>(
        &self,
        req: &RequestHeader,
        ctx: &Ctx,
        code: &str,
        looked: &'l Option<Looked>,
        now: u64,
    ) -> Verdict<'l> {
        match looked {
            Some(l) => decide(
                l.answer(),
                code,
                l.source(),
                &self.facts(req, ctx),
                &self.state.limits,
                now,
            ),
            None => Verdict::TooMany,
        }
    }

    /// Counts one redirect to `location` answered for `link` (code, domain).
    fn count(
        &self,
        req: &RequestHeader,
        ctx: &Ctx,
        link: (&str, &str),
        destination: Option<Destination>,
        location: &str,
        now: u64,
    ) {
        let clicks = &self.state.clicks;
        let facts = self.facts(req, ctx);
        let mut parts = ClickParts::of_request(req, destination);
        if clicks.dimensions() {
            parts.location = Some(location);
            parts.client = Some(&facts);
        }
        clicks.record_parts(parts, link, now);
    }

    /// `GET|HEAD /{code}`: the redirect, or what else [`decide`] says.
    async fn redirect_or_404(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        code: &str,
    ) -> Result<bool> {
        let looked = self.look_up(session.req_header(), ctx, code).await;
        let now = now_unix();
        match self.verdict(session.req_header(), ctx, code, &looked, now) {
            Verdict::Redirect(rec, target) => {
                // Counted before the answer is written: a client that got
                // its redirect has its click queued, so the last flush at
                // shutdown, which follows every answer, sends it.
                let url = target.url(&rec);
                self.count(
                    session.req_header(),
                    ctx,
                    (code, rec.domain),
                    target.destination(&rec),
                    url,
                    now,
                );
                let hsts = self.hsts(ctx);
                let opened = rec.options.is_some_and(|o| o.password);
                respond::redirect(session, &self.state.cfg.redirect, url, hsts, opened).await?;
                Ok(true)
            }
            Verdict::Card(rec) => {
                // A crawler's fetch counts as a (bot) click of the link.
                let link = (code, rec.domain);
                let url = rec.url;
                self.count(
                    session.req_header(),
                    ctx,
                    link,
                    Some(Destination::Link),
                    url,
                    now,
                );
                self.page_instead(session, ctx, PageKind::Card, code, None);
                Ok(false)
            }
            Verdict::Guide { lang } => {
                // In-app browser guidance (protocol 4.6): no click yet.
                let query = format!("lang={lang}");
                self.page_instead(session, ctx, PageKind::Guide, code, Some(&query));
                Ok(false)
            }
            Verdict::Locked { page: true } => {
                // The password form (protocol 4.5): no click yet.
                self.page_instead(session, ctx, PageKind::Password, code, None);
                Ok(false)
            }
            Verdict::Locked { page: false } => {
                ctx.outcome = Outcome::Local;
                respond::error(
                    session,
                    401,
                    "password_required",
                    "this link needs a password",
                    None,
                )
                .await?;
                Ok(true)
            }
            Verdict::Screened { page: true, .. } => {
                // The warning page (protocol 4.7): not a click.
                self.page_instead(session, ctx, PageKind::Warning, code, None);
                Ok(false)
            }
            Verdict::Screened {
                page: false,
                screen,
            } => {
                ctx.outcome = Outcome::Local;
                let (error, message) = screen.refusal();
                respond::error(session, 403, error, message, None).await?;
                Ok(true)
            }
            Verdict::NotFound { page } => self.not_found_code(session, ctx, page).await,
            Verdict::TooMany => self.too_many(session, ctx, Refusal::Unknown).await,
            Verdict::Unavailable => self.unavailable(session).await,
        }
    }

    /// Answers `/{code}` with the code's page of `kind` (the origin's
    /// `/{code}.<kind>[?query]`, through the page cache).
    fn page_instead(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        kind: PageKind,
        code: &str,
        query: Option<&str>,
    ) {
        ctx.outcome = Outcome::Page;
        let req = session.req_header();
        let key = ctx
            .host
            .and_then(|h| h.get(req))
            .and_then(|host| crate::pages::key(host, kind, code, query));
        self.to_page_origin(session, ctx, key, false);
        if let Some(p) = ctx.page.as_mut() {
            // `/{code}` answers others differently (a redirect, another
            // language): no cache may keep this answer for them.
            p.no_store = true;
            let path = format!("/{code}.{}", kind.label());
            p.upstream_path = Some(match query {
                Some(q) => format!("{path}?{q}"),
                None => path,
            });
        }
    }

    /// `POST /{code}`: a password link's form (protocol 4.5). Looked up
    /// and decided as `GET` is; a live password link's entry goes to the
    /// origin (uncached), which checks it and sets the unlock token.
    async fn unlock(&self, session: &mut Session, ctx: &mut Ctx, code: &str) -> Result<bool> {
        let looked = self.look_up(session.req_header(), ctx, code).await;
        let now = now_unix();
        match self.verdict(session.req_header(), ctx, code, &looked, now) {
            Verdict::Locked { .. } => {}
            // Entered again with a token that already opens it.
            Verdict::Redirect(rec, _) if rec.options.is_some_and(|o| o.password) => {}
            Verdict::NotFound { page } => return self.not_found_code(session, ctx, page).await,
            Verdict::TooMany => return self.too_many(session, ctx, Refusal::Unknown).await,
            Verdict::Unavailable => return self.unavailable(session).await,
            Verdict::Redirect(..)
            | Verdict::Card(_)
            | Verdict::Guide { .. }
            | Verdict::Screened { .. } => return self.wrong_method(session, ctx).await,
        }
        let too_long = session
            .req_header()
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > MAX_UNLOCK_BODY);
        if too_long {
            ctx.outcome = Outcome::Bad;
            respond::error(session, 413, "body_too_large", UNLOCK_TOO_LARGE, None).await?;
            return Ok(true);
        }
        ctx.unlock = true;
        self.to_origin(session, ctx).await
    }

    /// The 405 of a method other than `GET` and `HEAD` on a code or page
    /// path (`POST` only for a password link's form).
    async fn wrong_method(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
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

    /// The 503 of a failed record lookup.
    async fn unavailable(&self, session: &mut Session) -> Result<bool> {
        respond::unavailable(session).await?;
        Ok(true)
    }

    /// The protocol 404 for a code (or page) path: JSON, or for a browser
    /// (`page`) the origin's 404 page (protocol 4.2), proxied uncached.
    /// Spends the client's unknown-code budget first.
    async fn not_found_code(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        page: bool,
    ) -> Result<bool> {
        decide::spend(&self.facts(session.req_header(), ctx), &self.state.limits);
        if page {
            self.to_page_origin(session, ctx, None, true);
            return Ok(false);
        }
        respond::not_found_with(session, &self.state.cfg.redirect, self.hsts(ctx)).await?;
        Ok(true)
    }

    /// `Strict-Transport-Security` for answers over TLS, when configured.
    fn hsts(&self, ctx: &Ctx) -> Option<&http::HeaderValue> {
        self.state.tls.https.hsts.as_ref().filter(|_| ctx.tls)
    }

    /// A plain-HTTP redirect request for a domain that goes to HTTPS
    /// first: the `Location` of its 308.
    fn https_upgrade(&self, session: &Session, ctx: &Ctx) -> Option<String> {
        // Off by default: no Host lookup on the redirect path then.
        if ctx.tls || !self.state.tls.https.may_upgrade() {
            return None;
        }
        let req = session.req_header();
        let host = ctx.host.and_then(|h| h.get(req))?;
        if !self.state.tls.https.upgrades(host) {
            return None;
        }
        let pq = req.uri.path_and_query().map_or("/", |p| p.as_str());
        Some(self.state.tls.https.location(host, pq))
    }

    /// `GET /.well-known/acme-challenge/{token}`: the key authorisation
    /// from the shared store, or the protocol 404.
    async fn acme_challenge(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        ctx.outcome = Outcome::Local;
        let path = session.req_header().uri.path();
        let answer = match crate::tls::challenge::token_of(path) {
            Some(token) => self.state.tls.shared.challenge(token).await,
            None => Ok(None),
        };
        match answer {
            Ok(Some(key_auth)) => respond::text(session, 200, Bytes::from(key_auth)).await?,
            Ok(None) => respond::not_found(session, &self.state.cfg.redirect).await?,
            Err(e) => {
                tracing::warn!(error = %e, "ACME challenge lookup failed");
                respond::error(
                    session,
                    503,
                    "unavailable",
                    "challenge store unavailable",
                    Some(respond::RETRY_AFTER_SECS),
                )
                .await?;
            }
        }
        Ok(true)
    }

    fn client_key(&self, ctx: &Ctx) -> Option<ClientKey> {
        ctx.client
            .map(|ip| ClientKey::new(ip, self.state.cfg.limits.ipv6_prefix_len))
    }

    async fn too_many(&self, session: &mut Session, ctx: &mut Ctx, why: Refusal) -> Result<bool> {
        ctx.outcome = Outcome::Limit;
        self.state.metrics.limited(why);
        respond::error(
            session,
            429,
            "rate_limited",
            why.message(),
            Some(respond::RETRY_AFTER_SECS),
        )
        .await?;
        Ok(true)
    }

    /// A page: its code is looked up and decided exactly as a redirect's
    /// (protocol 4.3: the unknown-code budget, the cached negatives, the
    /// same 404, 429 and 503); only a live record bound to the request's
    /// host goes on to the origin pool through the page cache (the origin
    /// is chosen in `upstream_peer`, after the cache lookup, so a cached
    /// page is served even when no origin is up).
    async fn page(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        kind: PageKind,
        code: &CodeBuf,
    ) -> Result<bool> {
        let looked = self.look_up(session.req_header(), ctx, code.as_str()).await;
        match self.verdict(
            session.req_header(),
            ctx,
            code.as_str(),
            &looked,
            now_unix(),
        ) {
            // A link kept only for its expiry fallback has no pages.
            Verdict::Redirect(_, t) if t.is_fallback() => {
                return self
                    .not_found_code(session, ctx, prefers_html(session.req_header()))
                    .await
            }
            // The origin answers a password link's pages (its preview is
            // the form, its card none).
            Verdict::Redirect(..)
            | Verdict::Card(_)
            | Verdict::Locked { .. }
            | Verdict::Guide { .. }
            | Verdict::Screened { .. } => {}
            Verdict::NotFound { page } => return self.not_found_code(session, ctx, page).await,
            Verdict::TooMany => return self.too_many(session, ctx, Refusal::Unknown).await,
            Verdict::Unavailable => return self.unavailable(session).await,
        }
        ctx.outcome = Outcome::Page;
        let req = session.req_header();
        let key = ctx
            .host
            .and_then(|h| h.get(req))
            .and_then(|host| crate::pages::key(host, kind, code.as_str(), req.uri.query()));
        self.to_page_origin(session, ctx, key, false);
        Ok(false)
    }

    /// Marks the request as a page proxied to the origin pool (through the
    /// page cache when it has a `key`), with the client timeouts of a
    /// proxied request.
    fn to_page_origin(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        key: Option<CacheKey>,
        html404: bool,
    ) {
        ctx.page = Some(Box::new(PageCtx {
            key,
            html404,
            upstream_path: None,
            no_store: false,
        }));
        session.set_read_timeout(Some(self.state.cfg.limits.client_timeout));
        session.set_write_timeout(Some(self.state.cfg.limits.client_timeout));
    }

    async fn forward(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let req = session.req_header();
        if req.method == Method::POST && req.uri.path().starts_with("/api/v1/links") {
            ctx.creation = true;
            let batch = req.uri.path() == BATCH_PATH && !session.is_body_empty();
            if let Some(key) = self.client_key(ctx) {
                if batch {
                    // One token per item, taken when the body is read
                    // (`request_body_filter`); refused here already when
                    // not even one item would be admitted.
                    if let Some(why) = self.state.limits.creation_blocked(&key) {
                        return self.too_many(session, ctx, why).await;
                    }
                    ctx.batch = Some(Box::default());
                } else if let Err(why) = self.state.limits.admit_creation(key) {
                    return self.too_many(session, ctx, why).await;
                }
            }
        }
        self.to_origin(session, ctx).await
    }

    /// Proxies the request to an origin of the pool, uncached.
    async fn to_origin(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        ctx.outcome = Outcome::Fwd;
        let Some(addr) = self.origin.select() else {
            self.state.metrics.origin_error.inc();
            respond::error(
                session,
                503,
                "unavailable",
                "no origin available",
                Some(respond::RETRY_AFTER_SECS),
            )
            .await?;
            return Ok(true);
        };
        self.state.metrics.origin_forward.inc();
        ctx.upstream = Some(addr);
        session.set_read_timeout(Some(self.state.cfg.limits.client_timeout));
        session.set_write_timeout(Some(self.state.cfg.limits.client_timeout));
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
            peer: None,
            client: None,
            creation: false,
            unlock: false,
            unlock_bytes: 0,
            host: None,
            upstream: None,
            connect_failures: 0,
            tls: false,
            page: None,
            batch: None,
            refusal: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        ctx.peer = peer_ip(session);
        ctx.client = ctx.peer.map(|p| {
            client_of(
                p,
                &session.req_header().headers,
                &self.state.cfg.trusted_proxies,
            )
            .0
        });
        // HTTP/1.1 keep-alive is unbounded by default: bound idle time.
        if session.get_keepalive().is_some() {
            session.set_keepalive(Some(self.state.cfg.limits.keepalive_timeout_secs));
        }
        if !self.state.tls.https.is_off() {
            ctx.tls = https::is_tls(session);
        }
        let raw_head = session.as_http1().map(|h1| h1.get_headers_raw_bytes());
        match request_rules::check(session.req_header(), raw_head.as_deref()) {
            Ok(host) => ctx.host = host,
            Err(refusal) => {
                ctx.outcome = Outcome::Bad;
                request_rules::refuse(session, refusal).await?;
                return Ok(true);
            }
        }
        let req = session.req_header();
        let uri_len = req.uri.path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > self.state.cfg.limits.max_uri_bytes {
            ctx.outcome = Outcome::Bad;
            respond::error(session, 414, "uri_too_long", "request URI too long", None).await?;
            return Ok(true);
        }
        if header_bytes(req) > self.state.cfg.limits.max_header_bytes {
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
            Route::Code(code) => {
                if let Some(location) = self.https_upgrade(session, ctx) {
                    ctx.outcome = Outcome::Local;
                    respond::to_https(session, &location).await?;
                    return Ok(true);
                }
                self.redirect_or_404(session, ctx, code.as_str()).await
            }
            Route::Page(kind, code) => {
                if let Some(location) = self.https_upgrade(session, ctx) {
                    ctx.outcome = Outcome::Local;
                    respond::to_https(session, &location).await?;
                    return Ok(true);
                }
                self.page(session, ctx, kind, &code).await
            }
            Route::AcmeChallenge => self.acme_challenge(session, ctx).await,
            Route::Unlock(code) => self.unlock(session, ctx, code.as_str()).await,
            Route::CodeWrongMethod => self.wrong_method(session, ctx).await,
            Route::Api => self.forward(session, ctx).await,
            Route::Status => {
                if !ctx
                    .client
                    .is_some_and(|ip| self.state.cfg.status_allow.contains(ip))
                {
                    ctx.outcome = Outcome::Bad;
                    respond::not_found(session, &self.state.cfg.redirect).await?;
                    return Ok(true);
                }
                ctx.outcome = Outcome::Local;
                let mut doc = self
                    .status
                    .document(&self.state.metrics, &self.state.clicks)
                    .await;
                doc.tls = self.state.tls.status();
                doc.geo = self.state.geo.status();
                let fast = &self.state.metrics.fast_path;
                doc.fast_path = Some(FastPathDim {
                    enabled: self.state.cfg.fast_path.enabled,
                    hit: fast.hit.get(),
                    negative: fast.negative.get(),
                    resolved: fast.resolved.get(),
                    handover: fast.handover.get(),
                });
                let body = serde_json::to_vec(&doc).unwrap_or_else(|_| b"{}".to_vec());
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
                respond::not_found(session, &self.state.cfg.redirect).await?;
                Ok(true)
            }
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let addr = if ctx.connect_failures == 0 {
            // Pages choose their origin only now, on a cache miss.
            ctx.upstream.or_else(|| {
                let a = self.origin.select();
                if a.is_some() {
                    self.state.metrics.origin_forward.inc();
                }
                a
            })
        } else {
            self.origin.select().or(ctx.upstream)
        };
        let Some(addr) = addr else {
            if ctx.page.is_some() {
                self.state.metrics.origin_error.inc();
            }
            return Err(Error::explain(
                ErrorType::HTTPStatus(503),
                "no origin available",
            ));
        };
        ctx.upstream = Some(addr);
        Ok(Box::new(
            self.origin.peer(addr, self.state.cfg.origin.read_timeout),
        ))
    }

    /// Pages only (everything else never enables the cache).
    fn request_cache_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
        if ctx.page.as_ref().is_some_and(|p| p.key.is_some()) {
            self.pages.enable(&mut session.cache);
        }
        Ok(())
    }

    fn cache_key_callback(&self, _session: &Session, ctx: &mut Ctx) -> Result<CacheKey> {
        match ctx.page.as_ref().and_then(|p| p.key.clone()) {
            Some(k) => Ok(k),
            None => Err(Error::explain(
                ErrorType::InternalError,
                "page cache enabled without a key",
            )),
        }
    }

    fn response_cache_filter(
        &self,
        _session: &Session,
        resp: &ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<RespCacheable> {
        Ok(match ctx.page {
            Some(_) => self.pages.cacheable(resp),
            None => RespCacheable::Uncacheable(pingora_cache::NoCacheReason::NeverEnabled),
        })
    }

    /// A cached page past its freshness is served (within its
    /// stale-if-error time) whatever failed on the origin's side: no
    /// origin up, a connection refused or timed out, or a 5xx. Never while
    /// revalidating (no stale-while-revalidate) nor for a client's error.
    fn should_serve_stale(
        &self,
        _session: &mut Session,
        ctx: &mut Ctx,
        error: Option<&Error>,
    ) -> bool {
        ctx.page.is_some() && error.is_some_and(|e| e.esource() != &ErrorSource::Downstream)
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

    /// A batch creation: its items are counted as its body streams to the
    /// origin, one piece behind; at the end they are admitted all at once
    /// (`Limits::admit_creations`) before the last piece is forwarded, or
    /// the request fails with the 429 of any refused creation and the
    /// origin, which never got a whole body, creates nothing.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if ctx.unlock {
            // A chunked form has no Content-Length to refuse it by: the
            // same 413 once it grows past the bound (`fail_to_proxy`).
            ctx.unlock_bytes += body.as_ref().map_or(0, |b| b.len() as u64);
            if ctx.unlock_bytes > MAX_UNLOCK_BODY {
                return Err(Error::explain(ErrorType::HTTPStatus(413), UNLOCK_TOO_LARGE));
            }
            return Ok(());
        }
        let Some(batch) = ctx.batch.as_mut() else {
            return Ok(());
        };
        if let Some(piece) = body.as_deref() {
            batch.items.feed(piece);
        }
        if !end_of_stream {
            // Never `None` here: to Pingora that ends the upstream body.
            let previous = std::mem::replace(&mut batch.held, body.take());
            *body = Some(previous.unwrap_or_default());
            return Ok(());
        }
        let items = batch.items.items();
        let held = batch.held.take();
        if let Some(key) = self.client_key(ctx) {
            if let Err(why) = self.state.limits.admit_creations(key, items) {
                ctx.refusal = Some(why);
                return Err(Error::explain(ErrorType::HTTPStatus(429), why.message()));
            }
        }
        *body = match (held, body.take()) {
            (Some(h), Some(last)) => {
                let mut both = bytes::BytesMut::with_capacity(h.len() + last.len());
                both.extend_from_slice(&h);
                both.extend_from_slice(&last);
                Some(both.freeze())
            }
            (h, last) => h.or(last),
        };
        Ok(())
    }

    /// `X-Forwarded-For` starts with the client the edge decided on (see
    /// [`forwarded_for`]); what an untrusted client wrote there is dropped.
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(path) = ctx.page.as_ref().and_then(|p| p.upstream_path.as_deref()) {
            let uri = path
                .parse::<http::Uri>()
                .or_err(ErrorType::InternalError, "page path")?;
            upstream.set_uri(uri);
        }
        if ctx.unlock {
            // Whether the unlock cookie may say `Secure` (protocol 4.5):
            // reached over TLS, or through a trusted proxy that says it
            // was (TLS ended in front of the edge). A client's own claim
            // never passes.
            let trusted = ctx
                .peer
                .is_some_and(|p| self.state.cfg.trusted_proxies.contains(p));
            let proxied_https = trusted
                && session
                    .req_header()
                    .headers
                    .get("x-forwarded-proto")
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
            if ctx.tls || proxied_https {
                upstream.insert_header("X-Forwarded-Proto", "https")?;
            } else {
                upstream.remove_header("X-Forwarded-Proto");
            }
        }
        if let Some(peer) = ctx.peer {
            let xff = forwarded_for(
                peer,
                &session.req_header().headers,
                &self.state.cfg.trusted_proxies,
            );
            upstream.insert_header("X-Forwarded-For", xff)?;
        } else {
            upstream.remove_header("X-Forwarded-For");
        }
        Ok(())
    }

    /// A creation the origin refused (401/403) spends the client's
    /// stricter refused-creation budget.
    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if ctx.creation && matches!(upstream.status.as_u16(), 401 | 403) {
            if let Some(key) = self.client_key(ctx) {
                self.state.limits.count_refused_creation(key);
            }
        }
        if let Some(v) = self.hsts(ctx) {
            upstream.insert_header("Strict-Transport-Security", v.clone())?;
        }
        if ctx.page.as_ref().is_some_and(|p| p.no_store) {
            upstream.insert_header("Cache-Control", "no-store")?;
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let code = match e.etype() {
            ErrorType::HTTPStatus(c) => *c,
            // A page nobody can fetch: the origin is unavailable.
            ErrorType::ConnectTimedout
            | ErrorType::ConnectRefused
            | ErrorType::ConnectNoRoute
            | ErrorType::ConnectError
                if ctx.page.is_some() =>
            {
                503
            }
            _ => match e.esource() {
                ErrorSource::Upstream => 502,
                ErrorSource::Downstream => match e.etype() {
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => 0,
                    _ => 400,
                },
                ErrorSource::Internal | ErrorSource::Unset => 500,
            },
        };
        if let Some(why) = ctx.refusal.filter(|_| code == 429) {
            // A batch over the creation limit, refused at the end of its
            // body: the same 429 as any refused creation, and the body was
            // read whole, so the connection may stay.
            ctx.outcome = Outcome::Limit;
            self.state.metrics.limited(why);
            if session.response_written().is_none() {
                if let Err(err) = respond::error(
                    session,
                    429,
                    "rate_limited",
                    why.message(),
                    Some(respond::RETRY_AFTER_SECS),
                )
                .await
                {
                    tracing::debug!(error = %err, "cannot send error response");
                }
            }
            return FailToProxy {
                error_code: 429,
                can_reuse_downstream: true,
            };
        }
        if ctx.unlock && code == 413 {
            // A chunked form past the bound; the rest of it is unread.
            ctx.outcome = Outcome::Bad;
            if session.response_written().is_none() {
                if let Err(err) =
                    respond::error(session, 413, "body_too_large", UNLOCK_TOO_LARGE, None).await
                {
                    tracing::debug!(error = %err, "cannot send error response");
                }
            }
            return FailToProxy {
                error_code: 413,
                can_reuse_downstream: false,
            };
        }
        let forwarded = ctx.upstream.is_some();
        if forwarded && code >= 500 {
            self.state.metrics.origin_error.inc();
        }
        let html404 = ctx.page.as_ref().is_some_and(|p| p.html404);
        if html404 && code >= 500 && session.response_written().is_none() {
            // The browser's 404 page could not be fetched: the JSON 404.
            let hsts = self.hsts(ctx).cloned();
            if let Err(err) =
                respond::not_found_with(session, &self.state.cfg.redirect, hsts.as_ref()).await
            {
                tracing::debug!(error = %err, "cannot send error response");
            }
            return FailToProxy {
                error_code: 404,
                can_reuse_downstream: false,
            };
        }
        if code > 0 && session.response_written().is_none() {
            let (kind, msg) = match code {
                400 => ("bad_request", "malformed request"),
                503 => ("unavailable", "no origin available"),
                502 => ("bad_gateway", "origin failed to answer"),
                _ => ("internal", "internal error"),
            };
            let retry = (code == 502 || code == 503).then_some(respond::RETRY_AFTER_SECS);
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

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let took = ctx.start.elapsed();
        if let Some(p) = ctx.page.as_ref().filter(|p| !p.html404) {
            let r = match p.key {
                Some(_) => PageResult::of(session.cache.phase(), e.is_some()),
                None => PageResult::Bypass,
            };
            self.pages.metrics.count(r);
        }
        self.state.metrics.observe(ctx.outcome, took);
        let status = session
            .response_written()
            .map_or(0, |r: &ResponseHeader| r.status.as_u16());
        let req = session.req_header();
        self.state.log.write(&LogLine {
            client: ctx.client,
            method: req.method.as_str(),
            path: req.uri.path(),
            status,
            outcome: ctx.outcome,
            took,
        });
    }
}
