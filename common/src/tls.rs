//! Values of the shared TLS store (protocol section 3.3): what the issuing
//! edge writes to Redis and every edge (Pingora or OpenResty) reads.

use serde::{Deserialize, Serialize};

/// `su:1:tls:cert:{name}`: one certificate with its key, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertBundle {
    /// PEM: the leaf first, then the intermediates.
    pub cert: String,
    /// PEM private key of the leaf; in Redis, sealed with the store key
    /// (`crate::tls_seal`, feature `tls-seal`), which the edges open.
    pub key: String,
    /// The leaf's `notAfter`, Unix seconds.
    pub not_after: i64,
}

/// `GET /internal/v1/domains` on the origin: the names certificates may be
/// ordered for (the creation whitelist: default domain, static list and
/// merchant domains, Apollo's included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainList {
    pub default_domain: String,
    /// Every listed domain (the default one included), sorted.
    pub domains: Vec<String>,
}
