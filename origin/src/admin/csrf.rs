//! CSRF tokens. A session's token is 256 random bits, hex, stored with the
//! session and compared in constant time. The sign-in form (no session yet)
//! is guarded by a double-submitted token that the server signed
//! ([`FormTokens`]): the cookie and the hidden field must be equal *and*
//! carry a valid, unexpired signature, so an attacker cannot pick the value
//! (`csrf=x` with a cookie `x` is refused).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A fresh token (64 hex digits).
pub fn token() -> String {
    let b: [u8; 32] = rand::random();
    hex::encode(b)
}

/// Whether `given` equals `expected`, in time independent of where they differ.
pub fn matches(expected: &str, given: Option<&str>) -> bool {
    let Some(given) = given else {
        return false;
    };
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() || a.is_empty() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How long a sign-in form's token is accepted (its cookie lives as long).
pub const FORM_TOKEN_MAX_AGE_SECS: u64 = 3600;

/// Clock difference between origins tolerated on a token's issue time.
const CLOCK_SKEW_SECS: u64 = 60;

/// Hex digits of a token's nonce (128 random bits).
const NONCE_HEX: usize = 32;

/// Signs and verifies sign-in form tokens, `<nonce>.<issued>.<tag>`: 128
/// random bits, the Unix second it was issued, and HMAC-SHA-256 over both
/// under a key every origin of the installation shares (derived from
/// `meta.cursor_key`), so a form served by one origin may be posted to
/// another.
pub struct FormTokens {
    key: [u8; 32],
}

impl FormTokens {
    /// Tokens under `key`.
    pub fn new(key: [u8; 32]) -> FormTokens {
        FormTokens { key }
    }

    fn mac(&self, body: &str) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(body.as_bytes());
        m
    }

    /// A fresh token issued at `now` (Unix seconds).
    pub fn issue(&self, now: u64) -> String {
        let nonce: [u8; NONCE_HEX / 2] = rand::random();
        let body = format!("{}.{now}", hex::encode(nonce));
        let tag = hex::encode(self.mac(&body).finalize().into_bytes());
        format!("{body}.{tag}")
    }

    /// Whether `token` was issued by this key at most
    /// [`FORM_TOKEN_MAX_AGE_SECS`] before `now` (tag checked in constant time).
    pub fn verify(&self, token: &str, now: u64) -> bool {
        let Some((body, tag)) = token.rsplit_once('.') else {
            return false;
        };
        let Some((nonce, issued)) = body.split_once('.') else {
            return false;
        };
        let issued = match issued.parse::<u64>() {
            Ok(t) if issued.bytes().all(|b| b.is_ascii_digit()) => t,
            _ => return false,
        };
        if nonce.len() != NONCE_HEX
            || !nonce.bytes().all(|b| b.is_ascii_hexdigit())
            || issued > now + CLOCK_SKEW_SECS
            || now.saturating_sub(issued) > FORM_TOKEN_MAX_AGE_SECS
        {
            return false;
        }
        let Ok(tag) = hex::decode(tag) else {
            return false;
        };
        self.mac(body).verify_slice(&tag).is_ok()
    }

    /// The double-submit check: the form's `field` equals the `cookie` and
    /// is a valid token at `now`.
    pub fn double_submitted(&self, cookie: Option<&str>, field: Option<&str>, now: u64) -> bool {
        let (Some(cookie), Some(field)) = (cookie, field) else {
            return false;
        };
        matches(cookie, Some(field)) && self.verify(field, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare() {
        let t = token();
        assert_eq!(t.len(), 64);
        assert_ne!(t, token());
        assert!(matches(&t, Some(&t.clone())));
        assert!(!matches(&t, None));
        assert!(!matches(&t, Some("")));
        assert!(!matches(&t, Some(&t[..63])));
        assert!(!matches("", Some("")));
        let mut other = t.clone().into_bytes();
        other[10] = if other[10] == b'a' { b'b' } else { b'a' };
        assert!(!matches(&t, Some(std::str::from_utf8(&other).unwrap())));
    }

    #[test]
    fn form_tokens_are_signed_and_expire() {
        let now = 1_800_000_000;
        let f = FormTokens::new([3; 32]);
        let t = f.issue(now);
        assert_ne!(t, f.issue(now), "a fresh nonce each time");
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit() || b == b'.'), "{t}");
        assert!(f.verify(&t, now));
        assert!(f.verify(&t, now + FORM_TOKEN_MAX_AGE_SECS));
        assert!(!f.verify(&t, now + FORM_TOKEN_MAX_AGE_SECS + 1), "expired");
        assert!(
            f.verify(&t, now - CLOCK_SKEW_SECS),
            "another origin's clock"
        );
        assert!(!f.verify(&t, now - CLOCK_SKEW_SECS - 1), "from the future");
        // Another installation's key, any changed character, junk: refused.
        assert!(!FormTokens::new([4; 32]).verify(&t, now));
        let bytes = t.clone().into_bytes();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] = if b[i] == b'1' { b'2' } else { b'1' };
            assert!(!f.verify(std::str::from_utf8(&b).unwrap(), now), "byte {i}");
        }
        for junk in ["", "x", "..", "a.b.c", &"0".repeat(64)] {
            assert!(!f.verify(junk, now), "{junk}");
        }
        // A re-signed issue time is refused (the tag covers it).
        let (body, tag) = t.rsplit_once('.').unwrap();
        let nonce = body.split_once('.').unwrap().0;
        assert!(!f.verify(&format!("{nonce}.{}.{tag}", now + 1), now + 1));

        // Double submit: equal and valid.
        assert!(f.double_submitted(Some(&t), Some(&t), now));
        assert!(
            !f.double_submitted(Some("x"), Some("x"), now),
            "attacker-chosen"
        );
        assert!(!f.double_submitted(Some(&f.issue(now)), Some(&t), now));
        assert!(!f.double_submitted(None, Some(&t), now));
        assert!(!f.double_submitted(Some(&t), None, now));
    }
}
