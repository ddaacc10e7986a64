//! Redis key schema. Every key the system writes starts with [`PREFIX`], so
//! a shared Redis can host other data. The prefix is the key schema's own
//! version: protocol 2 changed the record *values* in a way protocol 2
//! readers accept in both forms, so the keys kept `su:1:`.

use sha2::{Digest, Sha256};

/// Common prefix of every key written by this system.
pub const PREFIX: &str = "su:1:";

/// The pub/sub channel of invalidation messages ([`crate::inval`]).
pub const INVAL_CHANNEL: &str = "su:1:inval";

/// Key of the record of the link `code` on `domain` (normalised; value: a
/// [`crate::record`] line). Keyed by both (protocol 3.5) so a custom code
/// can be one merchant's on one domain and another's on another. A code
/// never contains `/`, so these keys never meet [`legacy_link_key`]'s.
pub fn link_key(domain: &str, code: &str) -> String {
    format!("{PREFIX}link:{domain}/{code}")
}

/// The key of `code`'s record before protocol 3.5, still written (with
/// `redis.legacy_keys`) for edges of the previous version during an upgrade.
pub fn legacy_link_key(code: &str) -> String {
    format!("{PREFIX}link:{code}")
}

/// Key of the dedup entry of a creation (value: the code). One creation
/// deduplicates only against an earlier one by the same app for the same
/// merchant, domain, lifetime policy and URL, so a caller is never handed
/// someone else's link. The rest is hashed so the key stays short:
/// the first 16 bytes of SHA-256 over `app \n kdt_id-or-empty \n ttl_days \n url`.
pub fn dedup_key(domain: &str, app: &str, kdt_id: Option<u64>, ttl_days: u32, url: &str) -> String {
    let kdt = kdt_id.map(|k| k.to_string()).unwrap_or_default();
    let mut h = Sha256::new();
    for part in [app, &kdt, &ttl_days.to_string()] {
        h.update(part.as_bytes());
        h.update(b"\n");
    }
    h.update(url.as_bytes());
    let digest = h.finalize();
    format!("{PREFIX}dedup:{domain}:{}", hex::encode(&digest[..16]))
}

/// Key of the issuer counter when the Redis counter backend is used.
pub fn issuer_key(name: &str) -> String {
    format!("{PREFIX}issuer:{name}")
}

/// Set of the names that have a certificate in the shared store.
pub const TLS_NAMES: &str = "su:1:tls:names";

/// Generation counter of the shared certificate store: every write of a
/// certificate increments it, so edges notice a change with one `GET`.
pub const TLS_GEN: &str = "su:1:tls:gen";

/// Key of the certificate bundle for `name` (`*.example.com` for a
/// wildcard); the value is a [`crate::tls::CertBundle`] as JSON.
pub fn tls_cert_key(name: &str) -> String {
    format!("{PREFIX}tls:cert:{name}")
}

/// Key of an ACME HTTP-01 challenge answer (value: the key authorisation).
pub fn acme_challenge_key(token: &str) -> String {
    format!("{PREFIX}acme:challenge:{token}")
}

/// The fleet-wide ACME issuer lease (value: the holder's node id).
pub const ACME_LEASE: &str = "su:1:acme:lease";

/// The ACME account credentials (JSON, as the ACME client serialises them,
/// sealed like a bundle's private key: protocol 3.3), per directory URL: `su:1:acme:account:{sha256(directory url) hex, 16 bytes}`.
pub fn acme_account_key(directory_url: &str) -> String {
    let digest = Sha256::digest(directory_url.as_bytes());
    format!("{PREFIX}acme:account:{}", hex::encode(&digest[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable() {
        assert_eq!(
            link_key("s.shop55.com", "aB3xYz"),
            "su:1:link:s.shop55.com/aB3xYz"
        );
        assert_eq!(legacy_link_key("aB3xYz"), "su:1:link:aB3xYz");
        // Case matters: codes are case-sensitive everywhere.
        assert_ne!(link_key("s.com", "aB3xYz"), link_key("s.com", "Ab3xYz"));
        assert_ne!(link_key("a.com", "sale"), link_key("b.com", "sale"));
        let k = dedup_key("s.com", "demo", None, 730, "https://example.com/");
        // sha256("demo\n\n730\nhttps://example.com/"), first 16 bytes.
        let want = Sha256::digest(b"demo\n\n730\nhttps://example.com/");
        assert_eq!(k, format!("su:1:dedup:s.com:{}", hex::encode(&want[..16])));
        assert_ne!(
            k,
            dedup_key("t.com", "demo", None, 730, "https://example.com/")
        );
        assert_eq!(issuer_key("default"), "su:1:issuer:default");
        assert_eq!(INVAL_CHANNEL, format!("{PREFIX}inval"));
        assert_eq!(tls_cert_key("*.shop55.com"), "su:1:tls:cert:*.shop55.com");
        assert_eq!(acme_challenge_key("tok"), "su:1:acme:challenge:tok");
        assert!(acme_account_key("https://ca/dir").starts_with("su:1:acme:account:"));
        assert_ne!(
            acme_account_key("https://a/dir"),
            acme_account_key("https://b/dir")
        );
    }

    #[test]
    fn dedup_separates_owners_and_policies() {
        let base = dedup_key("s.com", "a", Some(55), 30, "https://x/");
        for other in [
            dedup_key("s.com", "b", Some(55), 30, "https://x/"),
            dedup_key("s.com", "a", Some(56), 30, "https://x/"),
            dedup_key("s.com", "a", None, 30, "https://x/"),
            dedup_key("s.com", "a", Some(55), 31, "https://x/"),
            dedup_key("s.com", "a", Some(55), 30, "https://x/2"),
        ] {
            assert_ne!(base, other);
        }
    }
}
