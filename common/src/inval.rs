//! Invalidation messages (protocol 2, `docs/protocol.md` section 3.2).
//!
//! After the origin has written the Redis record of a changed link, it
//! publishes `<version> <code>` (ASCII, one space) on the pub/sub channel
//! [`crate::keys::INVAL_CHANNEL`]. An edge drops its in-process entry for
//! `code` unless that entry's version is already at least `version`.

use crate::code::is_valid_code;

/// One invalidation: `code` changed and its state is now at `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalidation<'a> {
    pub version: u64,
    pub code: &'a str,
}

impl<'a> Invalidation<'a> {
    /// Parses a message; `None` for anything that is not exactly
    /// `<digits> <code>` with a code of the protocol grammar.
    pub fn decode(msg: &'a str) -> Option<Invalidation<'a>> {
        let (v, code) = msg.split_once(' ')?;
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) || !is_valid_code(code) {
            return None;
        }
        Some(Invalidation {
            version: v.parse().ok()?,
            code,
        })
    }

    /// The message text.
    pub fn encode(&self) -> String {
        format!("{} {}", self.version, self.code)
    }
}

#[cfg(test)]
mod tests {
    use super::Invalidation;

    #[test]
    fn roundtrip_and_refusals() {
        let m = Invalidation {
            version: 12,
            code: "aB3xYz",
        };
        assert_eq!(m.encode(), "12 aB3xYz");
        assert_eq!(Invalidation::decode("12 aB3xYz"), Some(m));
        for bad in [
            "",
            "12",
            "12 ",
            " aB3xYz",
            "x aB3xYz",
            "+1 aB3xYz",
            "1 a/b",
            "1 aB3xYz x",
        ] {
            assert_eq!(Invalidation::decode(bad), None, "{bad:?}");
        }
    }
}
