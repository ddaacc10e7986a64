//! TLS termination on the edge's TLS listeners.
//!
//! The handshake runs inside the connection guard (`conn::Guarded`), after
//! the connection caps admitted the client and before any HTTP: so caps
//! apply to TLS clients too, every handshake is bounded by
//! `tls.handshake_timeout_secs`, and each one is counted
//! (`shorturl_tls_handshakes_total{result}`). Pingora's own TLS listener
//! would do the handshake before our code sees the connection, with a fixed
//! 60 s limit and only a log line on failure.
//!
//! * TLS 1.2 and 1.3 only (Mozilla "intermediate" ciphers).
//! * ALPN: `h2` preferred, `http/1.1`; a client offering neither gets no
//!   ALPN and speaks HTTP/1.1.
//! * Certificates: chosen by SNI in Pingora's asynchronous certificate
//!   callback, from the in-memory [`CertStore`] (no I/O in a handshake).
//! * Resumption: OpenSSL's server session cache (session ids) and session
//!   tickets. Ticket keys are random per acceptor; the acceptor is rebuilt
//!   every `tls.ticket_key_rotate_secs`, so a ticket key lives that long at
//!   most (a ticket from before a rotation costs one full handshake).

use super::config::AcceptorSettings;
use super::metrics::TlsMetrics;
use super::store::CertStore;
use super::turns::HandshakeTurns;
use crate::conn::Handshake;
use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::listeners::TlsAccept;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::tls::server::handshake_with_callback;
use pingora::protocols::tls::TlsRef;
use pingora::protocols::Stream;
use pingora::tls::ext;
use pingora::tls::ssl::{
    select_next_proto, AlpnError, NameType, SslAcceptor, SslMethod, SslSessionCacheMode,
};
use std::sync::Arc;
use std::time::Instant;

/// ALPN protocols we offer, in wire format, in order of preference.
const ALPN_H2_H1: &[u8] = b"\x02h2\x08http/1.1";
const ALPN_H1: &[u8] = b"\x08http/1.1";

/// Builds the acceptor: TLS 1.2+, ALPN, session cache and tickets.
pub fn build_acceptor(s: &AcceptorSettings) -> Result<SslAcceptor, openssl::error::ErrorStack> {
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls())?;
    let protos = if s.http2 { ALPN_H2_H1 } else { ALPN_H1 };
    b.set_alpn_select_callback(move |_, client| {
        select_next_proto(protos, client).ok_or(AlpnError::NOACK)
    });
    b.set_session_cache_mode(SslSessionCacheMode::SERVER);
    b.set_session_cache_size(s.session_cache_size.try_into().unwrap_or(i32::MAX));
    b.set_session_id_context(b"shorturl-edge")?;
    Ok(b.build())
}

/// Picks the certificate by SNI during the handshake.
struct SniCallback {
    store: Arc<CertStore>,
}

#[async_trait]
impl TlsAccept for SniCallback {
    async fn certificate_callback(&self, ssl: &mut TlsRef) {
        let sni = ssl.servername(NameType::HOST_NAME).map(str::to_owned);
        let snap = self.store.snapshot();
        let Some(cert) = snap.select(sni.as_deref()) else {
            // No certificate at all for this name and no default: the
            // handshake fails with an alert (counted as an error).
            tracing::debug!(?sni, "no certificate for the handshake");
            return;
        };
        let installed = ext::ssl_use_certificate(ssl, &cert.leaf)
            .and_then(|()| ext::ssl_use_private_key(ssl, &cert.key))
            .and_then(|()| {
                cert.chain
                    .iter()
                    .try_for_each(|c| ext::ssl_add_chain_cert(ssl, c))
            });
        if let Err(e) = installed {
            tracing::warn!(?sni, error = %e, "cannot install the certificate");
        }
    }
}

/// The TLS side of a listener: shared by every connection of the TLS service.
pub struct Terminator {
    acceptor: ArcSwap<SslAcceptor>,
    built_at: ArcSwap<Instant>,
    settings: AcceptorSettings,
    callback: SniCallback,
    metrics: Arc<TlsMetrics>,
    turns: HandshakeTurns,
}

impl Terminator {
    /// A terminator selecting certificates from `store`, for an edge of
    /// `threads` worker threads.
    pub fn new(
        settings: AcceptorSettings,
        store: Arc<CertStore>,
        metrics: Arc<TlsMetrics>,
        threads: usize,
    ) -> Result<Arc<Self>, openssl::error::ErrorStack> {
        let acceptor = build_acceptor(&settings)?;
        let turns = HandshakeTurns::new(
            settings
                .handshakes_per_thread
                .saturating_mul(threads.max(1)),
            settings.handshake_turn_wait,
        );
        Ok(Arc::new(Terminator {
            acceptor: ArcSwap::from_pointee(acceptor),
            built_at: ArcSwap::from_pointee(Instant::now()),
            settings,
            callback: SniCallback { store },
            metrics,
            turns,
        }))
    }

    /// The acceptor, rebuilt when its ticket key is due for rotation.
    fn acceptor(&self) -> Arc<SslAcceptor> {
        if self.built_at.load().elapsed() >= self.settings.ticket_key_rotation {
            match build_acceptor(&self.settings) {
                Ok(a) => {
                    self.acceptor.store(Arc::new(a));
                    tracing::debug!("TLS acceptor rebuilt: new session ticket key");
                }
                Err(e) => tracing::warn!(error = %e, "cannot rebuild the TLS acceptor"),
            }
            self.built_at.store(Arc::new(Instant::now()));
        }
        self.acceptor.load_full()
    }
}

#[async_trait]
impl Handshake for Terminator {
    async fn handshake(&self, stream: Stream) -> Option<Stream> {
        let Ok(l4) = stream.into_any().downcast::<L4Stream>() else {
            tracing::warn!("TLS listener got a stream that is not a socket");
            self.metrics.handshakes_error.inc();
            return None;
        };
        // Held until the handshake ends (`tls::turns`).
        let _turn = self.turns.take(&self.metrics.turns).await;
        let acceptor = self.acceptor();
        let hs = handshake_with_callback(&acceptor, *l4, &self.callback);
        match tokio::time::timeout(self.settings.handshake_timeout, hs).await {
            Ok(Ok(tls)) => {
                self.metrics.handshakes_ok.inc();
                Some(Box::new(tls))
            }
            Ok(Err(e)) => {
                self.metrics.handshakes_error.inc();
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                self.metrics.handshakes_timeout.inc();
                tracing::debug!("TLS handshake timed out");
                None
            }
        }
    }
}
