//! The origin's HTTP/1 listener, with the edge's connection discipline:
//!
//! * **caps**: at most `limits.max_connections` open and
//!   `limits.max_connections_per_ip` per client (IPv6 by prefix); over a
//!   cap the connection is closed before a byte is read
//!   (`shorturl_connections_refused_total{reason}`, as on the edge);
//! * **head deadline**: a request head must be complete
//!   `limits.header_timeout_secs` after accept or after the previous answer
//!   (hyper's header-read timer runs from the moment it waits for a head,
//!   so the same bound closes idle keep-alive connections). A slow or silent
//!   client is closed without an answer (`shorturl_connections_header_timeouts_total`);
//! * **no connection a client could reuse into a reset**: what a handler
//!   left unread of a body is read and thrown away (bounded) before its
//!   answer; when that is not possible, and on every answer while draining,
//!   the answer says `Connection: close` ([`body`]), so an edge never pools
//!   a connection the origin is about to close, nor sends into one;
//! * **drain** ([`Drain`]): after SIGTERM the listener keeps accepting and
//!   serving for `drain_secs` while `/healthz` says `draining`, so edges stop
//!   choosing this origin before it stops accepting; then [`Listener::close`]
//!   stops accepting and lets the requests in flight finish.
//!
//! This replaces `axum::serve`, which has none of these.

mod body;

use crate::config::ServeLimits;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use shorturl_common::conn_caps::{ConnCaps, Refused};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

/// Whether this origin is draining (after SIGTERM, before it stops accepting).
#[derive(Debug, Default)]
pub struct Drain(AtomicBool);

impl Drain {
    /// From now on `/healthz` says draining and answers close their connection.
    pub fn start(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// True once [`Drain::start`] was called.
    pub fn is_draining(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The listener's counters.
#[derive(Clone)]
pub struct ConnMetrics {
    open: IntGauge,
    refused: IntCounterVec,
    header_timeouts: IntCounter,
}

impl ConnMetrics {
    /// Registers the connection metrics in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<ConnMetrics> {
        let open = IntGauge::new("connections_open", "Client connections open now.")?;
        let refused = IntCounterVec::new(
            Opts::new(
                "connections_refused_total",
                "Connections closed before reading a byte, by cap.",
            ),
            &["reason"],
        )?;
        let header_timeouts = IntCounter::new(
            "connections_header_timeouts_total",
            "Connections closed because a request head (or the next one) was not received in time.",
        )?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(header_timeouts.clone()))?;
        for cap in ["max_connections", "max_connections_per_ip"] {
            refused.with_label_values(&[cap]);
        }
        Ok(ConnMetrics {
            open,
            refused,
            header_timeouts,
        })
    }
}

/// A running listener: accepting until [`Listener::close`].
pub struct Listener {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<GracefulShutdown>,
}

impl Listener {
    /// Accepts on `tcp` and serves `app` on every admitted connection.
    pub fn start(
        tcp: TcpListener,
        app: Router,
        limits: &ServeLimits,
        metrics: ConnMetrics,
        drain: Arc<Drain>,
    ) -> Listener {
        let caps = ConnCaps::new(limits.caps.clone(), metrics.open.clone());
        let (stop, stopped) = watch::channel(false);
        let ctx = Arc::new(Accept {
            app,
            caps,
            header_timeout: limits.header_timeout,
            metrics,
            drain,
        });
        Listener {
            stop,
            task: tokio::spawn(ctx.run(tcp, stopped)),
        }
    }

    /// Stops accepting (the listening socket closes), asks every connection
    /// to finish its request in flight and close, and waits for them until
    /// `deadline`. Returns false when some were still open then.
    pub async fn close(self, deadline: tokio::time::Instant) -> bool {
        let _ = self.stop.send(true);
        let Ok(graceful) = self.task.await else {
            return true;
        };
        tokio::time::timeout_at(deadline, graceful.shutdown())
            .await
            .is_ok()
    }
}

/// What the accept loop shares with its connections.
struct Accept {
    app: Router,
    caps: Arc<ConnCaps>,
    header_timeout: Duration,
    metrics: ConnMetrics,
    drain: Arc<Drain>,
}

impl Accept {
    async fn run(
        self: Arc<Self>,
        tcp: TcpListener,
        mut stopped: watch::Receiver<bool>,
    ) -> GracefulShutdown {
        let graceful = GracefulShutdown::new();
        loop {
            let accepted = tokio::select! {
                a = tcp.accept() => a,
                _ = stopped.wait_for(|s| *s) => break,
            };
            match accepted {
                Ok((stream, peer)) => self.serve(stream, peer, &graceful),
                Err(e) => {
                    // Out of descriptors and the like: the listener stays
                    // open; pause so the loop does not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        graceful
    }

    fn serve(
        self: &Arc<Self>,
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
        graceful: &GracefulShutdown,
    ) {
        let slot = match self.caps.admit(Some(peer.ip())) {
            Ok(s) => s,
            Err(r) => {
                let cap = match r {
                    Refused::Total => "max_connections",
                    Refused::PerClient => "max_connections_per_ip",
                };
                self.metrics.refused.with_label_values(&[cap]).inc();
                tracing::debug!(%peer, cap, "connection refused");
                return; // dropping the stream closes it
            }
        };
        let _ = stream.set_nodelay(true);
        let ctx = Arc::clone(self);
        let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            let ctx = Arc::clone(&ctx);
            async move { Ok::<_, std::convert::Infallible>(ctx.answer(req, peer).await) }
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        let timeouts = self.metrics.header_timeouts.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = conn.await {
                if e.is_timeout() {
                    timeouts.inc();
                }
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }

    /// One request through the router, with the peer address and the
    /// connection-close rules of [`body`].
    async fn answer(
        &self,
        req: http::Request<Incoming>,
        peer: SocketAddr,
    ) -> axum::response::Response {
        let (mut parts, incoming) = req.into_parts();
        parts.extensions.insert(ConnectInfo(peer));
        let expects_continue = parts
            .headers
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let (tracked, rest) = body::Tracked::new(incoming, expects_continue);
        let req = http::Request::from_parts(parts, axum::body::Body::new(tracked));
        let mut resp = match self.app.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        // The handler (and with it the body) is gone by now.
        let reusable = rest.drain().await;
        if self.drain.is_draining() || !reusable {
            body::close_after(&mut resp);
        }
        resp
    }
}
