//! Key material at rest in the shared TLS store (protocol section 3.3):
//! private keys and the ACME account are stored as
//!
//! ```text
//! enc1:<key id>:<base64(nonce || ciphertext || tag)>
//! ```
//!
//! AES-256-GCM (OpenSSL's), a random 96-bit nonce per value, and the Redis
//! key the value is stored under as associated data, so a value copied
//! under another key does not open. `<key id>` is the first 8 hex digits of
//! SHA-256 over the 32 key bytes: the reader picks the key by it, which is
//! how rotation works (new values under the current key, old keys kept for
//! reading until every value was re-sealed). The OpenResty module opens the
//! same format (`lua-compat/openresty/lua/shorturl/seal.lua`).
//!
//! A value without the `enc` prefix is a plaintext one from before
//! encryption: [`StoreKeys::open`] hands it back as [`KeyUse::Plaintext`]
//! so the upgrade keeps serving while the issuer re-seals it.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use openssl::symm::{decrypt_aead, encrypt_aead, Cipher};

/// The prefix of a sealed value (format version 1).
pub const PREFIX: &str = "enc1:";
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
pub use crate::secret_key::{KeyError, KEY_LEN};

/// Why a stored value was refused (the certificate or account is not used).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    /// Not `enc1:<8 hex>:<base64>` of at least nonce and tag, or an
    /// unknown format version.
    #[error("malformed sealed value")]
    Malformed,
    /// No configured key has this id.
    #[error("sealed with unknown key {0}")]
    UnknownKey(String),
    /// The key id matched but the tag did not: tampered, stored under
    /// another Redis key, or sealed by a different key with the same id.
    #[error("does not decrypt with key {0} (tampered or moved)")]
    Undecryptable(String),
}

impl OpenError {
    /// The metric label (`shorturl_tls_store_refused_total{reason}`).
    pub fn reason(&self) -> &'static str {
        match self {
            OpenError::Malformed => "malformed",
            OpenError::UnknownKey(_) => "unknown_key",
            OpenError::Undecryptable(_) => "undecryptable",
        }
    }
}

/// Sealing failed inside OpenSSL (no randomness, no cipher).
#[derive(Debug, thiserror::Error)]
#[error("sealing failed: {0}")]
pub struct SealError(#[from] openssl::error::ErrorStack);

/// One AES-256 key and its id (`crate::secret_key`).
pub type StoreKey = crate::secret_key::SecretKey;

/// Which key opened a value: the issuer re-seals all but `Current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    Current,
    Old,
    /// Stored before encryption (no `enc` prefix).
    Plaintext,
}

/// An opened value.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened {
    pub plain: Vec<u8>,
    pub key: KeyUse,
}

/// The current key (sealing and opening) and the old ones (opening only).
#[derive(Debug, Clone)]
pub struct StoreKeys {
    current: StoreKey,
    old: Vec<StoreKey>,
}

impl StoreKeys {
    pub fn new(current: StoreKey, old: Vec<StoreKey>) -> StoreKeys {
        StoreKeys { current, old }
    }

    /// The id of the key new values are sealed with.
    pub fn current_id(&self) -> &str {
        self.current.id()
    }

    /// Seals `plain` for the Redis key `name`.
    pub fn seal(&self, name: &str, plain: &[u8]) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        openssl::rand::rand_bytes(&mut nonce)?;
        let mut tag = [0u8; TAG_LEN];
        let ct = encrypt_aead(
            Cipher::aes_256_gcm(),
            self.current.bytes(),
            Some(&nonce),
            name.as_bytes(),
            plain,
            &mut tag,
        )?;
        let mut blob = Vec::with_capacity(NONCE_LEN + ct.len() + TAG_LEN);
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&ct);
        blob.extend_from_slice(&tag);
        Ok(format!(
            "{PREFIX}{}:{}",
            self.current.id(),
            STANDARD.encode(blob)
        ))
    }

    /// Opens the value stored at the Redis key `name`: a sealed value with
    /// the key its id names, a plaintext one as it is.
    pub fn open(&self, name: &str, value: &str) -> Result<Opened, OpenError> {
        let Some(rest) = value.strip_prefix(PREFIX) else {
            if is_other_version(value) {
                return Err(OpenError::Malformed);
            }
            return Ok(Opened {
                plain: value.as_bytes().to_vec(),
                key: KeyUse::Plaintext,
            });
        };
        let (id, b64) = rest.split_once(':').ok_or(OpenError::Malformed)?;
        if id.len() != 8 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(OpenError::Malformed);
        }
        let blob = STANDARD.decode(b64).map_err(|_| OpenError::Malformed)?;
        if blob.len() < NONCE_LEN + TAG_LEN {
            return Err(OpenError::Malformed);
        }
        let (nonce, rest) = blob.split_at(NONCE_LEN);
        let (ct, tag) = rest.split_at(rest.len() - TAG_LEN);
        let candidates = std::iter::once((&self.current, KeyUse::Current))
            .chain(self.old.iter().map(|k| (k, KeyUse::Old)))
            .filter(|(k, _)| k.id() == id);
        let mut known = false;
        for (k, key_use) in candidates {
            known = true;
            if let Ok(plain) = decrypt_aead(
                Cipher::aes_256_gcm(),
                k.bytes(),
                Some(nonce),
                name.as_bytes(),
                ct,
                tag,
            ) {
                return Ok(Opened {
                    plain,
                    key: key_use,
                });
            }
        }
        if known {
            Err(OpenError::Undecryptable(id.to_owned()))
        } else {
            Err(OpenError::UnknownKey(id.to_owned()))
        }
    }
}

/// `enc<digits>:` of a version this reader does not know.
fn is_other_version(value: &str) -> bool {
    value
        .strip_prefix("enc")
        .and_then(|r| r.split_once(':'))
        .is_some_and(|(v, _)| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    const NAME: &str = "su:1:tls:cert:s.shop55.com";

    fn key(b: u8) -> StoreKey {
        StoreKey::from_bytes([b; KEY_LEN])
    }

    #[test]
    fn parses_base64_keys_and_names_them_by_id() {
        let k = StoreKey::from_base64(&format!("  {}\n", STANDARD.encode([7u8; 32]))).unwrap();
        assert_eq!(k.id(), &hex::encode(Sha256::digest([7u8; 32]))[..8]);
        assert_eq!(k.id().len(), 8);
        assert_eq!(format!("{k:?}"), format!("SecretKey({})", k.id()));
        assert_eq!(
            StoreKey::from_base64(&STANDARD.encode([7u8; 31])).unwrap_err(),
            KeyError::Length(31)
        );
        assert_eq!(
            StoreKey::from_base64("not base64!").unwrap_err(),
            KeyError::NotBase64
        );
    }

    #[test]
    fn seals_and_opens_with_a_fresh_nonce_each_time() {
        let keys = StoreKeys::new(key(1), vec![]);
        let plain = b"-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n";
        let a = keys.seal(NAME, plain).unwrap();
        let b = keys.seal(NAME, plain).unwrap();
        assert!(a.starts_with(&format!("enc1:{}:", key(1).id())), "{a}");
        assert_ne!(a, b, "random nonce");
        assert!(!a.contains("BEGIN"));
        for v in [&a, &b] {
            assert_eq!(
                keys.open(NAME, v).unwrap(),
                Opened {
                    plain: plain.to_vec(),
                    key: KeyUse::Current
                }
            );
        }
    }

    #[test]
    fn rotation_opens_old_keys_and_seals_with_the_current_one() {
        let before = StoreKeys::new(key(1), vec![]);
        let old_value = before.seal(NAME, b"k").unwrap();
        let after = StoreKeys::new(key(2), vec![key(1)]);
        assert_eq!(after.open(NAME, &old_value).unwrap().key, KeyUse::Old);
        let new_value = after.seal(NAME, b"k").unwrap();
        assert!(new_value.starts_with(&format!("enc1:{}:", key(2).id())));
        assert_eq!(after.open(NAME, &new_value).unwrap().key, KeyUse::Current);
        // A reader that only has the old key refuses the new value by id.
        assert_eq!(
            before.open(NAME, &new_value).unwrap_err(),
            OpenError::UnknownKey(key(2).id().to_owned())
        );
        // Once the old key is dropped, its values are refused.
        let done = StoreKeys::new(key(2), vec![]);
        assert_eq!(
            done.open(NAME, &old_value).unwrap_err(),
            OpenError::UnknownKey(key(1).id().to_owned())
        );
    }

    #[test]
    fn a_tampered_value_or_another_key_name_does_not_open() {
        let keys = StoreKeys::new(key(1), vec![]);
        let v = keys.seal(NAME, b"secret key bytes").unwrap();
        let (head, b64) = v.rsplit_once(':').unwrap();
        let mut blob = STANDARD.decode(b64).unwrap();
        for i in [0, NONCE_LEN, blob.len() - 1] {
            blob[i] ^= 1;
            let t = format!("{head}:{}", STANDARD.encode(&blob));
            assert_eq!(
                keys.open(NAME, &t).unwrap_err(),
                OpenError::Undecryptable(key(1).id().to_owned()),
                "byte {i}"
            );
            blob[i] ^= 1;
        }
        // Copied under another Redis key: the associated data differs.
        assert_eq!(
            keys.open("su:1:tls:cert:evil.example", &v).unwrap_err(),
            OpenError::Undecryptable(key(1).id().to_owned())
        );
        // A key with the same id that is not the key (an id names, it does not prove).
        let forged = StoreKeys::new(
            crate::secret_key::SecretKey::forged([3; KEY_LEN], key(1).id()),
            vec![],
        );
        assert!(matches!(
            forged.open(NAME, &v),
            Err(OpenError::Undecryptable(_))
        ));
    }

    #[test]
    fn plaintext_is_handed_back_and_malformed_values_refused() {
        let keys = StoreKeys::new(key(1), vec![]);
        let pem = "-----BEGIN PRIVATE KEY-----\n";
        assert_eq!(
            keys.open(NAME, pem).unwrap(),
            Opened {
                plain: pem.as_bytes().to_vec(),
                key: KeyUse::Plaintext
            }
        );
        let k1 = key(1);
        let id = k1.id();
        for bad in [
            "enc1:".to_owned(),
            format!("enc1:{id}"),
            format!("enc1:{id}:!!"),
            format!("enc1:{id}:{}", STANDARD.encode([0u8; 27])),
            format!("enc1:ABCDEF01:{}", STANDARD.encode([0u8; 40])),
            format!("enc1:{}:{}", &id[..7], STANDARD.encode([0u8; 40])),
            format!("enc2:{id}:{}", STANDARD.encode([0u8; 40])),
        ] {
            assert_eq!(
                keys.open(NAME, &bad).unwrap_err(),
                OpenError::Malformed,
                "{bad}"
            );
        }
        assert_eq!(OpenError::Malformed.reason(), "malformed");
        assert_eq!(OpenError::UnknownKey(String::new()).reason(), "unknown_key");
        assert_eq!(
            OpenError::Undecryptable(String::new()).reason(),
            "undecryptable"
        );
    }
}
