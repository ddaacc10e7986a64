//! Pages for people, rendered from a link alone: QR codes of its short URL
//! ([`qr`]), the preview page and the HTML 404 pages ([`html`]), and the
//! `Accept` negotiation that decides who gets HTML ([`accept`]).
//!
//! Nothing here knows HTTP status codes; `crate::http::pages` answers.

pub use shorturl_common::accept;
pub mod html;
pub mod qr;

use sha2::{Digest, Sha256};

pub use shorturl_common::pages::PageKind;

/// The strong entity tag of a body: the start of its SHA-256, quoted.
pub fn etag(body: &[u8]) -> String {
    let h = Sha256::digest(body);
    format!("\"{}\"", hex::encode(&h[..16]))
}

/// Whether an `If-None-Match` value matches `tag` (weak comparison, as
/// RFC 9110 13.1.2 asks for this header; `*` matches any).
pub fn none_match(if_none_match: &str, tag: &str) -> bool {
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_strong_and_match() {
        let t = etag(b"x");
        assert!(
            t.starts_with('"') && t.ends_with('"') && t.len() == 34,
            "{t}"
        );
        assert_eq!(t, etag(b"x"));
        assert_ne!(t, etag(b"y"));
        assert!(none_match(&t, &t));
        assert!(none_match(&format!("\"a\", W/{t}"), &t));
        assert!(none_match("*", &t));
        assert!(!none_match("\"a\"", &t));
    }
}
