//! Redis key schema (protocol v1). Every key the system writes starts with
//! [`PREFIX`], so a shared Redis can host other data and a protocol bump can
//! live beside the old keys during a migration.

use sha2::{Digest, Sha256};

/// Common prefix of every key written by this system.
pub const PREFIX: &str = "su:1:";

/// Key of the link record for `code` (value: a [`crate::record`] line or `-`).
pub fn link_key(code: &str) -> String {
    format!("{PREFIX}link:{code}")
}

/// Key of the 24-hour dedup entry for `(domain, url)` (value: the code).
/// The URL is hashed so the key stays short whatever the URL length.
pub fn dedup_key(domain: &str, url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    format!("{PREFIX}dedup:{domain}:{}", hex::encode(&digest[..16]))
}

/// Key of the issuer counter when the Redis counter backend is used.
pub fn issuer_key(name: &str) -> String {
    format!("{PREFIX}issuer:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable() {
        assert_eq!(link_key("aB3xYz"), "su:1:link:aB3xYz");
        // Case matters: codes are case-sensitive everywhere.
        assert_ne!(link_key("aB3xYz"), link_key("Ab3xYz"));
        let k = dedup_key("s.com", "https://example.com/");
        assert!(k.starts_with("su:1:dedup:s.com:"));
        assert_eq!(k.len(), "su:1:dedup:s.com:".len() + 32);
        assert_ne!(k, dedup_key("t.com", "https://example.com/"));
        assert_eq!(issuer_key("default"), "su:1:issuer:default");
    }
}
