//! `pages:`: the look of the pages rendered for people (per domain, so
//! merchants can brand theirs) and how long caches may keep them.

use super::file::{PagesFile, ThemeFile};
use super::{err, ConfigError};
use shorturl_common::host::normalize_host;
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest page title accepted (characters).
const MAX_TITLE_CHARS: usize = 80;

/// The look of one domain's pages. Colours are validated `#rrggbb`, so
/// they can be written into CSS as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Theme {
    pub title: String,
    pub background: String,
    pub foreground: String,
    pub accent: String,
}

impl Default for Theme {
    fn default() -> Self {
        Theme {
            title: "Short link".into(),
            background: "#ffffff".into(),
            foreground: "#1a1a1a".into(),
            accent: "#0b57d0".into(),
        }
    }
}

/// The validated `pages:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagesConfig {
    pub default: Theme,
    /// Normalised host → its theme (fields it leaves out are the default's).
    pub domains: BTreeMap<String, Theme>,
    /// `Cache-Control` max-age of QR codes (they change only with the link's domain).
    pub qr_max_age: Duration,
    /// `Cache-Control` max-age of the preview page (it shows the URL, which edits change).
    pub preview_max_age: Duration,
}

impl Default for PagesConfig {
    fn default() -> Self {
        PagesConfig {
            default: Theme::default(),
            domains: BTreeMap::new(),
            qr_max_age: Duration::from_secs(86_400),
            preview_max_age: Duration::from_secs(60),
        }
    }
}

impl PagesConfig {
    /// The theme of pages served on `host` (the default for an unknown host).
    pub fn theme(&self, host: Option<&str>) -> &Theme {
        host.and_then(|h| self.domains.get(h))
            .unwrap_or(&self.default)
    }
}

/// True for `#rrggbb` (hex digits, either case).
fn is_colour(v: &str) -> bool {
    v.len() == 7 && v.starts_with('#') && v.bytes().skip(1).all(|b| b.is_ascii_hexdigit())
}

/// `f` over `base`, every field checked; `field` names it in errors.
fn theme(f: &ThemeFile, base: &Theme, field: &str) -> Result<Theme, ConfigError> {
    let colour = |v: &Option<String>, name: &str, fallback: &str| match v {
        None => Ok(fallback.to_owned()),
        Some(c) if is_colour(c) => Ok(c.to_ascii_lowercase()),
        Some(c) => err(
            format!("{field}.{name}"),
            format!("must be a #rrggbb colour (got {c:?})"),
        ),
    };
    let title = match &f.title {
        None => base.title.clone(),
        Some(t) if t.trim().is_empty() || t.chars().count() > MAX_TITLE_CHARS => {
            return err(
                format!("{field}.title"),
                format!("must be 1-{MAX_TITLE_CHARS} characters"),
            )
        }
        Some(t) if t.chars().any(char::is_control) => {
            return err(
                format!("{field}.title"),
                "must not contain control characters",
            )
        }
        Some(t) => t.clone(),
    };
    Ok(Theme {
        title,
        background: colour(&f.background, "background", &base.background)?,
        foreground: colour(&f.foreground, "foreground", &base.foreground)?,
        accent: colour(&f.accent, "accent", &base.accent)?,
    })
}

/// Validates `pages:`.
pub fn pages(f: PagesFile) -> Result<PagesConfig, ConfigError> {
    let default = theme(&f.default, &Theme::default(), "pages.default")?;
    let mut domains = BTreeMap::new();
    for (host, t) in &f.domains {
        let Some(n) = normalize_host(host) else {
            return err("pages.domains", format!("not a valid host: {host:?}"));
        };
        let th = theme(t, &default, &format!("pages.domains.{host}"))?;
        domains.insert(n, th);
    }
    let defaults = PagesConfig::default();
    let secs = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_secs);
    Ok(PagesConfig {
        default,
        domains,
        qr_max_age: secs(f.qr_max_age_secs, defaults.qr_max_age),
        preview_max_age: secs(f.preview_max_age_secs, defaults.preview_max_age),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::MIN;
    use super::super::Config;

    #[test]
    fn themes_inherit_the_default_and_are_found_by_host() {
        let text = format!(
            "{MIN}pages: {{default: {{title: Links, accent: '#AA0000'}}, domains: {{S.Shop55.com: {{background: '#000000'}}}}}}\n"
        );
        let c = Config::parse(&text, |_| None).unwrap();
        let shop = c.pages.theme(Some("s.shop55.com"));
        assert_eq!(shop.title, "Links");
        assert_eq!(shop.accent, "#aa0000");
        assert_eq!(shop.background, "#000000");
        assert_eq!(c.pages.theme(Some("other.com")).background, "#ffffff");
        assert_eq!(c.pages.theme(None).title, "Links");
        assert_eq!(c.pages.qr_max_age.as_secs(), 86_400);
        assert_eq!(c.pages.preview_max_age.as_secs(), 60);
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        let cases = [
            ("{default: {accent: red}}", "pages.default.accent"),
            (
                "{default: {background: '#12345'}}",
                "pages.default.background",
            ),
            (
                "{domains: {s.shop55.com: {foreground: '#12345g'}}}",
                "pages.domains.s.shop55.com.foreground",
            ),
            ("{default: {title: ''}}", "pages.default.title"),
            ("{domains: {'a b': {}}}", "pages.domains"),
            ("{default: {colour: '#000000'}}", "colour"),
        ];
        for (pages, field) in cases {
            let e = Config::parse(&format!("{MIN}pages: {pages}\n"), |_| None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
