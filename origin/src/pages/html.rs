//! The HTML pages: the preview of a link and the 404 pages for people.
//!
//! Every value written into a page goes through [`escape`]; the pages need
//! no script at all, and their only style is inline, allowed by its hash in
//! the `Content-Security-Policy` built with the page ([`Page::csp`]).

use crate::config::Theme;
use base64::Engine;
use sha2::{Digest, Sha256};
use shorturl_common::link_rules::Screen;

/// `s` with the five HTML-significant characters escaped: safe in text
/// and in a double- or single-quoted attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Why a link has no page (what the 404 page says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// Never issued, deleted, or not a link of this domain.
    Unknown,
    /// Past its expiry.
    Expired,
    /// Disabled by its owner.
    Disabled,
}

impl Gone {
    fn text(self) -> (&'static str, &'static str) {
        match self {
            Gone::Unknown => (
                "Link not found",
                "There is no short link at this address. Check that it was typed correctly.",
            ),
            Gone::Expired => (
                "Link expired",
                "This short link has expired and no longer leads anywhere.",
            ),
            Gone::Disabled => (
                "Link disabled",
                "This short link has been disabled by its owner.",
            ),
        }
    }
}

/// What the preview page shows of a live link.
pub struct Preview<'a> {
    pub code: &'a str,
    pub domain: &'a str,
    /// The stored destination (validated http/https at creation).
    pub url: &'a str,
    /// `YYYY-MM-DD`.
    pub created: &'a str,
}

/// A rendered page and the policy that lets its style (only) apply.
pub struct Page {
    pub body: Vec<u8>,
    pub csp: String,
    /// `Referrer-Policy`: `no-referrer`, but `same-origin` on a page whose
    /// form posts to itself (under `no-referrer` browsers send `Origin:
    /// null`, and the entry could not tell its own site from another).
    pub referrer: &'static str,
}

fn style(t: &Theme) -> String {
    format!(
        "body{{margin:0;font:16px/1.5 system-ui,sans-serif;background:{bg};color:{fg}}}\
         main{{max-width:36rem;margin:10vh auto;padding:0 1rem}}\
         h1{{font-size:1.5rem}}code{{display:block;overflow-wrap:anywhere;padding:.5rem;border:1px solid {accent}}}\
         a.button{{display:inline-block;margin-top:1rem;padding:.5rem 1.25rem;background:{accent};color:{bg};text-decoration:none;border-radius:4px}}\
         img{{display:block;margin-top:1rem}}\
         input,button{{font:inherit;padding:.4rem .6rem}}\
         button{{margin-left:.5rem;background:{accent};color:{bg};border:0;border-radius:4px}}\
         p.error{{font-weight:bold}}",
        bg = t.background,
        fg = t.foreground,
        accent = t.accent
    )
}

fn page(theme: &Theme, heading: &str, main: &str) -> Page {
    page_with_head(theme, heading, "", main)
}

/// [`page`] with `head` (markup, already escaped) in its `<head>`.
fn page_with_head(theme: &Theme, heading: &str, head: &str, main: &str) -> Page {
    page_posting(theme, heading, head, main, "'none'", "en")
}

/// [`page_with_head`] whose forms may post to `form_action` (CSP source).
fn page_posting(
    theme: &Theme,
    heading: &str,
    head: &str,
    main: &str,
    form_action: &str,
    lang: &str,
) -> Page {
    let style = style(theme);
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(style.as_bytes()));
    let body = format!(
        "<!DOCTYPE html>\n<html lang=\"{lang}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\">\
         <title>{title} · {heading}</title>{head}<style>{style}</style></head>\
         <body><main><h1>{heading}</h1>{main}<p><small>{title}</small></p></main></body></html>\n",
        title = escape(&theme.title),
        heading = escape(heading),
    );
    Page {
        referrer: if form_action == "'none'" {
            "no-referrer"
        } else {
            "same-origin"
        },
        body: body.into_bytes(),
        csp: format!(
            "default-src 'none'; style-src 'sha256-{hash}'; img-src 'self'; base-uri 'none'; \
             form-action {form_action}; frame-ancestors 'none'"
        ),
    }
}

/// True for a URL a button may lead to: `http:` or `https:` only.
fn is_web_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// The destination's host as a person reads it: in Unicode, followed by
/// its ASCII (punycode) form when the two differ, so a look-alike name
/// (`xn--pple-43d.com`, shown as `аpple.com`) is visible for what it is.
fn destination_host(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let ascii = parsed.host_str()?;
    let (unicode, _) = idna::domain_to_unicode(ascii);
    Some(if unicode == ascii {
        format!("<strong>{}</strong>", escape(ascii))
    } else {
        format!(
            "<strong>{}</strong> (<span class=\"ascii\">{}</span>)",
            escape(&unicode),
            escape(ascii)
        )
    })
}

/// The preview page: the destination as text and its real host, the
/// domain, the creation date, the QR code, and a plain link to continue.
pub fn preview(theme: &Theme, p: &Preview<'_>) -> Page {
    let url = escape(p.url);
    let host = destination_host(p.url)
        .map(|h| format!("<p>It goes to the site {h}.</p>"))
        .unwrap_or_default();
    let button = if is_web_url(p.url) {
        format!(
            "<a class=\"button\" href=\"{url}\" rel=\"noopener noreferrer nofollow\">Continue</a>"
        )
    } else {
        String::new()
    };
    let main = format!(
        "<p>This short link leads to:</p><code>{url}</code>{host}\
         <p>Short link on <strong>{domain}</strong>, created {created}.</p>{button}\
         <img src=\"/{code}.svg?size=160\" width=\"160\" height=\"160\" alt=\"QR code of this short link\">",
        domain = escape(p.domain),
        created = escape(p.created),
        code = escape(p.code),
    );
    page(theme, "Where this link goes", &main)
}

/// What a link's social card shows (protocol 4.4).
pub struct CardPage<'a> {
    /// The link's short URL (`og:url`).
    pub short_url: &'a str,
    /// The stored destination (the page's "Continue").
    pub url: &'a str,
    pub title: Option<&'a str>,
    pub description: Option<&'a str>,
    /// An absolute https URL (validated by the API).
    pub image: Option<&'a str>,
}

/// The social card: Open Graph and Twitter card tags for link-preview
/// crawlers, and for a person who opens it the title, the description and
/// a plain link on. Without a title the theme's names the card.
pub fn card(theme: &Theme, c: &CardPage<'_>) -> Page {
    let title = c.title.unwrap_or(&theme.title);
    let mut head = String::new();
    let mut meta = |attr: &str, name: &str, value: &str| {
        head.push_str(&format!(
            "<meta {attr}=\"{name}\" content=\"{}\">",
            escape(value)
        ));
    };
    meta("property", "og:type", "website");
    meta("property", "og:url", c.short_url);
    meta("property", "og:title", title);
    meta("name", "twitter:title", title);
    if let Some(d) = c.description {
        meta("property", "og:description", d);
        meta("name", "description", d);
        meta("name", "twitter:description", d);
    }
    let kind = match c.image {
        Some(i) => {
            meta("property", "og:image", i);
            meta("name", "twitter:image", i);
            "summary_large_image"
        }
        None => "summary",
    };
    meta("name", "twitter:card", kind);
    let description = c
        .description
        .map(|d| format!("<p>{}</p>", escape(d)))
        .unwrap_or_default();
    let button = if is_web_url(c.url) {
        format!(
            "<a class=\"button\" href=\"{}\" rel=\"noopener noreferrer nofollow\">Continue</a>",
            escape(c.url)
        )
    } else {
        String::new()
    };
    page_with_head(theme, title, &head, &format!("{description}{button}"))
}

/// The password form of a password-protected link (protocol 4.5), with
/// `error` said above it after a refused entry. It posts to the URL it
/// was shown on (no `action`: the query stays), and names nothing of the
/// link: not its destination, not its code.
pub fn password(theme: &Theme, error: Option<&str>) -> Page {
    let error = error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e)))
        .unwrap_or_default();
    let main = format!(
        "<p>This link is protected. Enter its password to continue.</p>{error}\
         <form method=\"post\"><label for=\"password\">Password</label> \
         <input id=\"password\" name=\"password\" type=\"password\" \
         autocomplete=\"current-password\" maxlength=\"128\" required autofocus>\
         <button type=\"submit\">Continue</button></form>"
    );
    // Browsers hold a form's whole redirect chain to `form-action`: the
    // entry's 303 leads to the link, whose redirect leads anywhere.
    page_posting(
        theme,
        "Password required",
        "",
        &main,
        "'self' http: https:",
        "en",
    )
}

/// The in-app browser guidance (protocol 4.6) in `lang` (`zh`, else
/// English): how to open the link in the system browser, and its short
/// URL to copy. No script: the visitor does it by hand.
pub fn guide(theme: &Theme, lang: &str, short_url: &str) -> Page {
    let url = escape(short_url);
    let (lang, heading, main) = if lang == "zh" {
        (
            "zh",
            "请在浏览器中打开",
            format!(
                "<p>应用内的浏览器无法打开这个链接。</p>\
                 <p>请点击右上角的「···」，选择「在浏览器中打开」。</p>\
                 <p>或复制下面的链接，粘贴到浏览器中打开：</p><code>{url}</code>"
            ),
        )
    } else {
        (
            "en",
            "Open in your browser",
            format!(
                "<p>This app's built-in browser cannot open this link.</p>\
                 <p>Tap <strong>···</strong> at the top right and choose \
                 <strong>Open in browser</strong>.</p>\
                 <p>Or copy this link into your browser:</p><code>{url}</code>"
            ),
        )
    };
    page_posting(theme, heading, "", &main, "'none'", lang)
}

/// The warning of a link with a screened destination (protocol 4.7): the
/// flagged host as text and, for `warn` only, a way on to the link's URL.
pub fn warning(theme: &Theme, host: &str, screen: Screen, url: &str) -> Page {
    let host = escape(host);
    let on = match screen {
        Screen::Warn if is_web_url(url) => format!(
            "<p>If you trust it anyway:</p>             <a class=\"button\" href=\"{}\" rel=\"noopener noreferrer nofollow\">Continue to {host}</a>",
            escape(url)
        ),
        _ => "<p>This link has been disabled to protect you.</p>".to_owned(),
    };
    let main = format!(
        "<p>This short link leads to <strong>{host}</strong>, a site flagged as unsafe \
         (phishing, malware or fraud).</p>{on}"
    );
    page(theme, "Warning: unsafe destination", &main)
}

/// The 404 page for people: what happened, never where the link went.
pub fn not_found(theme: &Theme, why: Gone) -> Page {
    let (heading, text) = why.text();
    page(theme, heading, &format!("<p>{}</p>", escape(text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_has_a_way_on_only_when_it_warns() {
        let u = "https://evil.example/?a=1&b=\"<x>";
        let warn =
            String::from_utf8(warning(&Theme::default(), "evil.example", Screen::Warn, u).body)
                .unwrap();
        assert!(
            warn.contains("href=\"https://evil.example/?a=1&amp;b=&quot;&lt;x&gt;\""),
            "{warn}"
        );
        assert!(warn.contains("Continue to evil.example"));
        let block = warning(&Theme::default(), "<evil>", Screen::Block, u);
        let body = String::from_utf8(block.body).unwrap();
        assert!(
            !body.contains("href=") && body.contains("&lt;evil&gt;"),
            "{body}"
        );
        assert!(!body.contains("<script") && block.csp.contains("default-src 'none'"));
    }

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape("\"><script>alert('x')&</script>"),
            "&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&amp;&lt;/script&gt;"
        );
        assert_eq!(escape("plain é"), "plain é");
    }

    #[test]
    fn the_password_form_posts_to_itself_and_escapes_its_message() {
        let p = password(&Theme::default(), Some("<b>Wrong</b>"));
        let body = String::from_utf8(p.body).unwrap();
        assert!(body.contains("<form method=\"post\">"), "{body}");
        assert!(body.contains("name=\"password\" type=\"password\""));
        assert!(body.contains("&lt;b&gt;Wrong&lt;/b&gt;") && !body.contains("<b>"));
        assert!(!body.contains("<script"));
        assert!(p.csp.contains("form-action 'self'") && !p.csp.contains("script-src"));
        let plain = String::from_utf8(password(&Theme::default(), None).body).unwrap();
        assert!(!plain.contains("class=\"error\""));
    }

    #[test]
    fn the_guide_speaks_chinese_or_english_and_escapes_the_url() {
        let zh = String::from_utf8(guide(&Theme::default(), "zh", "http://s/a\"<b>").body).unwrap();
        assert!(
            zh.contains("<html lang=\"zh\">") && zh.contains("在浏览器中打开"),
            "{zh}"
        );
        assert!(
            zh.contains("<code>http://s/a&quot;&lt;b&gt;</code>"),
            "{zh}"
        );
        let en = String::from_utf8(guide(&Theme::default(), "fr", "http://s/a").body).unwrap();
        assert!(
            en.contains("<html lang=\"en\">") && en.contains("Open in browser"),
            "{en}"
        );
        assert!(!en.contains("<script") && !en.contains("<form"));
    }

    #[test]
    fn preview_shows_a_hostile_url_as_text() {
        let url = "https://x.example/?q=\"><script>alert(1)</script>";
        let p = preview(
            &Theme::default(),
            &Preview {
                code: "abc123",
                domain: "sho.rt",
                url,
                created: "2026-01-02",
            },
        );
        let body = String::from_utf8(p.body).unwrap();
        assert!(!body.contains("<script"), "{body}");
        assert!(
            body.contains("q=&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{body}"
        );
        assert!(
            body.contains("2026-01-02") && body.contains("sho.rt"),
            "{body}"
        );
        assert!(p.csp.contains("default-src 'none'") && !p.csp.contains("script-src"));
    }

    /// The preview page of a link to `url`.
    fn preview_of(url: &str) -> String {
        let p = Preview {
            code: "abc123",
            domain: "sho.rt",
            url,
            created: "2026-01-02",
        };
        String::from_utf8(preview(&Theme::default(), &p).body).unwrap()
    }

    #[test]
    fn preview_names_the_real_host_in_unicode_and_punycode() {
        // A backslash authority, stored as the browser reads it.
        let body = preview_of("https://evil.example/@good.example/");
        assert!(
            body.contains("the site <strong>evil.example</strong>"),
            "{body}"
        );
        let body = preview_of("https://xn--pple-43d.com/");
        assert!(
            body.contains(
                "<strong>\u{430}pple.com</strong> (<span class=\"ascii\">xn--pple-43d.com</span>)"
            ),
            "{body}"
        );
    }

    #[test]
    fn only_web_urls_get_a_button() {
        assert!(preview_of("HTTPS://a.example/").contains("class=\"button\""));
        assert!(!preview_of("javascript:alert(1)").contains("class=\"button\""));
    }

    #[test]
    fn a_card_escapes_its_fields_and_names_its_image() {
        let c = CardPage {
            short_url: "https://sho.rt/abc123",
            url: "https://shop.example/sale",
            title: Some("Sale \"50%\" <b>off</b>"),
            description: Some("Today & tomorrow"),
            image: Some("https://img.example/a.png?x=1&y=2"),
        };
        let p = card(&Theme::default(), &c);
        let body = String::from_utf8(p.body).unwrap();
        assert!(!body.contains("<b>") && !body.contains("<script"), "{body}");
        assert!(body.contains(
            "<meta property=\"og:title\" content=\"Sale &quot;50%&quot; &lt;b&gt;off&lt;/b&gt;\">"
        ));
        assert!(body.contains("<meta property=\"og:url\" content=\"https://sho.rt/abc123\">"));
        assert!(body.contains(
            "<meta property=\"og:image\" content=\"https://img.example/a.png?x=1&amp;y=2\">"
        ));
        assert!(body.contains("content=\"summary_large_image\""));
        assert!(body.contains("<p>Today &amp; tomorrow</p>"), "{body}");
        assert!(body.contains("href=\"https://shop.example/sale\""));
        assert!(p.csp.contains("default-src 'none'") && !p.csp.contains("script-src"));
        let plain = CardPage {
            title: None,
            description: None,
            image: None,
            ..c
        };
        let body = String::from_utf8(card(&Theme::default(), &plain).body).unwrap();
        assert!(body.contains("content=\"summary\"") && !body.contains("og:image"));
        assert!(
            body.contains("<meta property=\"og:title\" content=\"Short link\">"),
            "{body}"
        );
    }

    #[test]
    fn not_found_pages_say_why_and_use_the_theme() {
        let t = Theme {
            title: "<Shop>".into(),
            accent: "#123456".into(),
            ..Theme::default()
        };
        let body = String::from_utf8(not_found(&t, Gone::Disabled).body).unwrap();
        assert!(
            body.contains("Link disabled") && body.contains("&lt;Shop&gt;"),
            "{body}"
        );
        assert!(body.contains("#123456"));
        let body = String::from_utf8(not_found(&t, Gone::Expired).body).unwrap();
        assert!(body.contains("Link expired"));
    }
}
