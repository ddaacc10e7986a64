//! What an entry is cached under: a code on a domain (protocol 3.5).

use super::entry::{Answer, Entry};
use std::hash::{BuildHasher, Hasher, RandomState};

/// A code on a domain. `domain` is the request's host part as the protocol
/// rules validated it (any case); hashing and comparing fold its case, so
/// the hot path never lower-cases a `Host` into a new string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<'a> {
    pub domain: &'a str,
    pub code: &'a str,
}

impl Key<'_> {
    /// The key's hash under the cache's random key: the domain lower-cased
    /// (in a stack buffer only when it has an upper-case letter), a
    /// separator no domain or code contains, then the code.
    pub(super) fn hash(&self, keys: &RandomState) -> u64 {
        let mut h = keys.build_hasher();
        let d = self.domain.as_bytes();
        if d.iter().any(u8::is_ascii_uppercase) {
            let mut buf = [0u8; 64];
            for chunk in d.chunks(buf.len()) {
                let out = &mut buf[..chunk.len()];
                out.copy_from_slice(chunk);
                out.make_ascii_lowercase();
                h.write(out);
            }
        } else {
            h.write(d);
        }
        h.write_u8(b'/');
        h.write(self.code.as_bytes());
        h.finish()
    }

    /// True when `e` is this key's entry.
    pub(super) fn is_of(&self, e: &Entry) -> bool {
        e.code() == self.code && e.domain().eq_ignore_ascii_case(self.domain)
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
