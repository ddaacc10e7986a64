//! The dimensions of a human click (protocol 3.7, section 3.4 "Version
//! 4"): country, browser and OS family, language, QR or link, the UTM
//! parameters of the redirect's `Location` and, with a city database
//! (protocol 3.9, opt-in), the city.
//!
//! An edge reads them on the request thread into a fixed-size [`Dims`]
//! (allocating only for UTM values), the accumulator counts them per
//! link-day, and a batch sends every value but each dimension's default,
//! which the origin infers from the day's human clicks. The browser and OS
//! families come from `common/data/ua_families.txt`, a data file the
//! OpenResty module reads too: both edges agree byte for byte, which no
//! parser crate with a Lua twin would give.

use crate::link_rules::{in_app, App};
use std::sync::OnceLock;

/// The family file (see its header).
pub const UA_FAMILIES_TXT: &str = include_str!("../../data/ua_families.txt");

/// Values of a dimension named per link-day in one batch; the rest are
/// summed under [`super::OTHER_REFERRER`] (`~other`), as referrer hosts are.
pub const TOP_VALUES: usize = 20;

/// Longest UTM value sent as it is (longer ones are `~other`).
pub const MAX_UTM_VALUE: usize = 64;

/// A dimension, in the order a batch lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Country,
    Browser,
    Os,
    Lang,
    Source,
    UtmSource,
    UtmMedium,
    UtmCampaign,
    /// Protocol 3.9: sent only by an edge with `clicks.city` on.
    City,
}

impl Dim {
    pub const ALL: [Dim; 9] = [
        Dim::Country,
        Dim::Browser,
        Dim::Os,
        Dim::Lang,
        Dim::Source,
        Dim::UtmSource,
        Dim::UtmMedium,
        Dim::UtmCampaign,
        Dim::City,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dim::Country => "country",
            Dim::Browser => "browser",
            Dim::Os => "os",
            Dim::Lang => "lang",
            Dim::Source => "source",
            Dim::UtmSource => "utm_source",
            Dim::UtmMedium => "utm_medium",
            Dim::UtmCampaign => "utm_campaign",
            Dim::City => "city",
        }
    }

    pub fn parse(s: &str) -> Option<Dim> {
        Dim::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The value of a click the batch does not name (the origin stores the
    /// day's remaining human clicks under it).
    pub fn default_value(self) -> &'static str {
        match self {
            Dim::Country | Dim::City => "unknown",
            Dim::Browser | Dim::Os => "other",
            Dim::Source => "link",
            Dim::Lang | Dim::UtmSource | Dim::UtmMedium | Dim::UtmCampaign => "-",
        }
    }

    /// Whether a batch may name `v` for this dimension: a value the edges'
    /// rules produce (never the default), or `~other`. Families are checked
    /// by their grammar, not this build's file, so an edge with a longer
    /// file is not refused by an older origin.
    pub fn is_valid_value(self, v: &str) -> bool {
        if v == super::OTHER_REFERRER {
            return true;
        }
        let b = v.as_bytes();
        match self {
            Dim::Country => b.len() == 2 && b.iter().all(u8::is_ascii_uppercase),
            Dim::Browser | Dim::Os => is_family_name(v) && v != "other",
            Dim::Lang => (2..=3).contains(&b.len()) && b.iter().all(u8::is_ascii_lowercase),
            Dim::Source => v == "qr",
            Dim::UtmSource | Dim::UtmMedium | Dim::UtmCampaign => is_utm_value(b),
            Dim::City => is_city_value(b),
        }
    }
}

/// Longest city value sent as it is (longer ones are `~other`).
pub const MAX_CITY_VALUE: usize = 64;

/// Whether a city name's byte is sent as it is (else `%XX`).
fn city_byte_kept(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'~' | b'-')
}

/// The `city` value of a database record (protocol 3.9): the upper-case
/// country, `-`, the name percent-encoded byte by byte (upper-case hex);
/// `~other` past [`MAX_CITY_VALUE`] bytes; `None` without a name or a
/// two-letter country.
pub fn city_value(country: &str, name: &str) -> Option<std::sync::Arc<str>> {
    let [a, b] = country.as_bytes() else {
        return None;
    };
    if name.is_empty() || !a.is_ascii_alphabetic() || !b.is_ascii_alphabetic() {
        return None;
    }
    let mut v = String::with_capacity(3 + name.len());
    v.push(char::from(a.to_ascii_uppercase()));
    v.push(char::from(b.to_ascii_uppercase()));
    v.push('-');
    for &c in name.as_bytes() {
        if city_byte_kept(c) {
            v.push(char::from(c));
        } else {
            v.push('%');
            v.push(char::from(b"0123456789ABCDEF"[usize::from(c >> 4)]));
            v.push(char::from(b"0123456789ABCDEF"[usize::from(c & 15)]));
        }
        if v.len() > MAX_CITY_VALUE {
            return Some(super::OTHER_REFERRER.into());
        }
    }
    Some(v.into())
}

/// A `city` value as [`city_value`] writes it.
fn is_city_value(b: &[u8]) -> bool {
    let Some((country, name)) = b.split_at_checked(3) else {
        return false;
    };
    if b.len() > MAX_CITY_VALUE
        || name.is_empty()
        || !matches!(country, [x, y, b'-'] if x.is_ascii_uppercase() && y.is_ascii_uppercase())
    {
        return false;
    }
    let mut i = 0;
    while i < name.len() {
        match name[i] {
            b'%' => match name.get(i + 1..i + 3) {
                Some([h, l]) if is_upper_hex(*h) && is_upper_hex(*l) => i += 3,
                _ => return false,
            },
            c if city_byte_kept(c) => i += 1,
            _ => return false,
        }
    }
    true
}

fn is_upper_hex(c: u8) -> bool {
    c.is_ascii_digit() || (b'A'..=b'F').contains(&c)
}

/// A `city` value for people: `London, GB` (the name decoded; a value not
/// of the grammar as it is).
pub fn city_label(v: &str) -> String {
    let b = v.as_bytes();
    if !is_city_value(b) {
        return v.to_owned();
    }
    let mut name = Vec::with_capacity(b.len());
    let mut i = 3;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
            name.push(hex(b[i + 1]) << 4 | hex(b[i + 2]));
            i += 3;
        } else {
            name.push(b[i]);
            i += 1;
        }
    }
    format!("{}, {}", String::from_utf8_lossy(&name), &v[..2])
}

/// The UTM parameters, in [`Dim`] order.
pub const UTM_NAMES: [&str; 3] = ["utm_source", "utm_medium", "utm_campaign"];

fn is_family_name(s: &str) -> bool {
    (1..=16).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A UTM value sent as it is: 1-64 of `[A-Za-z0-9._~%+-]`, not the
/// default `-`.
fn is_utm_value(b: &[u8]) -> bool {
    (1..=MAX_UTM_VALUE).contains(&b.len())
        && b != b"-"
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._~%+-".contains(c))
}

/// The browser and OS families: index 0 is `other`; browsers 1..=9 are the
/// in-app browsers ([`App::ALL`] order), then the file's families in order
/// of first appearance.
struct Families {
    browsers: Vec<&'static str>,
    browser_tokens: Vec<(u8, memchr::memmem::Finder<'static>)>,
    oses: Vec<&'static str>,
    os_tokens: Vec<(u8, memchr::memmem::Finder<'static>)>,
}

fn families() -> &'static Families {
    static F: OnceLock<Families> = OnceLock::new();
    F.get_or_init(|| {
        let mut f = Families {
            browsers: std::iter::once("other")
                .chain(App::ALL.iter().map(|a| a.as_str()))
                .collect(),
            browser_tokens: Vec::new(),
            oses: vec!["other"],
            os_tokens: Vec::new(),
        };
        for line in super::ua::data_lines(UA_FAMILIES_TXT) {
            let mut parts = line.splitn(3, ' ');
            let (Some(dim), Some(family), Some(token)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if !is_family_name(family) || family == "other" || token.is_empty() {
                continue;
            }
            let (names, tokens) = match dim {
                "browser" => (&mut f.browsers, &mut f.browser_tokens),
                "os" => (&mut f.oses, &mut f.os_tokens),
                _ => continue,
            };
            let i = match names.iter().position(|n| *n == family) {
                Some(i) => i,
                None => {
                    names.push(family);
                    names.len() - 1
                }
            };
            let Ok(i) = u8::try_from(i) else { continue };
            tokens.push((
                i,
                memchr::memmem::Finder::new(token.as_bytes()).into_owned(),
            ));
        }
        f
    })
}

/// The browser family of `ua` (index into the family names; 0 `other`).
pub fn browser_family(ua: &[u8]) -> u8 {
    if let Some(app) = in_app(ua) {
        return App::ALL
            .iter()
            .position(|a| *a == app)
            .map_or(0, |i| i as u8 + 1);
    }
    first_token(&families().browser_tokens, ua)
}

/// The OS family of `ua` (index; 0 `other`).
pub fn os_family(ua: &[u8]) -> u8 {
    first_token(&families().os_tokens, ua)
}

fn first_token(tokens: &[(u8, memchr::memmem::Finder<'static>)], ua: &[u8]) -> u8 {
    tokens
        .iter()
        .find(|(_, f)| f.find(ua).is_some())
        .map_or(0, |(i, _)| *i)
}

/// The name of browser family `i` (`other` when out of range).
pub fn browser_name(i: u8) -> &'static str {
    families()
        .browsers
        .get(usize::from(i))
        .copied()
        .unwrap_or("other")
}

/// The name of OS family `i` (`other` when out of range).
pub fn os_name(i: u8) -> &'static str {
    families()
        .oses
        .get(usize::from(i))
        .copied()
        .unwrap_or("other")
}

/// A primary language subtag of 2-3 lower-case letters, inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LangTag {
    buf: [u8; 3],
    len: u8,
}

impl LangTag {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("-")
    }
}

/// The `lang` dimension of an `Accept-Language` value: the primary subtag
/// of its first range (up to `,`, then `;`, spaces and tabs trimmed, up to
/// `-` or `_`), lower-cased, when it is 2-3 ASCII letters.
pub fn lang_of(accept_language: Option<&[u8]>) -> Option<LangTag> {
    let v = accept_language?;
    let range = v.split(|b| *b == b',').next()?;
    let range = range.split(|b| *b == b';').next()?;
    let range = range.trim_ascii_start();
    let end = range
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(0, |i| i + 1);
    let range = &range[..end];
    let start = range.iter().position(|b| !matches!(b, b' ' | b'\t'))?;
    let range = &range[start..];
    let tag = range.split(|b| *b == b'-' || *b == b'_').next()?;
    if !(2..=3).contains(&tag.len()) || !tag.iter().all(u8::is_ascii_alphabetic) {
        return None;
    }
    let mut buf = [0u8; 3];
    for (d, s) in buf.iter_mut().zip(tag) {
        *d = s.to_ascii_lowercase();
    }
    Some(LangTag {
        buf,
        len: tag.len() as u8,
    })
}

/// The QR marker (protocol 4.1), kept with the query forwarding that
/// drops it (the link rules need nothing of the click counting).
pub use crate::link_rules::QR_MARKER;

/// Whether the request's query carries [`QR_MARKER`] as one of its
/// `&`-separated parameters.
pub fn has_qr_marker(query: Option<&[u8]>) -> bool {
    query.is_some_and(|q| {
        memchr::memmem::find(q, QR_MARKER.as_bytes()).is_some()
            && q.split(|b| *b == b'&').any(|p| p == QR_MARKER.as_bytes())
    })
}

/// The UTM values of a redirect, in [`UTM_NAMES`] order (`None`: the
/// default `-`); a value the batch cannot carry is `~other`. Held inline
/// (one allocation for the shared `Arc` a click carries, not one per
/// value: a busy edge reads them on every click of a link it has not just
/// seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Utm {
    buf: [u8; 3 * MAX_UTM_VALUE],
    /// (start, length) of each value in `buf`; length 0: none.
    spans: [(u8, u8); 3],
}

impl Default for Utm {
    fn default() -> Self {
        Utm {
            buf: [0; 3 * MAX_UTM_VALUE],
            spans: [(0, 0); 3],
        }
    }
}

impl Utm {
    /// The value of [`UTM_NAMES`]`[i]`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let (start, len) = *self.spans.get(i)?;
        let (start, len) = (usize::from(start), usize::from(len));
        // Only ASCII of `is_utm_value` or `~other` is stored.
        (len > 0).then(|| std::str::from_utf8(&self.buf[start..start + len]).unwrap_or_default())
    }

    /// The three values.
    pub fn values(&self) -> [Option<&str>; 3] {
        [self.get(0), self.get(1), self.get(2)]
    }

    fn set(&mut self, i: usize, value: &[u8]) {
        let start = i * MAX_UTM_VALUE;
        self.buf[start..start + value.len()].copy_from_slice(value);
        self.spans[i] = (start as u8, value.len() as u8);
    }
}

/// Whether `url` may carry UTM parameters (it has `utm_`): one search
/// with a searcher built once (building one costs more than the search).
pub fn may_have_utm(url: &[u8]) -> bool {
    static UTM: OnceLock<memchr::memmem::Finder<'static>> = OnceLock::new();
    UTM.get_or_init(|| memchr::memmem::Finder::new(b"utm_"))
        .find(url)
        .is_some()
}

/// The UTM parameters of the `Location` `url` (its query: after the first
/// `?`, before any `#`); `None` when it has none, which costs one search
/// for the common URL without `utm_`. Built in the `Arc` that clicks share.
pub fn utm_of(url: &str) -> Option<std::sync::Arc<Utm>> {
    if !may_have_utm(url.as_bytes()) {
        return None;
    }
    utm_parse(url)
}

/// [`utm_of`] for a caller that has already seen [`may_have_utm`] say yes
/// (the search is the costly part for a URL without UTM).
pub fn utm_parse(url: &str) -> Option<std::sync::Arc<Utm>> {
    let url = url.as_bytes();
    let mut at = memchr::memchr(b'?', url)? + 1;
    // Built at the first value (a URL whose `utm_` is elsewhere costs no
    // allocation and no zeroing).
    let mut utm: Option<Utm> = None;
    let mut seen = [false; 3];
    // One parameter per turn, from `at` to the next `&` (the query ends at
    // `#`). A parameter not starting `utm_` is skipped by one search; a
    // `utm_` one (short) is read byte by byte, where the searches' setup
    // cost more than the bytes (callgrind: 611 instructions a click read
    // the plain way, split at `&`; 516 so).
    while at < url.len() && url[at] != b'#' {
        let rest = &url[at..];
        let Some(name_value) = rest.strip_prefix(b"utm_") else {
            match memchr::memchr2(b'&', b'#', rest) {
                Some(i) if rest[i] == b'&' => at += i + 1,
                _ => break,
            }
            continue;
        };
        let len = name_value
            .iter()
            .position(|b| matches!(b, b'&' | b'#'))
            .unwrap_or(name_value.len());
        let p = &name_value[..len];
        // Past the parameter and its `&`; a `#` ends the loop.
        at += 4 + len;
        if url.get(at) == Some(&b'&') {
            at += 1;
        }
        let eq = p.iter().position(|b| *b == b'=').unwrap_or(p.len());
        let i = match &p[..eq] {
            b"source" => 0,
            b"medium" => 1,
            b"campaign" => 2,
            _ => continue,
        };
        let value = p.get(eq + 1..).unwrap_or_default();
        // The first parameter of a name decides; empty or `-` is the
        // default, as if absent.
        if std::mem::replace(&mut seen[i], true) || value.is_empty() || value == b"-" {
            continue;
        }
        let utm = utm.get_or_insert_with(Utm::default);
        if is_utm_value(value) {
            utm.set(i, value);
        } else {
            utm.set(i, super::OTHER_REFERRER.as_bytes());
        }
    }
    utm.map(std::sync::Arc::new)
}

/// What an edge reads off one human click for its dimensions: fixed size,
/// heap only for UTM values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dims {
    /// ISO 3166-1 alpha-2, upper case (`None`: `unknown`).
    pub country: Option<[u8; 2]>,
    /// [`browser_family`] (0: `other`).
    pub browser: u8,
    /// [`os_family`] (0: `other`).
    pub os: u8,
    pub lang: Option<LangTag>,
    /// Reached through a QR code.
    pub qr: bool,
    /// Shared: an edge hands every click to one link the same values
    /// (`edge/src/clicks/record.rs` remembers the last `Location`'s).
    pub utm: Option<std::sync::Arc<Utm>>,
    /// [`city_value`] (`None`: `unknown`; always without `clicks.city`).
    pub city: Option<std::sync::Arc<str>>,
    /// The visitor (`uniq::visitor`), for the day's unique visitors; `None`
    /// without an address or the day's salt.
    pub visitor: Option<u64>,
}

/// The inputs of [`Dims::read`], as both edges have them.
#[derive(Debug, Clone, Copy, Default)]
pub struct DimsInput<'a> {
    pub user_agent: Option<&'a [u8]>,
    pub accept_language: Option<&'a [u8]>,
    pub country: Option<[u8; 2]>,
    /// The request's raw query (after `?`).
    pub query: Option<&'a [u8]>,
    /// The redirect's `Location`.
    pub location: Option<&'a str>,
    /// The city value, looked up by the caller (it holds the database).
    pub city: Option<&'a str>,
    /// The visitor, computed by the caller (it holds the day's salt).
    pub visitor: Option<u64>,
}

impl Dims {
    /// The dimensions of a click (the UA families uncached: edges remember
    /// them per thread with the device class).
    pub fn read(i: &DimsInput<'_>) -> Dims {
        let ua = i.user_agent.unwrap_or_default();
        Dims {
            country: i.country.filter(|c| c.iter().all(u8::is_ascii_uppercase)),
            browser: browser_family(ua),
            os: os_family(ua),
            lang: lang_of(i.accept_language),
            qr: has_qr_marker(i.query),
            utm: i.location.and_then(utm_of),
            city: i.city.map(std::sync::Arc::from),
            visitor: i.visitor,
        }
    }

    /// Whether any dimension has a value other than its default.
    pub fn has_values(&self) -> bool {
        self.country.is_some()
            || self.browser != 0
            || self.os != 0
            || self.lang.is_some()
            || self.qr
            || self.utm.is_some()
            || self.city.is_some()
    }

    /// Whether `other` has the same values (the visitor aside).
    fn same_values(&self, other: &Dims) -> bool {
        self.country == other.country
            && self.browser == other.browser
            && self.os == other.os
            && self.lang == other.lang
            && self.qr == other.qr
            && match (&self.utm, &other.utm) {
                (None, None) => true,
                (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b) || a == b,
                _ => false,
            }
            && self.city == other.city
    }

    /// The value of `dim` (`None`: the default).
    fn value(&self, dim: Dim) -> Option<&str> {
        match dim {
            Dim::Country => self
                .country
                .as_ref()
                .and_then(|c| std::str::from_utf8(c).ok()),
            Dim::Browser => (self.browser != 0).then(|| browser_name(self.browser)),
            Dim::Os => (self.os != 0).then(|| os_name(self.os)),
            Dim::Lang => self.lang.as_ref().map(LangTag::as_str),
            Dim::Source => self.qr.then_some("qr"),
            Dim::UtmSource => self.utm_value(0),
            Dim::UtmMedium => self.utm_value(1),
            Dim::UtmCampaign => self.utm_value(2),
            Dim::City => self.city.as_deref(),
        }
    }

    fn utm_value(&self, i: usize) -> Option<&str> {
        self.utm.as_ref().and_then(|u| u.get(i))
    }
}

/// One counted value of a link-day: what [`DayDims`] keeps per value of
/// the clicks unlike the day's first.
#[derive(Debug, Clone)]
enum Val {
    Country([u8; 2]),
    Browser(u8),
    Os(u8),
    Lang(LangTag),
    Qr,
    /// The value at this index of the (shared) UTM values.
    Utm(u8, std::sync::Arc<Utm>),
    City(std::sync::Arc<str>),
}

impl PartialEq for Val {
    fn eq(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Country(a), Val::Country(b)) => a == b,
            (Val::Browser(a), Val::Browser(b)) | (Val::Os(a), Val::Os(b)) => a == b,
            (Val::Lang(a), Val::Lang(b)) => a == b,
            (Val::Qr, Val::Qr) => true,
            (Val::Utm(i, _), Val::Utm(j, _)) => i == j && self.value() == other.value(),
            (Val::City(a), Val::City(b)) => a == b,
            _ => false,
        }
    }
}

impl Val {
    fn dim(&self) -> Dim {
        match self {
            Val::Country(_) => Dim::Country,
            Val::Browser(_) => Dim::Browser,
            Val::Os(_) => Dim::Os,
            Val::Lang(_) => Dim::Lang,
            Val::Qr => Dim::Source,
            Val::Utm(i, _) => [Dim::UtmSource, Dim::UtmMedium, Dim::UtmCampaign][usize::from(*i)],
            Val::City(_) => Dim::City,
        }
    }

    fn value(&self) -> &str {
        match self {
            Val::Country(c) => std::str::from_utf8(c).unwrap_or("~other"),
            Val::Browser(i) => browser_name(*i),
            Val::Os(i) => os_name(*i),
            Val::Lang(l) => l.as_str(),
            Val::Qr => "qr",
            Val::Utm(i, u) => u.get(usize::from(*i)).unwrap_or_default(),
            Val::City(c) => c,
        }
    }
}

/// A link-day's dimension counts (human clicks; defaults not kept). Held
/// inline in the link-day's counts: the first click's values with how many
/// clicks had exactly them (between two flushes most link-days see one
/// kind of visitor, and a link clicked once costs no allocation of its
/// own), and a short list, searched linearly, of every value of the other
/// clicks.
#[derive(Debug, Default)]
pub(crate) struct DayDims {
    first: Option<(Dims, u64)>,
    rest: Vec<(Val, u64)>,
}

impl DayDims {
    fn bump(&mut self, v: Val) {
        match self.rest.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => self.rest.push((v, 1)),
        }
    }

    /// Counts one human click's dimensions.
    pub(crate) fn count(&mut self, d: &Dims) {
        match &mut self.first {
            None => {
                self.first = Some((
                    Dims {
                        visitor: None,
                        ..d.clone()
                    },
                    1,
                ));
                return;
            }
            Some((f, n)) if f.same_values(d) => {
                *n += 1;
                return;
            }
            Some(_) => {}
        }
        if let Some(c) = d.country {
            self.bump(Val::Country(c));
        }
        if d.browser != 0 {
            self.bump(Val::Browser(d.browser));
        }
        if d.os != 0 {
            self.bump(Val::Os(d.os));
        }
        if let Some(l) = d.lang {
            self.bump(Val::Lang(l));
        }
        if d.qr {
            self.bump(Val::Qr);
        }
        if let Some(u) = &d.utm {
            for i in 0..UTM_NAMES.len() {
                if u.get(i).is_some() {
                    self.bump(Val::Utm(i as u8, std::sync::Arc::clone(u)));
                }
            }
        }
        if let Some(c) = &d.city {
            self.bump(Val::City(std::sync::Arc::clone(c)));
        }
    }

    /// Every line of the day: per dimension in [`Dim`] order the top
    /// [`TOP_VALUES`] by clicks (ties by value), then in value byte order,
    /// the rest summed as `~other` (which sorts last). `ranked`: a buffer
    /// reused from call to call.
    pub(crate) fn each_line<'a>(
        &'a self,
        ranked: &mut Vec<(&'a str, u64)>,
        mut f: impl FnMut(Dim, &'a str, u64),
    ) {
        for dim in Dim::ALL {
            ranked.clear();
            ranked.extend(
                self.rest
                    .iter()
                    .filter(|(v, _)| v.dim() == dim)
                    .map(|(v, n)| (v.value(), *n)),
            );
            if let Some((first, n)) = &self.first {
                if let Some(v) = first.value(dim) {
                    match ranked.iter_mut().find(|(x, _)| *x == v) {
                        Some((_, m)) => *m += n,
                        None => ranked.push((v, *n)),
                    }
                }
            }
            // One value (a link's day mostly sees one country, browser...):
            // nothing to fold or order.
            match ranked[..] {
                [] => continue,
                [(v, n)] => {
                    f(dim, v, n);
                    continue;
                }
                _ => {}
            }
            let other = fold_top(ranked);
            if other > 0 {
                ranked.push((super::OTHER_REFERRER, other));
            }
            // In value byte order, `~other` included (a UTM value may sort
            // after it).
            ranked.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (v, n) in ranked.iter() {
                f(dim, v, *n);
            }
        }
    }
}

/// Keeps in `ranked` the [`TOP_VALUES`] values with the most clicks (ties
/// by value, `~other` never kept); returns the sum of the rest.
fn fold_top(ranked: &mut Vec<(&str, u64)>) -> u64 {
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let mut other = 0;
    let mut kept = 0;
    ranked.retain(|(v, n)| {
        if kept < TOP_VALUES && *v != super::OTHER_REFERRER {
            kept += 1;
            true
        } else {
            other += n;
            false
        }
    });
    other
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHROME_WIN: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    const SAFARI_IOS: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
    const EDGE_MAC: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91";
    const FIREFOX_LINUX: &str =
        "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0";
    const WECHAT_ANDROID: &str = "Mozilla/5.0 (Linux; Android 13; PGT-AN10) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/111.0.5563.116 Mobile Safari/537.36 XWEB/1160117 MMWEBSDK/20231202 MicroMessenger/8.0.47.2560(0x28002F30) WeChat/arm64 Weixin NetType/WIFI Language/zh_CN ABI/arm64";

    fn fam(ua: &str) -> (&'static str, &'static str) {
        (
            browser_name(browser_family(ua.as_bytes())),
            os_name(os_family(ua.as_bytes())),
        )
    }

    #[test]
    fn families_follow_the_file_order() {
        assert_eq!(fam(CHROME_WIN), ("chrome", "windows"));
        assert_eq!(fam(SAFARI_IOS), ("safari", "ios"));
        assert_eq!(fam(EDGE_MAC), ("edge", "macos"));
        assert_eq!(fam(FIREFOX_LINUX), ("firefox", "linux"));
        assert_eq!(fam(WECHAT_ANDROID), ("wechat", "android"));
        assert_eq!(fam("curl/8.4"), ("other", "other"));
        assert_eq!(fam(""), ("other", "other"));
        // Every name is a valid value of its dimension.
        let f = families();
        assert!(f.browsers.len() < 64 && f.oses.len() < 64);
        for n in &f.browsers[1..] {
            assert!(Dim::Browser.is_valid_value(n), "{n}");
        }
        for n in &f.oses[1..] {
            assert!(Dim::Os.is_valid_value(n), "{n}");
        }
    }

    #[test]
    fn language_is_the_first_ranges_primary_subtag() {
        let l = |s: &str| lang_of(Some(s.as_bytes())).map(|l| l.as_str().to_owned());
        assert_eq!(l("zh-CN,zh;q=0.9,en;q=0.8").as_deref(), Some("zh"));
        assert_eq!(l(" EN_us ; q=1").as_deref(), Some("en"));
        assert_eq!(l("fil").as_deref(), Some("fil"));
        assert_eq!(l("*"), None);
        assert_eq!(l("x-klingon"), None);
        assert_eq!(l("e1"), None);
        assert_eq!(l(""), None);
        assert_eq!(l(",en"), None);
        assert_eq!(lang_of(None), None);
    }

    #[test]
    fn the_qr_marker_is_one_parameter() {
        let q = |s: &str| has_qr_marker(Some(s.as_bytes()));
        assert!(q("qr=1"));
        assert!(q("a=b&qr=1"));
        assert!(q("qr=1&x"));
        assert!(!q("qr=10"));
        assert!(!q("xqr=1"));
        assert!(!q(""));
        assert!(!has_qr_marker(None));
    }

    #[test]
    fn utm_values_come_from_the_locations_query() {
        let u = |s: &str| utm_of(s).map(|u| u.values().map(|v| v.map(String::from)));
        assert_eq!(u("https://a.example/x"), None);
        assert_eq!(u("https://a.example/utm_x"), None);
        let got = u("https://a/p?utm_source=mail&utm_medium=&utm_campaign=spring%2024&utm_source=x&utm_medium=late#utm_medium=y");
        assert_eq!(
            got,
            Some([Some("mail".into()), None, Some("spring%2024".into())])
        );
        let long = "a".repeat(65);
        assert_eq!(
            u(&format!(
                "https://a/?utm_medium=a b&utm_campaign={long}&utm_source=-"
            )),
            Some([None, Some("~other".into()), Some("~other".into())])
        );
        assert_eq!(u("https://a/?utm_source=-"), None);
    }

    /// The query read the plain way (split at `&`, then each parameter),
    /// as `utm_parse` did before it was hand-rolled.
    fn utm_reference(url: &str) -> Option<[Option<String>; 3]> {
        let q = &url[url.find('?')? + 1..];
        let q = &q[..q.find('#').unwrap_or(q.len())];
        let mut out: [Option<String>; 3] = Default::default();
        let mut seen = [false; 3];
        for p in q.split('&') {
            let Some(rest) = p.strip_prefix("utm_") else {
                continue;
            };
            let (name, value) = rest.split_once('=').unwrap_or((rest, ""));
            let Some(i) = ["source", "medium", "campaign"]
                .iter()
                .position(|n| *n == name)
            else {
                continue;
            };
            if std::mem::replace(&mut seen[i], true) || value.is_empty() || value == "-" {
                continue;
            }
            out[i] = Some(
                if is_utm_value(value.as_bytes()) {
                    value
                } else {
                    "~other"
                }
                .into(),
            );
        }
        out.iter().any(Option::is_some).then_some(out)
    }

    #[test]
    fn the_hand_rolled_utm_reading_is_the_plain_one() {
        let long = format!("utm_campaign={}", "a".repeat(65));
        let parts = [
            "utm_source=a",
            "utm_medium=",
            "utm_campaign=x%20y",
            "utm_source=-",
            "x=1",
            "utm_x=2",
            "utm_source",
            "",
            "utm_medium=a b",
            "#utm_source=frag",
            &long,
            "utm_source=b#",
            "utm_=1",
            "utm_medium=m&",
            "a=utm_source=z",
        ];
        let mut n = 0;
        for a in parts {
            for b in parts {
                for c in parts {
                    for sep in ["&", "&&", "#"] {
                        let url = format!("https://s.example/p?{a}{sep}{b}&{c}");
                        let got = utm_parse(&url).map(|u| u.values().map(|v| v.map(String::from)));
                        assert_eq!(got, utm_reference(&url), "{url}");
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 15 * 15 * 15 * 3);
        assert_eq!(utm_parse("https://s.example/p"), None);
        assert_eq!(utm_parse("https://s.example/p?"), None);
    }

    #[test]
    fn a_city_is_its_country_and_its_name_percent_encoded() {
        let v = |c: &str, n: &str| city_value(c, n).map(|v| v.to_string());
        assert_eq!(v("GB", "London").as_deref(), Some("GB-London"));
        assert_eq!(v("br", "São Paulo").as_deref(), Some("BR-S%C3%A3o%20Paulo"));
        assert_eq!(v("US", "St. John's").as_deref(), Some("US-St.%20John%27s"));
        assert_eq!(v("US", ""), None);
        assert_eq!(v("USA", "Boston"), None);
        assert_eq!(v("1A", "Boston"), None);
        assert_eq!(v("CN", &"X".repeat(61)).map(|v| v.len()), Some(64));
        assert_eq!(v("CN", &"X".repeat(62)).as_deref(), Some("~other"));
        assert_eq!(v("JP", &"東".repeat(20)).as_deref(), Some("~other"));
        for (c, n) in [
            ("GB", "London"),
            ("BR", "São Paulo"),
            ("DE", "Köln/Bonn ~ 1"),
        ] {
            let value = v(c, n).unwrap_or_default();
            assert!(Dim::City.is_valid_value(&value), "{value}");
            assert_eq!(city_label(&value), format!("{n}, {c}"));
        }
        assert_eq!(city_label("~other"), "~other");
    }

    #[test]
    fn values_are_checked_by_grammar() {
        assert!(Dim::Country.is_valid_value("CN"));
        assert!(!Dim::Country.is_valid_value("unknown"));
        assert!(!Dim::Country.is_valid_value("cn"));
        assert!(Dim::Browser.is_valid_value("newbrowser"));
        assert!(!Dim::Browser.is_valid_value("other"));
        assert!(!Dim::Lang.is_valid_value("-"));
        assert!(Dim::Source.is_valid_value("qr"));
        assert!(!Dim::Source.is_valid_value("link"));
        assert!(Dim::UtmSource.is_valid_value("~other"));
        assert!(!Dim::UtmSource.is_valid_value("-"));
        assert!(!Dim::UtmSource.is_valid_value("a b"));
        assert!(Dim::City.is_valid_value("GB-London"));
        assert!(Dim::City.is_valid_value("BR-S%C3%A3o%20Paulo"));
        assert!(Dim::City.is_valid_value("~other"));
        for bad in [
            "gb-London",
            "GB-",
            "GB London",
            "GB-a b",
            "GB-%c3",
            "GB-%C",
            "G-x",
            "GBR-x",
        ] {
            assert!(!Dim::City.is_valid_value(bad), "{bad}");
        }
        assert!(!Dim::City.is_valid_value(&format!("GB-{}", "a".repeat(62))));
        assert!(Dim::City.is_valid_value(&format!("GB-{}", "a".repeat(61))));
        for d in Dim::ALL {
            assert_eq!(Dim::parse(d.as_str()), Some(d));
            assert!(!d.is_valid_value(d.default_value()));
        }
    }

    #[test]
    fn the_first_clicks_values_add_to_the_others() {
        let mut day = DayDims::default();
        let url = "https://a/?utm_source=x";
        let a = Dims {
            country: Some(*b"CN"),
            browser: 1,
            utm: utm_of(url),
            ..Dims::default()
        };
        let b = Dims {
            browser: 2,
            visitor: Some(7),
            utm: utm_of(url),
            ..a.clone()
        };
        for d in [&a, &a, &b, &a, &b] {
            day.count(d);
        }
        let mut lines = Vec::new();
        day.each_line(&mut Vec::new(), |d, v, n| lines.push((d, v.to_owned(), n)));
        let mut browsers = vec![
            (Dim::Browser, browser_name(1).to_owned(), 3),
            (Dim::Browser, browser_name(2).to_owned(), 2),
        ];
        browsers.sort_by(|x, y| x.1.cmp(&y.1));
        let mut want = vec![(Dim::Country, "CN".to_owned(), 5)];
        want.extend(browsers);
        want.push((Dim::UtmSource, "x".to_owned(), 5));
        assert_eq!(lines, want);
    }

    #[test]
    fn a_day_keeps_the_top_20_of_each_dimension() {
        let mut day = DayDims::default();
        for i in 0..25u64 {
            let url = format!("https://a/?utm_campaign=c{i:02}");
            for _ in 0..=i {
                day.count(&Dims {
                    country: Some(*b"CN"),
                    qr: i % 2 == 0,
                    utm: utm_of(&url),
                    ..Dims::default()
                });
            }
        }
        let mut lines = Vec::new();
        day.each_line(&mut Vec::new(), |d, v, n| lines.push((d, v.to_owned(), n)));
        let total: u64 = (1..=25).sum();
        assert_eq!(lines[0], (Dim::Country, "CN".into(), total));
        assert_eq!(
            lines[1],
            (
                Dim::Source,
                "qr".into(),
                (0..25).step_by(2).map(|i| i + 1).sum()
            )
        );
        let campaigns: Vec<_> = lines[2..]
            .iter()
            .map(|(_, v, n)| (v.as_str(), *n))
            .collect();
        assert_eq!(campaigns.len(), 21);
        assert_eq!(campaigns[0], ("c05", 6));
        assert_eq!(campaigns[19], ("c24", 25));
        assert_eq!(campaigns[20], ("~other", 1 + 2 + 3 + 4 + 5));
    }
}
