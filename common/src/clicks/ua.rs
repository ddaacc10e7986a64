//! User-agent classification: bot or not, and the device class.
//!
//! Runs on the edge for every click (or at flush time), so both answers
//! come from automatons built once: every bot pattern of
//! `common/data/bots.txt` (derived from `monperrus/crawler-user-agents`; the
//! file's header says which version and how) is one ASCII-case-insensitive
//! Aho-Corasick automaton, a single pass over the user agent whatever the
//! list's length, with no allocation; the few `^` patterns are prefix
//! compares. The device tokens are a second, small automaton.
//!
//! A `HEAD` request is always a bot click; that is the caller's decision
//! (it knows the method), made before asking [`device_class`]: see
//! [`crate::clicks::accum::Click`]. A missing or empty user agent is a bot
//! (every browser sends one).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use std::sync::OnceLock;

/// The maintained bot list (see its header comment).
pub const BOTS_TXT: &str = include_str!("../../data/bots.txt");

/// The device class of a click, as counted per link-day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Device {
    /// A phone.
    Mobile,
    /// A desktop or laptop browser.
    Desktop,
    /// A tablet (an iPad asking for the desktop site is desktop).
    Tablet,
    /// Every bot click, `HEAD` requests included, whatever the device.
    Bot,
    /// TVs, consoles and whatever the rules do not recognise.
    Other,
}

impl Device {
    /// Every class, in the order the API lists them.
    pub const ALL: [Device; 5] = [
        Device::Mobile,
        Device::Desktop,
        Device::Tablet,
        Device::Bot,
        Device::Other,
    ];

    /// The batch-format and API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Mobile => "mobile",
            Device::Desktop => "desktop",
            Device::Tablet => "tablet",
            Device::Bot => "bot",
            Device::Other => "other",
        }
    }

    /// The class spelled `s`.
    pub fn parse(s: &str) -> Option<Device> {
        Device::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// Position in [`Device::ALL`] (an array index for counters).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The compiled bot list.
struct Bots {
    /// Substring patterns; `None` only if the automaton could not be built
    /// (a test makes sure the shipped list builds).
    any: Option<AhoCorasick>,
    /// `^` patterns, lower-cased, without the `^`.
    prefixes: Vec<Vec<u8>>,
}

/// The lines of one of `common/data`'s files: trimmed, blank lines and
/// `#` comment lines skipped, in file order (the OpenResty module's
/// `clicks_ua.data_lines` reads them the same way).
pub fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Splits the list file into substring and prefix patterns (lower-cased).
fn parse_list(text: &str) -> (Vec<String>, Vec<Vec<u8>>) {
    let mut any = Vec::new();
    let mut prefixes = Vec::new();
    for p in data_lines(text) {
        match p.strip_prefix('^') {
            Some(rest) if !rest.is_empty() => prefixes.push(rest.to_ascii_lowercase().into_bytes()),
            Some(_) => {}
            None => any.push(p.to_ascii_lowercase()),
        }
    }
    (any, prefixes)
}

fn bots() -> &'static Bots {
    static B: OnceLock<Bots> = OnceLock::new();
    B.get_or_init(|| {
        let (any, prefixes) = parse_list(BOTS_TXT);
        // A DFA: about 1 ns a byte whatever the list's size, for a few MB
        // built once (the default NFA costs ~10 ns a byte here).
        let any = prefilter(any.iter().map(String::as_str), true);
        Bots { any, prefixes }
    })
}

/// Builds both automatons now (a few milliseconds, ~7 MB for the bot
/// list's DFA) rather than on the first click: an edge calls it at start.
pub fn warm_up() {
    let _ = bots();
    let _ = tokens();
}

/// How many patterns the bot list holds (substring and prefix).
pub fn bot_pattern_count() -> usize {
    let b = bots();
    b.any.as_ref().map_or(0, AhoCorasick::patterns_len) + b.prefixes.len()
}

/// Whether `ua` is a bot: empty, or matching a pattern of the bot list.
/// `HEAD` requests are bots too, but that is the caller's test.
pub fn is_bot(ua: &str) -> bool {
    is_bot_trimmed(ua.trim().as_bytes())
}

fn is_bot_trimmed(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return true;
    }
    let b = bots();
    if b.prefixes
        .iter()
        .any(|p| bytes.len() >= p.len() && bytes[..p.len()].eq_ignore_ascii_case(p))
    {
        return true;
    }
    b.any.as_ref().is_some_and(|ac| ac.is_match(bytes))
}

/// Device tokens, in the bit order of [`device_class`].
const TOKENS: [&str; 22] = [
    "ipad",          // 0 tablet
    "tablet",        // 1 tablet
    "kindle",        // 2 tablet
    "silk/",         // 3 tablet
    "playbook",      // 4 tablet
    "android",       // 5 tablet without "mobi", mobile with it
    "mobi",          // 6 mobile
    "iphone",        // 7 mobile
    "ipod",          // 8 mobile
    "windows phone", // 9 mobile
    "blackberry",    // 10 mobile
    "opera mini",    // 11 mobile
    "smart-tv",      // 12 other
    "smarttv",       // 13 other
    "crkey",         // 14 other
    "xbox",          // 15 other
    "playstation",   // 16 other
    "windows nt",    // 17 desktop
    "macintosh",     // 18 desktop
    "x11",           // 19 desktop
    "cros",          // 20 desktop
    "linux",         // 21 desktop
];
const TABLET: u32 = 0b1_1111;
const ANDROID: u32 = 1 << 5;
const MOBI: u32 = 1 << 6;
const MOBILE: u32 = 0b1111_1100_0000;
const OTHER: u32 = 0b1_1111 << 12;
const DESKTOP: u32 = 0b1_1111 << 17;

/// A DFA that tells whether any of `tokens` occurs (`None` if it cannot be
/// built: then every search runs): the bots', crawlers' and in-app
/// browsers' lists.
pub(crate) fn prefilter<'a>(
    tokens: impl IntoIterator<Item = &'a str>,
    caseless: bool,
) -> Option<AhoCorasick> {
    AhoCorasickBuilder::new()
        .ascii_case_insensitive(caseless)
        .match_kind(MatchKind::LeftmostFirst)
        .kind(Some(AhoCorasickKind::DFA))
        .build(tokens)
        .ok()
}

fn tokens() -> Option<&'static AhoCorasick> {
    static T: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    T.get_or_init(|| {
        AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(TOKENS)
            .ok()
    })
    .as_ref()
}

/// The device class of a click with user agent `ua`: [`Device::Bot`] for a
/// bot ([`is_bot`]); else tablet (iPad, "Tablet", Kindle, or Android
/// without "Mobi"), mobile ("Mobi", iPhone, Android, ...), other (TVs,
/// consoles), desktop (Windows NT, Macintosh, X11, CrOS, Linux), or other.
/// An iPad asking for the desktop site says "Macintosh" and counts as desktop.
pub fn device_class(ua: &str) -> Device {
    classify(ua.trim().as_bytes(), ua.as_bytes())
}

/// [`device_class`] of a raw header value (an edge reads bytes: a header
/// may carry any). A UTF-8 value is classified exactly as by
/// [`device_class`]; another is trimmed of ASCII whitespace only (the
/// patterns are ASCII, so the bytes that are not UTF-8 never match one).
pub fn device_class_bytes(ua: &[u8]) -> Device {
    match std::str::from_utf8(ua) {
        Ok(s) => device_class(s),
        Err(_) => classify(ua.trim_ascii(), ua),
    }
}

fn classify(trimmed: &[u8], ua: &[u8]) -> Device {
    if is_bot_trimmed(trimmed) {
        return Device::Bot;
    }
    let Some(ac) = tokens() else {
        return Device::Other;
    };
    let mut seen = 0u32;
    // Non-overlapping is enough: no two tokens overlap in a user agent
    // that matters (each token is its own word).
    for m in ac.find_iter(ua) {
        seen |= 1 << m.pattern().as_usize();
    }
    if seen & TABLET != 0 || (seen & ANDROID != 0 && seen & MOBI == 0) {
        Device::Tablet
    } else if seen & MOBILE != 0 || seen & ANDROID != 0 {
        Device::Mobile
    } else if seen & OTHER != 0 {
        Device::Other
    } else if seen & DESKTOP != 0 {
        Device::Desktop
    } else {
        Device::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const CHROME_WIN: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    pub(crate) const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
    pub(crate) const GOOGLEBOT: &str =
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

    const BROWSERS: [(&str, Device); 12] = [
        (CHROME_WIN, Device::Desktop),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15", Device::Desktop),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0", Device::Desktop),
        ("Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36", Device::Desktop),
        (IPHONE, Device::Mobile),
        ("Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1", Device::Tablet),
        ("Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.144 Mobile Safari/537.36", Device::Mobile),
        ("Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36", Device::Tablet),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.42(0x18002a2f) NetType/WIFI Language/zh_CN", Device::Mobile),
        ("Mozilla/5.0 (Linux; U; Android 11; zh-cn; M2012K11AC Build/RKQ1.200826.002) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/100.0.4896.127 Mobile Safari/537.36 XiaoMi/MiuiBrowser/17.1.80320", Device::Mobile),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; Xbox; Xbox One) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36 Edge/44.18363.8131", Device::Other),
        ("Mozilla/5.0 (Linux; Android 12; CUBOT KINGKONG 7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/110.0 Mobile Safari/537.36", Device::Mobile),
    ];

    #[test]
    fn the_list_builds_and_has_the_source_patterns() {
        assert!(bots().any.is_some());
        assert!(bot_pattern_count() > 1400, "{}", bot_pattern_count());
    }

    #[test]
    fn browsers_are_not_bots_and_get_their_class() {
        for (ua, class) in BROWSERS {
            assert!(!is_bot(ua), "{ua}");
            assert_eq!(device_class(ua), class, "{ua}");
        }
        assert_eq!(device_class("SomethingNew/1.0"), Device::Other);
        for (ua, class) in BROWSERS {
            assert_eq!(device_class_bytes(ua.as_bytes()), class, "{ua}");
            let mut raw = ua.as_bytes().to_vec();
            raw.extend_from_slice(b" \xff");
            assert_eq!(device_class_bytes(&raw), class, "{ua} + invalid byte");
        }
    }

    #[test]
    fn bot_user_agents() {
        for ua in [
            GOOGLEBOT,
            "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
            "curl/8.5.0",
            "CURL/8.5.0",
            "Wget/1.21",
            "python-requests/2.31.0",
            "Go-http-client/1.1",
            "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)",
            "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
            "",
            "   ",
        ] {
            assert!(is_bot(ua), "{ua:?}");
            assert_eq!(device_class(ua), Device::Bot, "{ua:?}");
        }
        assert_eq!(device_class_bytes(b"curl/8 \xff"), Device::Bot);
        assert_eq!(device_class_bytes(b" \t"), Device::Bot);
        // `^curl` is a prefix pattern: "curl" elsewhere is not a bot by it.
        assert!(!is_bot("Mozilla/5.0 (X11; Linux x86_64) MyApp-curly/1.0"));
    }

    #[test]
    fn list_syntax() {
        let (any, pre) = parse_list("# c\n\nFooBot\n^Bar/\n^\n");
        assert_eq!(any, vec!["foobot".to_string()]);
        assert_eq!(pre, vec![b"bar/".to_vec()]);
        for d in Device::ALL {
            assert_eq!(Device::parse(d.as_str()), Some(d));
            assert_eq!(Device::ALL[d.index()], d);
        }
    }

    /// Prints the cost per user agent (run with `--nocapture`; the figure
    /// that matters is the release build's: `cargo test --release`).
    #[test]
    fn cost_per_user_agent() {
        let uas: Vec<&str> = BROWSERS
            .iter()
            .map(|(u, _)| *u)
            .chain([GOOGLEBOT, "curl/8.5.0"])
            .collect();
        let _ = device_class(CHROME_WIN);
        let n = 200_000;
        let start = std::time::Instant::now();
        let mut bots = 0;
        for i in 0..n {
            if device_class(uas[i % uas.len()]) == Device::Bot {
                bots += 1;
            }
        }
        let ns = start.elapsed().as_nanos() / n as u128;
        let start = std::time::Instant::now();
        for i in 0..n {
            if is_bot(uas[i % uas.len()]) {
                bots += 1;
            }
        }
        let bot_ns = start.elapsed().as_nanos() / n as u128;
        assert!(bots > 0);
        println!(
            "device_class: {ns} ns per user agent, is_bot alone {bot_ns} ns ({} bot patterns, \
             automaton {} KiB, avg UA {} bytes)",
            bot_pattern_count(),
            super::bots()
                .any
                .as_ref()
                .map_or(0, AhoCorasick::memory_usage)
                / 1024,
            uas.iter().map(|u| u.len()).sum::<usize>() / uas.len()
        );
    }
}
