//! Search cursors: an opaque, signed page boundary.
//!
//! A cursor is the `(created_at, id)` of the last link of a page, bound to
//! the query it came from (its filters and the caller's app) by an
//! HMAC-SHA-256 tag under a per-installation key (`meta.cursor_key`). The
//! client cannot move it, forge one, or reuse it with other filters: any of
//! that fails verification (`400 invalid_cursor`). The key is shared by
//! every origin of an installation, so a cursor from one origin works on
//! the next.
//!
//! A primitive beside [`crate::permutation`]: the store loads the key
//! ([`crate::store::meta::load_cursor_key`]), the links API signs with it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Format version (first byte of a decoded cursor).
const VERSION: u8 = 1;
/// Bytes of the tag kept (128 bits).
const TAG_LEN: usize = 16;
/// version + created_at + id + tag.
const RAW_LEN: usize = 1 + 8 + 8 + TAG_LEN;

/// Where a page ends: the last link's `created_at` and row id. The next
/// page holds the links strictly before it in `(created_at DESC, id DESC)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub created_at: u64,
    pub id: u64,
}

/// The installation's cursor-signing key.
#[derive(Clone)]
pub struct CursorKey([u8; 32]);

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorKey(..)")
    }
}

impl CursorKey {
    /// A key from 32 bytes.
    pub fn new(key: [u8; 32]) -> CursorKey {
        CursorKey(key)
    }

    /// The key stored as 64 hex digits in `meta`.
    pub fn from_hex(s: &str) -> Option<CursorKey> {
        let v = hex::decode(s).ok()?;
        Some(CursorKey(v.try_into().ok()?))
    }

    /// A key for another purpose, derived from this one (HMAC of
    /// `purpose`): other signed tokens get the same distribution to every
    /// origin (`meta`), and a tag of one kind is never valid as another.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(b"derive\0");
        m.update(purpose.as_bytes());
        m.finalize().into_bytes().into()
    }

    fn mac(&self, binding: &str, created_at: u64, id: u64) -> Hmac<Sha256> {
        // A key of any length is accepted by HMAC; this cannot fail.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(&[VERSION]);
        m.update(&created_at.to_be_bytes());
        m.update(&id.to_be_bytes());
        m.update(binding.as_bytes());
        m
    }

    /// The cursor for `pos` in the query described by `binding`.
    pub fn sign(&self, binding: &str, pos: Position) -> String {
        let tag = self.mac(binding, pos.created_at, pos.id).finalize();
        let mut raw = Vec::with_capacity(RAW_LEN);
        raw.push(VERSION);
        raw.extend_from_slice(&pos.created_at.to_be_bytes());
        raw.extend_from_slice(&pos.id.to_be_bytes());
        raw.extend_from_slice(&tag.into_bytes()[..TAG_LEN]);
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The position in `cursor`, if it was signed by this key for exactly
    /// this query (`binding`); `None` for anything else.
    pub fn verify(&self, binding: &str, cursor: &str) -> Option<Position> {
        if cursor.len() > 64 {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(cursor).ok()?;
        if raw.len() != RAW_LEN || raw[0] != VERSION {
            return None;
        }
        let num = |at: usize| -> Option<u64> {
            Some(u64::from_be_bytes(raw.get(at..at + 8)?.try_into().ok()?))
        };
        let (created_at, id) = (num(1)?, num(9)?);
        self.mac(binding, created_at, id)
            .verify_truncated_left(&raw[17..])
            .ok()?;
        Some(Position { created_at, id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tampering() {
        let k = CursorKey::new([7; 32]);
        let pos = Position {
            created_at: 1_700_000_000,
            id: 42,
        };
        let c = k.sign("domain=a", pos);
        assert!(c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(k.verify("domain=a", &c), Some(pos));
        // Other filters, another key, a changed byte, a truncation: refused.
        assert_eq!(k.verify("domain=b", &c), None);
        assert_eq!(CursorKey::new([8; 32]).verify("domain=a", &c), None);
        let mut raw = URL_SAFE_NO_PAD.decode(&c).unwrap();
        for i in 0..raw.len() {
            raw[i] ^= 1;
            assert_eq!(
                k.verify("domain=a", &URL_SAFE_NO_PAD.encode(&raw)),
                None,
                "byte {i}"
            );
            raw[i] ^= 1;
        }
        assert_eq!(k.verify("domain=a", &c[..c.len() - 1]), None);
        for junk in ["", "x", "!!!!", &"A".repeat(200)] {
            assert_eq!(k.verify("domain=a", junk), None, "{junk}");
        }
        assert!(CursorKey::from_hex(&"ab".repeat(32)).is_some());
        assert!(CursorKey::from_hex("abcd").is_none());
    }

    #[test]
    fn derived_keys_differ_by_purpose_and_installation() {
        let k = CursorKey::new([7; 32]);
        assert_eq!(k.derive("a"), k.derive("a"));
        assert_ne!(k.derive("a"), k.derive("b"));
        assert_ne!(k.derive("a"), CursorKey::new([8; 32]).derive("a"));
        assert_ne!(k.derive("a"), [7; 32]);
    }
}
