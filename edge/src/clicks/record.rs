//! The redirect path's side of counting: classify the click and push a
//! fixed-size [`Event`] into the calling thread's bounded lock-free queue.
//!
//! No allocation or syscall per click on a fleet code (protocol 3.6):
//! the code and the referrer host are copied inline (a per-domain custom
//! code also boxes its domain, the one allocation: inline it would double
//! every queue slot), the user agent is classified through a one-entry
//! per-thread cache (a repeated user agent costs a byte compare instead of
//! the bot list's automaton), and the queue is a `crossbeam` `ArrayQueue`
//! allocated once per thread, at its first click, and registered then (the
//! only lock of the push, once per thread) where the flusher finds it.
//! [`record_parts`] returns the queue's length: every
//! [`super::LOCAL_STEP`]th click the caller ([`super::Clicks`]) counts the
//! thread's queue itself, under the counts' lock; a full queue hands the
//! event back to be counted the same way, never lost.

use super::salts::{Salt, Salts};
use crossbeam_queue::ArrayQueue;
use http::Method;
use pingora::http::RequestHeader;
use pingora_prometheus::prometheus::IntCounter;
use shorturl_common::clicks::dims::{
    browser_family, has_qr_marker, lang_of, may_have_utm, os_family, utm_parse, Utm,
};
use shorturl_common::clicks::uniq::{self, SALT_LEN};
use shorturl_common::clicks::{device_class_bytes, referrer_host_buf, Device, Dims, HostBuf};
use shorturl_common::code::is_fleet_code;
use shorturl_common::link_rules::split_key;
use shorturl_common::link_rules::Destination;
use shorturl_common::memo::{remembered, Last};
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Longest code (protocol section 1).
pub const MAX_CODE_LEN: usize = 32;
/// User agents up to this length are cached per thread; longer ones are
/// classified every time.
const UA_CACHE_BYTES: usize = 512;

/// One click, as queued (heap data only for a per-domain code's domain).
#[derive(Clone, Debug)]
pub struct Event {
    code: [u8; MAX_CODE_LEN],
    code_len: u8,
    /// The link's domain when its code is unique per domain, not per
    /// fleet: the click is counted under `<domain>/<code>`.
    domain: Option<Box<str>>,
    /// Unix seconds.
    pub at_unix: u64,
    /// [`Device::Bot`] for a bot click.
    pub device: Device,
    pub host: HostBuf,
    /// For a link with options: the destination that answered.
    pub destination: Option<Destination>,
    /// A human click's dimensions (protocol 3.7; `None`: a bot, or
    /// counting without dimensions).
    pub dims: Option<Dims>,
}

impl Event {
    /// A click on `code` on `domain` (`None` when the code is longer than
    /// any valid one).
    pub fn new(
        code: &str,
        domain: &str,
        at_unix: u64,
        device: Device,
        host: HostBuf,
        destination: Option<Destination>,
        dims: Option<Dims>,
    ) -> Option<Event> {
        let len = code.len();
        if len > MAX_CODE_LEN {
            return None;
        }
        let mut buf = [0u8; MAX_CODE_LEN];
        buf[..len].copy_from_slice(code.as_bytes());
        Some(Event {
            code: buf,
            code_len: u8::try_from(len).ok()?,
            domain: (!is_fleet_code(code)).then(|| domain.into()),
            at_unix,
            device,
            host,
            destination,
            dims,
        })
    }

    /// The link's code.
    pub fn code(&self) -> &str {
        let bytes = self
            .code
            .get(..usize::from(self.code_len))
            .unwrap_or_default();
        // SAFETY: `Event::new` copied these bytes whole from a `str` and
        // nothing changes them after. Checked again, this was a tenth of
        // what counting a click cost its request thread (issue 27).
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// What the click is counted under: the link key (`code::link_key`),
    /// written into `buf` for a per-domain code.
    pub fn key<'a>(&'a self, buf: &'a mut String) -> &'a str {
        match &self.domain {
            None => self.code(),
            Some(d) => domain_key(d, self.code(), buf),
        }
    }
}

/// What a click on `code` on `domain` is counted under: the code of a
/// fleet code, else the link key `<domain>/<code>` (written into `buf`).
pub fn link_key<'a>(code: &'a str, domain: &str, buf: &'a mut String) -> &'a str {
    if is_fleet_code(code) {
        code
    } else {
        domain_key(domain, code, buf)
    }
}

fn domain_key<'a>(domain: &str, code: &str, buf: &'a mut String) -> &'a str {
    buf.clear();
    buf.push_str(domain);
    buf.push('/');
    buf.push_str(code);
    buf
}

/// Every thread's queue, for the flusher.
pub struct Registry {
    /// Distinguishes registries (tests build several in one process).
    id: usize,
    capacity: usize,
    queues: Mutex<Vec<Arc<ArrayQueue<Event>>>>,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

impl Registry {
    /// A registry whose threads get queues of `capacity` clicks.
    pub fn new(capacity: usize) -> Registry {
        Registry {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            capacity: capacity.max(1),
            queues: Mutex::new(Vec::new()),
        }
    }

    fn register(&self) -> Arc<ArrayQueue<Event>> {
        let q = Arc::new(ArrayQueue::new(self.capacity));
        match self.queues.lock() {
            Ok(mut v) => v.push(Arc::clone(&q)),
            Err(p) => p.into_inner().push(Arc::clone(&q)),
        }
        q
    }

    /// Every thread's queue, as registered now.
    pub fn queues(&self) -> Vec<Arc<ArrayQueue<Event>>> {
        match self.queues.lock() {
            Ok(v) => v.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// Pops at most `max` clicks of the calling thread's own queue (for
/// `registry`) into `f`. Returns how many.
pub fn drain_local(registry: &Registry, max: usize, f: &mut dyn FnMut(&Event)) -> u64 {
    LOCAL.with(|l| {
        let Ok(l) = l.try_borrow() else {
            return 0;
        };
        match l.queue.as_ref().filter(|_| l.registry == registry.id) {
            Some(q) => pop_up_to(q, max, f),
            None => 0,
        }
    })
}

/// Pops at most `max` clicks of `q` into `f`. Returns how many.
pub fn pop_up_to(q: &ArrayQueue<Event>, max: usize, f: &mut dyn FnMut(&Event)) -> u64 {
    let mut n = 0;
    for _ in 0..max {
        let Some(e) = q.pop() else { break };
        f(&e);
        n += 1;
    }
    n
}

/// One thread's state: its queue (for one registry).
struct Local {
    registry: usize,
    queue: Option<Arc<ArrayQueue<Event>>>,
}

thread_local! {
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local {
            registry: 0,
            queue: None,
        })
    };
    /// The last user agent's class (`common::memo`).
    static LAST_UA: RefCell<Last<UaClass>> = const { RefCell::new(Last::new()) };
}

/// What a click reads off its user agent: the device class and the
/// browser and OS families (protocol 3.4, 3.7), remembered together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UaClass {
    pub device: Device,
    /// `dims::browser_family` (0: `other`).
    pub browser: u8,
    /// `dims::os_family` (0: `other`).
    pub os: u8,
}

impl UaClass {
    const BOT: UaClass = UaClass {
        device: Device::Bot,
        browser: 0,
        os: 0,
    };
}

/// The device class of a request: [`Device::Bot`] for `HEAD`, a missing or
/// empty user agent, or one on the bot list (protocol section 3.4).
pub fn classify(req: &RequestHeader) -> Device {
    classify_parts(
        req.method == Method::HEAD,
        req.headers
            .get(http::header::USER_AGENT)
            .map(|v| v.as_bytes()),
    )
    .device
}

/// [`classify`] from the parts of a head: whether it is a `HEAD` request,
/// and its (first) `User-Agent` value; with the families of a human's
/// user agent.
pub fn classify_parts(head: bool, user_agent: Option<&[u8]>) -> UaClass {
    if head {
        return UaClass::BOT;
    }
    match user_agent {
        None => UaClass::BOT,
        Some(ua) => remembered(&LAST_UA, ua, UA_CACHE_BYTES, || {
            match device_class_bytes(ua) {
                Device::Bot => UaClass::BOT,
                device => UaClass {
                    device,
                    browser: browser_family(ua),
                    os: os_family(ua),
                },
            }
        }),
    }
}

/// What a click's dimensions read of the client: asked only for a human
/// click, so a bot's click costs no address parsing, geo lookup or salt.
pub trait Client {
    /// The client's country (ISO alpha-2, upper case).
    fn country(&self) -> Option<[u8; 2]>;
    /// The client's address (behind trusted proxies): the unique visitor's.
    fn address(&self) -> Option<std::net::IpAddr>;
    /// The client's `city` value (asked only with `clicks.city` on).
    fn city(&self) -> Option<Arc<str>> {
        None
    }
}

/// The parts of a request a click is classified by (see [`record_parts`]).
#[derive(Clone, Copy, Default)]
pub struct ClickParts<'a> {
    /// A `HEAD` request (always a bot).
    pub head: bool,
    /// The first `User-Agent` value.
    pub user_agent: Option<&'a [u8]>,
    /// The first `Referer` value.
    pub referer: Option<&'a [u8]>,
    /// For a link with options: the destination that answered.
    pub destination: Option<Destination>,
    /// The dimensions' inputs (read only with dimensions on): the first
    /// `Accept-Language` value, the raw query, the redirect's `Location`
    /// and the client.
    pub accept_language: Option<&'a [u8]>,
    pub query: Option<&'a [u8]>,
    pub location: Option<&'a str>,
    pub client: Option<&'a dyn Client>,
}

/// What counting a click's dimensions needs besides the request: the
/// days' salts of unique visitors and the counter of human clicks left out
/// for the want of one.
pub struct DimsCtx<'a> {
    pub salts: &'a Salts,
    pub unsalted: &'a IntCounter,
    /// Read the client's city (`clicks.city`).
    pub city: bool,
}

thread_local! {
    /// The last `Location` with `utm_` in it and its UTM values.
    static LAST_UTM: RefCell<(String, Option<Arc<Utm>>)> = const { RefCell::new((String::new(), None)) };
    /// The last (salt, address, user agent) and its visitor.
    static LAST_VISITOR: RefCell<Last<u64>> = const { RefCell::new(Last::new()) };
}

/// The UTM values of a redirect's `Location`, remembered per thread for
/// the last one: a link's clicks share its URL, so a repeat costs a compare
/// and a reference count instead of parsing and allocating the values.
fn utm_remembered(location: &str) -> Option<Arc<Utm>> {
    if !may_have_utm(location.as_bytes()) {
        return None;
    }
    LAST_UTM.with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            return utm_parse(location);
        };
        if last.0 != location {
            last.1 = utm_parse(location);
            last.0.clear();
            last.0.push_str(location);
        }
        last.1.clone()
    })
}

/// The unique visitor of a click (`uniq::visitor`), remembered per thread:
/// a browser repeats its address and user agent on every request of a
/// connection, and an HMAC costs thousands of instructions.
fn visitor_of(salt: &Salt, ip: std::net::IpAddr, ua: &[u8]) -> u64 {
    let mut key = [0u8; SALT_LEN + 17 + UA_CACHE_BYTES];
    let ip_bytes = match ip {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    };
    let fixed = SALT_LEN + 17;
    let Some(rest) = key.get_mut(fixed..fixed + ua.len()) else {
        return uniq::visitor(salt, &split_key(ip), ua);
    };
    rest.copy_from_slice(ua);
    key[..SALT_LEN].copy_from_slice(salt);
    key[SALT_LEN] = u8::from(ip.is_ipv4());
    key[SALT_LEN + 1..fixed].copy_from_slice(&ip_bytes);
    remembered(&LAST_VISITOR, &key[..fixed + ua.len()], usize::MAX, || {
        uniq::visitor(salt, &split_key(ip), ua)
    })
}

impl<'a> ClickParts<'a> {
    /// The parts a proxied request's head holds (the client's country and
    /// the `Location` are the caller's to add).
    pub fn of_request(req: &'a RequestHeader, destination: Option<Destination>) -> Self {
        let header = |name| {
            req.headers
                .get(name)
                .map(|v: &http::HeaderValue| v.as_bytes())
        };
        ClickParts {
            head: req.method == Method::HEAD,
            user_agent: header(http::header::USER_AGENT),
            referer: header(http::header::REFERER),
            destination,
            accept_language: header(http::header::ACCEPT_LANGUAGE),
            query: req.uri.query().map(str::as_bytes),
            ..ClickParts::default()
        }
    }
}

/// Queues one redirect answered for `code` on `domain` at `at_unix`
/// (`dims`: read a human click's dimensions and visitor). `Ok`: the clicks
/// now in the thread's queue; `Err` hands back the event when it is full.
pub fn record_parts(
    registry: &Registry,
    parts: ClickParts<'_>,
    link: (&str, &str),
    at_unix: u64,
    dims: Option<DimsCtx<'_>>,
) -> Result<usize, Box<Event>> {
    let class = classify_parts(parts.head, parts.user_agent);
    record_class(registry, class, parts, link, at_unix, dims)
}

/// [`record_parts`] with the user agent classified (`class`).
pub fn record_class(
    registry: &Registry,
    class: UaClass,
    parts: ClickParts<'_>,
    (code, domain): (&str, &str),
    at_unix: u64,
    dims: Option<DimsCtx<'_>>,
) -> Result<usize, Box<Event>> {
    let host = referrer_host_buf(parts.referer);
    let dims = dims.filter(|_| class.device != Device::Bot).map(|ctx| {
        let ua = parts.user_agent.unwrap_or_default();
        let visitor = parts.client.and_then(|c| c.address()).and_then(|ip| {
            match ctx.salts.get(shorturl_common::clicks::day_start(at_unix)) {
                Some(salt) => Some(visitor_of(&salt, ip, ua)),
                None => {
                    ctx.unsalted.inc();
                    None
                }
            }
        });
        Dims {
            country: parts.client.and_then(|c| c.country()),
            browser: class.browser,
            os: class.os,
            lang: lang_of(parts.accept_language),
            qr: has_qr_marker(parts.query),
            utm: parts.location.and_then(utm_remembered),
            city: parts.client.filter(|_| ctx.city).and_then(|c| c.city()),
            visitor,
        }
    });
    let Some(event) = Event::new(
        code,
        domain,
        at_unix,
        class.device,
        host,
        parts.destination,
        dims,
    ) else {
        return Ok(0);
    };
    LOCAL.with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else {
            return Err(Box::new(event));
        };
        if l.registry != registry.id || l.queue.is_none() {
            l.queue = Some(registry.register());
            l.registry = registry.id;
        }
        // Boxed only when full (the cold path): a small `Result` here.
        match &l.queue {
            Some(q) => q.push(event).map(|()| q.len()).map_err(Box::new),
            None => Err(Box::new(event)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        reg: &Registry,
        r: &RequestHeader,
        link: (&str, &str),
        destination: Option<Destination>,
        at: u64,
    ) -> Result<usize, Box<Event>> {
        record_parts(reg, ClickParts::of_request(r, destination), link, at, None)
    }

    fn req(method: &str, ua: Option<&str>, referer: Option<&str>) -> RequestHeader {
        let mut r = match RequestHeader::build(method, b"/abcdef", None) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        if let Some(ua) = ua {
            let _ = r.insert_header("User-Agent", ua);
        }
        if let Some(x) = referer {
            let _ = r.insert_header("Referer", x);
        }
        r
    }

    /// Pops every queued click into `f`. Returns how many.
    fn drain(reg: &Registry, mut f: impl FnMut(&Event)) -> u64 {
        reg.queues()
            .iter()
            .map(|q| pop_up_to(q, q.len(), &mut f))
            .sum()
    }

    #[test]
    fn a_locations_utm_values_are_remembered_and_shared() {
        let a = "https://d.example/p?utm_source=mail&utm_campaign=x";
        let first = utm_remembered(a);
        let again = utm_remembered(a);
        assert!(matches!((&first, &again), (Some(x), Some(y)) if Arc::ptr_eq(x, y)));
        let other = utm_remembered("https://d.example/p?utm_source=news");
        assert_eq!(
            other.as_deref().map(Utm::values),
            Some([Some("news"), None, None])
        );
        assert!(utm_remembered("https://d.example/p?x=1").is_none());
        assert_eq!(utm_remembered(a), first);
    }

    const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";

    #[test]
    fn classifies_and_queues_per_thread() {
        let reg = Registry::new(3);
        assert_eq!(classify(&req("HEAD", Some(CHROME), None)), Device::Bot);
        assert_eq!(classify(&req("GET", None, None)), Device::Bot);
        assert_eq!(classify(&req("GET", Some(""), None)), Device::Bot);
        assert_eq!(classify(&req("GET", Some(CHROME), None)), Device::Desktop);
        // Cached: the same answer again, then another agent replaces it.
        assert_eq!(classify(&req("GET", Some(CHROME), None)), Device::Desktop);
        assert_eq!(classify(&req("GET", Some("curl/8"), None)), Device::Bot);
        let r = req("GET", Some(CHROME), Some("https://News.Example.com:8443/a"));
        for _ in 0..3 {
            assert!(record(&reg, &r, ("abcdef", "s.example"), None, 7200).is_ok());
        }
        // Full: the event comes back to the caller.
        let back = record(&reg, &r, ("abcdef", "s.example"), None, 7201);
        assert_eq!(back.map_err(|e| e.at_unix), Err(7201));
        let other = std::thread::spawn(move || {
            for code in ["ghijkl", "sale"] {
                let queued = record(&reg, &req("GET", None, None), (code, "s.example"), None, 10);
                assert!(queued.is_ok());
            }
            reg
        });
        let reg = match other.join() {
            Ok(x) => x,
            Err(_) => panic!("thread panicked"),
        };
        let mut seen = Vec::new();
        let mut buf = String::new();
        let n = drain(&reg, |e| {
            seen.push((
                e.key(&mut buf).to_owned(),
                e.at_unix,
                e.device,
                e.host.as_str().to_owned(),
            ))
        });
        assert_eq!(n, 5);
        assert!(seen.contains(&("ghijkl".into(), 10, Device::Bot, "-".into())));
        // A per-domain code is counted under its link key.
        assert!(seen.contains(&("s.example/sale".into(), 10, Device::Bot, "-".into())));
        let news = (
            "abcdef".into(),
            7200,
            Device::Desktop,
            "news.example.com".into(),
        );
        assert_eq!(seen.iter().filter(|s| **s == news).count(), 3);
        assert_eq!(drain(&reg, |_| {}), 0);
    }
}
