//! The origin pool: round-robin selection among healthy origins (health
//! checked by `pingora-load-balancing`; an origin saying
//! `Shorturl-Health: draining` is out, see [`health_verdict`]), and the
//! internal requests the edge makes itself: the record fetch on the miss
//! path, the status fetch, the whitelist and the heartbeat.

use crate::config::OriginConfig;
use bytes::BytesMut;
use http::HeaderValue;
use pingora::connectors::http::Connector;
use pingora::connectors::TransportConnector;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::lb::health_check::HttpHealthCheck;
use pingora::lb::selection::RoundRobin;
use pingora::lb::LoadBalancer;
use pingora::protocols::http::client::HttpSession;
use pingora::protocols::http::v1::client::HttpSession as Http1Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::ErrorType;
use shorturl_common::record::Lookup;
use shorturl_common::time::now_unix;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Largest body accepted from an internal origin answer.
const MAX_INTERNAL_BODY: usize = 64 * 1024;
/// Largest whitelist accepted from `/internal/v1/domains`.
const MAX_DOMAINS_BODY: usize = 8 << 20;

/// Why an internal origin request failed.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("no healthy origin")]
    NoneHealthy,
    #[error("origin request timed out")]
    Timeout,
    #[error("origin transport error: {0}")]
    Transport(String),
    #[error("origin answered {0}")]
    Status(u16),
    #[error("origin answer is malformed")]
    Malformed,
}

/// An answer of `GET /internal/v1/records/{code}`.
#[derive(Debug)]
pub struct RecordAnswer {
    pub lookup: Lookup,
    /// `Cache-Control: max-age` given by the origin, if any.
    pub max_age: Option<Duration>,
}

/// Origins, their health, and a pooled HTTP connector for internal requests.
pub struct OriginPool {
    lb: Arc<LoadBalancer<RoundRobin>>,
    connector: Connector,
    /// Fresh connections only: the one retry of an internal GET whose
    /// pooled connection turned out closed.
    fresh: TransportConnector,
    cfg: OriginConfig,
    host: String,
    /// `Bearer <edge.origin.internal_token>` (marked sensitive), sent on
    /// every request the edge makes itself.
    auth: Option<HeaderValue>,
    /// When an origin last refused the token (unix seconds): the error is
    /// logged at most once per [`REFUSED_LOG_SECS`].
    refused_logged: AtomicU64,
}

/// At most one error line per this many seconds about a refused token.
const REFUSED_LOG_SECS: u64 = 10;

/// How one attempt of an internal GET failed.
enum Attempt {
    /// Before any answer was read (writing the request, or the connection
    /// closed or reset before the response head): on a pooled connection,
    /// the origin closed it while it sat idle.
    BeforeAnswer(OriginError),
    /// Anything else (a timeout included): final.
    Failed(OriginError),
}

/// Why the origin pool could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BalancerError {
    #[error("origin list: {0}")]
    List(#[source] std::io::Error),
    #[error("health check request: {0}")]
    HealthRequest(#[source] Box<pingora::Error>),
    #[error("health check host: {0}")]
    HealthHost(#[source] Box<pingora::Error>),
}

/// Builds the load balancer with its HTTP health check. The returned
/// balancer must run as a Pingora background service for checks to happen.
pub fn build_balancer(
    cfg: &OriginConfig,
    host: &str,
) -> Result<LoadBalancer<RoundRobin>, BalancerError> {
    let mut lb = LoadBalancer::<RoundRobin>::try_from_iter(cfg.servers.iter().copied())
        .map_err(BalancerError::List)?;
    let mut hc = HttpHealthCheck::new(host, false);
    let mut req = RequestHeader::build("GET", cfg.health_check_path.as_bytes(), None)
        .map_err(BalancerError::HealthRequest)?;
    req.insert_header("Host", host)
        .map_err(BalancerError::HealthHost)?;
    hc.req = req;
    hc.peer_template.options.connection_timeout = Some(cfg.connect_timeout);
    hc.peer_template.options.read_timeout =
        Some(cfg.health_check_interval.max(Duration::from_millis(200)));
    hc.validator = Some(Box::new(health_verdict));
    lb.set_health_check(Box::new(hc));
    lb.health_check_frequency = Some(cfg.health_check_interval);
    lb.parallel_health_check = true;
    Ok(lb)
}

/// The header of an origin's `/healthz` answer saying what it is
/// (protocol 5: `ok`, `degraded`, `draining`).
pub const HEALTH_HEADER: &str = "shorturl-health";

/// The health check's verdict on an answer (contract B of issue 23): any
/// HTTP answer means the origin is up, except one carrying
/// `Shorturl-Health: draining` (it is stopping: send it no new requests).
/// A 503 otherwise stays up: /healthz says 503 while MySQL is down, yet the
/// origin still serves records from Redis and answers creations with a
/// proper JSON error, which beats the edge's own 503.
pub fn health_verdict(resp: &ResponseHeader) -> pingora::Result<()> {
    let draining = resp
        .headers
        .get_all(HEALTH_HEADER)
        .iter()
        .any(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"draining"));
    if draining {
        return Err(pingora::Error::explain(
            pingora::ErrorType::HTTPStatus(resp.status.as_u16()),
            "origin is draining",
        ));
    }
    Ok(())
}

impl OriginPool {
    /// Wraps a balancer (shared with its background health-check service).
    pub fn new(lb: Arc<LoadBalancer<RoundRobin>>, cfg: OriginConfig, host: String) -> Self {
        let auth = cfg.internal_token.as_ref().and_then(|t| {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", t.expose())).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        OriginPool {
            lb,
            connector: Connector::new(None),
            fresh: TransportConnector::new(None),
            cfg,
            host,
            auth,
            refused_logged: AtomicU64::new(0),
        }
    }

    /// The next healthy origin, round robin; `None` when all are down.
    pub fn select(&self) -> Option<SocketAddr> {
        self.lb
            .select(b"", 256)
            .and_then(|b| b.addr.as_inet().copied())
    }

    /// Number of configured origins (bounds proxy retries).
    pub fn len(&self) -> usize {
        self.cfg.servers.len()
    }

    /// True when no origin is configured (never, after validation).
    pub fn is_empty(&self) -> bool {
        self.cfg.servers.is_empty()
    }

    /// A peer for `addr` with the configured timeouts; `read` bounds each read.
    pub fn peer(&self, addr: SocketAddr, read: Duration) -> HttpPeer {
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(self.cfg.connect_timeout);
        peer.options.total_connection_timeout = Some(self.cfg.connect_timeout);
        peer.options.read_timeout = Some(read);
        peer.options.write_timeout = Some(read);
        peer.options.idle_timeout = Some(self.cfg.pool_idle_timeout);
        peer
    }

    /// The headers of every request the edge makes itself: `Host` and, when
    /// configured, the internal token.
    fn own_headers(&self, req: &mut RequestHeader) -> pingora::Result<()> {
        req.insert_header("Host", self.host.as_str())?;
        if let Some(auth) = &self.auth {
            req.insert_header("Authorization", auth.clone())?;
        }
        Ok(())
    }

    /// An origin answered one of the edge's own requests 401: the internal
    /// token is missing or wrong. Logged at error level (at most once per
    /// [`REFUSED_LOG_SECS`]), naming the setting, never the token.
    fn note_status(&self, status: u16, path: &str) {
        if status != 401 {
            return;
        }
        let now = now_unix();
        let last = self.refused_logged.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= REFUSED_LOG_SECS
            && self
                .refused_logged
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::error!(
                path,
                "the origin refused the edge's internal token (401): set edge.origin.internal_token \
                 (or SHORTURL_EDGE_INTERNAL_TOKEN) to the token whose SHA-256 is the origin's \
                 internal.token_sha256"
            );
        }
    }

    /// Asks an origin for the record of `code` on `domain` (the edge's miss
    /// path; protocol 3.5: `?domain=`, lower-cased, an IPv6 literal's
    /// brackets and colons percent-encoded).
    pub async fn fetch_record(
        &self,
        domain: &str,
        code: &str,
    ) -> Result<RecordAnswer, OriginError> {
        let mut path = format!("/internal/v1/records/{code}?domain=");
        for c in domain.chars() {
            match c {
                '[' => path.push_str("%5B"),
                ']' => path.push_str("%5D"),
                ':' => path.push_str("%3A"),
                c => path.push(c.to_ascii_lowercase()),
            }
        }
        let budget = self.cfg.record_timeout;
        let (status, max_age, body) = self.get(&path, budget, MAX_INTERNAL_BODY).await?;
        match status {
            200 | 404 => {
                let text = std::str::from_utf8(&body).map_err(|_| OriginError::Malformed)?;
                let lookup = Lookup::decode(text.trim_end()).map_err(|_| OriginError::Malformed)?;
                if status == 404 && !matches!(lookup, Lookup::Negative(_)) {
                    return Err(OriginError::Malformed);
                }
                Ok(RecordAnswer { lookup, max_age })
            }
            other => Err(OriginError::Status(other)),
        }
    }

    /// Fetches the origin's `/shorturl_status` JSON within the status budget.
    pub async fn fetch_status(&self) -> Result<serde_json::Value, OriginError> {
        let (status, _, body) = self
            .get(
                "/shorturl_status",
                self.cfg.status_timeout,
                MAX_INTERNAL_BODY,
            )
            .await?;
        if status != 200 {
            return Err(OriginError::Status(status));
        }
        serde_json::from_slice(&body).map_err(|_| OriginError::Malformed)
    }

    /// Fetches the whitelist (`/internal/v1/domains`) for the ACME issuer.
    pub async fn fetch_domains(
        &self,
        budget: Duration,
    ) -> Result<shorturl_common::tls::DomainList, OriginError> {
        let (status, _, body) = self
            .get("/internal/v1/domains", budget, MAX_DOMAINS_BODY)
            .await?;
        if status != 200 {
            return Err(OriginError::Status(status));
        }
        serde_json::from_slice(&body).map_err(|_| OriginError::Malformed)
    }

    /// Every configured origin (the heartbeat goes to each).
    pub fn servers(&self) -> Vec<SocketAddr> {
        self.cfg.servers.clone()
    }

    /// One JSON `POST` to `addr`, bounded by `budget`; `Ok` on a 2xx.
    pub async fn post(
        &self,
        addr: SocketAddr,
        path: &str,
        body: &[u8],
        budget: Duration,
    ) -> Result<(), OriginError> {
        let peer = self.peer(addr, budget);
        let exchange = async {
            let t = |e: Box<pingora::Error>| OriginError::Transport(e.to_string());
            let (mut session, _) = self.connector.get_http_session(&peer).await.map_err(t)?;
            let mut req = RequestHeader::build("POST", path.as_bytes(), None).map_err(t)?;
            self.own_headers(&mut req).map_err(t)?;
            req.insert_header("Content-Type", "application/json")
                .map_err(t)?;
            req.insert_header("Content-Length", body.len().to_string())
                .map_err(t)?;
            session
                .write_request_header(Box::new(req))
                .await
                .map_err(t)?;
            session
                .write_request_body(bytes::Bytes::copy_from_slice(body), true)
                .await
                .map_err(t)?;
            session.finish_request_body().await.map_err(t)?;
            session.read_response_header().await.map_err(t)?;
            let status = session
                .response_header()
                .map(|h| h.status.as_u16())
                .ok_or(OriginError::Malformed)?;
            while session.read_response_body().await.map_err(t)?.is_some() {}
            self.connector
                .release_http_session(session, &peer, Some(self.cfg.pool_idle_timeout))
                .await;
            self.note_status(status, path);
            if (200..300).contains(&status) {
                Ok(())
            } else {
                Err(OriginError::Status(status))
            }
        };
        tokio::time::timeout(budget, exchange)
            .await
            .unwrap_or(Err(OriginError::Timeout))
    }

    /// One GET to the next healthy origin, bounded by `budget` as a whole.
    /// A pooled connection that fails before any answer (the origin closed
    /// it while it sat idle, and the close crossed our request) is not the
    /// origin's answer: the GET is made once more on a fresh connection
    /// (contract C of issue 23). Only idempotent GETs go through here.
    async fn get(
        &self,
        path: &str,
        budget: Duration,
        max_body: usize,
    ) -> Result<(u16, Option<Duration>, BytesMut), OriginError> {
        let addr = self.select().ok_or(OriginError::NoneHealthy)?;
        let peer = self.peer(addr, budget);
        let t = |e: Box<pingora::Error>| OriginError::Transport(e.to_string());
        let exchange = async {
            let (session, reused) = self.connector.get_http_session(&peer).await.map_err(t)?;
            match self.get_on(session, &peer, path, max_body).await {
                Ok(answer) => Ok(answer),
                Err(Attempt::BeforeAnswer(e)) if reused => {
                    tracing::debug!(origin = %addr, error = %e, "pooled origin connection was closed; retrying on a fresh one");
                    let stream = self.fresh.new_stream(&peer).await.map_err(t)?;
                    let session = HttpSession::H1(Http1Session::new_with_options(stream, &peer));
                    self.get_on(session, &peer, path, max_body)
                        .await
                        .map_err(Attempt::into_error)
                }
                Err(a) => Err(a.into_error()),
            }
        };
        let answer = match tokio::time::timeout(budget, exchange).await {
            Ok(r) => r,
            Err(_) => Err(OriginError::Timeout),
        };
        if let Ok((status, _, _)) = &answer {
            self.note_status(*status, path);
        }
        answer
    }

    /// One GET of `path` on `session`; the session goes back to the pool
    /// after a whole answer.
    async fn get_on(
        &self,
        mut session: HttpSession,
        peer: &HttpPeer,
        path: &str,
        max_body: usize,
    ) -> Result<(u16, Option<Duration>, BytesMut), Attempt> {
        let early = |e: Box<pingora::Error>| {
            let err = OriginError::Transport(e.to_string());
            match e.etype() {
                ErrorType::ReadTimedout | ErrorType::WriteTimedout => Attempt::Failed(err),
                _ => Attempt::BeforeAnswer(err),
            }
        };
        let late = |e: Box<pingora::Error>| Attempt::Failed(OriginError::Transport(e.to_string()));
        let mut req = RequestHeader::build("GET", path.as_bytes(), None).map_err(late)?;
        self.own_headers(&mut req).map_err(late)?;
        session
            .write_request_header(Box::new(req))
            .await
            .map_err(early)?;
        session.finish_request_body().await.map_err(early)?;
        session.read_response_header().await.map_err(early)?;
        let (status, max_age) = match session.response_header() {
            Some(h) => (
                h.status.as_u16(),
                h.headers
                    .get("cache-control")
                    .and_then(|v| parse_max_age(v.as_bytes())),
            ),
            None => return Err(Attempt::Failed(OriginError::Malformed)),
        };
        let mut body = BytesMut::new();
        while let Some(chunk) = session.read_response_body().await.map_err(late)? {
            if body.len() + chunk.len() > max_body {
                return Err(Attempt::Failed(OriginError::Malformed));
            }
            body.extend_from_slice(&chunk);
        }
        self.connector
            .release_http_session(session, peer, Some(self.cfg.pool_idle_timeout))
            .await;
        Ok((status, max_age, body))
    }
}

impl Attempt {
    fn into_error(self) -> OriginError {
        match self {
            Attempt::BeforeAnswer(e) | Attempt::Failed(e) => e,
        }
    }
}

/// `max-age=N` from a `Cache-Control` value.
fn parse_max_age(v: &[u8]) -> Option<Duration> {
    let s = std::str::from_utf8(v).ok()?;
    s.split(',')
        .find_map(|d| {
            d.trim()
                .strip_prefix("max-age=")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::{health_verdict, parse_max_age};
    use pingora::http::ResponseHeader;
    use std::time::Duration;

    fn answer(status: u16, health: Option<&str>) -> ResponseHeader {
        let mut h = ResponseHeader::build(status, None).unwrap_or_else(|e| panic!("{e}"));
        if let Some(v) = health {
            h.insert_header("Shorturl-Health", v)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        h
    }

    #[test]
    fn only_a_draining_origin_is_unhealthy() {
        for (status, health) in [
            (200, Some("ok")),
            (200, None),
            (503, Some("degraded")),
            (503, None),
            (500, None),
            (404, None),
        ] {
            assert!(
                health_verdict(&answer(status, health)).is_ok(),
                "{status} {health:?}"
            );
        }
        for (status, health) in [(503, "draining"), (503, " Draining "), (200, "DRAINING")] {
            assert!(
                health_verdict(&answer(status, Some(health))).is_err(),
                "{status} {health}"
            );
        }
    }

    #[test]
    fn max_age() {
        assert_eq!(parse_max_age(b"max-age=30"), Some(Duration::from_secs(30)));
        assert_eq!(
            parse_max_age(b"public, max-age=5"),
            Some(Duration::from_secs(5))
        );
        assert_eq!(parse_max_age(b"no-store"), None);
        assert_eq!(parse_max_age(b"max-age=x"), None);
    }
}
