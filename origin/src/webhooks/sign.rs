//! Signatures in the Standard Webhooks format (standardwebhooks.com), so
//! receivers can verify with its libraries or a few lines of their own:
//!
//! ```text
//! webhook-id: evt_…            (the idempotency id: the same on every retry)
//! webhook-timestamp: 1764460800 (Unix seconds of this attempt)
//! webhook-signature: v1,<base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))>
//! ```
//!
//! The secret is `whsec_` and the base64 of the key's 24 random bytes.
//! Receivers reject a timestamp more than 5 minutes from their clock
//! (the replay window) and compare signatures in constant time.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new random secret.
pub fn new_secret() -> String {
    format!(
        "{SECRET_PREFIX}{}",
        STANDARD.encode(rand::random::<[u8; 24]>())
    )
}

/// The key bytes of a secret (`None`: not one of ours).
fn key_of(secret: &str) -> Option<Vec<u8>> {
    STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()
}

/// The `webhook-signature` value of `body` sent as event `id` at `timestamp`.
pub fn signature(secret: &str, id: &str, timestamp: u64, body: &[u8]) -> Option<String> {
    let key = key_of(secret)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_webhooks_test_vector() {
        // The specification's own example (standard-webhooks, spec/README).
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(secret, id, 1614265330, body).unwrap(),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_are_fresh_and_usable() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX) && key_of(&a).unwrap().len() == 24);
        assert!(signature("not-a-secret", "x", 1, b"").is_none());
    }
}
