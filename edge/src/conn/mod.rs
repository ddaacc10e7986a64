//! Connection-level protection, in front of Pingora's HTTP proxy.
//!
//! [`Guarded`] wraps the proxy's [`ServerApp`] (the `HttpProxy` that handles
//! a whole HTTP/1 connection, keep-alive requests included, inside one
//! `process_new` call). For each accepted connection it:
//!
//! 1. takes a [`Slot`] from [`ConnCaps`]: at most `max_connections` open in
//!    total and `max_connections_per_ip` per client key (IPv6 by prefix).
//!    Over a cap, the connection is closed before a byte is read. Peers in
//!    `trusted_proxies` are exempt from the per-client cap (a load balancer
//!    carries many clients; their limits apply per request instead);
//! 2. on a TLS listener, runs the TLS handshake ([`Handshake`], see
//!    `tls::handshake`), so the caps and the handshake deadline apply before
//!    any TLS work is spent on a client;
//! 3. wraps the stream in [`HeadDeadline`], which closes the connection when
//!    a request head is not complete within `header_timeout` (HTTP/1 only:
//!    an HTTP/2 connection negotiated by ALPN is framed, not head-delimited,
//!    and is bounded by Pingora's HTTP/2 idle timeout instead);
//! 4. hands it to the app (the redirect fast path, `crate::fast_path`, in
//!    front of the proxy); the slot is released when the connection ends,
//!    however it ends (drop guard).
//!
//! Contract: the inner app sees an ordinary [`Stream`] (socket digest, peer
//! address and the rest delegate to the real socket). Per request, this
//! layer adds a byte scan of each head and nothing else: no syscall, lock
//! or allocation. Per connection it costs four atomic operations, and with a
//! per-client cap one short lock of one of 16 shards.

mod head;

pub use head::HeadDeadline;

use crate::config::limits::LimitsConfig;
use crate::metrics::Metrics;
use crate::net::CidrList;
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use pingora_prometheus::prometheus::IntCounter;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

pub use shorturl_common::conn_caps::{CapsConfig, ConnCaps, Refused, Slot};

/// The caps of `limits`; peers in `trusted_proxies` are exempt from the
/// per-client cap (a load balancer carries many clients).
pub fn caps_config(limits: &LimitsConfig, trusted_proxies: CidrList) -> CapsConfig {
    CapsConfig {
        max_total: limits.max_connections,
        max_per_client: limits.max_connections_per_ip,
        v6_prefix: limits.ipv6_prefix_len,
        exempt: trusted_proxies,
    }
}

/// The connection counters [`Guarded`] updates.
#[derive(Clone)]
pub struct ConnMetrics {
    pub refused_total: IntCounter,
    pub refused_per_client: IntCounter,
    pub header_timeouts: IntCounter,
}

impl ConnMetrics {
    /// Handles from the edge's metrics.
    pub fn from(m: &Metrics) -> Self {
        ConnMetrics {
            refused_total: m.conn_refused_total.clone(),
            refused_per_client: m.conn_refused_per_ip.clone(),
            header_timeouts: m.conn_header_timeouts.clone(),
        }
    }
}

/// A transport handshake run on an admitted connection before HTTP (TLS).
#[async_trait]
pub trait Handshake: Send + Sync {
    /// The stream to speak HTTP on, or `None` to close the connection.
    async fn handshake(&self, stream: Stream) -> Option<Stream>;
}

/// A [`ServerApp`] guarded by connection caps and a request-head deadline.
pub struct Guarded<A> {
    app: Arc<A>,
    caps: Arc<ConnCaps>,
    header_timeout: Duration,
    metrics: ConnMetrics,
    handshake: Option<Arc<dyn Handshake>>,
}

impl<A> Guarded<A> {
    /// Guards `app`.
    pub fn new(
        app: A,
        caps: Arc<ConnCaps>,
        header_timeout: Duration,
        metrics: ConnMetrics,
    ) -> Self {
        Self::shared(Arc::new(app), caps, header_timeout, metrics)
    }

    /// Guards an app shared with other listeners (plain and TLS services
    /// share one proxy, so one set of per-client limits).
    pub fn shared(
        app: Arc<A>,
        caps: Arc<ConnCaps>,
        header_timeout: Duration,
        metrics: ConnMetrics,
    ) -> Self {
        Guarded {
            app,
            caps,
            header_timeout,
            metrics,
            handshake: None,
        }
    }

    /// Runs `h` (the TLS handshake) on every admitted connection.
    pub fn with_handshake(mut self, h: Arc<dyn Handshake>) -> Self {
        self.handshake = Some(h);
        self
    }
}

fn peer_ip(stream: &Stream) -> Option<IpAddr> {
    stream
        .get_socket_digest()
        .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Guarded<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let _slot = match self.caps.admit(peer_ip(&stream)) {
            Ok(s) => s,
            Err(r) => {
                match r {
                    Refused::Total => self.metrics.refused_total.inc(),
                    Refused::PerClient => self.metrics.refused_per_client.inc(),
                }
                tracing::debug!(reason = ?r, "connection refused");
                return None; // dropping the stream closes it
            }
        };
        let stream = match &self.handshake {
            Some(h) => match h.handshake(stream).await {
                Some(s) => s,
                None => return None,
            },
            None => stream,
        };
        let guarded: Stream = if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
            stream
        } else {
            Box::new(HeadDeadline::new(
                stream,
                self.header_timeout,
                self.metrics.header_timeouts.clone(),
            ))
        };
        // Keep every reuse of this connection under the same slot.
        let mut next = Some(guarded);
        while let Some(s) = next {
            next = self.app.process_new(s, shutdown).await;
        }
        None
    }

    async fn cleanup(&self) {
        self.app.cleanup().await
    }
}
