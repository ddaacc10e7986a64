//! Unique visitors per link-day (protocol 3.7, section 3.4 "Unique
//! visitors"): a HyperLogLog sketch over a keyed hash of (client key, user
//! agent), the key a salt the fleet shares for one UTC day only.
//!
//! No address or user agent is stored anywhere: an edge keeps the 64-bit
//! visitor hashes of a flush interval, a batch carries them (sparse) or
//! registers (dense), the origin keeps one sketch per link-day. Once the
//! day's salt is gone (an hour after the day) a hash cannot be recomputed
//! from a guessed address, so it says nothing about who visited.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Precision: 2^14 registers (0.8% standard error).
pub const PRECISION: u32 = 14;
/// Registers of a dense sketch.
pub const REGISTERS: usize = 1 << PRECISION;
/// Visitors a sparse (exact) sketch holds; one more makes it dense.
pub const SPARSE_MAX: usize = 256;
/// Bytes of a day's salt (hex digits).
pub const SALT_LEN: usize = 32;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The Redis key of the salt of the UTC day starting at `day`.
pub fn salt_key(day: u64) -> String {
    format!("su:1:uniq_salt:{day}")
}

/// Whether `s` is a salt: 32 lower-case hex digits.
pub fn is_salt(s: &[u8]) -> bool {
    s.len() == SALT_LEN && s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The visitor of a click: the first 8 bytes (big-endian) of
/// HMAC-SHA256 keyed with `salt` over `<client key>\n<user agent>`.
pub fn visitor(salt: &[u8], client_key: &str, user_agent: &[u8]) -> u64 {
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(salt) else {
        return 0;
    };
    m.update(client_key.as_bytes());
    m.update(b"\n");
    m.update(user_agent);
    let out = m.finalize().into_bytes();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out[..8]);
    u64::from_be_bytes(first)
}

/// The register of `v` and its value (1-51).
pub fn register(v: u64) -> (usize, u8) {
    let index = (v >> (64 - PRECISION)) as usize;
    let low = v << PRECISION;
    // Leading zeros of the low 50 bits, + 1 (51 when they are all zero).
    let rho = low.leading_zeros().min(64 - PRECISION) + 1;
    (index, rho as u8)
}

/// A link-day's distinct visitors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sketch {
    /// At most [`SPARSE_MAX`] visitors, ascending, distinct: exact.
    /// Inline up to two (a link's day between two flushes mostly sees one
    /// visitor: no allocation per counted link).
    Sparse(smallvec::SmallVec<[u64; 2]>),
    /// Registers.
    Dense(Box<[u8]>),
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch::Sparse(smallvec::SmallVec::new())
    }
}

impl Sketch {
    /// Adds one visitor.
    pub fn insert(&mut self, v: u64) {
        match self {
            Sketch::Sparse(s) => {
                if let Err(i) = s.binary_search(&v) {
                    s.insert(i, v);
                    if s.len() > SPARSE_MAX {
                        *self = Sketch::densify(s);
                    }
                }
            }
            Sketch::Dense(r) => {
                let (i, rho) = register(v);
                r[i] = r[i].max(rho);
            }
        }
    }

    fn densify(s: &[u64]) -> Sketch {
        let mut d = Sketch::Dense(vec![0u8; REGISTERS].into_boxed_slice());
        for v in s {
            d.insert(*v);
        }
        d
    }

    /// Adds `other`'s visitors (union; dense register-wise maximum).
    pub fn merge(&mut self, other: &Sketch) {
        match (&mut *self, other) {
            (Sketch::Dense(a), Sketch::Dense(b)) => {
                for (x, y) in a.iter_mut().zip(b.iter()) {
                    *x = (*x).max(*y);
                }
            }
            (Sketch::Sparse(_), Sketch::Dense(_)) => {
                let mut d = other.clone();
                if let Sketch::Sparse(s) = &*self {
                    for v in s {
                        d.insert(*v);
                    }
                }
                *self = d;
            }
            (_, Sketch::Sparse(s)) => {
                for v in s {
                    self.insert(*v);
                }
            }
        }
    }

    /// Distinct visitors: exact while sparse, HyperLogLog's estimate when
    /// dense (linear counting in the small range).
    pub fn estimate(&self) -> u64 {
        match self {
            Sketch::Sparse(s) => s.len() as u64,
            Sketch::Dense(r) => {
                let m = REGISTERS as f64;
                let alpha = 0.7213 / (1.0 + 1.079 / m);
                let (sum, zeros) = r.iter().fold((0.0f64, 0u32), |(s, z), x| {
                    (s + 2f64.powi(-i32::from(*x)), z + u32::from(*x == 0))
                });
                let raw = alpha * m * m / sum;
                let e = if raw <= 2.5 * m && zeros > 0 {
                    m * (m / f64::from(zeros)).ln()
                } else {
                    raw
                };
                e.round() as u64
            }
        }
    }

    /// Whether no visitor is in it.
    pub fn is_empty(&self) -> bool {
        matches!(self, Sketch::Sparse(s) if s.is_empty())
    }

    /// The last two fields of a `u` line: `s <hex>...` or `d <registers>`.
    pub fn encode(&self, out: &mut String) {
        match self {
            Sketch::Sparse(s) => {
                out.reserve(2 + 16 * s.len());
                out.push_str("s ");
                // By hand: the formatting machinery cost a flush more than
                // the rest of a link's lines.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                for v in s {
                    let mut hex = [0u8; 16];
                    for (i, h) in hex.iter_mut().enumerate() {
                        *h = HEX[((v >> (4 * (15 - i))) & 15) as usize];
                    }
                    // Hex digits are ASCII.
                    out.push_str(std::str::from_utf8(&hex).unwrap_or_default());
                }
            }
            Sketch::Dense(r) => {
                out.reserve(2 + REGISTERS);
                out.push_str("d ");
                out.extend(r.iter().map(|x| ALPHABET[usize::from(*x & 63)] as char));
            }
        }
    }

    /// The sketch of a `u` line's last two fields, strictly: `s` and 1-256
    /// visitors, ascending and distinct, lower-case hex; `d` and 16,384
    /// registers of at most 51.
    pub fn decode_parts(kind: &str, data: &str) -> Option<Sketch> {
        let b = data.as_bytes();
        match kind {
            "s" => {
                if b.is_empty() || !b.len().is_multiple_of(16) || b.len() / 16 > SPARSE_MAX {
                    return None;
                }
                let mut out: Vec<u64> = Vec::with_capacity(b.len() / 16);
                for chunk in b.chunks(16) {
                    if !chunk.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
                        return None;
                    }
                    let v = u64::from_str_radix(std::str::from_utf8(chunk).ok()?, 16).ok()?;
                    if out.last().is_some_and(|last| *last >= v) {
                        return None;
                    }
                    out.push(v);
                }
                Some(Sketch::Sparse(smallvec::SmallVec::from_vec(out)))
            }
            "d" => {
                if b.len() != REGISTERS {
                    return None;
                }
                let mut r = vec![0u8; REGISTERS].into_boxed_slice();
                for (d, c) in r.iter_mut().zip(b) {
                    let v = ALPHABET.iter().position(|a| a == c)?;
                    if v > 51 {
                        return None;
                    }
                    *d = v as u8;
                }
                Some(Sketch::Dense(r))
            }
            _ => None,
        }
    }

    /// [`Sketch::decode_parts`] of the text [`Sketch::encode`] writes.
    pub fn decode(text: &str) -> Option<Sketch> {
        let (kind, data) = text.split_once(' ')?;
        Sketch::decode_parts(kind, data)
    }

    /// Visitors of a sparse sketch (`None` when dense).
    pub fn sparse_len(&self) -> Option<usize> {
        match self {
            Sketch::Sparse(s) => Some(s.len()),
            Sketch::Dense(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_visitor_is_the_contracts_hmac() {
        // The same vector as lua-compat/openresty/t/clicks_test.lua:
        // printf '203.0.113.7\nMozilla/5.0 (X11; Linux x86_64) Firefox/121.0' |
        //   openssl dgst -sha256 -hmac 000102030405060708090a0b0c0d0e0f
        let v = visitor(
            b"000102030405060708090a0b0c0d0e0f",
            "203.0.113.7",
            b"Mozilla/5.0 (X11; Linux x86_64) Firefox/121.0",
        );
        let want = std::process::Command::new("sh")
            .arg("-c")
            .arg("printf '203.0.113.7\\nMozilla/5.0 (X11; Linux x86_64) Firefox/121.0' | openssl dgst -sha256 -hmac 000102030405060708090a0b0c0d0e0f -r")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| u64::from_str_radix(s.get(..16)?, 16).ok());
        if let Some(want) = want {
            assert_eq!(v, want);
        }
        assert!(is_salt(b"000102030405060708090a0b0c0d0e0f"));
        assert!(!is_salt(b"000102030405060708090A0B0C0D0E0F"));
    }

    #[test]
    fn registers_take_the_top_14_bits_and_the_rest_leading_zeros() {
        assert_eq!(register(0), (0, 51));
        assert_eq!(register(u64::MAX), (REGISTERS - 1, 1));
        assert_eq!(register(1 << 49), (0, 1));
        assert_eq!(register(1), (0, 50));
        assert_eq!(register((5 << 50) | (1 << 40)), (5, 10));
    }

    #[test]
    fn sparse_is_exact_and_turns_dense_past_256() {
        let mut s = Sketch::default();
        for v in [30u64, 10, 20, 10] {
            s.insert(v);
        }
        let mut t = String::new();
        s.encode(&mut t);
        assert_eq!(t, "s 000000000000000a0000000000000014000000000000001e");
        assert_eq!(Sketch::decode(&t), Some(s.clone()));
        assert_eq!(s.estimate(), 3);
        let mut big = Sketch::default();
        for i in 0..256u64 {
            big.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
        assert_eq!(big.sparse_len(), Some(256));
        big.insert(7);
        assert_eq!(big.sparse_len(), None);
        let mut t = String::new();
        big.encode(&mut t);
        assert_eq!(t.len(), 2 + REGISTERS);
        assert_eq!(Sketch::decode(&t), Some(big.clone()));
        // Dense: an estimate (linear counting this small).
        assert!((254..=260).contains(&big.estimate()), "{}", big.estimate());
        for bad in [
            "",
            "s ",
            "x 00",
            "s 0000000000000002000000000000001",
            "s 00000000000000020000000000000001",
            "s 000000000000000A",
            "d ",
            "d AAAA",
        ] {
            assert_eq!(Sketch::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn within_two_percent_at_100000_and_merges_like_one_sketch() {
        let salt = b"0f0e0d0c0b0a09080706050403020100";
        let (mut a, mut b, mut all) = (Sketch::default(), Sketch::default(), Sketch::default());
        let first = visitor(salt, "10.0.0.0", b"Mozilla/5.0");
        for i in 0..100_000u32 {
            let ip = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            let v = visitor(salt, &ip, b"Mozilla/5.0");
            all.insert(v);
            if i % 3 == 0 {
                a.insert(v);
            } else {
                b.insert(v);
            }
            // A visitor seen at both edges counts once.
            if i % 10 == 0 {
                b.insert(v);
            }
        }
        let e = all.estimate() as f64;
        assert!((e - 100_000.0).abs() / 100_000.0 < 0.02, "{e}");
        a.merge(&b);
        assert_eq!(a, all);
        // A sparse sketch of a visitor already counted adds nothing.
        let mut small = Sketch::default();
        small.insert(first);
        small.merge(&all);
        assert_eq!(small.estimate(), all.estimate());
    }
}
