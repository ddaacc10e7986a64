//! Keyed permutation of the code space `[0, 62^6)`.
//!
//! Issue order `id` maps to code index `P(id - 1)`. A 6-round Feistel network
//! over 36 bits (two 18-bit halves, round function SHA-256 keyed with the
//! installation's secret) is a bijection on `[0, 2^36)`; cycle walking (apply
//! again while the result is outside `[0, 62^6)`) restricts it to a bijection
//! on the code space. So codes never repeat, by construction, and are spread
//! uniformly over the whole space: a random guess hits with probability
//! issued / 62^6, and no code says anything about its neighbours.

use sha2::{Digest, Sha256};
use shorturl_common::code::{self, CODE_LEN, CODE_SPACE};

const HALF_BITS: u32 = 18;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
const ROUNDS: u8 = 6;

/// A keyed bijection on the code space.
#[derive(Clone)]
pub struct Permutation {
    key: [u8; 32],
}

impl std::fmt::Debug for Permutation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permutation(<key>)")
    }
}

impl Permutation {
    /// Builds the permutation from a 32-byte secret.
    pub fn new(key: [u8; 32]) -> Self {
        Permutation { key }
    }

    /// Parses a key stored as 64 hex digits.
    pub fn from_hex(hex_key: &str) -> Option<Self> {
        let bytes = hex::decode(hex_key).ok()?;
        let key: [u8; 32] = bytes.try_into().ok()?;
        Some(Permutation::new(key))
    }

    fn round(&self, r: u8, half: u64) -> u64 {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update([r]);
        h.update(half.to_le_bytes());
        let d = h.finalize();
        u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]) & HALF_MASK
    }

    fn feistel(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> HALF_BITS, x & HALF_MASK);
        for i in 0..ROUNDS {
            let next = l ^ self.round(i, r);
            l = r;
            r = next;
        }
        (l << HALF_BITS) | r
    }

    fn feistel_inv(&self, y: u64) -> u64 {
        let (mut l, mut r) = (y >> HALF_BITS, y & HALF_MASK);
        for i in (0..ROUNDS).rev() {
            let prev = r ^ self.round(i, l);
            r = l;
            l = prev;
        }
        (l << HALF_BITS) | r
    }

    /// Maps an index in `[0, 62^6)` to another index in the same range.
    pub fn forward(&self, index: u64) -> Option<u64> {
        if index >= CODE_SPACE {
            return None;
        }
        let mut x = self.feistel(index);
        while x >= CODE_SPACE {
            x = self.feistel(x);
        }
        Some(x)
    }

    /// Inverse of [`Permutation::forward`].
    pub fn inverse(&self, index: u64) -> Option<u64> {
        if index >= CODE_SPACE {
            return None;
        }
        let mut x = self.feistel_inv(index);
        while x >= CODE_SPACE {
            x = self.feistel_inv(x);
        }
        Some(x)
    }

    /// The code of issue-order id `id` (1-based). `None` past the code space.
    pub fn code_for_id(&self, id: u64) -> Option<String> {
        let idx = self.forward(id.checked_sub(1)?)?;
        let bytes = code::encode_index(idx)?;
        Some(bytes.iter().map(|&b| b as char).collect())
    }

    /// The issue-order id whose code is `code`, if `code` is a 6-char base62 string.
    pub fn id_for_code(&self, code: &str) -> Option<u64> {
        if code.len() != CODE_LEN {
            return None;
        }
        Some(self.inverse(code::decode_index(code)?)? + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn perm() -> Permutation {
        Permutation::new([7u8; 32])
    }

    #[test]
    fn feistel_is_invertible_on_36_bits() {
        let p = perm();
        for x in [0u64, 1, 12345, (1 << 36) - 1, 0xABCDEF012] {
            assert_eq!(p.feistel_inv(p.feistel(x)), x);
        }
    }

    #[test]
    fn ids_map_to_distinct_codes_and_back() {
        let p = perm();
        let mut seen = HashSet::new();
        for id in 1..=50_000u64 {
            let c = p.code_for_id(id).unwrap_or_default();
            assert_eq!(c.len(), 6);
            assert_eq!(p.id_for_code(&c), Some(id), "{c}");
            assert!(seen.insert(c), "duplicate code at id {id}");
        }
    }

    #[test]
    fn codes_spread_over_the_whole_space() {
        // Dense ids must not give a dense prefix: the first characters of the
        // first 10k codes should cover (nearly) all 62 symbols.
        let p = perm();
        let firsts: HashSet<char> = (1..=10_000u64)
            .filter_map(|id| p.code_for_id(id))
            .filter_map(|c| c.chars().next())
            .collect();
        assert!(firsts.len() >= 60, "first chars only {}", firsts.len());
        // And the mean index is near the middle of the space.
        let mean = (1..=10_000u64)
            .filter_map(|id| p.forward(id - 1))
            .map(|i| i as f64)
            .sum::<f64>()
            / 10_000.0;
        let mid = CODE_SPACE as f64 / 2.0;
        assert!(
            (mean - mid).abs() < CODE_SPACE as f64 * 0.02,
            "mean {mean} vs {mid}"
        );
    }

    #[test]
    fn different_keys_give_different_orders() {
        let a = Permutation::new([1u8; 32]);
        let b = Permutation::new([2u8; 32]);
        let same = (1..=1000u64)
            .filter(|&id| a.code_for_id(id) == b.code_for_id(id))
            .count();
        assert!(same < 5);
    }

    #[test]
    fn out_of_range() {
        let p = perm();
        assert_eq!(p.code_for_id(0), None);
        assert_eq!(p.code_for_id(CODE_SPACE + 1), None);
        assert!(p.code_for_id(CODE_SPACE).is_some());
        assert_eq!(p.id_for_code("abc"), None);
        assert_eq!(Permutation::from_hex("zz").map(|_| ()), None);
    }
}
