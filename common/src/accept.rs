//! Whether a client prefers HTML (protocol 4.2): a small, allocation-free
//! reading of `Accept` with q-values (RFC 9110 12.5.1). Shared by the origin
//! (which renders the 404 page) and the edge (which fetches it for browsers).
//!
//! The page for people is chosen only when `text/html` is wanted more than
//! `application/json`: `*/*` alone (curl, most libraries) weighs both the
//! same and keeps the protocol's JSON.

/// The weight (q × 1000) `accept` gives `ty/sub`: that of the most specific
/// range matching it (`ty/sub` over `ty/*` over `*/*`), 0 if none does.
fn weight(accept: &str, ty: &str, sub: &str) -> u16 {
    let mut best: Option<(u8, u16)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let Some((t, s)) = media.split_once('/') else {
            continue;
        };
        let (t, s) = (t.trim(), s.trim());
        let specificity = if t.eq_ignore_ascii_case(ty) && s.eq_ignore_ascii_case(sub) {
            3
        } else if t.eq_ignore_ascii_case(ty) && s == "*" {
            2
        } else if t == "*" && s == "*" {
            1
        } else {
            continue;
        };
        let q = parts.find_map(q_value).unwrap_or(1000);
        if best.is_none_or(|(sp, _)| specificity > sp) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0, |(_, q)| q)
}

/// `q=0.5` → 500; an unparsable q counts as 0 (not acceptable).
fn q_value(param: &str) -> Option<u16> {
    let (k, v) = param.split_once('=')?;
    if !k.trim().eq_ignore_ascii_case("q") {
        return None;
    }
    let v = v.trim();
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    let q = match int {
        "1" if frac.bytes().all(|b| b == b'0') => 1000,
        "0" if frac.len() <= 3 && frac.bytes().all(|b| b.is_ascii_digit()) => {
            let mut n: u16 = 0;
            for i in 0..3 {
                n = n * 10 + frac.as_bytes().get(i).map_or(0, |b| u16::from(b - b'0'));
            }
            n
        }
        _ => 0,
    };
    Some(q)
}

/// True when `accept` wants `text/html` more than `application/json`.
pub fn prefers_html(accept: Option<&str>) -> bool {
    let Some(a) = accept else {
        return false;
    };
    let html = weight(a, "text", "html");
    html > 0 && html > weight(a, "application", "json")
}

#[cfg(test)]
mod tests {
    use super::prefers_html;

    #[test]
    fn browsers_get_html_and_programs_json() {
        let firefox = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        for a in [
            firefox,
            "text/html",
            "text/*",
            "TEXT/HTML; charset=utf-8",
            "application/json;q=0.5, text/html",
        ] {
            assert!(prefers_html(Some(a)), "{a}");
        }
        for a in [
            "*/*",
            "application/json",
            "text/html;q=0.1, application/json",
            "text/html;q=0, */*",
            "text/html;q=0.5, */*;q=0.5",
            "text/plain",
            "",
            "garbage",
            "text/html;q=abc",
        ] {
            assert!(!prefers_html(Some(a)), "{a}");
        }
        assert!(!prefers_html(None));
    }

    #[test]
    fn the_most_specific_range_decides() {
        // text/html is refused outright even though */* is welcome.
        assert!(!prefers_html(Some("*/*, text/html;q=0")));
        assert!(prefers_html(Some(
            "text/html;q=0.9, application/*;q=0.3, */*;q=0.2"
        )));
        assert!(prefers_html(Some(
            "text/html;q=0.501, application/json;q=0.5"
        )));
    }
}
