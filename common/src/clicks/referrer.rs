//! The referrer host of a click: what "top referrers" are counted by.
//!
//! Only the host is kept (no path, query or credentials: they can carry
//! personal data, and a host is what an admin asks about), lower-cased,
//! without a port or a trailing dot, at most [`MAX_HOST_LEN`] bytes of
//! `[a-z0-9._-]` (or a bracketed IPv6 literal). Anything else, and a missing
//! header, is [`NO_REFERRER`]. The result never contains a space, so it is
//! one field of a batch line.
//!
//! One parser, over bytes, writing into a small buffer ([`HostBuf`]): the
//! edge's redirect path calls it per click without allocating (but for a
//! host longer than [`INLINE_HOST_LEN`], rare), and [`referrer_host`] is
//! the same parser with an owned result.

use super::NO_REFERRER;

/// Longest host kept (a DNS name is at most 253 bytes).
pub const MAX_HOST_LEN: usize = 253;

/// Hosts up to this long are held inline in a [`HostBuf`]; the edge copies
/// one per click, so it is kept small (the usual referrers — `t.co`,
/// `www.google.com`, `l.facebook.com` — are far shorter).
pub const INLINE_HOST_LEN: usize = 46;

/// A referrer host: a [`referrer_host`] value, inline without a heap
/// allocation up to [`INLINE_HOST_LEN`] bytes (what an edge keeps per click
/// until it is counted), boxed beyond.
#[derive(Clone)]
pub struct HostBuf(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        bytes: [u8; INLINE_HOST_LEN],
    },
    Heap(Box<str>),
}

impl HostBuf {
    /// [`NO_REFERRER`].
    pub const NONE: HostBuf = {
        let mut bytes = [0u8; INLINE_HOST_LEN];
        bytes[0] = b'-';
        HostBuf(Repr::Inline { len: 1, bytes })
    };

    /// The host (or `-`).
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only ASCII is ever written.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or(NO_REFERRER)
            }
            Repr::Heap(h) => h,
        }
    }
}

impl std::fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The host of a `Referer` value, or `-` when there is none or it does not
/// parse as `scheme://[userinfo@]host[:port][/...]`.
pub fn referrer_host(referer: Option<&str>) -> String {
    referrer_host_buf(referer.map(str::as_bytes))
        .as_str()
        .to_owned()
}

/// [`referrer_host`] of a raw header value, without allocating. Surrounding
/// whitespace is trimmed as `str::trim` does for UTF-8 values, ASCII
/// whitespace for others (a header may carry any bytes; a host is ASCII).
pub fn referrer_host_buf(referer: Option<&[u8]>) -> HostBuf {
    let Some(v) = referer else {
        return HostBuf::NONE;
    };
    let v = match std::str::from_utf8(v) {
        Ok(s) => s.trim().as_bytes(),
        Err(_) => v.trim_ascii(),
    };
    parse(v).unwrap_or(HostBuf::NONE)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Copies `parts` lower-cased into a buffer, `None` past [`MAX_HOST_LEN`].
fn lower(parts: &[&[u8]]) -> Option<HostBuf> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if total > MAX_HOST_LEN {
        return None;
    }
    if total > INLINE_HOST_LEN {
        let mut s = String::with_capacity(total);
        for p in parts {
            // Only ASCII is ever copied: the parser checked every byte.
            s.extend(p.iter().map(|b| char::from(b.to_ascii_lowercase())));
        }
        return Some(HostBuf(Repr::Heap(s.into_boxed_str())));
    }
    let mut bytes = [0u8; INLINE_HOST_LEN];
    let mut at = 0;
    for p in parts {
        for (dst, src) in bytes[at..at + p.len()].iter_mut().zip(p.iter()) {
            *dst = src.to_ascii_lowercase();
        }
        at += p.len();
    }
    Some(HostBuf(Repr::Inline {
        len: u8::try_from(at).ok()?,
        bytes,
    }))
}

fn parse(v: &[u8]) -> Option<HostBuf> {
    let sep = find(v, b"://")?;
    let (scheme, rest) = (&v[..sep], &v[sep + 3..]);
    let (first, others) = scheme.split_first()?;
    if !first.is_ascii_alphabetic()
        || !others
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return None;
    }
    let end = rest
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    let hostport = match authority.iter().rposition(|b| *b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    if let Some(v6) = hostport.strip_prefix(b"[") {
        let close = v6.iter().position(|b| *b == b']')?;
        let (inner, after) = (&v6[..close], &v6[close + 1..]);
        if !port_ok(after)
            || inner.is_empty()
            || !inner
                .iter()
                .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
        {
            return None;
        }
        return lower(&[b"[", inner, b"]"]);
    }
    let (h, port) = match hostport.iter().position(|b| *b == b':') {
        Some(c) => (&hostport[..c], Some(&hostport[c + 1..])),
        None => (hostport, None),
    };
    if port.is_some_and(|p| !p.iter().all(u8::is_ascii_digit)) {
        return None;
    }
    let h = h.strip_suffix(b".").unwrap_or(h);
    if h.is_empty()
        || !h.iter().any(u8::is_ascii_alphanumeric)
        || !h
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        return None;
    }
    lower(&[h])
}

/// `""` or `:digits` after an IPv6 literal.
fn port_ok(after: &[u8]) -> bool {
    after.is_empty()
        || after
            .strip_prefix(b":")
            .is_some_and(|p| p.iter().all(u8::is_ascii_digit))
}

/// Whether `h` is a value [`referrer_host`] can return (or `~other`): the
/// strict batch decoder accepts nothing else.
pub fn is_valid_host_field(h: &str) -> bool {
    if h == NO_REFERRER || h == super::OTHER_REFERRER {
        return true;
    }
    parse(format!("x://{h}").as_bytes()).is_some_and(|p| p.as_str() == h)
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
        let max = format!("https://{}.com/", "a".repeat(249));
        assert_eq!(referrer_host(Some(&max)).len(), MAX_HOST_LEN);
        let over = format!("https://{}.com/", "a".repeat(250));
        assert_eq!(referrer_host(Some(&over)), "-");
        // Inline up to INLINE_HOST_LEN, boxed beyond: the same value.
        for n in [
            INLINE_HOST_LEN - 5,
            INLINE_HOST_LEN - 4,
            INLINE_HOST_LEN - 3,
        ] {
            let host = format!("{}.Com", "A".repeat(n));
            let got = referrer_host_buf(Some(format!("https://{host}/").as_bytes()));
            assert_eq!(got.as_str(), host.to_ascii_lowercase(), "{n}");
        }
    }

    #[test]
    fn raw_header_bytes() {
        let host = |v: &[u8]| referrer_host_buf(Some(v)).as_str().to_owned();
        // A path that is not UTF-8 does not hide the host.
        assert_eq!(host(b"https://Shop.CN/\xff\xfe?q"), "shop.cn");
        assert_eq!(host(b"\t https://a.b \xff"), "-");
        assert_eq!(host(b" https://a.b/\xff "), "a.b");
        assert_eq!(host(b"https://\xffa.b/"), "-");
        assert_eq!(referrer_host_buf(None).as_str(), "-");
        // Unicode whitespace around a UTF-8 value is trimmed like str::trim.
        assert_eq!(host("\u{a0}https://x.com/\u{3000}".as_bytes()), "x.com");
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
