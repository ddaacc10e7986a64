//! The link record as stored in Redis and returned by the origin's record
//! endpoint (protocol 2, `docs/protocol.md` section 3).
//!
//! One line of ASCII text, fields separated by a single space, URL last:
//!
//! ```text
//! 2 <version> <expires_at_unix> <domain> <url>     a link
//! - <version>                                      a negative record
//! ```
//!
//! `version` is the link row's version in MySQL (0 for a code that was never
//! issued, 1 at creation, +1 on every change), so a writer can refuse to
//! replace a newer state with an older one. The URL never contains
//! whitespace (creation refuses it) and the domain is a normalised host, so
//! the Lua patterns `^2 (%d+) (%d+) (%S+) (%S+)$` and `^%- (%d+)$` parse it.
//!
//! Readers also accept the protocol 1 forms `1 <expires_at> <domain> <url>`
//! and `-`, as version 0, so a rolling upgrade can meet values written by
//! older origins.
//!
//! A link with options (link rules, protocol 3) is
//! `3 <version> <expires_at> <domain> <url> <options>`, the options compact
//! JSON ([`crate::link_rules`]); a link without keeps the protocol 2 line.

use crate::link_rules::LinkOptions;
use crate::time::now_unix;
use std::sync::Arc;

/// Leading field of a protocol 2 record.
pub const RECORD_VERSION: &str = "2";
/// Leading field of a protocol 3 record (a link with options).
pub const OPTIONS_RECORD_VERSION: &str = "3";
/// Leading field of a protocol 1 record (read as version 0, never written).
pub const LEGACY_RECORD_VERSION: &str = "1";
/// The protocol 1 negative record (read as version 0, never written).
pub const NEGATIVE: &str = "-";

/// A resolvable link: where it goes, on which domain, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The link row's version (0 for a record written by a protocol 1 origin).
    pub version: u64,
    /// Unix seconds after which the link is gone (404 everywhere).
    pub expires_at: u64,
    /// The normalised host the link was created for; it resolves nowhere else.
    pub domain: String,
    /// The long URL (absolute http/https, no whitespace).
    pub url: String,
    /// The link's options (rules, forwarding, fallback); `None`: a plain link.
    pub options: Option<Arc<LinkOptions>>,
}

/// What a record string says about a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A live or expired link (check [`Record::is_expired`]).
    Found(Record),
    /// The code is known not to resolve (never issued, disabled, deleted or
    /// expired), as of this row version.
    Negative(u64),
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

/// A non-empty run of ASCII digits as a number: exactly what Lua's `%d+`
/// accepts (Rust's own parser would also take a leading `+`).
fn digits(s: &str) -> Result<u64, MalformedRecord> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(MalformedRecord);
    }
    s.parse().map_err(|_| MalformedRecord)
}

impl Record {
    /// Serialises to the protocol 2 line format, or 3 with options.
    pub fn encode(&self) -> String {
        let options = self.options.as_deref().filter(|o| !o.is_empty());
        let mut s = String::with_capacity(48 + self.domain.len() + self.url.len());
        s.push_str(if options.is_some() {
            OPTIONS_RECORD_VERSION
        } else {
            RECORD_VERSION
        });
        s.push(' ');
        s.push_str(&self.version.to_string());
        s.push(' ');
        s.push_str(&self.expires_at.to_string());
        s.push(' ');
        s.push_str(&self.domain);
        s.push(' ');
        s.push_str(&self.url);
        if let Some(o) = options {
            s.push(' ');
            s.push_str(&o.encode());
        }
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

    /// True when the record answers even once expired: its options have
    /// an expiry fallback (protocol 3.1.1).
    pub fn has_fallback(&self) -> bool {
        self.options
            .as_ref()
            .is_some_and(|o| o.expired_url.is_some())
    }

    /// True when this link may be served for a request whose normalised host is `host`.
    pub fn binds(&self, host: &str) -> bool {
        self.domain == host
    }

    fn from_fields(
        version: u64,
        exp: &str,
        domain: &str,
        url: &str,
    ) -> Result<Record, MalformedRecord> {
        let expires_at = digits(exp)?;
        if domain.is_empty() || url.is_empty() || url.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(MalformedRecord);
        }
        Ok(Record {
            version,
            expires_at,
            domain: domain.to_owned(),
            url: url.to_owned(),
            options: None,
        })
    }
}

impl Lookup {
    /// Parses a stored value: a protocol 2 record or negative, or their
    /// protocol 1 forms (version 0).
    pub fn decode(value: &str) -> Result<Lookup, MalformedRecord> {
        if value == NEGATIVE {
            return Ok(Lookup::Negative(0));
        }
        if let Some(v) = value.strip_prefix("- ") {
            return Ok(Lookup::Negative(digits(v)?));
        }
        match value.split_once(' ') {
            Some((RECORD_VERSION, rest)) => {
                let mut parts = rest.splitn(4, ' ');
                let (Some(version), Some(exp), Some(domain), Some(url)) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return Err(MalformedRecord);
                };
                Record::from_fields(digits(version)?, exp, domain, url).map(Lookup::Found)
            }
            Some((OPTIONS_RECORD_VERSION, rest)) => {
                let mut parts = rest.splitn(5, ' ');
                let (Some(version), Some(exp), Some(domain), Some(url), Some(opts)) = (
                    parts.next(),
                    parts.next(),
                    parts.next(),
                    parts.next(),
                    parts.next(),
                ) else {
                    return Err(MalformedRecord);
                };
                let options = LinkOptions::decode(opts).ok_or(MalformedRecord)?;
                let mut r = Record::from_fields(digits(version)?, exp, domain, url)?;
                r.options = Some(Arc::new(options));
                Ok(Lookup::Found(r))
            }
            Some((LEGACY_RECORD_VERSION, rest)) => {
                let mut parts = rest.splitn(3, ' ');
                let (Some(exp), Some(domain), Some(url)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(MalformedRecord);
                };
                Record::from_fields(0, exp, domain, url).map(Lookup::Found)
            }
            _ => Err(MalformedRecord),
        }
    }

    /// The stored form of this lookup result (always protocol 2).
    pub fn encode(&self) -> String {
        match self {
            Lookup::Found(r) => r.encode(),
            Lookup::Negative(v) => format!("- {v}"),
        }
    }

    /// The row version this answer reflects.
    pub fn version(&self) -> u64 {
        match self {
            Lookup::Found(r) => r.version,
            Lookup::Negative(v) => *v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let r = Record {
            version: 7,
            expires_at: 1_900_000_000,
            domain: "s.shop55.com".into(),
            url: "https://example.com/a b".replace(' ', "%20"),
            options: None,
        };
        let line = r.encode();
        assert_eq!(
            line,
            "2 7 1900000000 s.shop55.com https://example.com/a%20b"
        );
        assert_eq!(Lookup::decode(&line), Ok(Lookup::Found(r.clone())));
        assert_eq!(Lookup::Found(r).version(), 7);
        assert_eq!(Lookup::decode("- 3"), Ok(Lookup::Negative(3)));
        assert_eq!(Lookup::Negative(3).encode(), "- 3");
        assert_eq!(Lookup::Negative(0).encode(), "- 0");
    }

    #[test]
    fn protocol_1_values_read_as_version_0() {
        assert_eq!(
            Lookup::decode("1 5 d.com https://x/y"),
            Ok(Lookup::Found(Record {
                version: 0,
                expires_at: 5,
                domain: "d.com".into(),
                url: "https://x/y".into(),
                options: None,
            }))
        );
        assert_eq!(Lookup::decode("-"), Ok(Lookup::Negative(0)));
        assert_eq!(Lookup::decode("-").map(|l| l.version()), Ok(0));
    }

    #[test]
    fn url_may_contain_separators_other_than_space() {
        for line in [
            "2 1 5 d.com https://x.com/?a=1|2&b=3:4",
            "1 5 d.com https://x.com/?a=1|2&b=3:4",
        ] {
            match Lookup::decode(line) {
                Ok(Lookup::Found(r)) => assert_eq!(r.url, "https://x.com/?a=1|2&b=3:4"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn malformed() {
        for bad in [
            "",
            "2 5 d.com https://x",
            "2 x 5 d.com https://x",
            "2 +1 5 d.com https://x",
            "2 1 +5 d.com https://x",
            "2 1 5 d.com https://x y",
            "2 1 5  https://x",
            "3 1 5 d.com https://x",
            "3 1 5 d.com https://x {}x",
            "3 1 5 d.com https://x {\"z\":1}",
            "3 1 5 d.com https://x {\"f\":true} y",
            "1 x d.com https://x",
            "1 +5 d.com https://x",
            "1 5 d.com",
            "1 5  https://x",
            "1 5 d.com https://x y",
            "--",
            "- ",
            "- x",
            "- 1 2",
            "-1",
        ] {
            assert_eq!(Lookup::decode(bad), Err(MalformedRecord), "{bad:?}");
        }
    }

    #[test]
    fn options_make_a_protocol_3_record() {
        let line =
            r#"3 4 9 d.com https://x/ {"f":true,"r":[{"c":{"dev":["ios"]},"u":"https://i/"}]}"#;
        let Ok(Lookup::Found(r)) = Lookup::decode(line) else {
            panic!("not decoded")
        };
        assert_eq!((r.version, r.url.as_str()), (4, "https://x/"));
        assert!(r
            .options
            .as_ref()
            .is_some_and(|o| o.forward_query && o.rules.len() == 1));
        assert_eq!(r.encode(), line);
        // Empty options write protocol 2.
        let plain = Record {
            options: Some(Arc::default()),
            ..r
        };
        assert_eq!(plain.encode(), "2 4 9 d.com https://x/");
    }

    #[test]
    fn expiry_and_binding() {
        let r = Record {
            version: 1,
            expires_at: 100,
            domain: "a.com".into(),
            url: "https://x".into(),
            options: None,
        };
        assert!(!r.is_expired_at(99));
        assert!(r.is_expired_at(100));
        assert_eq!(r.remaining_secs(40), 60);
        assert_eq!(r.remaining_secs(400), 0);
        assert!(r.binds("a.com"));
        assert!(!r.binds("b.com"));
    }
}
