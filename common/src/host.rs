//! Host normalisation: the one rule that decides which domain a request is for.
//!
//! Both the creation API (for the `domain` field) and redirects (for the
//! `Host` header) go through [`normalize_host`], so a link created for
//! `S.Shop55.com.` resolves on `s.shop55.com:8080`.

/// Lowercases, strips a `:port` and one trailing dot. Returns `None` for an
/// empty or malformed host (characters outside `[a-z0-9.-]`, empty labels, or
/// longer than 253 bytes). IPv6 literals (`[::1]:80`) are kept with brackets.
pub fn normalize_host(raw: &str) -> Option<String> {
    host_part(raw).map(str::to_ascii_lowercase)
}

/// True when the raw `Host` value names `domain` (already normalised).
/// Same rule as [`normalize_host`], without allocating: the redirect hot
/// path runs it on every request.
pub fn host_is(raw: &str, domain: &str) -> bool {
    host_part(raw).is_some_and(|h| h.eq_ignore_ascii_case(domain))
}

/// The validated host part of a raw `Host` value, borrowed and not yet
/// lower-cased: whitespace, `:port` and one trailing dot removed; `None` when
/// [`normalize_host`] would refuse it. Compare it to a normalised domain with
/// `eq_ignore_ascii_case` (no allocation).
pub fn host_part(raw: &str) -> Option<&str> {
    let raw = raw.trim();
    let host = if let Some(rest) = raw.strip_prefix('[') {
        let end = rest.find(']')?;
        let inner = &rest[..end];
        let after = &rest[end + 1..];
        if !(after.is_empty() || valid_port(after.strip_prefix(':')?)) {
            return None;
        }
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        return Some(&raw[..end + 2]);
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) if valid_port(port) => h,
            Some(_) => return None,
            None => raw,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() || host.len() > 253 {
        return None;
    }
    let ok = host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    ok.then_some(host)
}

fn valid_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::{host_is, normalize_host};

    #[test]
    fn normalises() {
        assert_eq!(
            normalize_host("S.Shop55.com").as_deref(),
            Some("s.shop55.com")
        );
        assert_eq!(
            normalize_host("s.shop55.com.").as_deref(),
            Some("s.shop55.com")
        );
        assert_eq!(
            normalize_host("s.shop55.com:8080").as_deref(),
            Some("s.shop55.com")
        );
        assert_eq!(
            normalize_host("S.SHOP55.COM.:443").as_deref(),
            Some("s.shop55.com")
        );
        assert_eq!(normalize_host("localhost").as_deref(), Some("localhost"));
        assert_eq!(
            normalize_host("127.0.0.1:8080").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(normalize_host("[::1]:8080").as_deref(), Some("[::1]"));
    }

    #[test]
    fn host_is_matches_exactly_what_normalize_host_gives() {
        for raw in [
            "S.Shop55.com",
            "s.shop55.com.:8080",
            "[::1]:80",
            "LOCALHOST",
            "a..b",
            "",
            "x:y",
        ] {
            for domain in ["s.shop55.com", "[::1]", "localhost", "a..b", ""] {
                let want = normalize_host(raw).as_deref() == Some(domain);
                assert_eq!(host_is(raw, domain), want, "{raw:?} vs {domain:?}");
            }
        }
    }

    #[test]
    fn rejects() {
        for bad in [
            "",
            ":80",
            ".",
            "a..b",
            "a b",
            "a/b",
            "a:b",
            "ex ample.com",
            "a:99999999",
            "[::1",
            "é.com",
        ] {
            assert_eq!(normalize_host(bad), None, "{bad:?}");
        }
    }
}
