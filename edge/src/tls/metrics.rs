//! TLS and ACME metrics (protocol section 7 names), registered through
//! `pingora_prometheus::prometheus` like the rest of the edge's.

use pingora_prometheus::prometheus::{self, IntCounter, IntCounterVec, IntGaugeVec, Opts};

/// Handshake, certificate and ACME counters.
pub struct TlsMetrics {
    pub handshakes_ok: IntCounter,
    pub handshakes_error: IntCounter,
    pub handshakes_timeout: IntCounter,
    /// How handshakes got their turn (`tls::turns`).
    pub turns: super::turns::TurnMetrics,
    /// `notAfter` per served certificate name (ops alert on days to expiry).
    pub expiry: IntGaugeVec,
    pub orders_issued: IntCounter,
    pub orders_failed: IntCounter,
    /// Key material read from the shared store in plaintext (from before
    /// sealing; the issuer re-seals it).
    pub store_plaintext: IntCounter,
    /// Sealed values refused, by reason (`malformed`, `unknown_key`, `undecryptable`).
    pub store_refused: IntCounterVec,
    /// Values the issuer re-sealed under the current store key.
    pub store_resealed: IntCounter,
}

impl TlsMetrics {
    /// Creates and registers the metrics (a second instance in one process,
    /// as in unit tests, keeps working counters that are not exported).
    pub fn new() -> Result<TlsMetrics, prometheus::Error> {
        let hs = IntCounterVec::new(
            Opts::new(
                "shorturl_tls_handshakes_total",
                "TLS handshakes on the edge's TLS listeners, by result (ok, error, timeout).",
            ),
            &["result"],
        )?;
        let turns = IntCounterVec::new(
            Opts::new(
                "shorturl_tls_handshake_turns_total",
                "TLS handshakes by how they got their turn: immediate (a turn was free), waited, overdue (started without one after tls.handshake_turn_wait_ms).",
            ),
            &["how"],
        )?;
        let expiry = IntGaugeVec::new(
            Opts::new(
                "shorturl_tls_certificate_expiry_timestamp_seconds",
                "notAfter of each certificate the edge serves, by the name it is selected for.",
            ),
            &["domain"],
        )?;
        let orders = IntCounterVec::new(
            Opts::new(
                "shorturl_acme_orders_total",
                "ACME certificate orders of this edge, by result (issued, failed).",
            ),
            &["result"],
        )?;
        let plaintext = IntCounter::new(
            "shorturl_tls_store_plaintext_total",
            "Private keys and ACME accounts read from the shared store in plaintext (stored before sealing).",
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "shorturl_tls_store_refused_total",
                "Sealed shared-store values refused, by reason (malformed, unknown_key, undecryptable).",
            ),
            &["reason"],
        )?;
        let resealed = IntCounter::new(
            "shorturl_tls_store_resealed_total",
            "Shared-store values this edge's issuer re-sealed under the current store key.",
        )?;
        for r in ["malformed", "unknown_key", "undecryptable"] {
            refused.with_label_values(&[r]);
        }
        for c in [
            Box::new(hs.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(turns.clone()),
            Box::new(expiry.clone()),
            Box::new(orders.clone()),
            Box::new(plaintext.clone()),
            Box::new(refused.clone()),
            Box::new(resealed.clone()),
        ] {
            let _ = prometheus::register(c);
        }
        Ok(TlsMetrics {
            handshakes_ok: hs.with_label_values(&["ok"]),
            handshakes_error: hs.with_label_values(&["error"]),
            handshakes_timeout: hs.with_label_values(&["timeout"]),
            turns: super::turns::TurnMetrics {
                immediate: turns.with_label_values(&["immediate"]),
                waited: turns.with_label_values(&["waited"]),
                overdue: turns.with_label_values(&["overdue"]),
            },
            expiry,
            orders_issued: orders.with_label_values(&["issued"]),
            orders_failed: orders.with_label_values(&["failed"]),
            store_plaintext: plaintext,
            store_refused: refused,
            store_resealed: resealed,
        })
    }
}
