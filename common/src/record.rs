//! The link record as stored in Redis and returned by the origin's record
//! endpoint.
//!
//! Format (protocol v1), one line of ASCII-safe text, fields separated by a
//! single space, URL last:
//!
//! ```text
//! 1 <expires_at_unix> <domain> <url>
//! ```
//!
//! The URL never contains whitespace (creation refuses it) and the domain is
//! a normalised host, so a Lua pattern `^1 (%d+) (%S+) (%S+)$` parses it.
//! The single character `-` is a negative record: the code is known not to
//! resolve (unknown, disabled or expired).

use crate::time::now_unix;

/// Leading field of a v1 record.
pub const RECORD_VERSION: &str = "1";
/// The negative record value.
pub const NEGATIVE: &str = "-";

/// A resolvable link: where it goes, on which domain, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Unix seconds after which the link is gone (404 everywhere).
    pub expires_at: u64,
    /// The normalised host the link was created for; it resolves nowhere else.
    pub domain: String,
    /// The long URL (absolute http/https, no whitespace).
    pub url: String,
}

/// What a record string says about a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A live or expired link (check [`Record::is_expired`]).
    Found(Record),
    /// The code is known not to resolve.
    Negative,
}

/// Why a stored value could not be read as a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedRecord;

impl std::fmt::Display for MalformedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("malformed link record")
    }
}

impl std::error::Error for MalformedRecord {}

impl Record {
    /// Serialises to the v1 line format.
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(24 + self.domain.len() + self.url.len());
        s.push_str(RECORD_VERSION);
        s.push(' ');
        s.push_str(&self.expires_at.to_string());
        s.push(' ');
        s.push_str(&self.domain);
        s.push(' ');
        s.push_str(&self.url);
        s
    }

    /// True once `now` is at or past the expiry.
    pub fn is_expired_at(&self, now: u64) -> bool {
        now >= self.expires_at
    }

    /// True once the wall clock is at or past the expiry.
    pub fn is_expired(&self) -> bool {
        self.is_expired_at(now_unix())
    }

    /// Seconds left before expiry (0 if already expired).
    pub fn remaining_secs(&self, now: u64) -> u64 {
        self.expires_at.saturating_sub(now)
    }

    /// True when this link may be served for a request whose normalised host is `host`.
    pub fn binds(&self, host: &str) -> bool {
        self.domain == host
    }
}

impl Lookup {
    /// Parses a stored value: a v1 record or the negative marker.
    pub fn decode(value: &str) -> Result<Lookup, MalformedRecord> {
        if value == NEGATIVE {
            return Ok(Lookup::Negative);
        }
        let mut parts = value.splitn(4, ' ');
        let (Some(RECORD_VERSION), Some(exp), Some(domain), Some(url)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(MalformedRecord);
        };
        let expires_at = exp.parse::<u64>().map_err(|_| MalformedRecord)?;
        if domain.is_empty() || url.is_empty() || url.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(MalformedRecord);
        }
        Ok(Lookup::Found(Record {
            expires_at,
            domain: domain.to_owned(),
            url: url.to_owned(),
        }))
    }

    /// The stored form of this lookup result.
    pub fn encode(&self) -> String {
        match self {
            Lookup::Found(r) => r.encode(),
            Lookup::Negative => NEGATIVE.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let r = Record {
            expires_at: 1_900_000_000,
            domain: "s.shop55.com".into(),
            url: "https://example.com/a b".replace(' ', "%20"),
        };
        let line = r.encode();
        assert_eq!(line, "1 1900000000 s.shop55.com https://example.com/a%20b");
        assert_eq!(Lookup::decode(&line), Ok(Lookup::Found(r)));
        assert_eq!(Lookup::decode("-"), Ok(Lookup::Negative));
    }

    #[test]
    fn url_may_contain_separators_other_than_space() {
        let line = "1 5 d.com https://x.com/?a=1|2&b=3:4";
        match Lookup::decode(line) {
            Ok(Lookup::Found(r)) => assert_eq!(r.url, "https://x.com/?a=1|2&b=3:4"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn malformed() {
        for bad in [
            "",
            "2 5 d.com https://x",
            "1 x d.com https://x",
            "1 5 d.com",
            "1 5  https://x",
            "1 5 d.com https://x y",
            "--",
        ] {
            assert_eq!(Lookup::decode(bad), Err(MalformedRecord), "{bad:?}");
        }
    }

    #[test]
    fn expiry_and_binding() {
        let r = Record {
            expires_at: 100,
            domain: "a.com".into(),
            url: "https://x".into(),
        };
        assert!(!r.is_expired_at(99));
        assert!(r.is_expired_at(100));
        assert_eq!(r.remaining_secs(40), 60);
        assert_eq!(r.remaining_secs(400), 0);
        assert!(r.binds("a.com"));
        assert!(!r.binds("b.com"));
    }
}
