//! The odd-request rules of protocol section 2.1: which request heads are
//! refused, and which host a request is for.
//!
//! One pure function, [`check`], over plain inputs (method, raw target,
//! version, the Host field, the number of header fields), so the Pingora
//! edge and the origin cannot drift; the OpenResty module mirrors it in
//! `lua-compat/openresty/lua/shorturl/rules.lua`. It allocates nothing: the
//! edge runs it on every request, redirects included. The edges add one
//! rule the origin's parser cannot see ([`check_fields`]): a field nginx
//! takes at most once ([`SINGLE_FIELDS`]) sent twice.
//!
//! The target is matched as received: never percent-decoded or normalised
//! (codes are compared byte for byte). The rules only refuse what nginx
//! refuses on its own (so the OpenResty module can answer identically) plus
//! what can never be a valid request for this service.

use crate::host::host_part;

/// More header fields than this: 431 (bounded work per request).
pub const MAX_HEADER_FIELDS: usize = 100;

/// Header fields nginx takes at most once: it refuses a request repeating
/// one (400, before any module runs), so both edges refuse it (with the
/// protocol's JSON 400). `Host` has its own rule; `Content-Length` and
/// `Transfer-Encoding` are framing, which each server's parser decides
/// itself (protocol section 2.1).
pub const SINGLE_FIELDS: [&str; 8] = [
    "authorization",
    "content-range",
    "expect",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
];

/// The index in [`SINGLE_FIELDS`] of `name` (any case), if it is one.
pub fn single_field(name: &[u8]) -> Option<usize> {
    SINGLE_FIELDS
        .iter()
        .position(|f| f.as_bytes().eq_ignore_ascii_case(name))
}

/// The HTTP version of a request line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `GET /x` with no version: HTTP/0.9.
    Http09,
    /// `HTTP/1.0`.
    Http10,
    /// `HTTP/1.1`.
    Http11,
    /// Anything else (`HTTP/2.0`, `HTTP/1.2`, ...).
    Other,
}

impl Version {
    /// Reads the version token of a request line; `None` (no token) is HTTP/0.9.
    pub fn from_token(token: Option<&str>) -> Version {
        match token {
            None => Version::Http09,
            Some("HTTP/1.1") => Version::Http11,
            Some("HTTP/1.0") => Version::Http10,
            Some(_) => Version::Other,
        }
    }
}

/// The `Host` header field of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostField<'a> {
    /// No `Host` field.
    Absent,
    /// Exactly one, with this value as it stands in the head: surrounding
    /// spaces are allowed, a tab anywhere is not (see [`with_ows`]).
    One(&'a [u8]),
    /// Two or more.
    Repeated,
}

impl<'a> HostField<'a> {
    /// Classifies the values of every `Host` field of a request.
    pub fn from_values<I: IntoIterator<Item = &'a [u8]>>(values: I) -> Self {
        let mut it = values.into_iter();
        match (it.next(), it.next()) {
            (None, _) => HostField::Absent,
            (Some(v), None) => HostField::One(v),
            (Some(_), Some(_)) => HostField::Repeated,
        }
    }
}

/// What the rules look at in a request head.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// The method as received (case kept).
    pub method: &'a str,
    /// The request target as received (a `#fragment` may still be on it).
    pub target: &'a [u8],
    pub version: Version,
    pub host: HostField<'a>,
    /// Number of header fields (repeated names count once per field).
    pub fields: usize,
}

/// An accepted request: what routing needs, borrowed from the [`Head`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted<'a> {
    /// The request's host: the validated host part (no port, no trailing
    /// dot, case as received) of the `Host` value, or of the absolute-form
    /// authority when there is no `Host`. `None` only for an HTTP/1.0
    /// origin-form request without `Host`: it is for no domain.
    pub host: Option<&'a str>,
    /// The path to route on: no query, no fragment, not decoded.
    pub path: &'a str,
}

/// Why a request head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("HTTP version other than 1.0 and 1.1")]
    Version,
    #[error("method is not upper-case letters")]
    Method,
    #[error("CONNECT (authority-form target)")]
    Connect,
    #[error("asterisk-form target")]
    AsteriskForm,
    #[error("target is neither origin-form nor absolute-form")]
    TargetForm,
    #[error("byte outside 0x21-0x7E in the target")]
    TargetByte,
    #[error("percent-escape of a control character or space in the path")]
    EncodedControl,
    #[error("malformed percent-escape in the path")]
    BadEscape,
    #[error("dot segments climb above the root")]
    DotSegments,
    #[error("absolute-form target with a scheme other than http/https")]
    Scheme,
    #[error("userinfo in the absolute-form target")]
    Userinfo,
    #[error("two or more Host fields")]
    RepeatedHost,
    #[error("Host differs from the absolute-form authority")]
    HostMismatch,
    #[error("HTTP/1.1 request without Host")]
    MissingHost,
    #[error("invalid host")]
    InvalidHost,
    #[error("more than {MAX_HEADER_FIELDS} header fields")]
    TooManyFields,
    #[error("a header field allowed once is repeated")]
    RepeatedField,
}

impl Refusal {
    /// The status protocol section 2.1 gives it: 405 for CONNECT, 431 for
    /// too many fields, 400 (`bad_request`) for everything else.
    pub fn status(self) -> u16 {
        match self {
            Refusal::Connect => 405,
            Refusal::TooManyFields => 431,
            _ => 400,
        }
    }
}

/// [`check`] and, for the edges, the rule on repeated [`SINGLE_FIELDS`]
/// (`repeated_single`: the head has two fields of one of those names), in
/// nginx's order: after the request line and the Host, before the field
/// count (nginx stops reading a head at the repeated field).
pub fn check_fields<'a>(head: &Head<'a>, repeated_single: bool) -> Result<Accepted<'a>, Refusal> {
    match check(head) {
        Ok(_) | Err(Refusal::TooManyFields) if repeated_single => Err(Refusal::RepeatedField),
        verdict => verdict,
    }
}

/// `value`, a field value a parser took out of `head` without its optional
/// whitespace, widened back over the spaces and tabs around it on its line;
/// `value` itself when it is not a slice of `head`. The `Host` rule needs
/// the tabs: nginx strips only spaces around a value and refuses a tab in
/// `Host`, while `httparse` (Pingora's parser) strips both.
pub fn with_ows<'a>(head: &'a [u8], value: &'a [u8]) -> &'a [u8] {
    let base = head.as_ptr() as usize;
    let Some(start) = (value.as_ptr() as usize).checked_sub(base) else {
        return value;
    };
    let end = start + value.len();
    if end > head.len() {
        return value;
    }
    let ows = |b: &u8| matches!(b, b' ' | b'\t');
    let before = head[..start].iter().rev().take_while(|b| ows(b)).count();
    let after = head[end..].iter().take_while(|b| ows(b)).count();
    head.get(start - before..end + after).unwrap_or(value)
}

/// Applies the rules (in this order: request line, Host, field count).
pub fn check<'a>(head: &Head<'a>) -> Result<Accepted<'a>, Refusal> {
    if !matches!(head.version, Version::Http10 | Version::Http11) {
        return Err(Refusal::Version);
    }
    if head.method.is_empty() || !head.method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Refusal::Method);
    }
    if head.method == "CONNECT" {
        return Err(Refusal::Connect);
    }
    // One pass: the fragment is cut first, then every byte must be visible ASCII.
    let mut end = head.target.len();
    let mut visible = true;
    for (i, &b) in head.target.iter().enumerate() {
        if b == b'#' {
            end = i;
            break;
        }
        visible &= (0x21..=0x7e).contains(&b);
    }
    let target = head.target.get(..end).unwrap_or_default();
    match target {
        // Only a fragment: the root (as Pingora's parser reads it).
        b"" => return finish(head, None, "/"),
        b"*" => return Err(Refusal::AsteriskForm),
        _ if !visible => return Err(Refusal::TargetByte),
        _ => {}
    }
    // Every byte is 0x21-0x7E (checked above): ASCII, so a `str`.
    let target = ascii_str(target).ok_or(Refusal::TargetByte)?;
    let (authority, rest) = split_target(target)?;
    // memchr: `split_once('?')` cost ~90 instructions per request here
    // (callgrind, the edge's fast path).
    let path = memchr::memchr(b'?', rest.as_bytes()).map_or(rest, |i| &rest[..i]);
    let path = if path.is_empty() { "/" } else { path };
    check_path(path)?;
    finish(head, authority, path)
}

/// Host rules and the field count, once the target is accepted.
fn finish<'a>(
    head: &Head<'a>,
    authority: Option<&'a str>,
    path: &'a str,
) -> Result<Accepted<'a>, Refusal> {
    let raw = match head.host {
        HostField::Repeated => return Err(Refusal::RepeatedHost),
        HostField::One(value) => {
            // nginx strips only spaces around the value and refuses a tab in
            // Host: so do the edges, to answer alike. A tab inside the value
            // fails the host grammar below; one at its ends must be caught
            // here (the grammar trims whitespace). No scan of the value: a
            // look at its two ends.
            let value = trim_spaces(value);
            if value.first() == Some(&b'\t') || value.last() == Some(&b'\t') {
                return Err(Refusal::InvalidHost);
            }
            if authority.is_some_and(|a| a.as_bytes() != value) {
                return Err(Refusal::HostMismatch);
            }
            // Anything but ASCII is refused as a host anyway.
            Some(ascii_str(value).ok_or(Refusal::InvalidHost)?)
        }
        HostField::Absent if head.version == Version::Http11 => return Err(Refusal::MissingHost),
        HostField::Absent => authority,
    };
    let host = match raw {
        Some(r) => Some(host_part(r).ok_or(Refusal::InvalidHost)?),
        None => None,
    };
    if head.fields > MAX_HEADER_FIELDS {
        return Err(Refusal::TooManyFields);
    }
    Ok(Accepted { host, path })
}

/// `bytes` as a `str` when they are all ASCII. Every request runs this on
/// its target and its Host: `str::from_utf8` cost ~100 instructions per
/// call on these short values (callgrind, the edge's fast path), the ASCII
/// check a tenth of that.
fn ascii_str(bytes: &[u8]) -> Option<&str> {
    if !bytes.is_ascii() {
        return None;
    }
    // SAFETY: ASCII bytes are valid UTF-8.
    Some(unsafe { std::str::from_utf8_unchecked(bytes) })
}

/// Splits an origin-form or absolute-form target into its authority (for
/// absolute-form) and the path-and-query.
fn split_target(target: &str) -> Result<(Option<&str>, &str), Refusal> {
    if target.starts_with('/') {
        return Ok((None, target));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(Refusal::TargetForm);
    };
    let mut bytes = scheme.bytes();
    let valid_scheme = bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !valid_scheme {
        return Err(Refusal::TargetForm);
    }
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(Refusal::Scheme);
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(end);
    if authority.contains('@') {
        return Err(Refusal::Userinfo);
    }
    Ok((Some(authority), rest))
}

/// The path rules nginx applies while parsing: no escaped control or space,
/// every `%` followed by two hex digits, and dot segments (`..`, also
/// written `%2e%2e`, with `%2f` as a separator) never climbing above the
/// root. The path itself is never rewritten.
fn check_path(path: &str) -> Result<(), Refusal> {
    let b = path.as_bytes();
    // Codes and API paths have neither: nothing to check.
    if !b.iter().any(|&c| c == b'%' || c == b'.') {
        return Ok(());
    }
    // Depth below the root, and the current segment: its length and whether
    // it is made only of dots (decoded) so far.
    let mut depth: usize = 0;
    let (mut seg_len, mut seg_dots) = (0usize, 0usize);
    let mut i = 0;
    while i <= b.len() {
        let (ch, width) = match b.get(i) {
            None => (b'/', 1),
            Some(b'%') => {
                let hi = b.get(i + 1).and_then(|c| (*c as char).to_digit(16));
                let lo = b.get(i + 2).and_then(|c| (*c as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(Refusal::BadEscape);
                };
                let v = (hi * 16 + lo) as u8;
                if v < 0x21 || v == 0x7f {
                    return Err(Refusal::EncodedControl);
                }
                (v, 3)
            }
            Some(&c) => (c, 1),
        };
        if ch == b'/' {
            match (seg_len, seg_dots) {
                (2, 2) if depth == 0 => return Err(Refusal::DotSegments),
                (2, 2) => depth -= 1,
                (0, _) | (1, 1) => {}
                _ => depth += 1,
            }
            seg_len = 0;
            seg_dots = 0;
        } else {
            seg_len += 1;
            if ch == b'.' {
                seg_dots += 1;
            }
        }
        i += width;
    }
    Ok(())
}

/// `b` without the optional whitespace (SP, HTAB) around it: an element of
/// a field's list (`Accept-Language` ranges, `X-Forwarded-For` hops).
pub fn trim_ows(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

/// Strips the spaces around a field value.
fn trim_spaces(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| *b != b' ').unwrap_or(v.len());
    let end = v.iter().rposition(|b| *b != b' ').map_or(start, |e| e + 1);
    v.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head<'a>(method: &'a str, target: &'a str, version: &str, host: HostField<'a>) -> Head<'a> {
        Head {
            method,
            target: target.as_bytes(),
            version: Version::from_token(if version.is_empty() {
                None
            } else {
                Some(version)
            }),
            host,
            fields: 1,
        }
    }

    fn get(target: &str, host: Option<&str>) -> Result<(Option<String>, String), Refusal> {
        let field = host.map_or(HostField::Absent, |h| HostField::One(h.as_bytes()));
        check(&head("GET", target, "HTTP/1.1", field))
            .map(|a| (a.host.map(str::to_owned), a.path.to_owned()))
    }

    fn ok(target: &str, host: Option<&str>) -> (Option<String>, String) {
        get(target, host).unwrap_or_else(|e| panic!("{target:?} {host:?}: {e}"))
    }

    #[test]
    fn origin_form_routes_on_the_raw_path() {
        assert_eq!(
            ok("/aB3xYz?utm=1", Some("S.Shop55.com.:8080")),
            (Some("S.Shop55.com".into()), "/aB3xYz".into())
        );
        assert_eq!(ok("/%61bcdef", Some("x")).1, "/%61bcdef");
        assert_eq!(ok("/x/../abcdef", Some("x")).1, "/x/../abcdef");
        assert_eq!(ok("/abcdef#frag", Some("x")).1, "/abcdef");
        assert_eq!(ok("/abcdef?a=1#x", Some("x")).1, "/abcdef");
        assert_eq!(ok("#only", Some("x")).1, "/");
        assert_eq!(ok("/abcdef?q=a%20b%00", Some("x")).1, "/abcdef");
        assert_eq!(ok("/ab%2fcd", Some("x")).1, "/ab%2fcd");
        assert_eq!(ok("/a/..", Some("x")).1, "/a/..");
        assert_eq!(ok("/...", Some("x")).1, "/...");
        assert_eq!(ok("/..a", Some("x")).1, "/..a");
        assert_eq!(
            ok("/abcdef", Some("  localhost  ")).0.as_deref(),
            Some("localhost")
        );
        assert_eq!(ok("/abcdef", Some("[::1]:80")).0.as_deref(), Some("[::1]"));
    }

    #[test]
    fn absolute_form_takes_its_authority() {
        assert_eq!(
            ok("http://localhost/abcdef?x", Some("localhost")),
            (Some("localhost".into()), "/abcdef".into())
        );
        assert_eq!(ok("HTTPS://localhost", Some("localhost")).1, "/");
        assert_eq!(ok("http://localhost?q", Some("localhost")).1, "/");
        let h10 = head(
            "GET",
            "http://Localhost:80/abcdef",
            "HTTP/1.0",
            HostField::Absent,
        );
        assert_eq!(check(&h10).map(|a| a.host), Ok(Some("Localhost")));
        let h10 = head("GET", "/abcdef", "HTTP/1.0", HostField::Absent);
        assert_eq!(
            check(&h10),
            Ok(Accepted {
                host: None,
                path: "/abcdef"
            })
        );
    }

    #[test]
    fn refusals() {
        use Refusal::*;
        let cases: &[(&str, Option<&str>, Refusal)] = &[
            ("*", Some("x"), AsteriskForm),
            ("abcdef", Some("x"), TargetForm),
            ("://x/y", Some("x"), TargetForm),
            ("ht_tp://x/y", Some("x"), TargetForm),
            ("ftp://x/y", Some("x"), Scheme),
            ("http://u:p@x/y", Some("u:p@x"), Userinfo),
            ("/ab cd", Some("x"), TargetByte),
            ("/ab\x01cd", Some("x"), TargetByte),
            ("/ab\x7fcd", Some("x"), TargetByte),
            ("/abé", Some("x"), TargetByte),
            ("/abcdef?q=é", Some("x"), TargetByte),
            ("/%00abcdef", Some("x"), EncodedControl),
            ("/api/v1/links/a%00bc", Some("x"), EncodedControl),
            ("/ab%20cd", Some("x"), EncodedControl),
            ("/ab%7Fcd", Some("x"), EncodedControl),
            ("/ab%1fcd", Some("x"), EncodedControl),
            ("/%zzabcd", Some("x"), BadEscape),
            ("/abcd%4", Some("x"), BadEscape),
            ("/abcd%", Some("x"), BadEscape),
            ("/..", Some("x"), DotSegments),
            ("/../abcdef", Some("x"), DotSegments),
            ("/%2e%2E/abcdef", Some("x"), DotSegments),
            ("/.%2e/x", Some("x"), DotSegments),
            ("/a/./../../x", Some("x"), DotSegments),
            ("//../x", Some("x"), DotSegments),
            ("/a%2f..%2f..%2fx", Some("x"), DotSegments),
            ("/..?x", Some("x"), DotSegments),
            ("/..#x", Some("x"), DotSegments),
            (
                "http://evil.example/abcdef",
                Some("localhost"),
                HostMismatch,
            ),
            ("http://localhost/abcdef", Some("LOCALHOST"), HostMismatch),
            (
                "http://localhost:80/abcdef",
                Some("localhost"),
                HostMismatch,
            ),
            ("http://localhost/abcdef", None, MissingHost),
            ("/abcdef", None, MissingHost),
            ("/abcdef", Some(""), InvalidHost),
            ("/abcdef", Some("a_b.com"), InvalidHost),
            ("/abcdef", Some("localhost:abc"), InvalidHost),
            ("/abcdef", Some("a..b"), InvalidHost),
            ("/abcdef", Some("a/b"), InvalidHost),
            ("/abcdef", Some("a\tb"), InvalidHost),
            ("/abcdef", Some("\tlocalhost"), InvalidHost),
            ("/abcdef", Some("localhost\t"), InvalidHost),
            ("/abcdef", Some(" \t localhost \t "), InvalidHost),
            ("http://localhost/abcdef", Some("\tlocalhost"), InvalidHost),
            ("/abcdef", Some("u@localhost"), InvalidHost),
            ("http://a_b.com/abcdef", Some("a_b.com"), InvalidHost),
        ];
        for (target, host, want) in cases {
            assert_eq!(get(target, *host).err(), Some(*want), "{target:?} {host:?}");
        }
        let no = HostField::One(b"x");
        for (method, version, want) in [
            ("GET", "", Version),
            ("GET", "HTTP/2.0", Version),
            ("GET", "HTTP/1.2", Version),
            ("get", "HTTP/1.1", Method),
            ("Get", "HTTP/1.1", Method),
            ("M_X", "HTTP/1.1", Method),
            ("", "HTTP/1.1", Method),
            ("CONNECT", "HTTP/1.1", Connect),
        ] {
            let h = head(method, "/abcdef", version, no);
            assert_eq!(check(&h).err(), Some(want), "{method} {version}");
        }
        let two = head("GET", "/abcdef", "HTTP/1.1", HostField::Repeated);
        assert_eq!(check(&two).err(), Some(RepeatedHost));
        let mut many = head("GET", "/abcdef", "HTTP/1.1", no);
        many.fields = MAX_HEADER_FIELDS;
        assert!(check(&many).is_ok());
        many.fields = MAX_HEADER_FIELDS + 1;
        assert_eq!(check(&many).err(), Some(TooManyFields));
        assert_eq!(TooManyFields.status(), 431);
        assert_eq!(Connect.status(), 405);
        assert_eq!(Method.status(), 400);
    }

    #[test]
    fn repeated_single_fields() {
        let h = head("GET", "/abcdef", "HTTP/1.1", HostField::One(b"x"));
        assert!(check_fields(&h, false).is_ok());
        assert_eq!(check_fields(&h, true).err(), Some(Refusal::RepeatedField));
        assert_eq!(Refusal::RepeatedField.status(), 400);
        // After the request line and the Host, before the field count.
        let mut many = h;
        many.fields = MAX_HEADER_FIELDS + 1;
        assert_eq!(
            check_fields(&many, true).err(),
            Some(Refusal::RepeatedField)
        );
        assert_eq!(
            check_fields(&many, false).err(),
            Some(Refusal::TooManyFields)
        );
        let bad_host = head("GET", "/abcdef", "HTTP/1.1", HostField::One(b"a_b"));
        assert_eq!(
            check_fields(&bad_host, true).err(),
            Some(Refusal::InvalidHost)
        );
        let bad_line = head("get", "/abcdef", "HTTP/1.1", HostField::One(b"x"));
        assert_eq!(check_fields(&bad_line, true).err(), Some(Refusal::Method));
        assert_eq!(single_field(b"Authorization"), Some(0));
        for name in ["if-none-match", "EXPECT", "If-Unmodified-Since", "If-Range"] {
            assert!(single_field(name.as_bytes()).is_some(), "{name}");
        }
        for name in [
            "Host",
            "Content-Length",
            "Transfer-Encoding",
            "Cookie",
            "authorizatio",
        ] {
            assert_eq!(single_field(name.as_bytes()), None, "{name}");
        }
    }

    #[test]
    fn with_ows_widens_a_trimmed_value_to_its_line() {
        let head = b"GET / HTTP/1.1\r\nHost:\t localhost \t\r\nX: y\r\n\r\n";
        let at = |s: &str| {
            let i = head
                .windows(s.len())
                .position(|w| w == s.as_bytes())
                .unwrap_or_else(|| panic!("{s}"));
            &head[i..i + s.len()]
        };
        assert_eq!(with_ows(head, at("localhost")), b"\t localhost \t");
        assert_eq!(with_ows(head, at("y")), b" y");
        // Not a slice of the head: as given.
        assert_eq!(with_ows(head, b"localhost"), b"localhost");
        assert_eq!(with_ows(b"", b"x"), b"x");
    }

    #[test]
    fn host_field_from_values() {
        let none: [&[u8]; 0] = [];
        assert_eq!(HostField::from_values(none), HostField::Absent);
        assert_eq!(HostField::from_values([&b"a"[..]]), HostField::One(b"a"));
        assert_eq!(
            HostField::from_values([&b"a"[..], &b"a"[..]]),
            HostField::Repeated
        );
    }
}
