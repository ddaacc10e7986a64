//! The fast path's answer bytes, serialised from the very headers the
//! proxy sends (`crate::respond`), so the two paths cannot drift apart:
//! a redirect's status line and headers are built once per process around
//! an empty place for the URL ([`redirect_frame`], a cache entry stores
//! only the URL), the 404's once per process ([`Answers`]). Per request
//! only `Date` and `Connection` are appended, as Pingora appends them.

use super::clock::DATE_LEN;
use crate::cache::{Frame, Serialiser};
use crate::respond;
use http::HeaderValue;
use pingora::http::ResponseHeader;
use shorturl_common::error::NOT_FOUND_BODY;
use shorturl_common::redirect::RedirectPolicy;
use std::sync::Arc;

/// Why the answers could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// A header Pingora refuses.
    #[error("fast path answers: {0}")]
    Header(#[from] Box<pingora::Error>),
    /// The redirect's head does not hold its URL as `Location`'s value.
    #[error("fast path answers: no URL in the redirect's Location")]
    Frame,
}

/// The status line and header lines of `h` as Pingora's HTTP/1 writer
/// puts them on the wire, without the blank line that ends the head.
pub fn serialise(h: &ResponseHeader) -> Vec<u8> {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(match h.version {
        http::Version::HTTP_10 => b"HTTP/1.0 ",
        _ => b"HTTP/1.1 ",
    });
    out.extend_from_slice(h.status.as_str().as_bytes());
    out.push(b' ');
    if let Some(reason) = h.get_reason_phrase() {
        out.extend_from_slice(reason.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    h.header_to_h1_wire(&mut out);
    out
}

const LOCATION: &[u8] = b"\r\nLocation: ";

/// The redirect to a URL under `policy`, and where the URL sits in it.
pub fn redirect_serialiser(policy: RedirectPolicy) -> Arc<Serialiser> {
    Arc::new(move |url: &str| {
        let h = respond::redirect_header(&policy, url, None).ok()?;
        let bytes = serialise(&h);
        let at = memchr::memmem::find(&bytes, LOCATION)? + LOCATION.len();
        Some((bytes, at))
    })
}

/// The cache's frame: the redirect under `policy` around its URL.
pub fn redirect_frame(policy: RedirectPolicy) -> Result<Frame, AnswerError> {
    Frame::new(redirect_serialiser(policy)).ok_or(AnswerError::Frame)
}

/// The answers that are the same for every request of a kind.
pub struct Answers {
    /// The 404 head (plain, and over TLS with HSTS when configured).
    not_found: Vec<u8>,
    not_found_tls: Vec<u8>,
    /// `Strict-Transport-Security: ...\r\n` for redirects over TLS (empty
    /// when not configured).
    hsts_line: Vec<u8>,
    /// The 503 of a failed lookup: head and body.
    unavailable: Vec<u8>,
    unavailable_body: Vec<u8>,
}

impl Answers {
    /// Built from the proxy's own headers for `policy` and `hsts`.
    pub fn new(policy: &RedirectPolicy, hsts: Option<&HeaderValue>) -> Result<Self, AnswerError> {
        let not_found = serialise(&respond::not_found_header(policy, None)?);
        let not_found_tls = serialise(&respond::not_found_header(policy, hsts)?);
        // The redirect with HSTS is the one without, plus that line.
        let plain = serialise(&respond::redirect_header(policy, "/", None)?);
        let with = serialise(&respond::redirect_header(policy, "/", hsts)?);
        let hsts_line = with.get(plain.len()..).unwrap_or_default().to_vec();
        let unavailable_body = respond::unavailable_body();
        let unavailable = serialise(&respond::json_header(
            503,
            unavailable_body.len(),
            "no-store",
            Some(respond::RETRY_AFTER_SECS),
        )?);
        Ok(Answers {
            not_found,
            not_found_tls,
            hsts_line,
            unavailable,
            unavailable_body,
        })
    }

    /// Appends a redirect: `parts` make the head (the frame around the
    /// URL, or a head made whole), then HSTS over TLS, `Date` and
    /// `Connection`.
    pub fn redirect_parts(&self, out: &mut Vec<u8>, parts: [&[u8]; 3], tls: bool, end: &End) {
        for p in parts {
            out.extend_from_slice(p);
        }
        if tls {
            out.extend_from_slice(&self.hsts_line);
        }
        end.append(out);
    }

    /// Appends the protocol 404 (its body unless `head`).
    pub fn not_found(&self, out: &mut Vec<u8>, tls: bool, head: bool, end: &End) {
        out.extend_from_slice(if tls {
            &self.not_found_tls
        } else {
            &self.not_found
        });
        end.append(out);
        if !head {
            out.extend_from_slice(NOT_FOUND_BODY);
        }
    }

    /// Appends the 503 of a failed lookup (its body unless `head`), as the
    /// proxy writes it (no HSTS).
    pub fn unavailable(&self, out: &mut Vec<u8>, head: bool, end: &End) {
        out.extend_from_slice(&self.unavailable);
        end.append(out);
        if !head {
            out.extend_from_slice(&self.unavailable_body);
        }
    }
}

/// The per-request end of a head: `Date`, `Connection`, blank line.
pub struct End {
    pub date: [u8; DATE_LEN],
    pub keepalive: bool,
}

impl End {
    fn append(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"Date: ");
        out.extend_from_slice(&self.date);
        out.extend_from_slice(if self.keepalive {
            b"\r\nConnection: keep-alive\r\n\r\n"
        } else {
            b"\r\nConnection: close\r\n\r\n"
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_the_redirect_around_any_url() {
        let f = redirect_frame(RedirectPolicy::default()).unwrap_or_else(|e| panic!("{e}"));
        let url = "https://x.example/a?b=1";
        assert!(f.fits(url));
        assert_eq!(
            String::from_utf8_lossy(&f.around(url.as_bytes()).concat()),
            "HTTP/1.1 302 Found\r\nLocation: https://x.example/a?b=1\r\nContent-Length: 0\r\nCache-Control: private, max-age=60\r\n"
        );
        // What Location cannot carry does not fit (the proxy answers it).
        assert!(!f.fits("https://x.example/\r\nSet-Cookie: a=b"));
    }

    #[test]
    fn redirect_bytes_hold_the_url_in_location() {
        let policy = RedirectPolicy::default();
        let f = redirect_serialiser(policy);
        let url = "https://x.example/a?b=1";
        let Some((bytes, at)) = f(url) else {
            panic!("no bytes")
        };
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            "HTTP/1.1 302 Found\r\nLocation: https://x.example/a?b=1\r\nContent-Length: 0\r\nCache-Control: private, max-age=60\r\n"
        );
        assert_eq!(&bytes[at..at + url.len()], url.as_bytes());
    }

    #[test]
    fn not_found_and_hsts() {
        let policy = RedirectPolicy {
            status: 301,
            ..RedirectPolicy::default()
        };
        let hsts = HeaderValue::from_static("max-age=300");
        let a = Answers::new(&policy, Some(&hsts)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.hsts_line, b"Strict-Transport-Security: max-age=300\r\n");
        let end = End {
            date: *b"Sun, 06 Nov 1994 08:49:37 GMT",
            keepalive: false,
        };
        let mut out = Vec::new();
        a.not_found(&mut out, false, false, &end);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!(
                "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\nConnection: close\r\n\r\n{}",
                String::from_utf8_lossy(NOT_FOUND_BODY)
            )),
            "{text}"
        );
        out.clear();
        a.not_found(&mut out, true, true, &end);
        assert!(String::from_utf8_lossy(&out)
            .contains("Strict-Transport-Security: max-age=300\r\nDate: "));
        let f = redirect_serialiser(policy);
        let Some((r, _)) = f("https://a.example/") else {
            panic!("no bytes")
        };
        out.clear();
        a.redirect_parts(&mut out, [&r, &[], &[]], true, &end);
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 301 Moved Permanently\r\n"));
    }
}
