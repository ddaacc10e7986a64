//! The grammar of the pages for people (protocol section 4.1), shared by the
//! origin that renders them and the edge that caches them: which paths are
//! pages ([`PageKind::of_path`]) and which `?size=`/`?margin=` a QR code
//! request means ([`QrParams::from_query`]). The edge keys its page cache on
//! the parsed parameters, so it must read a query exactly as the origin does.

/// Which page a request asks for (also the `kind` label of `pages_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    Svg,
    Png,
    Preview,
    /// A link's social card (protocol 4.4): what link-preview crawlers get
    /// on `/{code}`, served through the page cache from `/{code}.card`.
    Card,
    /// A password link's form (protocol 4.5): what browsers get on
    /// `/{code}` without an unlock token, from `/{code}.password`.
    Password,
    /// The in-app browser guidance (protocol 4.6): what the listed in-app
    /// browsers get on `/{code}`, from `/{code}.guide?lang=zh|en`.
    Guide,
    /// The warning of a link with a screened destination (protocol 4.7):
    /// what browsers get on `/{code}`, from `/{code}.warning`.
    Warning,
}

impl PageKind {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            PageKind::Svg => "svg",
            PageKind::Png => "png",
            PageKind::Preview => "preview",
            PageKind::Card => "card",
            PageKind::Password => "password",
            PageKind::Guide => "guide",
            PageKind::Warning => "warning",
        }
    }

    /// `/{code}.svg`, `/{code}.png`, `/{code}+`, `/{code}.card`,
    /// `/{code}.password`, `/{code}.guide` or `/{code}.warning` → the kind
    /// and the code
    /// (not yet checked to be a valid code).
    pub fn of_path(path: &str) -> Option<(PageKind, &str)> {
        let rest = path.strip_prefix('/')?;
        if let Some(code) = rest.strip_suffix(".svg") {
            Some((PageKind::Svg, code))
        } else if let Some(code) = rest.strip_suffix(".png") {
            Some((PageKind::Png, code))
        } else if let Some(code) = rest.strip_suffix(".card") {
            Some((PageKind::Card, code))
        } else if let Some(code) = rest.strip_suffix(".password") {
            Some((PageKind::Password, code))
        } else if let Some(code) = rest.strip_suffix(".guide") {
            Some((PageKind::Guide, code))
        } else if let Some(code) = rest.strip_suffix(".warning") {
            Some((PageKind::Warning, code))
        } else {
            rest.strip_suffix('+').map(|code| (PageKind::Preview, code))
        }
    }
}

/// Smallest and largest `?size=` (pixels).
pub const SIZE_RANGE: std::ops::RangeInclusive<u32> = 64..=1024;
/// Largest `?margin=` (modules of quiet zone on each side).
pub const MAX_MARGIN: u32 = 16;
/// `?size=` when absent.
pub const DEFAULT_SIZE: u32 = 256;
/// `?margin=` when absent (the quiet zone the standard asks for).
pub const DEFAULT_MARGIN: u32 = 4;

/// A QR code's rendering parameters, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QrParams {
    /// Side of the image in pixels.
    pub size: u32,
    /// Light modules around the code on each side.
    pub margin: u32,
}

/// Why `?size=` or `?margin=` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QrParamError {
    #[error("size must be a whole number of pixels from 64 to 1024")]
    Size,
    #[error("margin must be a whole number of modules from 0 to 16")]
    Margin,
}

impl QrParams {
    /// Reads `size` and `margin` from a query string (other keys ignored;
    /// a repeated key counts as its last value).
    pub fn from_query(query: Option<&str>) -> Result<QrParams, QrParamError> {
        let mut p = QrParams {
            size: DEFAULT_SIZE,
            margin: DEFAULT_MARGIN,
        };
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "size" => {
                    p.size = number(&v)
                        .filter(|n| SIZE_RANGE.contains(n))
                        .ok_or(QrParamError::Size)?
                }
                "margin" => {
                    p.margin = number(&v)
                        .filter(|n| *n <= MAX_MARGIN)
                        .ok_or(QrParamError::Margin)?
                }
                _ => {}
            }
        }
        Ok(p)
    }
}

/// Plain decimal digits only (no sign, no spaces), at most 4 of them.
fn number(v: &str) -> Option<u32> {
    if v.is_empty() || v.len() > 4 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// The language of a guidance page's query (`lang=zh`; anything else,
/// or none, is `en`): what the origin renders and the page cache keys.
pub fn guide_lang_of_query(query: Option<&str>) -> &'static str {
    let zh = query.is_some_and(|q| q.split('&').any(|p| p == "lang=zh"));
    if zh {
        "zh"
    } else {
        "en"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_kind() {
        assert_eq!(
            PageKind::of_path("/abc123.svg"),
            Some((PageKind::Svg, "abc123"))
        );
        assert_eq!(
            PageKind::of_path("/abc123.png"),
            Some((PageKind::Png, "abc123"))
        );
        assert_eq!(
            PageKind::of_path("/abc123+"),
            Some((PageKind::Preview, "abc123"))
        );
        assert_eq!(PageKind::of_path("/abc123"), None);
        assert_eq!(PageKind::of_path("/abc123.gif"), None);
    }

    #[test]
    fn params_are_bounded() {
        let ok = |q| QrParams::from_query(Some(q));
        assert_eq!(
            QrParams::from_query(None),
            Ok(QrParams {
                size: 256,
                margin: 4
            })
        );
        assert_eq!(
            ok("size=64&margin=0"),
            Ok(QrParams {
                size: 64,
                margin: 0
            })
        );
        assert_eq!(
            ok("size=1024&margin=16&x=1"),
            Ok(QrParams {
                size: 1024,
                margin: 16
            })
        );
        assert_eq!(
            ok("%73ize=100&size=120"),
            Ok(QrParams {
                size: 120,
                margin: 4
            })
        );
        for q in [
            "size=63",
            "size=1025",
            "size=abc",
            "size=",
            "size=-1",
            "size=+64",
            "size=00064",
            "size=9999&size=256",
        ] {
            assert_eq!(ok(q), Err(QrParamError::Size), "{q}");
        }
        for q in ["margin=17", "margin=a", "margin=-0"] {
            assert_eq!(ok(q), Err(QrParamError::Margin), "{q}");
        }
    }
}
