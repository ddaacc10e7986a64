//! The console's page frame and HTML answers. Every value written into a
//! page goes through [`esc`] (the pages' one escaping helper); the policy
//! allows only the console's own stylesheet and script (no inline script,
//! no other host).

use super::assets;
use super::session::Session;
pub use crate::pages::html::escape as esc;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

/// The console's `Content-Security-Policy`.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
     form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Search,
    Merchants,
    Apps,
    Screening,
    Webhooks,
    None,
}

/// A full page: the header (navigation, user, sign-out form) and `main`.
pub fn page(session: Option<&Session>, nav: Nav, title: &str, main: &str) -> String {
    frame(session, nav, title, main, "")
}

/// [`page`] that loads `to` (a console path) after `secs` seconds by
/// itself: a `<meta>` refresh, which the policy allows (no script).
pub fn refreshing(
    session: Option<&Session>,
    nav: Nav,
    title: &str,
    main: &str,
    secs: u32,
    to: &str,
) -> String {
    let head = format!(
        "<meta http-equiv=\"refresh\" content=\"{secs};url={}\">",
        esc(to)
    );
    frame(session, nav, title, main, &head)
}

fn frame(session: Option<&Session>, nav: Nav, title: &str, main: &str, head: &str) -> String {
    let header = match session {
        Some(s) => {
            let link = |n: Nav, href: &str, text: &str| {
                let cur = if n == nav {
                    " aria-current=\"page\""
                } else {
                    ""
                };
                format!("<a href=\"{href}\"{cur}>{text}</a>")
            };
            // A user bound to merchants is refused the pages over every
            // tenant: the bar links Search and each of its merchants' pages.
            let links = if s.user.merchants.is_empty() {
                [
                    link(Nav::Overview, "/admin/", "Overview"),
                    link(Nav::Search, "/admin/links", "Search"),
                    link(Nav::Merchants, "/admin/merchants", "Merchants"),
                    link(Nav::Apps, "/admin/apps", "Apps"),
                    link(Nav::Screening, "/admin/screening", "Screening"),
                    link(Nav::Webhooks, "/admin/webhooks", "Webhooks"),
                ]
                .concat()
            } else {
                let mut l = link(Nav::Search, "/admin/links", "Search");
                for k in &s.user.merchants {
                    l.push_str(&link(
                        Nav::Merchants,
                        &format!("/admin/merchants/{k}"),
                        &format!("Merchant {k}"),
                    ));
                }
                l
            };
            format!(
                "<header><nav>{links}<a href=\"/api/docs\">API</a></nav><div class=\"who\"><span id=\"who\">{} · {}</span>\
                 <form method=\"post\" action=\"/admin/logout\">{}<button type=\"submit\">Sign out</button></form></div></header>",
                esc(&s.user.name),
                s.user.role.as_str(),
                csrf_field(s),
            )
        }
        None => String::new(),
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\">{head}\
         <title>{title} · Short-link console</title>\
         <link rel=\"stylesheet\" href=\"{css}\"><script src=\"{js}\" defer></script></head>\
         <body>{header}<main><h1>{title}</h1>{main}</main></body></html>\n",
        title = esc(title),
        css = assets::css_path(),
        js = assets::js_path(),
    )
}

/// The hidden CSRF field of a session's forms.
pub fn csrf_field(s: &Session) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(&s.csrf)
    )
}

/// An HTML answer with the console's headers (never cached: pages show
/// live data and carry the CSRF token).
pub fn respond(status: StatusCode, body: String) -> Response {
    page_response(status, body, "no-store")
}

/// An HTML page under the console's policy (type, CSP, no framing, no
/// sniffing, same-origin referrers), cached as `cache_control` says.
pub fn page_response(
    status: StatusCode,
    body: impl IntoResponse,
    cache_control: &'static str,
) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    r
}

/// An error page: what went wrong, in words.
pub fn error(session: Option<&Session>, status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let main = format!(
        "<p class=\"msg error\" id=\"error\">{}</p><p><a href=\"/admin/\">Back to the overview</a></p>",
        esc(message)
    );
    respond(status, page(session, Nav::None, title, &main))
}

/// `303 See Other` to `to` (after a form), with `set_cookie` if given.
pub fn see_other(to: &str, set_cookie: Option<String>) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A page that moves on to `to` (a path of the console) by itself: for an
/// answer at the end of a cross-site redirect chain (the identity
/// provider's), where a `303` would carry the chain on and the browser
/// would not send the `SameSite=Strict` session cookie just set; the
/// refresh is this site's own navigation.
pub fn continue_to(to: &str, set_cookie: Option<String>) -> Response {
    let body = refreshing(
        None,
        Nav::None,
        "Signed in",
        &format!(
            "<p><a href=\"{}\" id=\"continue\">Continue to the console</a></p>",
            esc(to)
        ),
        0,
        to,
    );
    let mut r = respond(StatusCode::OK, body);
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().append(header::SET_COOKIE, c);
    }
    r
}

/// A CSV download (`crate::download`).
pub fn csv(name: &str, body: String) -> Response {
    crate::download::csv(name, body)
}

/// Each tag as a link to the search for it.
pub fn tag_links(tags: &[String]) -> String {
    tags.iter()
        .map(|t| {
            let q: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("tag", t)
                .finish();
            format!(
                "<a class=\"tag\" href=\"/admin/links?{}\">{}</a>",
                esc(&q),
                esc(t)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A number with thousands separators (`1 234 567`).
pub fn num(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_frames() {
        assert_eq!(num(0), "0");
        assert_eq!(num(1234567), "1\u{202f}234\u{202f}567");
        let p = page(None, Nav::None, "<T>", "x");
        assert!(p.contains("<title>&lt;T&gt; ·") && !p.contains("<T>"));
        assert!(p.contains("/admin/assets/admin."));
    }
}
