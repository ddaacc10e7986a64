//! Short-code grammar.
//!
//! Pre-generated codes are exactly [`CODE_LEN`] characters of [`ALPHABET`];
//! custom codes are 4–32 characters of `[0-9A-Za-z_-]`. A request path is only
//! looked up when it matches the custom grammar (which contains the
//! pre-generated one), so garbage never costs a Redis or MySQL round trip.

/// The base62 alphabet, in the order used to encode code indexes.
pub const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Length of a pre-generated code.
pub const CODE_LEN: usize = 6;
/// Number of distinct pre-generated codes: 62^6.
pub const CODE_SPACE: u64 = 56_800_235_584;
/// Shortest custom code.
pub const CUSTOM_MIN: usize = 4;
/// Longest custom code.
pub const CUSTOM_MAX: usize = 32;

/// Encodes `index` (< [`CODE_SPACE`]) as a fixed-width 6-character base62 code.
/// Returns `None` when the index is outside the code space.
pub fn encode_index(mut index: u64) -> Option<[u8; CODE_LEN]> {
    if index >= CODE_SPACE {
        return None;
    }
    let mut out = [b'0'; CODE_LEN];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(index % 62) as usize];
        index /= 62;
    }
    Some(out)
}

/// Decodes a 6-character base62 code back to its index, `None` if it is not one.
pub fn decode_index(code: &str) -> Option<u64> {
    if code.len() != CODE_LEN {
        return None;
    }
    code.bytes().try_fold(0u64, |acc, b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'A'..=b'Z' => b - b'A' + 10,
            b'a'..=b'z' => b - b'a' + 36,
            _ => return None,
        };
        Some(acc * 62 + u64::from(digit))
    })
}

fn is_code_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// True when `s` may name a link: 4–32 of `[0-9A-Za-z_-]`. This is the
/// grammar the edge and the origin check before any lookup.
pub fn is_valid_code(s: &str) -> bool {
    (CUSTOM_MIN..=CUSTOM_MAX).contains(&s.len()) && s.bytes().all(is_code_byte)
}

/// True when `code` is in the fleet-wide namespace: exactly [`CODE_LEN`]
/// alphanumerics, the pre-generated grammar. Such a code names one link in
/// the whole fleet (pre-generated or custom: a custom one takes the free
/// pre-generated row, so issuing can never hand it out twice); every other
/// code is unique per domain (protocol 3.6).
pub fn is_fleet_code(code: &str) -> bool {
    code.len() == CODE_LEN && code.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The link key of `code` on `domain` (normalised): the code for a fleet
/// code, `<domain>/<code>` for a per-domain one. What the origin keys its
/// rows, rollups and history by, and what click batches of version 3 name
/// (protocol 3.6).
pub fn link_key(code: &str, domain: &str) -> String {
    if is_fleet_code(code) {
        code.to_owned()
    } else {
        format!("{domain}/{code}")
    }
}

/// Splits a link key into (domain, code): `None` as the domain for a fleet
/// code's key. `None` for anything that is not a key: a bare code that is
/// not a fleet code, a per-domain key of a fleet code, a bad domain or
/// code.
pub fn split_link_key(key: &str) -> Option<(Option<&str>, &str)> {
    match key.rsplit_once('/') {
        None => is_fleet_code(key).then_some((None, key)),
        Some((domain, code)) => {
            let ok = is_valid_code(code)
                && !is_fleet_code(code)
                && crate::host::host_part(domain) == Some(domain)
                && !domain.bytes().any(|b| b.is_ascii_uppercase());
            ok.then_some((Some(domain), code))
        }
    }
}

/// Paths the services answer themselves: a custom code equal to one of these
/// could never resolve, so creation refuses them. `batch` resolves, but
/// `/api/v1/links/batch` is the batch-creation route, so no link may be
/// managed under that name. `admin` is the origin's console (`/admin/`).
pub const RESERVED: [&str; 7] = [
    "healthz",
    "shorturl_status",
    "metrics",
    "internal",
    "api",
    "batch",
    "admin",
];

/// True when `code` is a service path and may not be used as a custom code.
pub fn is_reserved_code(code: &str) -> bool {
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(code))
}

/// Extracts the code from a redirect request path (`/{code}`), or `None` when
/// the path is not a single valid code segment. A query string is ignored.
pub fn code_from_path(path: &str) -> Option<&str> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let code = path.strip_prefix('/')?;
    is_valid_code(code).then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_keys() {
        assert!(is_fleet_code("aB3xYz"));
        assert!(!is_fleet_code("ab_cde"));
        assert!(!is_fleet_code("sale"));
        assert_eq!(link_key("aB3xYz", "s.shop55.com"), "aB3xYz");
        assert_eq!(link_key("sale", "s.shop55.com"), "s.shop55.com/sale");
        assert_eq!(link_key("ab-cde", "[::1]"), "[::1]/ab-cde");
        assert_eq!(split_link_key("aB3xYz"), Some((None, "aB3xYz")));
        assert_eq!(
            split_link_key("s.shop55.com/sale"),
            Some((Some("s.shop55.com"), "sale"))
        );
        assert_eq!(
            split_link_key("[::1]/ab-cde"),
            Some((Some("[::1]"), "ab-cde"))
        );
        for bad in [
            "sale",
            "s.shop55.com/aB3xYz",
            "S.shop55.com/sale",
            "/sale",
            "s.shop55.com/",
            "s..com/sale",
            "s.shop55.com/sa le",
            "a/b/sale",
        ] {
            assert_eq!(split_link_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn encode_decode_roundtrip_at_edges() {
        for i in [0, 1, 61, 62, 3843, CODE_SPACE / 2, CODE_SPACE - 1] {
            let code = encode_index(i).map(|c| String::from_utf8_lossy(&c).into_owned());
            let code = code.unwrap_or_default();
            assert_eq!(code.len(), CODE_LEN);
            assert_eq!(decode_index(&code), Some(i), "index {i} via {code}");
        }
        assert_eq!(encode_index(CODE_SPACE), None);
        assert_eq!(
            encode_index(0).as_ref().map(|c| &c[..]),
            Some(&b"000000"[..])
        );
        assert_eq!(
            encode_index(CODE_SPACE - 1).as_ref().map(|c| &c[..]),
            Some(&b"zzzzzz"[..])
        );
    }

    #[test]
    fn code_space_is_62_pow_6() {
        assert_eq!(CODE_SPACE, 62u64.pow(6));
    }

    #[test]
    fn grammar() {
        assert!(is_valid_code("aB3xYz"));
        assert!(is_valid_code("my-promo_2026"));
        assert!(!is_valid_code("abc"));
        assert!(!is_valid_code(&"a".repeat(33)));
        assert!(!is_valid_code("abc/def"));
        assert!(!is_valid_code("abc.def"));
        assert!(!is_valid_code("ab%20cd"));
        assert_eq!(code_from_path("/aB3xYz"), Some("aB3xYz"));
        assert_eq!(code_from_path("/aB3xYz?utm=1"), Some("aB3xYz"));
        assert_eq!(code_from_path("/aB3xYz/"), None);
        assert_eq!(code_from_path("/"), None);
        assert_eq!(code_from_path("aB3xYz"), None);
        assert_eq!(decode_index("aB3xY!"), None);
        assert!(is_reserved_code("healthz"));
        assert!(is_reserved_code("Shorturl_Status"));
        assert!(!is_reserved_code("promo1"));
    }
}
