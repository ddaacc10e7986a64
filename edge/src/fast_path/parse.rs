//! Reading one request head in place (`httparse`, zero copy) and deciding
//! whether it is plain enough for the fast path.
//!
//! A head is [`Parsed::Plain`] only when nothing about it needs the proxy:
//! `GET` or `HEAD`, HTTP/1.0 or 1.1, an origin-form target of RFC 3986
//! characters only (what `http::Uri` takes as is), no body framing
//! (`Content-Length`, `Transfer-Encoding`), no `Upgrade` or `Expect`, at
//! most one `Connection` field saying exactly `keep-alive` or `close`, no
//! bytes after the head (pipelining), and the protocol's section 2.1 rules
//! (`shorturl_common::request_rules`, the proxy's own check) accept it.
//! Anything else is [`Parsed::HandOver`]: the proxy answers it as always.

use shorturl_common::request_rules::{
    check_fields, single_field, with_ows, Head, HostField, Version,
};

/// Header fields the fast path parses; a head with more goes to the proxy.
pub const MAX_FIELDS: usize = 48;
/// `X-Forwarded-For` fields kept for the client address.
const MAX_XFF: usize = 4;

/// A head the fast path may answer (slices of the read buffer).
#[derive(Debug)]
pub struct Request<'b> {
    /// `HEAD` (else `GET`).
    pub head: bool,
    /// `GET` or `HEAD`.
    pub method: &'static str,
    /// The target's path (before `?`).
    pub path: &'b str,
    /// The target's length (path and query).
    pub uri_len: usize,
    /// Header names and values, as the proxy's size limit counts them.
    pub header_bytes: usize,
    /// The host as the section 2.1 rules found it (`None`: HTTP/1.0 without one).
    pub host: Option<&'b str>,
    /// Whether the connection stays open after the answer (RFC 9112
    /// section 9.3, as Pingora decides it).
    pub keepalive: bool,
    /// The first `User-Agent` value.
    pub user_agent: Option<&'b [u8]>,
    /// The first `Referer` value.
    pub referer: Option<&'b [u8]>,
    /// The first `Accept` value (a browser's 404 is the proxy's: the page).
    pub accept: Option<&'b [u8]>,
    /// The target's query (after `?`), for the link rules.
    pub query: Option<&'b str>,
    /// The first `Accept-Language` value (link rules).
    pub accept_language: Option<&'b [u8]>,
    /// The first value of the configured country header (link rules).
    pub country: Option<&'b [u8]>,
    xff: [&'b [u8]; MAX_XFF],
    xff_len: usize,
}

impl<'b> Request<'b> {
    /// The `X-Forwarded-For` values, in head order.
    pub fn forwarded_for(&self) -> impl DoubleEndedIterator<Item = &'b [u8]> + Clone + '_ {
        self.xff.iter().take(self.xff_len).copied()
    }
}

/// What the bytes read so far hold.
#[derive(Debug)]
// Returned once per request, by value on the stack: boxing the large
// variant would cost an allocation on the hot path to save a few bytes of
// stack.
#[allow(clippy::large_enum_variant)]
pub enum Parsed<'b> {
    /// A whole head, and nothing after it, the fast path may answer.
    Plain(Request<'b>),
    /// Not a whole head yet.
    Partial,
    /// Anything else: the proxy's business.
    HandOver,
}

/// A target the fast path takes: origin-form, RFC 3986 path and query
/// characters only, every `%` followed by two hex digits.
fn plain_target(t: &[u8]) -> bool {
    if t.first() != Some(&b'/') {
        return false;
    }
    let mut i = 0;
    while let Some(&b) = t.get(i) {
        match b {
            b'%' => {
                let hex = |j: usize| t.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
                continue;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => {}
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
            | b',' | b';' | b'=' | b':' | b'@' | b'/' | b'?' => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

/// Parses `buf` (everything read since the last answer); `country_header`
/// (lower case) is the header a trusted proxy sets the country in.
pub fn parse<'b>(buf: &'b [u8], country_header: Option<&str>) -> Parsed<'b> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::HandOver,
    };
    if len != buf.len() {
        return Parsed::HandOver; // pipelined bytes: the proxy's rules
    }
    let (head, method) = match req.method {
        Some("GET") => (false, "GET"),
        Some("HEAD") => (true, "HEAD"),
        _ => return Parsed::HandOver,
    };
    let version = match req.version {
        Some(1) => Version::Http11,
        Some(0) => Version::Http10,
        _ => return Parsed::HandOver,
    };
    let Some(target) = req.path else {
        return Parsed::HandOver;
    };
    if !plain_target(target.as_bytes()) {
        return Parsed::HandOver;
    }
    let mut hosts = (0usize, None);
    let mut connection: Option<bool> = None;
    let mut connections = 0;
    let mut user_agent = None;
    let mut referer = None;
    let mut accept = None;
    let mut accept_language = None;
    let mut country = None;
    let mut xff: [&[u8]; MAX_XFF] = [&[]; MAX_XFF];
    let mut xff_len = 0;
    let mut header_bytes = 0;
    // Fields of `SINGLE_FIELDS` seen (a bit each), and whether one repeats.
    let (mut singles, mut repeated) = (0u32, false);
    for f in req.headers.iter() {
        let (name, value) = (f.name, f.value);
        header_bytes += name.len() + value.len() + 4;
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("host") {
            hosts = (hosts.0 + 1, hosts.1.or(Some(value)));
        } else if is("user-agent") {
            user_agent = user_agent.or(Some(value));
        } else if is("referer") {
            referer = referer.or(Some(value));
        } else if is("accept") {
            accept = accept.or(Some(value));
        } else if is("accept-language") {
            accept_language = accept_language.or(Some(value));
        } else if country_header.is_some_and(is) {
            country = country.or(Some(value));
        } else if is("x-forwarded-for") {
            let Some(slot) = xff.get_mut(xff_len) else {
                return Parsed::HandOver;
            };
            *slot = value;
            xff_len += 1;
        } else if is("connection") {
            connections += 1;
            connection = if value.eq_ignore_ascii_case(b"keep-alive") {
                Some(true)
            } else if value.eq_ignore_ascii_case(b"close") {
                Some(false)
            } else {
                return Parsed::HandOver;
            };
        } else if is("content-length") || is("transfer-encoding") || is("upgrade") || is("expect") {
            return Parsed::HandOver;
        } else if let Some(i) = single_field(name.as_bytes()) {
            repeated |= singles & (1 << i) != 0;
            singles |= 1 << i;
        }
    }
    if connections > 1 {
        return Parsed::HandOver;
    }
    let host = match hosts {
        (0, _) => HostField::Absent,
        // With the whitespace around it: the rules refuse a tab there.
        (1, Some(v)) => HostField::One(with_ows(buf, v)),
        _ => HostField::Repeated,
    };
    let rules = Head {
        method,
        target: target.as_bytes(),
        version,
        host,
        fields: req.headers.len(),
    };
    let Ok(accepted) = check_fields(&rules, repeated) else {
        return Parsed::HandOver; // the proxy refuses it with its 400/405/431
    };
    // memchr: `split_once('?')` cost ~90 instructions here (callgrind).
    let (path, query) = match memchr::memchr(b'?', target.as_bytes()) {
        Some(i) => (&target[..i], target.get(i + 1..)),
        None => (target, None),
    };
    Parsed::Plain(Request {
        head,
        method,
        path,
        uri_len: target.len(),
        header_bytes,
        host: accepted.host,
        keepalive: connection.unwrap_or(version == Version::Http11),
        user_agent,
        referer,
        accept,
        query,
        accept_language,
        country,
        xff,
        xff_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(head: &str) -> Request<'_> {
        match parse(head.as_bytes(), None) {
            Parsed::Plain(r) => r,
            other => panic!("{head:?}: {other:?}"),
        }
    }

    fn handed_over(head: &str) -> bool {
        matches!(parse(head.as_bytes(), None), Parsed::HandOver)
    }

    #[test]
    fn plain_heads() {
        let r = plain("GET /aB3xYz?utm=1&x=%2F HTTP/1.1\r\nHost: S.Shop.com:8080\r\nUser-Agent: curl/8\r\nReferer: https://r.example/x\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 5.6.7.8\r\n\r\n");
        assert_eq!((r.head, r.method, r.path), (false, "GET", "/aB3xYz"));
        assert_eq!(r.host, Some("S.Shop.com"));
        assert!(r.keepalive);
        assert_eq!(r.user_agent, Some(&b"curl/8"[..]));
        assert_eq!(r.referer, Some(&b"https://r.example/x"[..]));
        let xff: Vec<&[u8]> = r.forwarded_for().collect();
        assert_eq!(xff, vec![&b"1.2.3.4"[..], &b"5.6.7.8"[..]]);
        assert_eq!(r.uri_len, "/aB3xYz?utm=1&x=%2F".len());
        assert_eq!(
            r.header_bytes,
            (4 + 15 + 4) + (10 + 6 + 4) + (7 + 19 + 4) + 2 * (15 + 7 + 4)
        );
        let r = plain("HEAD /abcdef HTTP/1.0\r\n\r\n");
        assert_eq!((r.head, r.host, r.keepalive), (true, None, false));
        let r = plain("GET /abcdef HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: x\r\n\r\n");
        assert!(r.keepalive);
        let r = plain("GET /abcdef HTTP/1.1\r\nConnection: close\r\nHost: x\r\n\r\n");
        assert!(!r.keepalive);
        let r =
            plain("GET /abcdef HTTP/1.1\r\nHost:   x  \r\nAuthorization: a\r\nIf-Match: b\r\n\r\n");
        assert_eq!(r.host, Some("x"));
    }

    #[test]
    fn partial_heads_wait_for_more() {
        let head = "GET /abcdef HTTP/1.1\r\nHost: x\r\n\r\n";
        for cut in 0..head.len() {
            assert!(
                matches!(parse(&head.as_bytes()[..cut], None), Parsed::Partial),
                "{cut}"
            );
        }
    }

    #[test]
    fn everything_unusual_goes_to_the_proxy() {
        for head in [
            "POST /abcdef HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, te\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nConnection: close\r\nConnection: close\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\n\r\nGET /abcdef HTTP/1.1\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: a_b.com\r\n\r\n",
            "GET http://x/abcdef HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /abc{def HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /abcdef#x HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /abcdef?q=%zz HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /../abcdef HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /abcdef HTTP/2.0\r\nHost: x\r\n\r\n",
            "get /abcdef HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost:\tx\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\t\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nHost: x\r\nAuthorization: a\r\nauthorization: b\r\n\r\n",
            "GET /abcdef HTTP/1.1\r\nIf-None-Match: a\r\nHost: x\r\nIf-None-Match: a\r\n\r\n",
        ] {
            assert!(handed_over(head), "{head:?}");
        }
        // A TLS ClientHello on the plain port.
        assert!(matches!(
            parse(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", None),
            Parsed::HandOver
        ));
        let many: String = (0..MAX_FIELDS + 1)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect();
        assert!(handed_over(&format!(
            "GET /abcdef HTTP/1.1\r\nHost: x\r\n{many}\r\n"
        )));
        let xff = "X-Forwarded-For: 1.1.1.1\r\n".repeat(MAX_XFF + 1);
        assert!(handed_over(&format!(
            "GET /abcdef HTTP/1.1\r\nHost: x\r\n{xff}\r\n"
        )));
    }
}
