//! Click counting (protocol section 3.4) as the tests see it: a list of
//! requests, what `shorturl_common::clicks::Accumulator` makes of the
//! redirects among them, and the batches an edge appended to the stream,
//! both reduced to the same aggregated lines.

use super::http::Conn;
use shorturl_common::clicks::ua::BOTS_TXT;
use shorturl_common::clicks::uniq::Sketch;
use shorturl_common::clicks::{Accumulator, Batch, BatchIds, Click, STREAM_KEY};
use shorturl_common::link_rules::{self, Destination, LinkOptions, Visitor};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// One request of a click test.
#[derive(Debug, Clone)]
pub struct Req {
    pub code: String,
    /// The `Host` header.
    pub host: String,
    pub head: bool,
    pub ua: Option<String>,
    pub referer: Option<String>,
    /// On a link with options: the destination that answers it
    /// ([`Req::route`]).
    pub destination: Option<Destination>,
    /// The dimensions' inputs (protocol 3.7): `Accept-Language`, the
    /// query (after `?`), the trusted proxy's `CF-IPCountry` and
    /// `X-Forwarded-For`, and the country and `Location` the click gets.
    pub lang: Option<String>,
    pub query: Option<String>,
    pub cf_country: Option<String>,
    pub xff: Option<String>,
    pub country: Option<[u8; 2]>,
    pub location: Option<String>,
    /// The `city` value the click gets (protocol 3.9).
    pub city: Option<String>,
    /// The unique visitor the click is counted as (`uniq::visitor`).
    pub visitor: Option<u64>,
}

impl Req {
    pub fn get(code: &str, ua: Option<&str>, referer: Option<&str>) -> Req {
        Req {
            code: code.to_owned(),
            host: "localhost".to_owned(),
            head: false,
            ua: ua.map(str::to_owned),
            referer: referer.map(str::to_owned),
            destination: None,
            lang: None,
            query: None,
            cf_country: None,
            xff: None,
            country: None,
            location: None,
            city: None,
            visitor: None,
        }
    }

    /// What the click is counted under: the link key of the code on the
    /// request's (normalised) domain.
    pub fn key(&self) -> String {
        let domain = shorturl_common::host::normalize_host(&self.host).unwrap_or_default();
        shorturl_common::code::link_key(&self.code, &domain)
    }

    /// Sets the destination the link's options `o` (URL `url`, expired or
    /// not) choose for this request from 127.0.0.1, as `link_rules::choose`
    /// decides it (`None`: the 404).
    pub fn route(&mut self, o: &LinkOptions, url: &str, expired: bool) {
        let now = shorturl_common::time::now_unix();
        self.destination =
            link_rules::choose(o, url, expired, &self.code, &*self, now).map(|c| c.dest);
    }
}

/// A request from 127.0.0.1, as the rules see it.
impl Visitor for Req {
    fn user_agent(&self) -> Option<&[u8]> {
        self.ua.as_deref().map(str::as_bytes)
    }
    fn accept_language(&self) -> Option<&[u8]> {
        None
    }
    fn country(&self) -> Option<[u8; 2]> {
        None
    }
    fn query(&self) -> Option<&str> {
        None
    }
    fn split_key(&self) -> Option<String> {
        Some(link_rules::split_key([127, 0, 0, 1].into()))
    }
}

/// Counts summed over batches: (`h`|`r`|`d`|`t`|`x`, code, hour or day,
/// key) → n, where the key of an `h` line is `human` or `bot` (zeros left
/// out), of an `r` line the host, of a `d` line the class, of a `t` line
/// the destination, of an `x` line `<dim>:<value>`. Batch boundaries vanish, so
/// two edges that flushed at different moments compare equal.
pub type Lines = BTreeMap<(char, String, u64, String), u64>;

/// Adds `b`'s lines to `lines`.
pub fn add_batch(lines: &mut Lines, b: &Batch) {
    let mut add = |k: char, code: &str, t: u64, key: &str, n: u64| {
        if n > 0 {
            *lines
                .entry((k, code.to_owned(), t, key.to_owned()))
                .or_default() += n;
        }
    };
    for h in &b.hours {
        add('h', &h.code, h.hour, "human", h.human);
        add('h', &h.code, h.hour, "bot", h.bot);
    }
    for r in &b.referrers {
        add('r', &r.code, r.day, &r.host, r.n);
    }
    for d in &b.devices {
        add('d', &d.code, d.day, d.device.as_str(), d.n);
    }
    for t in &b.destinations {
        add('t', &t.code, t.day, &t.destination.label(), t.n);
    }
    for x in &b.dims {
        add(
            'x',
            &x.code,
            x.day,
            &format!("{}:{}", x.dim.as_str(), x.value),
            x.n,
        );
    }
}

/// The unique visitors of `batches` per (link key, day), their sketches
/// merged (batch boundaries vanish, as in [`Lines`]).
pub fn uniques_of(batches: &[Batch]) -> BTreeMap<(String, u64), Sketch> {
    let mut out: BTreeMap<(String, u64), Sketch> = BTreeMap::new();
    for b in batches {
        for u in &b.uniques {
            out.entry((u.code.clone(), u.day))
                .or_default()
                .merge(&u.sketch);
        }
    }
    out
}

/// The lines of `batches`.
pub fn lines_of(batches: &[Batch]) -> Lines {
    let mut lines = Lines::new();
    for b in batches {
        add_batch(&mut lines, b);
    }
    lines
}

/// Sends `reqs` round-robin over `conns`; returns each answer's status and
/// the Unix second it was answered in (as the test's clock saw it).
pub fn send(conns: &mut [Conn], reqs: &[Req]) -> Vec<(u16, u64)> {
    let n = conns.len();
    reqs.iter()
        .enumerate()
        .map(|(i, r)| {
            let mut headers: Vec<(&str, &str)> = Vec::new();
            if let Some(ua) = &r.ua {
                headers.push(("User-Agent", ua));
            }
            if let Some(rf) = &r.referer {
                headers.push(("Referer", rf));
            }
            if let Some(l) = &r.lang {
                headers.push(("Accept-Language", l));
            }
            if let Some(c) = &r.cf_country {
                headers.push(("CF-IPCountry", c));
            }
            if let Some(x) = &r.xff {
                headers.push(("X-Forwarded-For", x));
            }
            let method = if r.head { "HEAD" } else { "GET" };
            let path = match &r.query {
                Some(q) => format!("/{}?{q}", r.code),
                None => format!("/{}", r.code),
            };
            let resp = conns[i % n]
                .send(method, &path, Some(&r.host), &headers, b"")
                .unwrap_or_else(|e| panic!("{method} /{}: {e}", r.code));
            (resp.status, shorturl_common::time::now_unix())
        })
        .collect()
}

/// What the Rust accumulator counts for the redirects (302) among `reqs`
/// answered as `answers` says, in one batch per link-day set (as an edge
/// that flushed once).
pub fn expected(reqs: &[Req], answers: &[(u16, u64)]) -> Vec<Batch> {
    // Counting dimensions, as both edges do by default (protocol 3.7).
    let mut acc = Accumulator::with_dimensions();
    for (r, (status, at)) in reqs.iter().zip(answers) {
        if *status == 302 {
            // Counted under the link key (protocol 3.6): the Host is the
            // link's domain once it redirected.
            let key = r.key();
            assert!(acc.add(&Click {
                head: r.head,
                user_agent: r.ua.as_deref(),
                referer: r.referer.as_deref(),
                destination: r.destination,
                accept_language: r.lang.as_deref(),
                country: r.country,
                query: r.query.as_deref(),
                location: r.location.as_deref(),
                city: r.city.as_deref(),
                visitor: r.visitor,
                ..Click::new(&key, *at)
            }));
        }
    }
    let ids = BatchIds::new("expected", "n").expect("valid name");
    acc.take_batches(&ids, shorturl_common::clicks::batch::MAX_LINES)
}

/// Every batch in the stream whose id starts with `prefix`, decoded
/// strictly (a batch the origin would reject fails the test); ids are
/// unique.
pub fn stream_batches(redis_url: &str, prefix: &str) -> Vec<Batch> {
    let client = redis::Client::open(redis_url).expect("redis url");
    let mut con = client.get_connection().expect("redis connection");
    let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(STREAM_KEY)
        .arg("-")
        .arg("+")
        .query(&mut con)
        .expect("XRANGE");
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (entry, f) in entries {
        let id = f.get("id").map(String::as_str).unwrap_or("");
        if !id.starts_with(prefix) {
            continue;
        }
        assert!(seen.insert(id.to_owned()), "batch {id} appended twice");
        let b = Batch::decode(
            id,
            f.get("v").map(String::as_str).unwrap_or(""),
            f.get("b").map(String::as_str).unwrap_or(""),
        )
        .unwrap_or_else(|e| panic!("entry {entry} ({id}) does not decode: {e}"));
        out.push(b);
    }
    out
}

/// Human plus bot clicks in `batches`.
pub fn clicks_in(batches: &[Batch]) -> u64 {
    batches
        .iter()
        .map(|b| {
            let (h, bot) = b.totals();
            h + bot
        })
        .sum()
}

/// Waits until the edge with batch-id prefix `prefix` has appended exactly
/// `want` clicks, and returns its batches.
pub fn await_clicks(redis_url: &str, prefix: &str, want: u64) -> Vec<Batch> {
    testkit::wait_for(
        &format!("{prefix} to append {want} clicks to the stream"),
        Duration::from_secs(20),
        || clicks_in(&stream_batches(redis_url, prefix)) >= want,
    );
    let batches = stream_batches(redis_url, prefix);
    assert_eq!(clicks_in(&batches), want, "{prefix}: clicks in the stream");
    batches
}

/// Waits, if needed, until the current UTC hour has at least `secs` left,
/// so requests sent now are counted in the hour the test expects.
pub fn away_from_hour_end(secs: u64) {
    let left = || 3600 - shorturl_common::time::now_unix() % 3600;
    if left() < secs {
        testkit::wait_for(
            "the next UTC hour to begin",
            Duration::from_secs(secs + 5),
            || left() >= secs,
        );
    }
}

pub const CHROME_WIN: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";

/// Browser user agents of every device class, and user agents that test
/// the corners of the rules (token overlap, `^` patterns elsewhere than at
/// the start, Unicode spaces around a bot, non-ASCII inside).
pub const BROWSERS: [&str; 17] = [
    CHROME_WIN,
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.144 Mobile Safari/537.36",
    "Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; Xbox; Xbox One) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36 Edge/44.18363.8131",
    "Mozilla/5.0 (SMART-TV; Linux; Tizen 6.0) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/4.0 TV Safari/537.36",
    "Mozilla/5.0 (Mobipad X11) Gecko",
    "Mozilla/5.0 (X11; Linux x86_64) MyApp-curly/1.0",
    "SomethingNew/1.0",
    "Mozilla/5.0 (Linux; Android 14; 日本語 Build) Mobile Safari/537.36",
    "\u{3000}curl/8.5.0\u{a0}",
    "\u{2003}Mozilla/5.0 (iPad) Silk/1.0",
    "   ",
];

/// Referrers: 11 distinct hosts and `-` (the edge cases of referrer.rs).
pub const REFERERS: [&str; 14] = [
    "https://Www.Example.COM/path?q=1",
    "http://user:pw@news.site.cn:8080/x",
    "https://example.com.",
    "https://[2001:DB8::1]:443/",
    "android-app://com.google.android.gm/",
    "not a url",
    "https:///path",
    "https://x.com:abc/",
    "https://例え.jp/",
    "https://a.b#frag",
    "HTTPS://MIXED.Case.org:/",
    "ftp://u@h@files.example.net/",
    "https://under_score.cn/",
    "  https://t.co/abc  ",
];

/// `p` with every other ASCII letter upper-cased.
pub fn mixed_case(p: &str) -> String {
    p.chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// Every pattern of the bot list in a user agent: substring patterns inside
/// one, `^` patterns at the start (a bot) and after a prefix (a bot only if
/// another pattern matches).
pub fn bot_list_user_agents() -> Vec<String> {
    let mut out = Vec::new();
    for line in BOTS_TXT.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(p) = line.strip_prefix('^') {
            out.push(format!("{}/2.1 (+https://example.org)", mixed_case(p)));
            out.push(format!("Mozilla/5.0 (Windows NT 10.0) {p}/2.1"));
        } else {
            out.push(format!(
                "Mozilla/5.0 (compatible; {}; +https://example.org)",
                mixed_case(line)
            ));
        }
    }
    out
}

/// A record of `code` on `domain` in Redis (version 1, an hour to live).
pub fn record(redis_url: &str, code: &str, domain: &str) {
    let exp = shorturl_common::time::now_unix() + 3600;
    super::redis_cmd(
        redis_url,
        &[
            "SET",
            &format!("su:1:link:{domain}/{code}"),
            &format!("2 1 {exp} {domain} https://example.com/{code}"),
        ],
    )
    .unwrap();
}
