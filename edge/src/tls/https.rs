//! HTTPS policy for requests (`edge.https`): which domains' plain-HTTP
//! redirect requests are sent to HTTPS first (308 to the same URL on
//! `https`), and the `Strict-Transport-Security` value added to answers
//! given over TLS. Both are off by default: plain HTTP keeps working as it
//! did.

use http::HeaderValue;
use pingora::proxy::Session;
use std::collections::HashSet;

/// Domains whose plain-HTTP redirect requests get a 308 to HTTPS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Upgrade {
    /// None (default).
    #[default]
    Off,
    /// Every domain.
    All,
    /// These domains (normalised).
    Domains(HashSet<String>),
}

/// The HTTPS policy.
#[derive(Debug, Clone, Default)]
pub struct HttpsPolicy {
    pub upgrade: Upgrade,
    /// Added to answers over TLS when set.
    pub hsts: Option<HeaderValue>,
    /// Port in the `Location` of a 308 (omitted when 443).
    pub port: u16,
}

/// Whether the request came over TLS. One pointer check, no allocation.
pub fn is_tls(session: &Session) -> bool {
    session.digest().is_some_and(|d| d.ssl_digest.is_some())
}

impl HttpsPolicy {
    /// True when nothing depends on the connection being TLS or not.
    pub fn is_off(&self) -> bool {
        self.upgrade == Upgrade::Off && self.hsts.is_none()
    }

    /// Whether any plain-HTTP request may go to HTTPS: when not, the
    /// redirect path skips finding the Host for [`Self::upgrades`].
    pub fn may_upgrade(&self) -> bool {
        self.upgrade != Upgrade::Off
    }

    /// Whether a plain-HTTP redirect request for `host` goes to HTTPS.
    pub fn upgrades(&self, host: &str) -> bool {
        match &self.upgrade {
            Upgrade::Off => false,
            Upgrade::All => true,
            Upgrade::Domains(d) => {
                if host.bytes().any(|b| b.is_ascii_uppercase()) {
                    d.contains(&host.to_ascii_lowercase())
                } else {
                    d.contains(host)
                }
            }
        }
    }

    /// `https://host[:port]<path_and_query>`.
    pub fn location(&self, host: &str, path_and_query: &str) -> String {
        if self.port == 443 {
            format!("https://{host}{path_and_query}")
        } else {
            format!("https://{host}:{}{path_and_query}", self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrades_per_domain_or_all() {
        let mut p = HttpsPolicy {
            port: 443,
            ..Default::default()
        };
        assert!(p.is_off() && !p.upgrades("a.com"));
        p.upgrade = Upgrade::Domains(["a.com".to_owned()].into_iter().collect());
        assert!(p.upgrades("a.com") && p.upgrades("A.Com") && !p.upgrades("b.com"));
        assert_eq!(p.location("a.com", "/abc?x=1"), "https://a.com/abc?x=1");
        p.port = 8443;
        assert_eq!(p.location("a.com", "/abc"), "https://a.com:8443/abc");
        p.upgrade = Upgrade::All;
        assert!(p.upgrades("anything.net"));
    }
}
