//! Link rules (protocol 3, `docs/protocol.md` section 3.1.1): what a link
//! with options answers for one visitor. Sans I/O and shared by the origin
//! and the Pingora edge; the OpenResty module implements the same
//! (`lua-compat/openresty/lua/shorturl/link_rules.lua`), held identical by
//! the conformance suite.
//!
//! The options travel in the link's record as compact JSON (short keys,
//! no whitespace), so an edge decides without any lookup: an ordered list
//! of rules (first match wins, else the link's URL), each a set of
//! conditions that must all hold and one destination or a weighted split;
//! query forwarding; a fallback URL for an expired or disabled link.

use crate::clicks::ua::{device_class_bytes, Device};
use crate::memo::{remembered, Last};
use crate::request_rules::trim_ows;
use aho_corasick::AhoCorasick;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::OnceLock;

mod conditions;
pub use conditions::{Country, Member, Set};

/// The in-app browser patterns (see the file's header).
pub const INAPP_TXT: &str = include_str!("../data/inapp.txt");

/// Bounds a link's options keep (the API refuses more, readers of a record
/// refuse it as malformed).
pub const MAX_RULES: usize = 20;
/// Values of one condition list (devices, apps, countries, languages).
pub const MAX_VALUES: usize = 50;
/// Destinations of one split.
pub const MAX_VARIANTS: usize = 10;
/// Largest weight of one variant.
pub const MAX_WEIGHT: u32 = 10_000;
/// Longest query parameter name or value in a `q` condition.
pub const MAX_PARAM: usize = 128;

/// A link's options as its record carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkOptions {
    /// Merge the request's query string into the destination.
    #[serde(rename = "f", default, skip_serializing_if = "is_false")]
    pub forward_query: bool,
    /// Answered (redirect) instead of the 404 once the link has expired or
    /// been disabled.
    #[serde(rename = "x", default, skip_serializing_if = "Option::is_none")]
    pub expired_url: Option<String>,
    /// The link is disabled or expired: only `x` answers (a record kept
    /// for its fallback; without `x` the record would be a negative).
    #[serde(rename = "d", default, skip_serializing_if = "is_false")]
    pub gone: bool,
    /// The targeting rules, in order.
    #[serde(rename = "r", default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// The link has a social card (the origin keeps its title, description
    /// and image): a link-preview crawler gets the card page instead of
    /// the redirect (protocol 4.4; `crate::crawlers`).
    #[serde(rename = "g", default, skip_serializing_if = "is_false")]
    pub card: bool,
    /// The link needs a password (protocol 4.5; the origin keeps its
    /// hash): only a visitor with a valid unlock token (`crate::unlock`)
    /// gets its answer.
    #[serde(rename = "p", default, skip_serializing_if = "is_false")]
    pub password: bool,
    /// The in-app browsers that cannot open the link's destinations: their
    /// visitors get the guidance page instead of the redirect (protocol
    /// 4.6; the origin decides which links, from its `guide` settings).
    #[serde(rename = "b", default, skip_serializing_if = "Set::is_empty")]
    pub guide: Set<App>,
    /// A destination is on a screened domain (protocol 4.7; the origin
    /// decides which links, from its screening policy): visitors get the
    /// warning page instead of the redirect.
    #[serde(rename = "w", default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<Screen>,
}

/// What a link with a screened destination answers (protocol 4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Screen {
    /// The warning page, with a way on to the destination.
    Warn,
    /// The warning page and no way on.
    Block,
}

impl Screen {
    pub fn as_str(self) -> &'static str {
        match self {
            Screen::Warn => "warn",
            Screen::Block => "block",
        }
    }

    /// The JSON error (`error`, `message`) for clients that get no page.
    pub fn refusal(self) -> (&'static str, &'static str) {
        match self {
            Screen::Warn => (
                "destination_flagged",
                "this link's destination was flagged as unsafe",
            ),
            Screen::Block => ("destination_blocked", "this link's destination is blocked"),
        }
    }
}

impl LinkOptions {
    /// The URL `dest` names for a link whose own URL is `url` (`None`: the
    /// options have no such destination, e.g. since an edit removed it).
    pub fn url_of<'a>(&'a self, dest: Destination, url: &'a str) -> Option<&'a str> {
        match dest {
            Destination::Link => Some(url),
            Destination::Expired => self.expired_url.as_deref(),
            Destination::Rule { rule, variant } => {
                let r = self.rules.get(usize::from(rule))?;
                match variant {
                    None => r.url.as_deref(),
                    Some(v) => r.split.get(usize::from(v)).map(|(u, _)| u.as_str()),
                }
            }
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One rule: when every condition holds, its destination answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(rename = "c", default)]
    pub when: When,
    /// One destination…
    #[serde(rename = "u", default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// …or a weighted split: `[url, weight]` pairs.
    #[serde(rename = "s", default, skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<(String, u32)>,
}

/// The conditions of a rule; an absent one holds for everyone. Laid out
/// for the edge, which walks every rule of a link on each request: sets as
/// bits and codes inline, so a rule's conditions are one block with no
/// strings to follow (a link with five rules reads ~10 cache lines, not
/// ~25: `docs/perf.md`, "Link rules").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct When {
    #[serde(default, skip_serializing_if = "Set::is_empty")]
    pub dev: Set<DeviceCond>,
    #[serde(default, skip_serializing_if = "Set::is_empty")]
    pub app: Set<App>,
    /// ISO 3166-1 alpha-2, upper case.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pub cc: Box<[Country]>,
    /// Primary language subtags, lower case.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pub lang: Box<[Lang]>,
    /// Unix seconds: holds from this second on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    /// Unix seconds: holds before this second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// `[name, value]`: the request's query has this pair, byte for byte
    /// (boxed: rare, and read only when the request has a query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<Box<(String, String)>>,
}

/// A device condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceCond {
    Ios,
    Android,
    Mobile,
    Tablet,
    Desktop,
}

impl DeviceCond {
    pub const ALL: [DeviceCond; 5] = [
        DeviceCond::Ios,
        DeviceCond::Android,
        DeviceCond::Mobile,
        DeviceCond::Tablet,
        DeviceCond::Desktop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceCond::Ios => "ios",
            DeviceCond::Android => "android",
            DeviceCond::Mobile => "mobile",
            DeviceCond::Tablet => "tablet",
            DeviceCond::Desktop => "desktop",
        }
    }

    pub fn parse(s: &str) -> Option<DeviceCond> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// An in-app browser (the names of `common/data/inapp.txt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum App {
    Wechat,
    Qq,
    Alipay,
    Weibo,
    Dingtalk,
    Facebook,
    Instagram,
    Line,
    Tiktok,
}

impl App {
    pub const ALL: [App; 9] = [
        App::Wechat,
        App::Qq,
        App::Alipay,
        App::Weibo,
        App::Dingtalk,
        App::Facebook,
        App::Instagram,
        App::Line,
        App::Tiktok,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            App::Wechat => "wechat",
            App::Qq => "qq",
            App::Alipay => "alipay",
            App::Weibo => "weibo",
            App::Dingtalk => "dingtalk",
            App::Facebook => "facebook",
            App::Instagram => "instagram",
            App::Line => "line",
            App::Tiktok => "tiktok",
        }
    }

    pub fn parse(s: &str) -> Option<App> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// Why options are refused (the API names the field; a record with such
/// options is malformed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("too many rules (at most {MAX_RULES})")]
    TooManyRules,
    #[error("rule {0}: give exactly one of url and split")]
    Destination(usize),
    #[error(
        "rule {0}: a split needs 2 to {MAX_VARIANTS} destinations with weights 1 to {MAX_WEIGHT}"
    )]
    Split(usize),
    #[error("rule {0}: {1}")]
    Condition(usize, String),
    #[error("rule {0}: destination is not an absolute http(s) URL without whitespace")]
    Url(usize),
    #[error("expired_url is not an absolute http(s) URL without whitespace")]
    ExpiredUrl,
    #[error("gone without expired_url")]
    Gone,
}

/// The URL shape every destination has (the creation's own checks are
/// stricter; this is what a reader needs: no whitespace or controls, so the
/// record stays one line and `Location` one header).
pub fn is_destination(url: &str) -> bool {
    let lower = url
        .get(..8)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let scheme = if lower.starts_with("https://") {
        8
    } else if lower.starts_with("http://") {
        7
    } else {
        return false;
    };
    url.len() > scheme && url.len() <= 4096 && url.bytes().all(|b| b > 0x20 && b < 0x7f)
}

fn is_param(s: &str) -> bool {
    s.len() <= MAX_PARAM
        && s.bytes()
            .all(|b| b > 0x20 && b < 0x7f && b != b'&' && b != b'#')
}

impl LinkOptions {
    /// Whether a visitor with User-Agent `ua` gets the link's social card
    /// instead of its redirect (protocol 4.4): the link has one, is live,
    /// and `ua` is a link-preview crawler's. One rule for the edges and
    /// the origin. A password link shows none (its card page would link
    /// the destination).
    pub fn shows_card(&self, expired: bool, ua: Option<&[u8]>) -> bool {
        self.card
            && !self.password
            && !self.gone
            && !expired
            && ua.is_some_and(crate::crawlers::is_crawler)
    }

    /// Whether a visitor with User-Agent `ua` gets the in-app browser
    /// guidance instead of the redirect (protocol 4.6): a live link whose
    /// `b` holds the visitor's in-app browser.
    pub fn shows_guide(&self, expired: bool, ua: Option<&[u8]>) -> bool {
        !self.guide.is_empty()
            && !self.gone
            && !expired
            && ua.and_then(in_app).is_some_and(|a| self.guide.contains(a))
    }

    /// The screening of a live link (protocol 4.7): checked before every
    /// other option, for every visitor. A record kept for its fallback
    /// carries none.
    pub fn screened(&self, expired: bool) -> Option<Screen> {
        self.screen.filter(|_| !self.gone && !expired)
    }

    /// Whether a visitor must show an unlock token first (protocol 4.5):
    /// a live password link. A record kept for its fallback carries no
    /// `p`: the fallback is public.
    pub fn locked(&self, expired: bool) -> bool {
        self.password && !self.gone && !expired
    }

    /// True when the options change nothing (the record stays protocol 2).
    pub fn is_empty(&self) -> bool {
        *self == LinkOptions::default()
    }

    /// Checks the bounds of section 3.1.1.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if self.rules.len() > MAX_RULES {
            return Err(OptionsError::TooManyRules);
        }
        if self
            .expired_url
            .as_deref()
            .is_some_and(|u| !is_destination(u))
        {
            return Err(OptionsError::ExpiredUrl);
        }
        if self.gone && self.expired_url.is_none() {
            return Err(OptionsError::Gone);
        }
        for (i, r) in self.rules.iter().enumerate() {
            match (&r.url, r.split.is_empty()) {
                (Some(u), true) if is_destination(u) => {}
                (Some(_), true) => return Err(OptionsError::Url(i)),
                (None, false) => {
                    let ok_weights = (2..=MAX_VARIANTS).contains(&r.split.len())
                        && r.split.iter().all(|(_, w)| (1..=MAX_WEIGHT).contains(w));
                    if !ok_weights {
                        return Err(OptionsError::Split(i));
                    }
                    if r.split.iter().any(|(u, _)| !is_destination(u)) {
                        return Err(OptionsError::Url(i));
                    }
                }
                _ => return Err(OptionsError::Destination(i)),
            }
            r.when
                .validate()
                .map_err(|m| OptionsError::Condition(i, m))?;
        }
        Ok(())
    }

    /// The record form: compact JSON without whitespace.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the record form (validated).
    pub fn decode(s: &str) -> Option<LinkOptions> {
        if s.bytes().any(|b| b.is_ascii_whitespace()) {
            return None;
        }
        let o: LinkOptions = serde_json::from_str(s).ok()?;
        o.validate().ok()?;
        Some(o)
    }
}

impl When {
    fn validate(&self) -> Result<(), String> {
        for (name, n) in [("cc", self.cc.len()), ("lang", self.lang.len())] {
            if n > MAX_VALUES {
                return Err(format!("{name}: at most {MAX_VALUES} values"));
            }
        }
        if let (Some(f), Some(u)) = (self.from, self.until) {
            if f >= u {
                return Err("from must be before until".into());
            }
        }
        if let Some((k, v)) = self.q.as_deref() {
            if k.is_empty() || !is_param(k) || !is_param(v) || k.contains('=') {
                return Err("query: name and value are 1-128 URL characters".into());
            }
        }
        Ok(())
    }
}

/// 1–8 lower-case ASCII letters (RFC 5646's primary language subtag).
fn is_primary_tag(s: &str) -> bool {
    (1..=8).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase())
}

/// What the rules may ask of a request; each is read only when a rule
/// needs it.
pub trait Visitor {
    /// The `User-Agent` value.
    fn user_agent(&self) -> Option<&[u8]>;
    /// The `Accept-Language` value.
    fn accept_language(&self) -> Option<&[u8]>;
    /// The visitor's country (ISO 3166 alpha-2, upper case).
    fn country(&self) -> Option<[u8; 2]>;
    /// The raw query string (after `?`, without it; `None` without `?`).
    fn query(&self) -> Option<&str>;
    /// The client's split key ([`split_key`]); `None` without an address.
    fn split_key(&self) -> Option<String>;
}

/// Which destination answered: what the clicks of a link are split by.
/// Ordered as a link lists them: its URL, the rules in order, the fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// The link's own URL (no rule matched).
    Link,
    /// Rule `rule` (0-based); `variant`: which of its split (0-based),
    /// `None` for a single URL.
    Rule { rule: u8, variant: Option<u8> },
    /// The expiry fallback.
    Expired,
}

impl Destination {
    /// The label clicks and logs use: `link`, `r<rule>` or
    /// `r<rule>v<variant>` (1-based), `expired` (also its `Display`).
    pub fn label(&self) -> String {
        self.to_string()
    }

    /// The destination a [`Destination::label`] names: `link`, `expired`,
    /// `r<rule>` (1 to [`MAX_RULES`]) or `r<rule>v<variant>` (1 to
    /// [`MAX_VARIANTS`]), without leading zeros. What the origin accepts
    /// in a click batch, so no label outside that set is stored.
    pub fn parse(label: &str) -> Option<Destination> {
        fn ordinal(s: &str, max: usize) -> Option<u8> {
            if s.is_empty()
                || s.starts_with('0')
                || s.len() > 2
                || !s.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let n: usize = s.parse().ok()?;
            (1..=max).contains(&n).then(|| (n - 1) as u8)
        }
        match label {
            "link" => Some(Destination::Link),
            "expired" => Some(Destination::Expired),
            _ => {
                let rest = label.strip_prefix('r')?;
                let (rule, variant) = match rest.split_once('v') {
                    Some((r, v)) => (r, Some(ordinal(v, MAX_VARIANTS)?)),
                    None => (rest, None),
                };
                Some(Destination::Rule {
                    rule: ordinal(rule, MAX_RULES)?,
                    variant,
                })
            }
        }
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Link => f.write_str("link"),
            Destination::Rule {
                rule,
                variant: None,
            } => write!(f, "r{}", rule + 1),
            Destination::Rule {
                rule,
                variant: Some(v),
            } => write!(f, "r{}v{}", rule + 1, v + 1),
            Destination::Expired => f.write_str("expired"),
        }
    }
}

/// What a link answers one visitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice<'a> {
    pub url: Cow<'a, str>,
    pub dest: Destination,
}

/// The answer of a link with `opts` and URL `url`, expired (or not) at
/// `now`, for visitor `v`: `None` is the 404.
pub fn choose<'a>(
    opts: &'a LinkOptions,
    url: &'a str,
    expired: bool,
    code: &str,
    v: &impl Visitor,
    now: u64,
) -> Option<Choice<'a>> {
    if expired || opts.gone {
        return opts.expired_url.as_deref().map(|x| Choice {
            url: Cow::Borrowed(x),
            dest: Destination::Expired,
        });
    }
    let mut ua: Option<UaFacts> = None;
    let mut lang: Option<Option<Lang>> = None;
    let mut country: Option<Option<[u8; 2]>> = None;
    let mut chosen = Choice {
        url: Cow::Borrowed(url),
        dest: Destination::Link,
    };
    for (i, r) in opts.rules.iter().enumerate() {
        if !r.when.holds(v, now, &mut ua, &mut lang, &mut country) {
            continue;
        }
        let (u, variant) = match &r.url {
            Some(u) => (u.as_str(), None),
            None => {
                let (u, at) = pick(&r.split, code, v.split_key().as_deref());
                (u, Some(at as u8))
            }
        };
        chosen = Choice {
            url: Cow::Borrowed(u),
            dest: Destination::Rule {
                rule: i as u8,
                variant,
            },
        };
        break;
    }
    if opts.forward_query {
        if let Some(q) = v.query() {
            if let Cow::Owned(s) = forward_query(&chosen.url, q) {
                chosen.url = Cow::Owned(s);
            }
        }
    }
    Some(chosen)
}

impl When {
    fn holds(
        &self,
        v: &impl Visitor,
        now: u64,
        ua: &mut Option<UaFacts>,
        lang: &mut Option<Option<Lang>>,
        country: &mut Option<Option<[u8; 2]>>,
    ) -> bool {
        if self.from.is_some_and(|f| now < f) || self.until.is_some_and(|u| now >= u) {
            return false;
        }
        if let Some((k, want)) = self.q.as_deref() {
            if !v.query().is_some_and(|q| has_pair(q, k, want)) {
                return false;
            }
        }
        if !self.dev.is_empty() || !self.app.is_empty() {
            let f =
                ua.get_or_insert_with(|| UaFacts::of_repeated(v.user_agent().unwrap_or_default()));
            if !self.dev.is_empty() && !f.is_any(self.dev, v) {
                return false;
            }
            if !self.app.is_empty() && !f.app.is_some_and(|a| self.app.contains(a)) {
                return false;
            }
        }
        if !self.lang.is_empty() {
            let l = lang.get_or_insert_with(|| preferred_language_repeated(v.accept_language()));
            if !l.as_ref().is_some_and(|l| self.lang.contains(l)) {
                return false;
            }
        }
        if !self.cc.is_empty() {
            let c = country.get_or_insert_with(|| v.country());
            if !c.is_some_and(|c| self.cc.contains(&Country(c))) {
                return false;
            }
        }
        true
    }
}

/// What the rules read off a User-Agent, computed once per request: the
/// platform and the in-app browser (one automaton pass each); the device
/// class, which needs the bot list, only when a rule asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UaFacts {
    pub ios: bool,
    pub android: bool,
    pub app: Option<App>,
    device: Option<Device>,
}

impl UaFacts {
    /// The platform and app of `ua` (empty: neither).
    pub fn of(ua: &[u8]) -> UaFacts {
        let (ios, android) = platform(ua);
        UaFacts {
            ios,
            android,
            app: in_app(ua),
            device: None,
        }
    }

    /// [`UaFacts::of`] through a one-entry memo per thread: a browser
    /// sends the same User-Agent with every request of a connection, so a
    /// repeat costs a byte compare instead of two automaton passes (the
    /// memo the click counter keeps for the device class, `edge/src/clicks`).
    /// The device class is left to compute, as in [`UaFacts::of`].
    pub fn of_repeated(ua: &[u8]) -> UaFacts {
        thread_local! {
            static LAST: RefCell<Last<UaFacts>> = const { RefCell::new(Last::new()) };
        }
        remembered(&LAST, ua, UA_MEMO_BYTES, || UaFacts::of(ua))
    }

    /// The click device class of `ua` (see `clicks::ua`).
    pub fn device(&mut self, ua: &[u8]) -> Device {
        *self.device.get_or_insert_with(|| device_class_bytes(ua))
    }

    /// Whether any of `want` describes the visitor: bit tests, the device
    /// class computed only when `want` names one.
    fn is_any(&mut self, want: Set<DeviceCond>, v: &impl Visitor) -> bool {
        if (self.ios && want.contains(DeviceCond::Ios))
            || (self.android && want.contains(DeviceCond::Android))
        {
            return true;
        }
        let classes = [DeviceCond::Mobile, DeviceCond::Tablet, DeviceCond::Desktop];
        if !classes.iter().any(|c| want.contains(*c)) {
            return false;
        }
        match self.device(v.user_agent().unwrap_or_default()) {
            Device::Mobile => want.contains(DeviceCond::Mobile),
            Device::Tablet => want.contains(DeviceCond::Tablet),
            Device::Desktop => want.contains(DeviceCond::Desktop),
            Device::Bot | Device::Other => false,
        }
    }
}

/// User-Agents up to this length are remembered by [`UaFacts::of_repeated`].
const UA_MEMO_BYTES: usize = 512;

/// The in-app tokens of [`INAPP_TXT`] in file order, each with a searcher
/// built once (SIMD `memmem`: ~100 instructions a token for a User-Agent;
/// an Aho-Corasick pass reporting overlapping matches cost ~1,700), behind
/// one prefilter pass.
struct InApp {
    tokens: Vec<(App, memchr::memmem::Finder<'static>)>,
    /// Whether any token occurs: one DFA pass, so a User-Agent of no
    /// in-app browser (nearly all) skips the searchers.
    any: Option<AhoCorasick>,
}

fn inapp() -> &'static InApp {
    static P: OnceLock<InApp> = OnceLock::new();
    P.get_or_init(|| {
        let pairs: Vec<(App, &str)> = crate::clicks::ua::data_lines(INAPP_TXT)
            .filter_map(|l| {
                let (app, token) = l.split_once(' ')?;
                Some((App::parse(app)?, token.trim()))
            })
            .collect();
        InApp {
            any: crate::clicks::ua::prefilter(pairs.iter().map(|(_, t)| *t), false),
            tokens: pairs
                .iter()
                .map(|(a, t)| (*a, memchr::memmem::Finder::new(t.as_bytes()).into_owned()))
                .collect(),
        }
    })
}

/// The link rules' platform facts of `ua`: whether it contains `iphone`,
/// `ipad` or `ipod` (iOS) and `android`, ASCII-case-insensitive.
pub fn platform(ua: &[u8]) -> (bool, bool) {
    static F: OnceLock<[memchr::memmem::Finder<'static>; 4]> = OnceLock::new();
    let [iphone, ipad, ipod, android] = F.get_or_init(|| {
        ["iphone", "ipad", "ipod", "android"]
            .map(|t| memchr::memmem::Finder::new(t.as_bytes()).into_owned())
    });
    let mut buf = [0u8; 512];
    let lowered;
    let lower: &[u8] = match buf.get_mut(..ua.len()) {
        Some(b) => {
            for (d, s) in b.iter_mut().zip(ua) {
                *d = s.to_ascii_lowercase();
            }
            b
        }
        None => {
            lowered = ua.to_ascii_lowercase();
            &lowered
        }
    };
    let has = |f: &memchr::memmem::Finder<'_>| f.find(lower).is_some();
    (has(iphone) || has(ipad) || has(ipod), has(android))
}

/// Builds the automatons the rules read a User-Agent with (the in-app
/// tokens, the device tokens and the bot list: a few milliseconds, ~7 MB)
/// now rather than on the first request that needs them.
pub fn warm_up() {
    let _ = inapp();
    crate::clicks::ua::warm_up();
}

/// The in-app browser `ua` belongs to: that of the first pattern (in file
/// order) it contains.
pub fn in_app(ua: &[u8]) -> Option<App> {
    let p = inapp();
    if p.any.as_ref().is_some_and(|ac| !ac.is_match(ua)) {
        return None;
    }
    p.tokens
        .iter()
        .find(|(_, f)| f.find(ua).is_some())
        .map(|(a, _)| *a)
}

/// A primary language subtag, lower case, without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lang {
    buf: [u8; 8],
    len: u8,
}

impl Lang {
    fn of_bytes(tag: &[u8]) -> Option<Lang> {
        if !(1..=8).contains(&tag.len()) || !tag.iter().all(u8::is_ascii_alphabetic) {
            return None;
        }
        let mut buf = [0u8; 8];
        for (d, b) in buf.iter_mut().zip(tag) {
            *d = b.to_ascii_lowercase();
        }
        Some(Lang {
            buf,
            len: tag.len() as u8,
        })
    }

    /// `s` if it is a primary language tag in lower case (the record's
    /// form).
    pub fn parse(s: &str) -> Result<Lang, String> {
        is_primary_tag(s)
            .then(|| Lang::of_bytes(s.as_bytes()))
            .flatten()
            .ok_or_else(|| format!("language {s:?} is not a primary language tag"))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

/// The visitor's language: the primary subtag (lower case) of the
/// `Accept-Language` range with the highest q-value (the first of equals),
/// skipping `*`, q=0 and anything that is not a language range. At most
/// the first 32 ranges are read.
pub fn preferred_language(header: Option<&[u8]>) -> Option<String> {
    preferred_language_of(header).map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned())
}

/// The language of the in-app browser guidance (protocol 4.6): `zh` for a
/// visitor whose language is Chinese, else `en`.
pub fn guide_language(accept_language: Option<&[u8]>) -> &'static str {
    match preferred_language_of(accept_language) {
        Some(l) if l.as_bytes() == b"zh" => "zh",
        _ => "en",
    }
}

/// [`preferred_language`] without allocating.
fn preferred_language_of(header: Option<&[u8]>) -> Option<Lang> {
    let h = header?;
    std::str::from_utf8(h).ok()?;
    let mut best: Option<(u32, &[u8])> = None;
    for item in h.split(|&b| b == b',').take(32) {
        let mut parts = item.split(|&b| b == b';');
        let range = trim_ows(parts.next().unwrap_or_default());
        let mut q = 1000;
        for p in parts {
            let p = trim_ows(p);
            if let Some(v) = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q=")) {
                q = qvalue(v).unwrap_or(0);
            }
        }
        let primary = range.split(|&b| b == b'-').next().unwrap_or_default();
        if q == 0
            || !(1..=8).contains(&primary.len())
            || !primary.iter().all(u8::is_ascii_alphabetic)
        {
            continue;
        }
        if best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, primary));
            if q == 1000 {
                // Nothing later can rank higher (ties keep the first).
                break;
            }
        }
    }
    best.and_then(|(_, p)| Lang::of_bytes(p))
}

/// [`preferred_language_of`] through a one-entry memo per thread (the
/// header repeats on every request of a browser's connection).
fn preferred_language_repeated(header: Option<&[u8]>) -> Option<Lang> {
    thread_local! {
        static LAST: RefCell<Last<Option<Lang>>> = const { RefCell::new(Last::new()) };
    }
    match header {
        None => None,
        Some(h) => remembered(&LAST, h, 128, || preferred_language_of(Some(h))),
    }
}

/// An RFC 9110 qvalue in thousandths: `0`, `0.5`, `1`, `1.000`.
fn qvalue(v: &[u8]) -> Option<u32> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let thousandths = frac
        .iter()
        .copied()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u32, |a, b| a * 10 + u32::from(b - b'0'));
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Whether query string `q` has the pair `name=value`, compared as sent
/// (a pair without `=` has the value "").
fn has_pair(q: &str, name: &str, value: &str) -> bool {
    q.split('&').any(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        k == name && v == value
    })
}

/// The split key of a client: IPv4 as dotted decimal; IPv6 cut to its /64,
/// as 32 lower-case hex digits and `/64` (the OpenResty module's client
/// key at the default prefix).
pub fn split_key(ip: std::net::IpAddr) -> String {
    use std::fmt::Write;
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => {
            let mut s = String::with_capacity(35);
            for b in &v6.octets()[..8] {
                let _ = write!(s, "{b:02x}");
            }
            s.push_str("0000000000000000/64");
            s
        }
    }
}

/// The variant of `split` for the client with `key`: a stable hash of
/// (code, key) over the weights (protocol 3.1.1); no key: the first.
fn pick<'a>(split: &'a [(String, u32)], code: &str, key: Option<&str>) -> (&'a str, usize) {
    let total: u32 = split.iter().map(|(_, w)| w).sum();
    let Some(key) = key else {
        return (split.first().map_or("", |(u, _)| u.as_str()), 0);
    };
    let mut at = split_hash(code, key) % total.max(1);
    for (i, (u, w)) in split.iter().enumerate() {
        if at < *w {
            return (u.as_str(), i);
        }
        at -= w;
    }
    (split.first().map_or("", |(u, _)| u.as_str()), 0)
}

/// `fmix32(crc32(code ‖ " " ‖ key))`: CRC-32 (IEEE) for a hash both edges
/// have, MurmurHash3's finaliser so neighbouring addresses spread.
pub fn split_hash(code: &str, key: &str) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(code.as_bytes());
    h.update(b" ");
    h.update(key.as_bytes());
    fmix32(h.finalize())
}

fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The QR marker (protocol 3.7, 4.1): a query parameter the QR codes
/// carry, counted as the click's `source` `qr` (`clicks::dims`) and never
/// forwarded ([`forward_query`]).
pub const QR_MARKER: &str = "qr=1";

/// `target` with the request's query `q` merged in: the pairs of `q`
/// whose name the target's own query does not have, in order, appended
/// to the target's query (before its fragment). Bytes a `Location` must
/// not carry raw are percent-encoded. Unchanged (borrowed) when nothing is
/// added.
pub fn forward_query<'a>(target: &'a str, q: &str) -> Cow<'a, str> {
    let (base, frag) = match target.find('#') {
        Some(i) => target.split_at(i),
        None => (target, ""),
    };
    let own = base.split_once('?').map(|(_, q)| q);
    let is_own = |name: &str| {
        own.is_some_and(|o| {
            o.split('&')
                .any(|p| !p.is_empty() && p.split_once('=').map_or(p, |(k, _)| k) == name)
        })
    };
    let mut out: Option<String> = None;
    for p in q.split('&') {
        // The QR marker (protocol 3.7) is the edge's, never the destination's.
        if p.is_empty() || p == QR_MARKER || is_own(p.split_once('=').map_or(p, |(k, _)| k)) {
            continue;
        }
        match out.as_mut() {
            // A separator between appended pairs (never judged by the last
            // byte: an appended pair may itself end in `?` or `&`-less `?`).
            Some(s) => s.push('&'),
            None => {
                let mut s = String::with_capacity(target.len() + q.len() + 8);
                s.push_str(base);
                match own {
                    None => s.push('?'),
                    Some(o) if o.is_empty() || o.ends_with('&') => {}
                    Some(_) => s.push('&'),
                }
                out = Some(s);
            }
        }
        let Some(s) = out.as_mut() else { continue };
        for b in p.bytes() {
            if b > 0x20 && b < 0x7f && !b"\"<>\\^`{|}".contains(&b) {
                s.push(b as char);
            } else {
                s.push_str(&format!("%{b:02X}"));
            }
        }
    }
    match out {
        Some(mut s) => {
            s.push_str(frag);
            Cow::Owned(s)
        }
        None => Cow::Borrowed(target),
    }
}

#[cfg(test)]
mod tests;
