//! What an entry is cached under: a code on a domain (protocol 3.5).

use super::entry::{Answer, Entry};
use std::hash::{BuildHasher, Hasher, RandomState};

/// Room for nearly every key (`s.shop55.com/aB3xYz` is 19 bytes): the
/// buffer is zeroed on every hit, so it is kept to one cache line; a
/// longer key takes the chunked path (always the same one for a key,
/// whatever its case: the path depends on the length alone).
const KEY_BUF: usize = 64;

/// A code on a domain. `domain` is the request's host part as the protocol
/// rules validated it (any case); hashing and comparing fold its case, so
/// the hot path never lower-cases a `Host` into a new string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<'a> {
    pub domain: &'a str,
    pub code: &'a str,
}

impl Key<'_> {
    /// The key's hash under the cache's random key: `domain/code` with the
    /// domain lower-cased, copied into a stack buffer and hashed in one
    /// `write` (one call costs far fewer instructions than three); a key
    /// longer than the buffer is hashed in chunks.
    pub(super) fn hash(&self, keys: &RandomState) -> u64 {
        let (d, c) = (self.domain.as_bytes(), self.code.as_bytes());
        let mut h = keys.build_hasher();
        let n = d.len() + 1 + c.len();
        let mut buf = [0u8; KEY_BUF];
        if n <= KEY_BUF {
            for (o, b) in buf.iter_mut().zip(d) {
                *o = b.to_ascii_lowercase();
            }
            buf[d.len()] = b'/';
            buf[d.len() + 1..n].copy_from_slice(c);
            h.write(&buf[..n]);
        } else {
            for chunk in d.chunks(KEY_BUF) {
                let out = &mut buf[..chunk.len()];
                out.copy_from_slice(chunk);
                out.make_ascii_lowercase();
                h.write(out);
            }
            h.write_u8(b'/');
            h.write(c);
        }
        h.finish()
    }

    /// True when `e` is this key's entry (its domain is lower-case, and so
    /// is nearly every Host: bytes first, case-blind only if they differ).
    pub(super) fn is_of(&self, e: &Entry) -> bool {
        let d = e.domain();
        e.code() == self.code && (d == self.domain || d.eq_ignore_ascii_case(self.domain))
    }

    /// The tombstone's name for the key: `domain/code`, lower-cased domain.
    pub(super) fn tomb_id(&self) -> String {
        let mut s = String::with_capacity(self.domain.len() + 1 + self.code.len());
        s.push_str(self.domain);
        s.make_ascii_lowercase();
        s.push('/');
        s.push_str(self.code);
        s
    }

    /// `answer` as this key's: a record bound to another domain is no
    /// link here (`- 0`), as the origin answers for this key.
    pub(super) fn own(&self, answer: Answer) -> Answer {
        match answer {
            Answer::Found(r) if !r.domain.eq_ignore_ascii_case(self.domain) => Answer::Negative(0),
            a => a,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Key;
    use std::hash::RandomState;

    #[test]
    fn case_of_the_domain_does_not_matter_and_parts_do() {
        let keys = RandomState::new();
        let h = |domain: &str, code: &str| Key { domain, code }.hash(&keys);
        assert_eq!(h("s.shop55.com", "sale"), h("S.Shop55.COM", "sale"));
        let long = "a".repeat(100) + ".com";
        let upper = long.to_ascii_uppercase();
        assert_eq!(h(&long, "sale"), h(&upper, "sale"));
        assert_ne!(h("s.shop55.com", "sale"), h("go.brand91.cn", "sale"));
        assert_ne!(h("s.shop55.com", "sale"), h("s.shop55.com", "Sale"));
        // Past the buffer: still case-blind.
        let huge = "b".repeat(300);
        let huge_upper = huge.to_ascii_uppercase();
        assert_eq!(h(&huge, "sale"), h(&huge_upper, "sale"));
        assert_eq!(
            Key {
                domain: "S.com",
                code: "x1"
            }
            .tomb_id(),
            "s.com/x1"
        );
    }
}
