//! The redirect decision, made in one place for both transports: what a
//! code's answer means for one request (protocol 4, 4.2 and 4.3). Sans I/O:
//! the fast path (`fast_path`) and the proxy (`proxy.rs`) each describe
//! their request through [`Facts`], call [`decide`] and only render the
//! [`Verdict`], so a redirect, a page and both transports cannot drift
//! apart. Link rules (protocol 3.1.1) extend this module and nothing else:
//! a record with options has its destination chosen here
//! ([`link_rules::choose`]); a plain one keeps its pre-serialised redirect.

use crate::cache::{AnswerRef, RecordRef};
use crate::limits::Limits;
use crate::net::ClientKey;
use shorturl_common::link_rules::{self, Destination, Screen, Visitor};
use std::borrow::Cow;

/// What the decision may ask of a request. Each fact is computed only when
/// a branch needs it: a redirect from memory reads the host alone; the
/// rules' facts ([`Visitor`]) are read only for a link with options.
pub trait Facts: Visitor {
    /// The request's host without its port, as the protocol rules found it.
    fn host(&self) -> Option<&str>;
    /// The client's key in the per-client limiter (`None`: no address).
    fn client(&self) -> Option<ClientKey>;
    /// The client prefers HTML: its 404 is the origin's page.
    fn prefers_html(&self) -> bool;
    /// The request carries an unlock token that opens `code` of `rec` at
    /// `now` (protocol 4.5). Read only for a live password link.
    fn unlocked(&self, rec: &RecordRef<'_>, code: &str, now: u64) -> bool;
}

/// Where an answer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The in-process cache: a record is answered at once; anything else
    /// first checks the client's unknown-code budget.
    Memory,
    /// A lookup this request ran, after [`admit_lookup`] let it.
    Lookup,
}

/// Where a redirect goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target<'a> {
    /// The record's own URL.
    Link,
    /// A destination the link's options chose (a rule, a forwarded query,
    /// the expiry fallback).
    Chosen(Cow<'a, str>, Destination),
}

impl Target<'_> {
    /// The `Location` of this target for record `rec`.
    pub fn url<'r>(&'r self, rec: &RecordRef<'r>) -> &'r str {
        match self {
            Target::Link => rec.url,
            Target::Chosen(u, _) => u,
        }
    }

    /// The destination its clicks count under: `None` for a link without
    /// options (no destination lines: protocol section 3.4).
    pub fn destination(&self, rec: &RecordRef<'_>) -> Option<Destination> {
        match self {
            Target::Link => rec.options.map(|_| Destination::Link),
            Target::Chosen(_, d) => Some(*d),
        }
    }

    /// True for the expiry fallback (no page is served for it).
    pub fn is_fallback(&self) -> bool {
        matches!(self, Target::Chosen(_, Destination::Expired))
    }
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// A record bound to the request's host that answers with a redirect
    /// (live, or expired with a fallback): where to (or its page).
    Redirect(RecordRef<'a>, Target<'a>),
    /// The protocol 404 (unknown, expired, another domain's). Rendering it
    /// spends the client's unknown-code budget ([`spend`]). `page`: a
    /// browser, whose 404 is the origin's page.
    NotFound { page: bool },
    /// The client has spent its unknown-code budget: 429.
    TooMany,
    /// The lookup failed: 503.
    Unavailable,
    /// A link-preview crawler on a live link with a social card: the card
    /// page (protocol 4.4), through the page cache.
    Card(RecordRef<'a>),
    /// A live password link and no unlock token that opens it (protocol
    /// 4.5): the form (`page`: the client prefers HTML), else the 401.
    Locked { page: bool },
    /// A visitor in an in-app browser that cannot open the link: the
    /// guidance page in `lang` (`zh` or `en`; protocol 4.6).
    Guide { lang: &'static str },
    /// A live link with a screened destination (protocol 4.7): the warning
    /// page (`page`: the client prefers HTML), else the 403 (`screen` says
    /// which).
    Screened { page: bool, screen: Screen },
}

/// Whether a lookup may run for this request: a miss costs Redis and
/// origin work, so a client over its unknown-code budget gets the 429
/// before any.
pub fn admit_lookup(facts: &impl Facts, limits: &Limits) -> bool {
    !over_budget(facts, limits)
}

/// The verdict for `answer` of `code` (from `source`) at `now` (unix
/// seconds).
#[inline]
pub fn decide<'a>(
    answer: AnswerRef<'a>,
    code: &str,
    source: Source,
    facts: &impl Facts,
    limits: &Limits,
    now: u64,
) -> Verdict<'a> {
    match answer {
        AnswerRef::Found(rec) if bound(facts.host(), rec.domain) => {
            let expired = rec.is_expired_at(now);
            match rec.options {
                None if !expired => Verdict::Redirect(rec, Target::Link),
                None => not_found(facts),
                // A screened destination comes before anything the link
                // would show or ask.
                Some(o) if o.screened(expired).is_some() => Verdict::Screened {
                    page: facts.prefers_html(),
                    screen: o.screen.unwrap_or(Screen::Block),
                },
                // An in-app browser that cannot open it goes to the system
                // browser first (a password entered here would be asked
                // again there).
                Some(o) if o.shows_guide(expired, facts.user_agent()) => Verdict::Guide {
                    lang: link_rules::guide_language(facts.accept_language()),
                },
                Some(o) if o.locked(expired) && !facts.unlocked(&rec, code, now) => {
                    Verdict::Locked {
                        page: facts.prefers_html(),
                    }
                }
                Some(o) if o.shows_card(expired, facts.user_agent()) => Verdict::Card(rec),
                Some(o) => match link_rules::choose(o, rec.url, expired, code, facts, now) {
                    Some(c) if c.dest == Destination::Link && matches!(c.url, Cow::Borrowed(_)) => {
                        Verdict::Redirect(rec, Target::Link)
                    }
                    Some(c) => Verdict::Redirect(rec, Target::Chosen(c.url, c.dest)),
                    None => not_found(facts),
                },
            }
        }
        AnswerRef::Found(_) => not_found(facts),
        _ if source == Source::Memory && over_budget(facts, limits) => Verdict::TooMany,
        AnswerRef::Unavailable => Verdict::Unavailable,
        AnswerRef::Negative(_) => not_found(facts),
    }
}

/// Counts a rendered [`Verdict::NotFound`] against the client.
pub fn spend(facts: &impl Facts, limits: &Limits) {
    if let Some(k) = facts.client() {
        limits.count_unknown(k);
    }
}

fn not_found<'a>(facts: &impl Facts) -> Verdict<'a> {
    Verdict::NotFound {
        page: facts.prefers_html(),
    }
}

fn over_budget(facts: &impl Facts, limits: &Limits) -> bool {
    facts.client().is_some_and(|k| limits.unknown_exceeded(&k))
}

/// Whether the request's host is the record's domain (protocol 2.1). The
/// domain is normalised (lower case) and so is nearly every Host: bytes
/// compared first, a case-blind comparison only when they differ.
#[inline]
fn bound(host: Option<&str>, domain: &str) -> bool {
    host.is_some_and(|h| h.as_bytes() == domain.as_bytes() || h.eq_ignore_ascii_case(domain))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pingora_prometheus::prometheus::IntCounter;
    use std::net::{IpAddr, Ipv4Addr};

    struct Req {
        host: Option<&'static str>,
        client: Option<IpAddr>,
        html: bool,
        ua: &'static str,
        cookie: Option<&'static str>,
        lang: Option<&'static str>,
    }

    impl Visitor for Req {
        fn user_agent(&self) -> Option<&[u8]> {
            Some(self.ua.as_bytes())
        }
        fn accept_language(&self) -> Option<&[u8]> {
            self.lang.map(str::as_bytes)
        }
        fn country(&self) -> Option<[u8; 2]> {
            None
        }
        fn query(&self) -> Option<&str> {
            Some("ref=tw")
        }
        fn split_key(&self) -> Option<String> {
            self.client.map(link_rules::split_key)
        }
    }

    impl Facts for Req {
        fn host(&self) -> Option<&str> {
            self.host
        }
        fn client(&self) -> Option<ClientKey> {
            self.client.map(|ip| ClientKey::new(ip, 64))
        }
        fn prefers_html(&self) -> bool {
            self.html
        }
        fn unlocked(&self, rec: &RecordRef<'_>, code: &str, now: u64) -> bool {
            unlock_keys().opened_by(
                self.cookie.map(str::as_bytes),
                rec.domain,
                code,
                rec.version,
                now,
            )
        }
    }

    fn unlock_keys() -> shorturl_common::unlock::UnlockKeys {
        shorturl_common::unlock::UnlockKeys::from_base64([
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        ])
        .unwrap_or_else(|e| panic!("{e}"))
    }

    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

    fn req() -> Req {
        Req {
            host: Some("s.shop55.com"),
            client: Some(CLIENT),
            html: false,
            ua: "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148",
            cookie: None,
            lang: None,
        }
    }

    fn limits(unknown_per_sec: u32) -> Limits {
        let cfg = crate::limits::test_config(unknown_per_sec, 0, 0, 16);
        let evictions = IntCounter::new("decide_test_evictions", "test");
        Limits::new(&cfg, evictions.unwrap_or_else(|e| panic!("{e}")))
    }

    const NOW: u64 = 1_800_000_000;

    fn record(domain: &str, expires_at: u64) -> AnswerRef<'_> {
        AnswerRef::Found(RecordRef {
            version: 3,
            expires_at,
            domain,
            url: "https://example.com/x",
            options: None,
        })
    }

    /// Spends the whole budget of [`CLIENT`].
    fn exhaust(l: &Limits, n: u32) {
        for _ in 0..n {
            spend(&req(), l);
        }
    }

    #[test]
    fn a_live_bound_record_redirects_from_either_source() {
        let l = limits(1);
        exhaust(&l, 1); // the budget never blocks a live link
        for source in [Source::Memory, Source::Lookup] {
            let v = decide(
                record("s.shop55.com", NOW + 1),
                "abc123",
                source,
                &req(),
                &l,
                NOW,
            );
            assert!(
                matches!(v, Verdict::Redirect(r, Target::Link) if r.version == 3),
                "{v:?}"
            );
        }
    }

    #[test]
    fn the_host_is_compared_case_blind() {
        let r = Req {
            host: Some("S.Shop55.COM"),
            ..req()
        };
        let v = decide(
            record("s.shop55.com", NOW + 1),
            "abc123",
            Source::Memory,
            &r,
            &limits(0),
            NOW,
        );
        assert!(matches!(v, Verdict::Redirect(_, Target::Link)), "{v:?}");
    }

    #[test]
    fn an_expired_record_is_not_found_from_its_expiry_second() {
        let l = limits(0);
        let v = decide(
            record("s.shop55.com", NOW),
            "abc123",
            Source::Memory,
            &req(),
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
    }

    #[test]
    fn another_domains_record_or_no_host_is_not_found() {
        let l = limits(0);
        let other = decide(
            record("go.brand91.cn", NOW + 9),
            "abc123",
            Source::Lookup,
            &req(),
            &l,
            NOW,
        );
        assert_eq!(other, Verdict::NotFound { page: false });
        let no_host = Req {
            host: None,
            ..req()
        };
        let v = decide(
            record("s.shop55.com", NOW + 9),
            "abc123",
            Source::Lookup,
            &no_host,
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
    }

    #[test]
    fn a_browsers_404_is_the_page() {
        let html = Req {
            html: true,
            ..req()
        };
        let l = limits(0);
        let v = decide(
            AnswerRef::Negative(2),
            "abc123",
            Source::Memory,
            &html,
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: true });
        let v = decide(
            record("x.example", NOW + 9),
            "abc123",
            Source::Memory,
            &html,
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: true });
    }

    #[test]
    fn a_failed_lookup_is_unavailable() {
        let l = limits(0);
        for source in [Source::Memory, Source::Lookup] {
            let v = decide(AnswerRef::Unavailable, "abc123", source, &req(), &l, NOW);
            assert_eq!(v, Verdict::Unavailable);
        }
    }

    #[test]
    fn over_the_budget_memory_answers_other_than_records_are_429() {
        let l = limits(2);
        exhaust(&l, 2);
        for a in [AnswerRef::Negative(1), AnswerRef::Unavailable] {
            assert_eq!(
                decide(a, "abc123", Source::Memory, &req(), &l, NOW),
                Verdict::TooMany
            );
        }
        // A lookup was admitted before it ran: its answer stands.
        let v = decide(
            AnswerRef::Negative(1),
            "abc123",
            Source::Lookup,
            &req(),
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
        // A cached record that no longer answers is a 404, not a 429.
        let v = decide(
            record("s.shop55.com", NOW),
            "abc123",
            Source::Memory,
            &req(),
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
        assert!(!admit_lookup(&req(), &l));
    }

    #[test]
    fn the_budget_is_per_client_and_unlimited_without_an_address() {
        let l = limits(1);
        assert!(admit_lookup(&req(), &l));
        exhaust(&l, 1);
        assert!(!admit_lookup(&req(), &l));
        let other = Req {
            client: Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 8))),
            ..req()
        };
        assert!(admit_lookup(&other, &l));
        let anonymous = Req {
            client: None,
            ..req()
        };
        spend(&anonymous, &l);
        assert!(admit_lookup(&anonymous, &l));
        let v = decide(
            AnswerRef::Negative(1),
            "abc123",
            Source::Memory,
            &anonymous,
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
    }

    fn with_options<'a>(o: &'a link_rules::LinkOptions, expires_at: u64) -> AnswerRef<'a> {
        AnswerRef::Found(RecordRef {
            version: 3,
            expires_at,
            domain: "s.shop55.com",
            url: "https://example.com/x",
            options: Some(o),
        })
    }

    fn options(json: &str) -> link_rules::LinkOptions {
        link_rules::LinkOptions::decode(json).unwrap_or_else(|| panic!("{json}"))
    }

    #[test]
    fn options_choose_the_destination() {
        let l = limits(0);
        let o = options(r#"{"f":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/ios"}]}"#);
        let v = decide(
            with_options(&o, NOW + 9),
            "abc123",
            Source::Memory,
            &req(),
            &l,
            NOW,
        );
        let want = Target::Chosen(
            Cow::Owned("https://a/ios?ref=tw".into()),
            Destination::Rule {
                rule: 0,
                variant: None,
            },
        );
        assert!(matches!(&v, Verdict::Redirect(_, t) if *t == want), "{v:?}");
        // No rule holds and nothing to forward: the record's own answer.
        let o = options(r#"{"r":[{"c":{"dev":["android"]},"u":"https://a/droid"}]}"#);
        let v = decide(
            with_options(&o, NOW + 9),
            "abc123",
            Source::Memory,
            &req(),
            &l,
            NOW,
        );
        assert!(matches!(v, Verdict::Redirect(_, Target::Link)), "{v:?}");
        // Another domain's link stays the 404, rules or not.
        let other = Req {
            host: Some("go.brand91.cn"),
            ..req()
        };
        let v = decide(
            with_options(&o, NOW + 9),
            "abc123",
            Source::Memory,
            &other,
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
    }

    #[test]
    fn an_expired_link_with_a_fallback_redirects_to_it() {
        let l = limits(0);
        let o = options(r#"{"x":"https://a/over","r":[{"u":"https://a/any"}]}"#);
        let v = decide(
            with_options(&o, NOW),
            "abc123",
            Source::Lookup,
            &req(),
            &l,
            NOW,
        );
        assert!(
            matches!(&v, Verdict::Redirect(_, t) if t.is_fallback()),
            "{v:?}"
        );
        let gone = options(r#"{"x":"https://a/over","d":true}"#);
        let v = decide(
            with_options(&gone, NOW + 9),
            "abc123",
            Source::Memory,
            &req(),
            &l,
            NOW,
        );
        assert!(
            matches!(&v, Verdict::Redirect(_, t) if t.is_fallback()),
            "{v:?}"
        );
        let plain = options(r#"{"f":true}"#);
        let v = decide(
            with_options(&plain, NOW),
            "abc123",
            Source::Memory,
            &req(),
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
    }

    #[test]
    fn a_crawler_gets_the_card_of_a_live_link_that_has_one() {
        let l = limits(0);
        let crawler = Req {
            ua: "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
            ..req()
        };
        let card = options(r#"{"g":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/ios"}]}"#);
        let at = |o, expires_at, who: &Req| {
            decide(
                with_options(o, expires_at),
                "abc123",
                Source::Memory,
                who,
                &l,
                NOW,
            )
        };
        assert!(matches!(at(&card, NOW + 9, &crawler), Verdict::Card(_)));
        // People get the rules' answer; a link without a card redirects
        // crawlers too; an expired link has no card.
        assert!(matches!(
            at(&card, NOW + 9, &req()),
            Verdict::Redirect(_, Target::Chosen(..))
        ));
        let plain = options(r#"{"r":[{"c":{"dev":["ios"]},"u":"https://a/ios"}]}"#);
        assert!(matches!(
            at(&plain, NOW + 9, &crawler),
            Verdict::Redirect(..)
        ));
        assert_eq!(at(&card, NOW, &crawler), Verdict::NotFound { page: false });
    }

    #[test]
    fn a_zero_budget_never_limits() {
        let l = limits(0);
        exhaust(&l, 100);
        assert!(admit_lookup(&req(), &l));
        let v = decide(
            AnswerRef::Negative(1),
            "abc123",
            Source::Memory,
            &req(),
            &l,
            NOW,
        );
        assert_eq!(v, Verdict::NotFound { page: false });
    }

    #[test]
    fn a_password_link_answers_only_a_visitor_whose_token_opens_it() {
        let l = limits(0);
        let locked = options(r#"{"p":true,"g":true}"#);
        let at = |who: &Req| {
            decide(
                with_options(&locked, NOW + 9),
                "abc123",
                Source::Memory,
                who,
                &l,
                NOW,
            )
        };
        assert_eq!(at(&req()), Verdict::Locked { page: false });
        let browser = Req {
            html: true,
            ..req()
        };
        assert_eq!(at(&browser), Verdict::Locked { page: true });
        let token = unlock_keys()
            .sign("s.shop55.com", "abc123", 3, NOW + 60)
            .unwrap_or_default();
        let cookie: &'static str = Box::leak(format!("su_pass={token}").into_boxed_str());
        let opened = Req {
            cookie: Some(cookie),
            ua: "facebookexternalhit/1.1",
            ..req()
        };
        // Opened: the redirect, never the card (it would link the destination).
        assert!(matches!(at(&opened), Verdict::Redirect(_, Target::Link)));
    }

    #[test]
    fn listed_in_app_browsers_get_the_guidance_in_their_language() {
        let l = limits(0);
        let guided = options(r#"{"b":["wechat","qq"]}"#);
        let at = |who: &Req| {
            decide(
                with_options(&guided, NOW + 9),
                "abc123",
                Source::Memory,
                who,
                &l,
                NOW,
            )
        };
        let wechat = Req {
            ua: "Mozilla/5.0 (iPhone) MicroMessenger/8.0.47",
            lang: Some("zh-CN,zh;q=0.9"),
            ..req()
        };
        assert_eq!(at(&wechat), Verdict::Guide { lang: "zh" });
        let english = Req {
            lang: None,
            ..wechat
        };
        assert_eq!(at(&english), Verdict::Guide { lang: "en" });
        // Another app, or a browser: the redirect.
        let weibo = Req {
            ua: "Mozilla/5.0 (iPhone) Weibo (iPhone10,1__weibo__12.1.0)",
            ..req()
        };
        assert!(matches!(at(&weibo), Verdict::Redirect(..)));
        assert!(matches!(at(&req()), Verdict::Redirect(..)));
    }

    #[test]
    fn a_screened_link_warns_everyone_before_anything_else() {
        let l = limits(0);
        let flagged = options(r#"{"w":"warn","b":["wechat"],"p":true,"g":true}"#);
        let at = |who: &Req, expires_at| {
            decide(
                with_options(&flagged, expires_at),
                "abc123",
                Source::Memory,
                who,
                &l,
                NOW,
            )
        };
        let warn = |page| Verdict::Screened {
            page,
            screen: Screen::Warn,
        };
        assert_eq!(at(&req(), NOW + 9), warn(false));
        let browser = Req {
            html: true,
            ..req()
        };
        assert_eq!(at(&browser, NOW + 9), warn(true));
        let wechat = Req {
            ua: "Mozilla/5.0 (iPhone) MicroMessenger/8.0.47",
            html: true,
            ..req()
        };
        assert_eq!(at(&wechat, NOW + 9), warn(true), "before the guidance");
        let crawler = Req {
            ua: "facebookexternalhit/1.1",
            ..req()
        };
        assert_eq!(at(&crawler, NOW + 9), warn(false), "before the card");
        assert_eq!(at(&req(), NOW), Verdict::NotFound { page: false });
        let blocked = options(r#"{"w":"block"}"#);
        let v = decide(
            with_options(&blocked, NOW + 9),
            "abc123",
            Source::Memory,
            &browser,
            &l,
            NOW,
        );
        assert_eq!(
            v,
            Verdict::Screened {
                page: true,
                screen: Screen::Block
            }
        );
    }
}
