//! Invalidation messages (protocol 3.5, `docs/protocol.md` section 3.2).
//!
//! After the origin has written the Redis record of a changed link, it
//! publishes `<version> <code> <domain>` (ASCII, single spaces) on the
//! pub/sub channel [`crate::keys::INVAL_CHANNEL`]. An edge drops its
//! in-process entry for (`domain`, `code`) unless that entry's version is
//! already at least `version`. The form before protocol 3.5,
//! `<version> <code>`, is still published for edges of the previous version
//! during an upgrade; edges of this version recognise and ignore it.

use crate::code::is_valid_code;
use crate::host::host_part;

/// One invalidation: the link `code` on `domain` changed and its state is
/// now at `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalidation<'a> {
    pub version: u64,
    pub code: &'a str,
    /// The link's normalised domain.
    pub domain: &'a str,
}

/// A message on the channel, as an edge reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// The protocol 3.5 form.
    Link(Invalidation<'a>),
    /// `<version> <code>`: the form for edges of the previous version.
    Legacy,
}

impl<'a> Invalidation<'a> {
    /// Parses a message; `None` for anything that is neither
    /// `<digits> <code> <domain>` nor the legacy `<digits> <code>`, with a
    /// code of the protocol grammar and a normalised domain.
    pub fn decode(msg: &'a str) -> Option<Message<'a>> {
        // Split by byte search: an edge decodes every message of a storm
        // (`str::split_once` cost ~140 instructions a call, callgrind).
        let space = |s: &'a str| memchr::memchr(b' ', s.as_bytes()).map(|i| (&s[..i], &s[i + 1..]));
        let (v, rest) = space(msg)?;
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let version = v.parse().ok()?;
        let Some((code, domain)) = space(rest) else {
            return is_valid_code(rest).then_some(Message::Legacy);
        };
        let normalised = host_part(domain).is_some_and(|h| h == domain)
            && !domain.bytes().any(|b| b.is_ascii_uppercase());
        if !is_valid_code(code) || !normalised {
            return None;
        }
        Some(Message::Link(Invalidation {
            version,
            code,
            domain,
        }))
    }

    /// The message text.
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.version, self.code, self.domain)
    }

    /// The legacy text `<version> <code>`, for edges of the previous
    /// version.
    pub fn encode_legacy(version: u64, code: &str) -> String {
        format!("{version} {code}")
    }
}

#[cfg(test)]
mod tests {
    use super::{Invalidation, Message};

    #[test]
    fn roundtrip_and_refusals() {
        let m = Invalidation {
            version: 12,
            code: "aB3xYz",
            domain: "s.shop55.com",
        };
        assert_eq!(m.encode(), "12 aB3xYz s.shop55.com");
        assert_eq!(Invalidation::encode_legacy(12, "aB3xYz"), "12 aB3xYz");
        assert_eq!(
            Invalidation::decode("12 aB3xYz s.shop55.com"),
            Some(Message::Link(m))
        );
        assert_eq!(Invalidation::decode("12 aB3xYz"), Some(Message::Legacy));
        let v6 = Invalidation::decode("3 sale [::1]");
        assert!(matches!(v6, Some(Message::Link(i)) if i.domain == "[::1]"));
        for bad in [
            "",
            "12",
            "12 ",
            " aB3xYz",
            "x aB3xYz",
            "+1 aB3xYz",
            "1 a/b",
            "1 aB3xYz x y",
            "1 aB3xYz S.shop55.com",
            "1 aB3xYz s.shop55.com:80",
            "1 aB3xYz s.shop55.com.",
            "1 aB3xYz ",
            "1 a/b s.com",
        ] {
            assert_eq!(Invalidation::decode(bad), None, "{bad:?}");
        }
    }
}
