//! Protocol section 2.1 on the Pingora edge: the request head as Pingora
//! parsed it goes once through `shorturl_common::request_rules::check_fields`
//! at the top of `request_filter`; the request's host is kept as a position
//! in the head (no copy), for the redirect to compare with the record's
//! domain. Two rules need more than Pingora's parsed head, to answer as
//! nginx does: a tab around the `Host` value (Pingora strips it; read from
//! the raw head) and a repeated field of `SINGLE_FIELDS` (both refused).
//!
//! Pingora's HTTP/1 parser refuses some heads before any of our code runs,
//! with its own 400 and an empty body, and closes: versions other than 1.0
//! and 1.1 (HTTP/0.9 included), bytes it cannot parse (a TLS ClientHello,
//! `<`, `>`, `` ` `` or invalid UTF-8 in the target, a malformed header
//! line), more than 256 header fields, two `Host` fields, userinfo in the
//! target or in `Host`, and a `Host` that is not byte for byte the
//! absolute-form authority; CONNECT gets its own bare 405. It also
//! percent-encodes raw spaces and control bytes of the target before we see
//! it, which is why the rules refuse escaped controls in the path. The
//! OpenResty module reproduces these answers (`rules.lua`).
//!
//! HTTP/2 requests (TLS with ALPN `h2`) carry their host in `:authority`
//! (RFC 9113 section 8.3.1), which Pingora keeps in the URI, and their
//! target in `:path`: they go through the same rules as HTTP/1.1, with
//! `:authority` standing for a `Host` field when there is none (Pingora
//! refuses an h2 request whose `Host` and `:authority` disagree).

use crate::respond;
use http::header::HOST;
use http::Version as HttpVersion;
use pingora::http::RequestHeader;
use pingora::proxy::Session;
use pingora::Result;
use shorturl_common::request_rules::{
    check_fields, with_ows, Head, HostField, Refusal, Version, SINGLE_FIELDS,
};

/// Where the request's host lies in its head: a byte range of the `Host`
/// value or of the raw target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostAt {
    source: HostSource,
    start: usize,
    end: usize,
}

/// Which part of the head holds the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostSource {
    Header,
    Target,
    /// HTTP/2 `:authority`.
    Authority,
}

impl HostAt {
    /// The host (validated host part, case as received) in `req`, the head
    /// [`check`] accepted.
    pub fn get<'r>(&self, req: &'r RequestHeader) -> Option<&'r str> {
        let source = match self.source {
            HostSource::Target => req.raw_path(),
            HostSource::Header => req.headers.get(HOST)?.as_bytes(),
            HostSource::Authority => req.uri.authority()?.as_str().as_bytes(),
        };
        std::str::from_utf8(source.get(self.start..self.end)?).ok()
    }
}

/// The byte range `inner` occupies inside `outer`, if it is a slice of it.
fn range_in(outer: &[u8], inner: &str) -> Option<(usize, usize)> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some((start, end))
}

/// Applies the rules to `req`: the position of its host (`None`: a request
/// for no domain), or why it is refused. `raw_head`: the head's bytes as
/// received (HTTP/1), in which the `Host` value is a slice: the rules see
/// the tabs around it that the parser stripped.
pub fn check(
    req: &RequestHeader,
    raw_head: Option<&[u8]>,
) -> std::result::Result<Option<HostAt>, Refusal> {
    let version = match req.version {
        HttpVersion::HTTP_11 | HttpVersion::HTTP_2 => Version::Http11,
        HttpVersion::HTTP_10 => Version::Http10,
        HttpVersion::HTTP_09 => Version::Http09,
        _ => Version::Other,
    };
    let target = req.raw_path();
    let mut hosts = req.headers.get_all(HOST).iter().map(|v| v.as_bytes());
    let host_value = hosts.next();
    let authority = (req.version == HttpVersion::HTTP_2)
        .then(|| req.uri.authority().map(|a| a.as_str().as_bytes()))
        .flatten();
    // The same bytes as `host_value`, with the whitespace around it: the
    // accepted host still lies inside `host_value` (for `range_in`).
    let host_line = match (raw_head, host_value) {
        (Some(raw), Some(v)) => Some(with_ows(raw, v)),
        _ => host_value,
    };
    let host = match (host_line.or(authority), hosts.next()) {
        (None, _) => HostField::Absent,
        (Some(v), None) => HostField::One(v),
        (Some(_), Some(_)) => HostField::Repeated,
    };
    let head = Head {
        method: req.method.as_str(),
        target,
        version,
        host,
        fields: req.headers.len(),
    };
    let repeated = SINGLE_FIELDS
        .iter()
        .any(|f| req.headers.get_all(*f).iter().nth(1).is_some());
    let Some(host) = check_fields(&head, repeated)?.host else {
        return Ok(None);
    };
    let at = host_value
        .and_then(|v| range_in(v, host).map(|r| (HostSource::Header, r)))
        .or_else(|| authority.and_then(|v| range_in(v, host).map(|r| (HostSource::Authority, r))))
        .or_else(|| range_in(target, host).map(|r| (HostSource::Target, r)));
    // The host is always borrowed from one of them; never a request for
    // no domain when it has one.
    let (source, (start, end)) = at.ok_or(Refusal::InvalidHost)?;
    Ok(Some(HostAt { source, start, end }))
}

/// Answers a refused head: 400 `bad_request` (connection closed), 431
/// `headers_too_large` or 405, all with the protocol's JSON body.
pub async fn refuse(session: &mut Session, refusal: Refusal) -> Result<()> {
    tracing::debug!(%refusal, "request refused by the protocol rules");
    match refusal.status() {
        431 => {
            respond::error(
                session,
                431,
                "headers_too_large",
                "request headers too large",
                None,
            )
            .await
        }
        405 => {
            respond::error(
                session,
                405,
                "method_not_allowed",
                "method not allowed",
                None,
            )
            .await
        }
        _ => {
            session.set_keepalive(None);
            respond::error(session, 400, "bad_request", "malformed request", None).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(target: &str, hosts: &[&str], version: HttpVersion) -> RequestHeader {
        let mut r = RequestHeader::build("GET", target.as_bytes(), None).unwrap_or_else(|e| {
            panic!("{target}: {e}");
        });
        r.set_version(version);
        for h in hosts {
            r.append_header("Host", *h)
                .unwrap_or_else(|e| panic!("{h}: {e}"));
        }
        r
    }

    #[test]
    fn host_comes_from_host_or_authority_without_a_copy() {
        let r = req("/abcdef", &["  S.Shop55.com.:8080 "], HttpVersion::HTTP_11);
        let at = check(&r, None).ok().flatten();
        assert_eq!(at.and_then(|a| a.get(&r)), Some("S.Shop55.com"));
        let r = req("http://Localhost:80/abcdef", &[], HttpVersion::HTTP_10);
        let at = check(&r, None).ok().flatten();
        assert_eq!(at.and_then(|a| a.get(&r)), Some("Localhost"));
        let r = req("/abcdef", &[], HttpVersion::HTTP_10);
        assert_eq!(check(&r, None), Ok(None));
    }

    #[test]
    fn http2_takes_its_host_from_the_authority() {
        let mut r = req("/abcdef", &[], HttpVersion::HTTP_2);
        r.set_uri(
            "https://S.shop55.com:8443/abcdef"
                .parse()
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let at = check(&r, None).ok().flatten();
        assert_eq!(at.and_then(|a| a.get(&r)), Some("S.shop55.com"));
        // A Host field, when present, is the host (Pingora has checked it
        // agrees with :authority).
        let mut r = req("/abcdef", &["a.com"], HttpVersion::HTTP_2);
        r.set_uri(
            "https://a.com/abcdef"
                .parse()
                .unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(
            check(&r, None).ok().flatten().and_then(|a| a.get(&r)),
            Some("a.com")
        );
        // No host at all: refused like an HTTP/1.1 request without Host.
        let r = req("/abcdef", &[], HttpVersion::HTTP_2);
        assert_eq!(check(&r, None), Err(Refusal::MissingHost));
    }

    #[test]
    fn refusals_reach_the_edge() {
        let r = req("/abcdef", &[], HttpVersion::HTTP_11);
        assert_eq!(check(&r, None), Err(Refusal::MissingHost));
        let r = req("/abcdef", &["a", "a"], HttpVersion::HTTP_11);
        assert_eq!(check(&r, None), Err(Refusal::RepeatedHost));
        let r = req("/%00abc", &["localhost"], HttpVersion::HTTP_11);
        assert_eq!(check(&r, None), Err(Refusal::EncodedControl));
        let r = req("/abcdef#x", &["a_b.com"], HttpVersion::HTTP_11);
        assert_eq!(check(&r, None), Err(Refusal::InvalidHost));
        let mut r = req("/abcdef", &["localhost"], HttpVersion::HTTP_11);
        r.append_header("Authorization", "Bearer a")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(check(&r, None), Ok(Some(_))));
        r.append_header("authorization", "Bearer b")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(check(&r, None), Err(Refusal::RepeatedField));
    }

    /// A request as Pingora parses `raw`: its `Host` value without the
    /// whitespace around it, a slice of the head's buffer.
    fn parsed(raw: &bytes::Bytes) -> RequestHeader {
        let at = raw
            .windows(9)
            .position(|w| w == b"localhost")
            .unwrap_or_else(|| panic!("no host"));
        let value = http::HeaderValue::from_maybe_shared(raw.slice(at..at + 9))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut r = req("/abcdef", &[], HttpVersion::HTTP_11);
        r.append_header("Host", value)
            .unwrap_or_else(|e| panic!("{e}"));
        r
    }

    #[test]
    fn tabs_around_host_are_seen_in_the_raw_head() {
        let raw = bytes::Bytes::from_static(b"GET /abcdef HTTP/1.1\r\nHost:\tlocalhost \r\n\r\n");
        let r = parsed(&raw);
        assert_eq!(check(&r, Some(&raw)), Err(Refusal::InvalidHost));
        // Without the raw head (HTTP/2) the value is all there is.
        let at = check(&r, None).ok().flatten();
        assert_eq!(at.and_then(|a| a.get(&r)), Some("localhost"));
        // Spaces are fine, and the host is still found in the field.
        let raw = bytes::Bytes::from_static(b"GET /abcdef HTTP/1.1\r\nHost:  localhost  \r\n\r\n");
        let r = parsed(&raw);
        let at = check(&r, Some(&raw)).ok().flatten();
        assert_eq!(at.and_then(|a| a.get(&r)), Some("localhost"));
    }
}
