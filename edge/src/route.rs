//! Where a request goes, decided from its method and path alone (size
//! limits, Host rules and per-client limits are applied around it in
//! `proxy.rs`).
//!
//! Routes (first match wins):
//! * `GET|HEAD /shorturl_status` → status JSON (for `status_allow` clients)
//! * `GET|HEAD /healthz` → the edge's own liveness
//! * `GET|HEAD /.well-known/acme-challenge/{token}` → an ACME HTTP-01 answer
//! * `GET|HEAD /{code}` → redirect or 404; another method → 405
//! * `GET|HEAD /{code}.svg`, `/{code}.png`, `/{code}+` → the code's lookup
//!   and decision (as a redirect's), then for a live link the page cache
//!   (`pages/`); another method → 405. Checked only when the path is not a
//!   code, so the redirect path does no extra work.
//! * `/api` and `/api/...` → the origin pool
//! * anything else (`/internal/...` included) → the protocol 404
//!
//! `/shorturl_status` and `/healthz` come before codes because both are also
//! valid custom-code shapes.

use http::Method;
use pingora::http::RequestHeader;
use shorturl_common::code::{code_from_path, is_valid_code, CUSTOM_MAX};
use shorturl_common::pages::PageKind;

/// A code copied out of the request (at most 32 bytes, no allocation).
pub struct CodeBuf {
    buf: [u8; CUSTOM_MAX],
    len: usize,
}

impl CodeBuf {
    fn new(code: &str) -> Option<Self> {
        let bytes = code.as_bytes();
        let mut buf = [0u8; CUSTOM_MAX];
        buf.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(CodeBuf {
            buf,
            len: bytes.len(),
        })
    }

    /// The code.
    pub fn as_str(&self) -> &str {
        let bytes = self.buf.get(..self.len).unwrap_or_default();
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: `new` copies a whole `&str` (a valid code) into
        // `buf[..len]`; nothing else writes `buf` or `len`.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }
}

impl std::fmt::Debug for CodeBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CodeBuf({:?})", self.as_str())
    }
}

/// Where a request goes.
#[derive(Debug)]
pub enum Route {
    /// `GET|HEAD /{code}`.
    Code(CodeBuf),
    /// `GET|HEAD /{code}.svg`, `/{code}.png` or `/{code}+`.
    Page(PageKind, CodeBuf),
    /// `POST /{code}`: a password link's form (protocol 4.5).
    Unlock(CodeBuf),
    /// Another method on a code or page path: 405.
    CodeWrongMethod,
    /// Proxied to the origin pool.
    Api,
    /// `GET|HEAD /shorturl_status`.
    Status,
    /// `GET|HEAD /healthz`.
    Health,
    /// `GET|HEAD /.well-known/acme-challenge/{token}` (token checked).
    AcmeChallenge,
    /// The protocol 404, without any lookup.
    NotFound,
}

/// Routes `req` (see the module documentation).
pub fn route(req: &RequestHeader) -> Route {
    let get_or_head = req.method == Method::GET || req.method == Method::HEAD;
    let path = req.uri.path();
    if req.method == Method::POST && !matches!(path, "/shorturl_status" | "/healthz") {
        if let Some(c) = code_from_path(path).and_then(CodeBuf::new) {
            return Route::Unlock(c);
        }
    }
    route_path(get_or_head, path)
}

/// Routes a request by its method (`GET`/`HEAD` or not) and its path (no
/// query): the table both the proxy and the fast path use.
pub fn route_path(get_or_head: bool, path: &str) -> Route {
    match path {
        "/shorturl_status" if get_or_head => return Route::Status,
        "/healthz" if get_or_head => return Route::Health,
        _ => {}
    }
    if get_or_head && crate::tls::challenge::token_of(path).is_some() {
        return Route::AcmeChallenge;
    }
    if let Some(code) = code_from_path(path) {
        return match (get_or_head, CodeBuf::new(code)) {
            (true, Some(c)) => Route::Code(c),
            (true, None) => Route::NotFound,
            (false, _) => Route::CodeWrongMethod,
        };
    }
    if path == "/api" || path.starts_with("/api/") {
        return Route::Api;
    }
    if let Some((kind, code)) = PageKind::of_path(path).filter(|(_, c)| is_valid_code(c)) {
        return match (get_or_head, CodeBuf::new(code)) {
            (true, Some(c)) => Route::Page(kind, c),
            (true, None) => Route::NotFound,
            (false, _) => Route::CodeWrongMethod,
        };
    }
    Route::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(method: &str, target: &str) -> String {
        let req = RequestHeader::build(method, target.as_bytes(), None)
            .unwrap_or_else(|e| panic!("{method} {target}: {e}"));
        match route(&req) {
            Route::Code(c) => format!("code {}", c.as_str()),
            Route::Page(k, c) => format!("{} {}", k.label(), c.as_str()),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn codes_resolve_on_get_and_head_only() {
        assert_eq!(to("GET", "/aB3xYz"), "code aB3xYz");
        assert_eq!(to("HEAD", "/aB3xYz"), "code aB3xYz");
        assert_eq!(to("GET", "/aB3xYz?utm=1&x=/y"), "code aB3xYz");
        assert_eq!(to("GET", "/promo-0001_x"), "code promo-0001_x");
        let longest = format!("/{}", "z".repeat(CUSTOM_MAX));
        assert_eq!(to("GET", &longest), format!("code {}", &longest[1..]));
        for m in ["PUT", "DELETE", "PATCH", "OPTIONS"] {
            assert_eq!(to(m, "/aB3xYz"), "CodeWrongMethod", "{m}");
        }
        // A password link's form posts to the link (protocol 4.5).
        assert_eq!(to("POST", "/aB3xYz?x=1"), "Unlock(CodeBuf(\"aB3xYz\"))");
        assert_eq!(to("POST", "/healthz"), "CodeWrongMethod");
        assert_eq!(to("POST", "/aB3xYz.png"), "CodeWrongMethod");
    }

    #[test]
    fn service_paths_win_over_code_shapes() {
        assert_eq!(to("GET", "/shorturl_status"), "Status");
        assert_eq!(to("HEAD", "/shorturl_status"), "Status");
        assert_eq!(to("GET", "/healthz"), "Health");
        assert_eq!(to("HEAD", "/healthz?x=1"), "Health");
        // Other methods fall through to the code grammar: 405 like any code.
        assert_eq!(to("POST", "/shorturl_status"), "CodeWrongMethod");
        assert_eq!(to("DELETE", "/healthz"), "CodeWrongMethod");
        // Case-sensitive: these are ordinary codes.
        assert_eq!(to("GET", "/Healthz"), "code Healthz");
        assert_eq!(
            to("GET", "/.well-known/acme-challenge/tok_EN-1"),
            "AcmeChallenge"
        );
        assert_eq!(to("POST", "/.well-known/acme-challenge/tok"), "NotFound");
        assert_eq!(to("GET", "/.well-known/acme-challenge/a.b"), "NotFound");
    }

    #[test]
    fn api_paths_go_to_the_origin_whatever_the_method() {
        for (m, p) in [
            ("POST", "/api/v1/links"),
            ("GET", "/api/v1/links/aB3xYz"),
            ("DELETE", "/api/v1/links/aB3xYz"),
            ("GET", "/api"),
            ("GET", "/api/"),
            ("PUT", "/api/anything?q=1"),
        ] {
            assert_eq!(to(m, p), "Api", "{m} {p}");
        }
        // `api` alone is a code shape (reserved at creation, so a 404).
        assert_eq!(to("GET", "/apix/v1"), "NotFound");
    }

    #[test]
    fn page_paths_go_to_the_page_cache() {
        assert_eq!(to("GET", "/aB3xYz.svg"), "svg aB3xYz");
        assert_eq!(to("HEAD", "/aB3xYz.png?size=128"), "png aB3xYz");
        assert_eq!(to("GET", "/promo-0001_x+"), "preview promo-0001_x");
        assert_eq!(to("POST", "/aB3xYz.svg"), "CodeWrongMethod");
        assert_eq!(to("DELETE", "/aB3xYz+"), "CodeWrongMethod");
        for p in [
            "/abc.svg",
            "/a.b.svg",
            "/aB3xYz.gif",
            "/aB3xYz++",
            "/.svg",
            "/x/ab12.png",
        ] {
            assert_eq!(to("GET", p), "NotFound", "{p}");
        }
    }

    #[test]
    fn everything_else_is_the_protocol_404() {
        for p in [
            "/",
            "/abc",
            "/a.b.c.d",
            "/abcdef/",
            "/abcdef/x",
            "/%41bcdef",
            "/internal/v1/records/abcdef",
            "/metrics/x",
            "/shorturl_status/",
        ] {
            assert_eq!(to("GET", p), "NotFound", "{p}");
        }
        let too_long = format!("/{}", "a".repeat(CUSTOM_MAX + 1));
        assert_eq!(to("GET", &too_long), "NotFound");
        assert_eq!(to("POST", "/internal/v1/records/abcdef"), "NotFound");
    }
}
