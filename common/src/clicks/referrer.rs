//! The referrer host of a click: what "top referrers" are counted by.
//!
//! Only the host is kept (no path, query or credentials: they can carry
//! personal data, and a host is what an admin asks about), lower-cased,
//! without a port or a trailing dot, at most [`MAX_HOST_LEN`] bytes of
//! `[a-z0-9._-]` (or a bracketed IPv6 literal). Anything else, and a missing
//! header, is [`NO_REFERRER`]. The result never contains a space, so it is
//! one field of a batch line.

use super::NO_REFERRER;

/// Longest host kept (a DNS name is at most 253 bytes).
pub const MAX_HOST_LEN: usize = 253;

/// The host of a `Referer` value, or `-` when there is none or it does not
/// parse as `scheme://[userinfo@]host[:port][/...]`.
pub fn referrer_host(referer: Option<&str>) -> String {
    referer
        .and_then(parse)
        .unwrap_or_else(|| NO_REFERRER.to_owned())
}

fn parse(v: &str) -> Option<String> {
    let v = v.trim();
    let (scheme, rest) = v.split_once("://")?;
    let mut sb = scheme.bytes();
    if !sb.next()?.is_ascii_alphabetic()
        || !sb.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        let (inner, after) = v6.split_once(']')?;
        if !port_ok(after)
            || inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        format!("[{}]", inner.to_ascii_lowercase())
    } else {
        let (h, port) = match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        };
        if let Some(p) = port {
            if !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
        }
        let h = h.strip_suffix('.').unwrap_or(h);
        if h.is_empty()
            || !h.bytes().any(|b| b.is_ascii_alphanumeric())
            || !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        {
            return None;
        }
        h.to_ascii_lowercase()
    };
    (host.len() <= MAX_HOST_LEN).then_some(host)
}

/// `""` or `:digits` after an IPv6 literal.
fn port_ok(after: &str) -> bool {
    after.is_empty()
        || after
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `h` is a value [`referrer_host`] can return (or `~other`): the
/// strict batch decoder accepts nothing else.
pub fn is_valid_host_field(h: &str) -> bool {
    if h == NO_REFERRER || h == super::OTHER_REFERRER {
        return true;
    }
    parse(&format!("x://{h}")).as_deref() == Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let cases = [
            (Some("https://Www.Example.COM/path?q=1"), "www.example.com"),
            (Some("http://user:pw@news.site.cn:8080/x"), "news.site.cn"),
            (Some("https://example.com."), "example.com"),
            (Some("https://[2001:DB8::1]:443/"), "[2001:db8::1]"),
            (
                Some("android-app://com.google.android.gm/"),
                "com.google.android.gm",
            ),
            (Some(" https://a.b#frag "), "a.b"),
            (None, "-"),
            (Some(""), "-"),
            (Some("not a url"), "-"),
            (Some("://x.com/"), "-"),
            (Some("https:///path"), "-"),
            (Some("https://exa mple.com/"), "-"),
            (Some("https://x.com:abc/"), "-"),
            (Some("https://例え.jp/"), "-"),
            (Some("https://.../"), "-"),
        ];
        for (input, want) in cases {
            assert_eq!(referrer_host(input), want, "{input:?}");
        }
        let long = format!("https://{}.com/", "a".repeat(300));
        assert_eq!(referrer_host(Some(&long)), "-");
    }

    #[test]
    fn host_fields() {
        for ok in ["-", "~other", "a.b", "[::1]", "x_y.cn"] {
            assert!(is_valid_host_field(ok), "{ok}");
        }
        for bad in ["", "A.b", "a b", "a:80", "~x", "a/b", "a.b."] {
            assert!(!is_valid_host_field(bad), "{bad}");
        }
    }
}
