//! A 32-byte secret key named by an id derived from it: the shared TLS
//! store's sealing keys (`crate::tls_seal`) and the unlock tokens' HMAC
//! keys (`crate::unlock`). Readers pick a key by the id a value carries,
//! which is how both rotate (new values under the current key, old keys
//! kept for reading until nothing under them is live).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// Bytes of a key.
pub const KEY_LEN: usize = 32;

/// A configured key that is not usable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("not base64")]
    NotBase64,
    #[error(
        "must be {KEY_LEN} bytes (base64 of 32 random bytes: `openssl rand -base64 32`), got {0}"
    )]
    Length(usize),
}

/// One key and its id. `Debug` shows the id only.
#[derive(Clone)]
pub struct SecretKey {
    id: String,
    key: [u8; KEY_LEN],
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey({})", self.id)
    }
}

impl SecretKey {
    /// The key from its 32 bytes.
    pub fn from_bytes(key: [u8; KEY_LEN]) -> SecretKey {
        SecretKey {
            id: hex::encode(&Sha256::digest(key)[..4]),
            key,
        }
    }

    /// The key from base64 (standard alphabet, surrounding white space
    /// ignored, as `openssl rand -base64 32` prints it).
    pub fn from_base64(text: &str) -> Result<SecretKey, KeyError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| KeyError::NotBase64)?;
        let key: [u8; KEY_LEN] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| KeyError::Length(bytes.len()))?;
        Ok(SecretKey::from_bytes(key))
    }

    /// First 8 hex digits of SHA-256 over the key bytes.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A key under another key's id (tests: an id names, it does not prove).
    #[cfg(test)]
    pub(crate) fn forged(key: [u8; KEY_LEN], id: &str) -> SecretKey {
        SecretKey {
            id: id.to_owned(),
            key,
        }
    }

    /// The key itself (for the cipher or MAC only).
    pub fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.key
    }
}
