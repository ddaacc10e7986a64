use super::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Default)]
struct V {
    ua: Option<&'static str>,
    lang: Option<&'static str>,
    cc: Option<&'static str>,
    q: Option<&'static str>,
    ip: Option<IpAddr>,
}

impl Visitor for V {
    fn user_agent(&self) -> Option<&[u8]> {
        self.ua.map(str::as_bytes)
    }
    fn accept_language(&self) -> Option<&[u8]> {
        self.lang.map(str::as_bytes)
    }
    fn country(&self) -> Option<[u8; 2]> {
        self.cc.and_then(|c| c.as_bytes().try_into().ok())
    }
    fn query(&self) -> Option<&str> {
        self.q
    }
    fn split_key(&self) -> Option<String> {
        self.ip.map(split_key)
    }
}

const IPHONE: &str =
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148";
const WECHAT: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 MicroMessenger/8.0.47(0x18002f2c) NetType/WIFI Language/zh_CN";
const ANDROID: &str =
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36";
const DESKTOP: &str =
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36";
const IPAD: &str =
    "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148";

fn opts(json: &str) -> LinkOptions {
    match LinkOptions::decode(json) {
        Some(o) => o,
        None => panic!("not decoded: {json}"),
    }
}

fn url_for(o: &LinkOptions, v: &V, now: u64) -> Option<String> {
    choose(o, "https://x.example/base", false, "abc123", v, now).map(|c| c.url.into_owned())
}

#[test]
fn forwarding_merges_the_request_query() {
    let cases = [
        ("https://t/p", "a=1&b=2", "https://t/p?a=1&b=2"),
        ("https://t/p?a=9", "a=1&b=2", "https://t/p?a=9&b=2"),
        (
            "https://t/p?a=9#frag",
            "b=2&b=3",
            "https://t/p?a=9&b=2&b=3#frag",
        ),
        ("https://t/p?", "b=2", "https://t/p?b=2"),
        ("https://t/p?a=1&", "b", "https://t/p?a=1&b"),
        ("https://t/p", "&&x=1&", "https://t/p?x=1"),
        (
            "https://t/p",
            "x=<a>%0D%0A\"",
            "https://t/p?x=%3Ca%3E%0D%0A%22",
        ),
        ("https://t/p", "x=é", "https://t/p?x=%C3%A9"),
        ("https://t/p#f", "", "https://t/p#f"),
        ("https://t/p?a=1", "a=2", "https://t/p?a=1"),
        // An appended pair ending in `?` is still followed by `&`.
        ("https://t/p", "a?&b=1", "https://t/p?a?&b=1"),
        ("https://t/p", "a=&b=", "https://t/p?a=&b="),
        // The QR marker is never forwarded (protocol 3.7).
        ("https://t/p", "qr=1&b=2", "https://t/p?b=2"),
        ("https://t/p", "qr=1", "https://t/p"),
        ("https://t/p", "qr=12", "https://t/p?qr=12"),
    ];
    for (target, q, want) in cases {
        assert_eq!(forward_query(target, q), want, "{target} + {q}");
    }
    assert!(matches!(
        forward_query("https://t/p?a=1", "a=2"),
        Cow::Borrowed(_)
    ));
}

#[test]
fn preferred_language_by_q_value() {
    let cases = [
        (Some("zh-CN,zh;q=0.9,en;q=0.8"), Some("zh")),
        (Some("en;q=0.5, de;q=0.7, fr"), Some("fr")),
        (Some("en;q=0.5, de;q=0.7"), Some("de")),
        (Some("*, ja;q=0.1"), Some("ja")),
        (Some("EN-us"), Some("en")),
        (Some("en;q=0, de;q=0.001"), Some("de")),
        (Some("en;q=2, de;q=0.3"), Some("de")),
        (Some("en;q=1.0, de;q=1"), Some("en")),
        (Some("x1"), None),
        (Some(""), None),
        (None, None),
    ];
    for (h, want) in cases {
        assert_eq!(
            preferred_language(h.map(str::as_bytes)).as_deref(),
            want,
            "{h:?}"
        );
    }
}

#[test]
fn user_agent_facts() {
    let mut f = UaFacts::of(WECHAT.as_bytes());
    assert!(f.ios && !f.android && f.app == Some(App::Wechat));
    assert_eq!(f.device(WECHAT.as_bytes()), Device::Mobile);
    let f = UaFacts::of(ANDROID.as_bytes());
    assert!(f.android && !f.ios && f.app.is_none());
    assert_eq!(
        UaFacts::of(IPAD.as_bytes()).device(IPAD.as_bytes()),
        Device::Tablet
    );
    assert_eq!(
        UaFacts::of(DESKTOP.as_bytes()).device(DESKTOP.as_bytes()),
        Device::Desktop
    );
    // "Contains", whatever else overlaps: `opera mini` ends where `iphone`
    // starts; case-blind.
    assert!(UaFacts::of(b"Opera MiniPhone").ios);
    assert!(UaFacts::of(b"x ANDROID y").android);
    // The first pattern in file order wins, wherever it is in the UA.
    assert_eq!(
        in_app(b"Instagram 300 ... MicroMessenger/8"),
        Some(App::Wechat)
    );
    for (ua, app) in [
        (
            "Mozilla/5.0 (Linux; Android 13) QQ/9.0.0.1 V1_AND_SQ",
            App::Qq,
        ),
        ("... AlipayClient/10.5.0 ...", App::Alipay),
        (
            "... Weibo (iPhone15,2__weibo__14.1.0__iphone__os17.0)",
            App::Weibo,
        ),
        ("... DingTalk/7.5.0 ...", App::Dingtalk),
        ("... [FBAN/FBIOS;FBAV/450.0]", App::Facebook),
        ("... Instagram 300.0.0 ...", App::Instagram),
        ("... Line/13.0.0", App::Line),
        ("... musical_ly_33.0 ...", App::Tiktok),
    ] {
        assert_eq!(in_app(ua.as_bytes()), Some(app), "{ua}");
    }
    assert_eq!(in_app(b"Mozilla/5.0 MQQBrowser/6.2"), None);
    // Every pattern line names a known app.
    let lines = INAPP_TXT
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    assert_eq!(inapp().tokens.len(), lines);
}

#[test]
fn first_matching_rule_wins_and_conditions_combine() {
    let o = opts(
        r#"{"r":[{"c":{"dev":["ios"],"app":["wechat"]},"u":"https://a/wechat-ios"},{"c":{"dev":["ios","android"]},"u":"https://a/app"},{"c":{"cc":["CN","HK"],"lang":["zh"]},"u":"https://a/zh-cn"},{"c":{"q":["ref","tw"]},"u":"https://a/tw"}]}"#,
    );
    let at = 1_800_000_000;
    let v = |ua, lang, cc, q| V {
        ua,
        lang,
        cc,
        q,
        ip: None,
    };
    assert_eq!(
        url_for(&o, &v(Some(WECHAT), None, None, None), at).as_deref(),
        Some("https://a/wechat-ios")
    );
    assert_eq!(
        url_for(&o, &v(Some(IPHONE), None, None, None), at).as_deref(),
        Some("https://a/app")
    );
    assert_eq!(
        url_for(&o, &v(Some(ANDROID), None, None, None), at).as_deref(),
        Some("https://a/app")
    );
    assert_eq!(
        url_for(&o, &v(Some(DESKTOP), Some("zh-CN"), Some("CN"), None), at).as_deref(),
        Some("https://a/zh-cn")
    );
    assert_eq!(
        url_for(&o, &v(Some(DESKTOP), Some("en"), Some("CN"), None), at).as_deref(),
        Some("https://x.example/base")
    );
    assert_eq!(
        url_for(&o, &v(Some(DESKTOP), Some("zh"), None, None), at).as_deref(),
        Some("https://x.example/base")
    );
    assert_eq!(
        url_for(&o, &v(Some(DESKTOP), None, None, Some("a=1&ref=tw")), at).as_deref(),
        Some("https://a/tw")
    );
    assert_eq!(
        url_for(&o, &v(Some(DESKTOP), None, None, Some("ref=twx")), at).as_deref(),
        Some("https://x.example/base")
    );
    assert_eq!(
        url_for(&o, &v(None, None, None, None), at).as_deref(),
        Some("https://x.example/base")
    );
}

#[test]
fn time_windows_are_half_open() {
    let o = opts(r#"{"r":[{"c":{"from":100,"until":200},"u":"https://a/sale"}]}"#);
    let v = V::default();
    assert_eq!(
        url_for(&o, &v, 99).as_deref(),
        Some("https://x.example/base")
    );
    assert_eq!(url_for(&o, &v, 100).as_deref(), Some("https://a/sale"));
    assert_eq!(url_for(&o, &v, 199).as_deref(), Some("https://a/sale"));
    assert_eq!(
        url_for(&o, &v, 200).as_deref(),
        Some("https://x.example/base")
    );
}

#[test]
fn forwarding_applies_to_the_chosen_destination() {
    let o = opts(r#"{"f":true,"r":[{"c":{"dev":["android"]},"u":"https://a/droid?src=sl"}]}"#);
    let v = V {
        ua: Some(ANDROID),
        q: Some("src=x&utm_source=mail"),
        ..V::default()
    };
    assert_eq!(
        url_for(&o, &v, 1).as_deref(),
        Some("https://a/droid?src=sl&utm_source=mail")
    );
}

#[test]
fn expired_and_gone_links_answer_their_fallback_or_nothing() {
    let o = opts(r#"{"x":"https://a/over","f":true}"#);
    let v = V {
        q: Some("a=1"),
        ..V::default()
    };
    let c = choose(&o, "https://x/", true, "abc123", &v, 1);
    assert_eq!(
        c,
        Some(Choice {
            url: Cow::Borrowed("https://a/over"),
            dest: Destination::Expired
        })
    );
    let gone = opts(r#"{"x":"https://a/over","d":true}"#);
    assert_eq!(
        choose(&gone, "https://x/", false, "c", &v, 1).map(|c| c.dest),
        Some(Destination::Expired)
    );
    assert_eq!(
        choose(&LinkOptions::default(), "https://x/", true, "c", &v, 1),
        None
    );
    assert!(LinkOptions::decode(r#"{"d":true}"#).is_none());
}

#[test]
fn splits_are_stable_and_hold_their_weights_within_two_percent() {
    let o = opts(r#"{"r":[{"s":[["https://a/A",70],["https://a/B",20],["https://a/C",10]]}]}"#);
    let mut counts = [0u32; 3];
    let n = 100_000u32;
    for i in 0..n {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        let v = V {
            ip: Some(ip),
            ..V::default()
        };
        let c = choose(&o, "https://x/", false, "abc123", &v, 1);
        let Some(Choice {
            dest:
                Destination::Rule {
                    variant: Some(variant),
                    ..
                },
            ..
        }) = c
        else {
            panic!("{c:?}")
        };
        counts[variant as usize] += 1;
        // The same visitor always gets the same variant.
        let again = choose(&o, "https://x/", false, "abc123", &v, 1).map(|c| c.dest);
        assert_eq!(
            again,
            Some(Destination::Rule {
                rule: 0,
                variant: Some(variant)
            })
        );
    }
    for (got, want) in counts.iter().zip([70.0, 20.0, 10.0]) {
        let pct = f64::from(*got) * 100.0 / f64::from(n);
        assert!((pct - want).abs() <= 2.0, "{counts:?}");
    }
    // No address: the first variant.
    let c = choose(&o, "https://x/", false, "abc123", &V::default(), 1);
    assert_eq!(
        c.map(|c| c.dest),
        Some(Destination::Rule {
            rule: 0,
            variant: Some(0)
        })
    );
    let labels = [
        Destination::Link,
        Destination::Rule {
            rule: 0,
            variant: None,
        },
        Destination::Rule {
            rule: 1,
            variant: Some(0),
        },
        Destination::Expired,
    ]
    .map(|d| d.label());
    assert_eq!(labels, ["link", "r1", "r2v1", "expired"]);
}

#[test]
fn split_keys_and_hashes_are_the_documented_ones() {
    assert_eq!(
        split_key(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))),
        "192.0.2.7"
    );
    let v6: Ipv6Addr = "2001:db8:1:2:3:4:5:6"
        .parse()
        .unwrap_or(Ipv6Addr::LOCALHOST);
    assert_eq!(
        split_key(IpAddr::V6(v6)),
        "20010db8000100020000000000000000/64"
    );
    let mapped: Ipv6Addr = "::ffff:192.0.2.7".parse().unwrap_or(Ipv6Addr::LOCALHOST);
    assert_eq!(split_key(IpAddr::V6(mapped)), "192.0.2.7");
    // Pinned values: the OpenResty module's tests expect the same.
    assert_eq!(split_hash("abc123", "192.0.2.7"), SPLIT_HASH_PIN);
}

const SPLIT_HASH_PIN: u32 = 2_456_142_176;

#[test]
fn validation_bounds() {
    let bad = [
        r#"{"r":[{"c":{},"u":"ftp://x"}]}"#,
        r#"{"r":[{"c":{}}]}"#,
        r#"{"r":[{"u":"https://a","s":[["https://b",1],["https://c",1]]}]}"#,
        r#"{"r":[{"s":[["https://b",1]]}]}"#,
        r#"{"r":[{"s":[["https://b",0],["https://c",1]]}]}"#,
        r#"{"r":[{"c":{"cc":["cn"]},"u":"https://a"}]}"#,
        r#"{"r":[{"c":{"lang":["zh-CN"]},"u":"https://a"}]}"#,
        r#"{"r":[{"c":{"from":5,"until":5},"u":"https://a"}]}"#,
        r#"{"r":[{"c":{"q":["","x"]},"u":"https://a"}]}"#,
        r#"{"r":[{"c":{"dev":["phone"]},"u":"https://a"}]}"#,
        r#"{"r":[{"c":{"os":["ios"]},"u":"https://a"}]}"#,
        r#"{"x":"https://a b"}"#,
        r#"{"z":1}"#,
        "{\"f\": true}",
    ];
    for b in bad {
        assert!(LinkOptions::decode(b).is_none(), "{b}");
    }
    let o = opts(
        r#"{"f":true,"x":"https://a/x","r":[{"c":{"dev":["ios"],"cc":["CN"]},"u":"https://a/1"},{"s":[["https://a/2",1],["https://a/3",3]]}]}"#,
    );
    assert_eq!(LinkOptions::decode(&o.encode()), Some(o.clone()));
    assert!(!o.encode().contains(' '));
    assert!(LinkOptions::default().is_empty());
}

#[test]
fn destination_labels_round_trip_and_nothing_else_parses() {
    let mut all = vec![Destination::Link, Destination::Expired];
    for rule in 0..MAX_RULES as u8 {
        all.push(Destination::Rule {
            rule,
            variant: None,
        });
        for v in 0..MAX_VARIANTS as u8 {
            all.push(Destination::Rule {
                rule,
                variant: Some(v),
            });
        }
    }
    for d in &all {
        assert_eq!(Destination::parse(&d.label()), Some(*d), "{}", d.label());
    }
    for bad in [
        "", "r", "r0", "r01", "r21", "r1v", "r1v0", "r1v11", "r1v01", "R1", "rv1", "r1v1v1",
        "links", "r+1", "r-1", "r 1", "expired ", "r100",
    ] {
        assert_eq!(Destination::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn repeated_user_agents_get_the_same_facts() {
    // The per-thread memo answers exactly as a fresh reading, whatever the
    // order (a repeat, a change, back), and longer agents bypass it.
    let long = format!("{WECHAT} {}", "x".repeat(600));
    for ua in [
        WECHAT, WECHAT, ANDROID, IPAD, IPAD, WECHAT, &long, &long, "", ANDROID,
    ] {
        assert_eq!(
            UaFacts::of_repeated(ua.as_bytes()),
            UaFacts::of(ua.as_bytes()),
            "{ua}"
        );
    }
}

#[test]
fn condition_sets_are_bits_written_in_their_own_order() {
    let o = opts(
        r#"{"r":[{"c":{"dev":["desktop","ios","ios"],"app":["tiktok","wechat"]},"u":"https://a"}]}"#,
    );
    let w = &o.rules[0].when;
    assert_eq!(
        w.dev.iter().collect::<Vec<_>>(),
        [DeviceCond::Ios, DeviceCond::Desktop]
    );
    assert!(w.app.contains(App::Tiktok) && !w.app.contains(App::Qq));
    assert_eq!(
        o.encode(),
        r#"{"r":[{"c":{"dev":["ios","desktop"],"app":["wechat","tiktok"]},"u":"https://a"}]}"#
    );
    // Bounds hold as for the other lists; codes are checked as read.
    let many = vec!["\"ios\""; MAX_VALUES + 1].join(",");
    assert!(LinkOptions::decode(&format!(
        r#"{{"r":[{{"c":{{"dev":[{many}]}},"u":"https://a"}}]}}"#
    ))
    .is_none());
    assert!(LinkOptions::decode(r#"{"r":[{"c":{"cc":["USA"]},"u":"https://a"}]}"#).is_none());
    assert!(LinkOptions::decode(r#"{"r":[{"c":{"lang":["EN"]},"u":"https://a"}]}"#).is_none());
    let o = opts(r#"{"r":[{"c":{"cc":["US","CN"],"lang":["zh"]},"u":"https://a"}]}"#);
    assert_eq!(&*o.rules[0].when.cc, &[Country(*b"US"), Country(*b"CN")]);
    assert_eq!(o.rules[0].when.lang[0].as_str(), "zh");
}

#[test]
fn the_card_flag_is_read_and_written_as_g() {
    let o = opts(r#"{"g":true}"#);
    assert!(o.card && !o.is_empty());
    assert_eq!(o.encode(), r#"{"g":true}"#);
    assert!(LinkOptions::decode(r#"{"g":1}"#).is_none());
    assert_eq!(opts(r#"[false,null,false,[],true]"#), o);
}

#[test]
fn the_password_flag_is_read_and_written_as_p_and_hides_the_card() {
    let o = opts(r#"{"g":true,"p":true}"#);
    assert!(o.password && o.card);
    assert_eq!(o.encode(), r#"{"g":true,"p":true}"#);
    assert!(LinkOptions::decode(r#"{"p":"yes"}"#).is_none());
    assert_eq!(opts(r#"[false,null,false,[],true,true]"#), o);
    // A password link's card would link its destination: none is shown.
    let crawler = Some(&b"facebookexternalhit/1.1"[..]);
    assert!(!o.shows_card(false, crawler));
    assert!(opts(r#"{"g":true}"#).shows_card(false, crawler));
    assert!(o.locked(false));
    assert!(!o.locked(true), "an expired link's fallback is public");
}

#[test]
fn the_guide_apps_are_read_and_written_as_b() {
    let o = opts(r#"{"b":["qq","wechat"]}"#);
    assert_eq!(o.encode(), r#"{"b":["wechat","qq"]}"#);
    assert!(LinkOptions::decode(r#"{"b":["icq"]}"#).is_none());
    assert_eq!(
        opts(r#"[false,null,false,[],false,false,["wechat","qq"]]"#),
        o
    );
    let wechat = Some(&b"Mozilla/5.0 (iPhone) MicroMessenger/8.0.47"[..]);
    let safari = Some(&b"Mozilla/5.0 (iPhone) Version/17.0 Safari/604.1"[..]);
    assert!(o.shows_guide(false, wechat));
    assert!(!o.shows_guide(false, safari));
    assert!(!o.shows_guide(true, wechat), "an expired link's fallback");
    assert!(!opts(r#"{"f":true}"#).shows_guide(false, wechat));
    assert_eq!(guide_language(Some(b"zh-CN,zh;q=0.9,en;q=0.8")), "zh");
    assert_eq!(guide_language(Some(b"en-US,zh;q=0.5")), "en");
    assert_eq!(guide_language(None), "en");
}

#[test]
fn a_rules_conditions_fit_in_little_more_than_a_cache_line() {
    // The edge walks every rule of a link on each request (perf.md, "Link
    // rules laid out for the walk"): no condition list is a Vec of Strings.
    assert!(
        std::mem::size_of::<When>() <= 80,
        "{}",
        std::mem::size_of::<When>()
    );
    assert!(
        std::mem::size_of::<Rule>() <= 128,
        "{}",
        std::mem::size_of::<Rule>()
    );
}

#[test]
fn the_screening_is_read_and_written_as_w() {
    let o = opts(r#"{"w":"block"}"#);
    assert_eq!(o.screen, Some(Screen::Block));
    assert_eq!(o.encode(), r#"{"w":"block"}"#);
    assert_eq!(opts(r#"{"w":"warn"}"#).screened(false), Some(Screen::Warn));
    assert!(LinkOptions::decode(r#"{"w":"allow"}"#).is_none());
    assert!(LinkOptions::decode(r#"{"w":true}"#).is_none());
    assert_eq!(o.screened(true), None, "an expired link");
    let gone = opts(r#"{"x":"https://t/x","d":true,"w":"warn"}"#);
    assert_eq!(gone.screened(false), None, "a record kept for its fallback");
    assert!(Screen::Block > Screen::Warn, "the stronger action wins");
}
