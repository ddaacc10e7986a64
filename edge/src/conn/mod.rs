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

use crate::config::LimitsConfig;
use crate::metrics::Metrics;
use crate::net::{CidrList, ClientKey};
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use pingora_prometheus::prometheus::{IntCounter, IntGauge};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const SHARDS: usize = 16;

/// Why a connection was closed on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `max_connections` reached.
    Total,
    /// `max_connections_per_ip` reached for this client.
    PerClient,
}

/// Counts of open connections, in total and per client key.
pub struct ConnCaps {
    max_total: usize,
    max_per_client: u32,
    v6_prefix: u8,
    trusted: CidrList,
    open: AtomicUsize,
    per_client: Box<[Mutex<HashMap<ClientKey, u32>>]>,
    hasher: std::hash::RandomState,
    gauge: IntGauge,
}

/// One admitted connection; dropping it gives the place back.
pub struct Slot {
    caps: Arc<ConnCaps>,
    key: Option<ClientKey>,
    admitted: bool,
}

impl ConnCaps {
    /// Caps from the limits; `gauge` shows the connections open.
    pub fn new(cfg: &LimitsConfig, trusted: CidrList, gauge: IntGauge) -> Arc<Self> {
        Arc::new(ConnCaps {
            max_total: cfg.max_connections,
            max_per_client: cfg.max_connections_per_ip,
            v6_prefix: cfg.ipv6_prefix_len,
            trusted,
            open: AtomicUsize::new(0),
            per_client: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::hash::RandomState::new(),
            gauge,
        })
    }

    fn shard(&self, key: &ClientKey) -> MutexGuard<'_, HashMap<ClientKey, u32>> {
        let m = &self.per_client[(self.hasher.hash_one(key) as usize) % SHARDS];
        match m.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Admits a connection from `peer`, or says which cap it hit.
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Slot, Refused> {
        let n = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        // From here on, dropping `slot` undoes the count.
        let mut slot = Slot {
            caps: Arc::clone(self),
            key: None,
            admitted: false,
        };
        if self.max_total > 0 && n > self.max_total {
            return Err(Refused::Total);
        }
        if self.max_per_client > 0 {
            if let Some(ip) = peer.filter(|ip| !self.trusted.contains(*ip)) {
                let key = ClientKey::new(ip, self.v6_prefix);
                let mut shard = self.shard(&key);
                let count = shard.entry(key).or_insert(0);
                if *count >= self.max_per_client {
                    return Err(Refused::PerClient);
                }
                *count += 1;
                slot.key = Some(key);
            }
        }
        slot.admitted = true;
        self.gauge.inc();
        Ok(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut shard = self.caps.shard(&key);
            if let Some(c) = shard.get_mut(&key) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    shard.remove(&key);
                }
            }
        }
        if self.admitted {
            self.caps.gauge.dec();
        }
        self.caps.open.fetch_sub(1, Ordering::AcqRel);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration as D;

    fn caps(total: usize, per: u32, trusted: &[&str]) -> Arc<ConnCaps> {
        let cfg = LimitsConfig {
            unknown_per_ip_per_sec: 0,
            creations_per_ip_per_sec: 0,
            refused_creations_per_ip_per_min: 0,
            clients_tracked: 1,
            ipv6_prefix_len: 64,
            max_uri_bytes: 4096,
            max_header_bytes: 16384,
            client_timeout: D::from_secs(1),
            keepalive_timeout_secs: 1,
            header_timeout: D::from_secs(1),
            max_connections: total,
            max_connections_per_ip: per,
        };
        let gauge = IntGauge::new("test_open", "test").unwrap_or_else(|e| panic!("{e}"));
        let t = CidrList::parse(trusted).unwrap_or_else(|e| panic!("{e}"));
        ConnCaps::new(&cfg, t, gauge)
    }

    fn ip(s: &str) -> Option<IpAddr> {
        s.parse().ok()
    }

    #[test]
    fn per_client_and_total_caps_with_release() {
        let c = caps(5, 2, &["10.0.0.0/8"]);
        let a1 = c.admit(ip("1.1.1.1")).ok();
        let a2 = c.admit(ip("1.1.1.1")).ok();
        assert!(a1.is_some() && a2.is_some());
        assert_eq!(c.admit(ip("1.1.1.1")).err(), Some(Refused::PerClient));
        // IPv6: one /64 is one client.
        let v1 = c.admit(ip("2001:db8::1")).ok();
        let v2 = c.admit(ip("2001:db8::2")).ok();
        assert!(v1.is_some() && v2.is_some());
        assert_eq!(c.admit(ip("2001:db8::3")).err(), Some(Refused::PerClient));
        // A trusted proxy is not capped per client, only in total.
        let p = c.admit(ip("10.0.0.1")).ok();
        assert!(p.is_some());
        assert_eq!(c.admit(ip("10.0.0.1")).err(), Some(Refused::Total));
        assert_eq!(c.admit(ip("2.2.2.2")).err(), Some(Refused::Total));
        assert_eq!(c.open(), 5, "refusals give their place back");
        drop(a1);
        assert_eq!(c.open(), 4);
        assert!(
            c.admit(ip("1.1.1.1")).is_ok(),
            "a closed connection frees its place"
        );
        drop((a2, v1, v2, p));
        assert_eq!(c.open(), 0);
        assert!(c
            .per_client
            .iter()
            .all(|s| s.lock().map(|m| m.is_empty()).unwrap_or(false)));
        assert_eq!(c.gauge.get(), 0);
    }

    #[test]
    fn zero_caps_are_off() {
        let c = caps(0, 0, &[]);
        let slots: Vec<_> = (0..1000)
            .filter_map(|_| c.admit(ip("1.1.1.1")).ok())
            .collect();
        assert_eq!(slots.len(), 1000);
        assert_eq!(c.gauge.get(), 1000);
        drop(slots);
        assert_eq!((c.open(), c.gauge.get()), (0, 0));
    }
}
