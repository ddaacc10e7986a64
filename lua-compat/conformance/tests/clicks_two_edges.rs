//! The two edges count alike (issue 12: "the conformance suite compares the
//! two edges' counts for the same requests"): the same request list is sent
//! to the Pingora edge and to the OpenResty module, both over one Redis
//! with their own `clicks.edge_name`, and each edge's batches in
//! `su:1:clicks` (grouped by batch-id prefix, decoded strictly) sum to the
//! same lines — which are what `common::clicks::Accumulator` counts.
//!
//! Two links carry options (protocol 3.1.1): one with a device rule and a
//! split, one expired with a fallback, so the destination lines (`t`,
//! batch format 2) are compared too.
//!
//! No link gets more than 20 referrer hosts a day here, so the sums do not
//! depend on when each edge flushed (past 20, each flush picks its own top
//! 20: openresty_clicks.rs tests that on the module alone).

use crate::support;

use shorturl_common::clicks::uniq;
use shorturl_common::code::link_key;
use shorturl_common::link_rules::{self as link_rules, LinkOptions};
use support::clicks::{self, bot_list_user_agents, record, Req, BROWSERS, CHROME_WIN, REFERERS};
use support::http::Conn;
use support::Edge;
use testkit::{free_port, Redis};

/// The requests: every browser user agent of openresty_clicks.rs (Unicode
/// spaces and non-ASCII included) and every 7th bot-list user agent (all
/// `^` ones), on two links, with and without referrers, HEADs, no and
/// empty user agents, and 404s.
fn requests(a: &str, b: &str, elsewhere: &str, unknown: &str) -> Vec<Req> {
    let bots = bot_list_user_agents();
    let uas = BROWSERS.iter().map(|s| s.to_string()).chain(
        bots.iter()
            .enumerate()
            .filter(|(i, u)| i % 7 == 0 || u.contains("/2.1"))
            .map(|(_, u)| u.clone()),
    );
    let refs = REFERERS;
    let mut out = Vec::new();
    for (i, ua) in uas.enumerate() {
        let code = if i % 3 == 0 { b } else { a };
        let referer = (i % (refs.len() + 1) < refs.len()).then(|| refs[i % (refs.len() + 1)]);
        let mut r = Req::get(code, Some(&ua), referer);
        r.head = i % 5 == 2;
        out.push(r);
    }
    out.push(Req::get(a, None, Some("https://t.co/x")));
    out.push(Req::get(b, Some(""), None));
    let mut head = Req::get(b, None, None);
    head.head = true;
    out.push(head);
    out.push(Req::get(elsewhere, Some(CHROME_WIN), None));
    out.push(Req::get(unknown, Some(CHROME_WIN), None));
    out
}

/// The options of the routed link: phones to one URL, everyone else split.
const RULES: &str = r#"{"r":[{"c":{"dev":["mobile"]},"u":"https://m.example.com/r"},{"c":{},"s":[["https://a.example.com/r",1],["https://b.example.com/r",3]]}]}"#;
/// The options of the expired link.
const FALLBACK: &str = r#"{"x":"https://example.com/fallback"}"#;

/// Every browser (and a HEAD, a bot) on the routed and the expired link.
fn routed_requests(routed: &str, expired: &str) -> Vec<Req> {
    let rules = LinkOptions::decode(RULES).expect("valid rules");
    let fallback = LinkOptions::decode(FALLBACK).expect("valid fallback");
    let mut out = Vec::new();
    for (i, ua) in BROWSERS.iter().enumerate() {
        let mut r = Req::get(routed, Some(ua), None);
        r.head = i == 3;
        r.route(&rules, &format!("https://example.com/{routed}"), false);
        out.push(r);
        let mut x = Req::get(expired, Some(ua), Some("https://t.co/x"));
        x.route(&fallback, "https://example.com/gone", true);
        out.push(x);
    }
    out
}

#[test]
fn the_pingora_edge_and_the_module_count_the_same_requests_alike() {
    let redis = Redis::start();
    let url = redis.url();
    let (a, b, elsewhere, unknown) = ("cmpLinkA01", "cmpLinkB01", "cmpOther01", "cmpNone001");
    record(&url, a, "localhost");
    record(&url, b, "localhost");
    record(&url, elsewhere, "s.shop55.com");
    support::redis_cmd(
        &url,
        &["SET", &format!("su:1:link:localhost/{unknown}"), "- 1"],
    )
    .unwrap();
    let (routed, expired) = ("cmpRouted1", "cmpExpired");
    let now = shorturl_common::time::now_unix();
    for (code, exp, opts) in [(routed, now + 3600, RULES), (expired, now - 10, FALLBACK)] {
        let line = format!("3 1 {exp} localhost https://example.com/{code} {opts}");
        support::redis_cmd(
            &url,
            &["SET", &format!("su:1:link:localhost/{code}"), &line],
        )
        .unwrap();
    }
    let origin = format!("127.0.0.1:{}", free_port());
    let pingora = Edge::pingora_with(
        &url,
        &origin,
        "  clicks: { enabled: true, flush_interval_ms: 100, edge_name: cmp-pingora }\n",
    );
    let lua = Edge::openresty_with(
        &format!("127.0.0.1:{}", redis.port()),
        &origin,
        &[
            ("SU_CLICKS_EDGE_NAME", "cmp-lua".into()),
            ("SU_CLICKS_FLUSH_INTERVAL_MS", "100".into()),
        ],
    );
    let mut reqs = requests(a, b, elsewhere, unknown);
    let routed_reqs = routed_requests(routed, expired);
    let dests: std::collections::BTreeSet<String> = routed_reqs
        .iter()
        .filter_map(|r| r.destination.map(|d| d.label()))
        .collect();
    assert!(
        dests.len() >= 3 && dests.contains("expired") && dests.contains("r1"),
        "the requests reach several destinations: {dests:?}"
    );
    reqs.extend(routed_reqs);
    clicks::away_from_hour_end(120);

    let mut answers = Vec::new();
    for edge in [&pingora, &lua] {
        let mut conns: Vec<Conn> = (0..4).map(|_| Conn::open(edge.port).unwrap()).collect();
        answers.push(clicks::send(&mut conns, &reqs));
    }
    let statuses = |i: usize| answers[i].iter().map(|a| a.0).collect::<Vec<_>>();
    assert_eq!(statuses(0), statuses(1), "the edges answered differently");
    let redirects = statuses(0).iter().filter(|s| **s == 302).count() as u64;
    assert_eq!(redirects, reqs.len() as u64 - 2);

    let from_pingora = clicks::await_clicks(&url, "cmp-pingora:", redirects);
    let from_lua = clicks::await_clicks(&url, "cmp-lua:", redirects);
    let want = clicks::lines_of(&clicks::expected(&reqs, &answers[0]));
    let p = clicks::lines_of(&from_pingora);
    let l = clicks::lines_of(&from_lua);
    for (k, n) in &p {
        assert_eq!(
            l.get(k),
            Some(n),
            "line {k:?}: pingora {n}, openresty {:?}",
            l.get(k)
        );
    }
    assert_eq!(p, l, "the two edges' lines");
    assert_eq!(l, want, "the lines against common::clicks::Accumulator");
    let t_lines = |lines: &clicks::Lines| lines.keys().filter(|k| k.0 == 't').count();
    assert!(t_lines(&p) >= 3, "destination lines: {p:?}");
    // Only the links with options have them.
    assert!(p
        .keys()
        .filter(|k| k.0 == 't')
        .all(|k| k.1 == link_key(routed, "localhost") || k.1 == link_key(expired, "localhost")));
}

/// The two edges over `redis`, behind a trusted proxy (loopback) with the
/// country header and `mmdb` as their geo database, flushing every 100 ms
/// as `<name>-pingora` and `<name>-lua`; `city`: counting cities too.
fn edges_behind_a_proxy(
    redis: &Redis,
    mmdb: &std::path::Path,
    name: &str,
    city: bool,
) -> (Edge, Edge) {
    let origin = format!("127.0.0.1:{}", free_port());
    let pingora = Edge::pingora_with(
        &redis.url(),
        &origin,
        &format!(
            "  trusted_proxies: [\"127.0.0.1/32\"]\n  geo: {{ country_header: CF-IPCountry, mmdb_path: \"{}\" }}\n  clicks: {{ enabled: true, flush_interval_ms: 100, edge_name: {name}-pingora, city: {city} }}\n",
            mmdb.display()
        ),
    );
    let lua = Edge::openresty_with(
        &format!("127.0.0.1:{}", redis.port()),
        &origin,
        &[
            ("SU_CLICKS_EDGE_NAME", format!("{name}-lua")),
            ("SU_CLICKS_FLUSH_INTERVAL_MS", "100".into()),
            ("SU_CLICKS_CITY", city.to_string()),
            ("SU_TRUSTED_PROXIES", "127.0.0.1/32".into()),
            ("SU_GEO_COUNTRY_HEADER", "CF-IPCountry".into()),
            ("SU_GEO_MMDB_PATH", mmdb.display().to_string()),
        ],
    );
    (pingora, lua)
}

/// Sets each human request's unique visitor, by the salt of `day` both
/// edges fetched from Redis (at `url`), as `uniq::visitor` computes it.
fn with_visitors(url: &str, reqs: &mut [Req], day: u64) {
    let salt: String =
        redis::from_redis_value(support::redis_cmd(url, &["GET", &uniq::salt_key(day)]).unwrap())
            .unwrap();
    assert!(
        uniq::is_salt(salt.as_bytes()),
        "the day's salt is 32 hex digits"
    );
    for r in reqs {
        let ua = r.ua.clone().unwrap_or_default();
        if !shorturl_common::clicks::is_bot(&ua) {
            let ip: std::net::IpAddr = r.xff.as_deref().unwrap_or("127.0.0.1").parse().unwrap();
            r.visitor = Some(uniq::visitor(
                salt.as_bytes(),
                &link_rules::split_key(ip),
                ua.as_bytes(),
            ));
        }
    }
}

/// The dimensions of protocol 3.7 (batch version 4) alike on both edges
/// and as `common::clicks::Accumulator::with_dimensions` counts them: both
/// behind a trusted proxy (loopback) with the country header and the
/// database `scripts/deps.sh` installs; browsers and in-app browsers,
/// languages, the QR marker (counted, and not forwarded), UTM values from a
/// link's own URL and from a forwarded query, countries from the header and
/// from addresses looked up in the database.
#[test]
fn the_two_edges_count_dimensions_alike() {
    let redis = Redis::start();
    let url = redis.url();
    let now = shorturl_common::time::now_unix();
    let (own, fwd) = ("dimOwnUtm1", "dimForward");
    let own_url = "https://example.com/a?utm_source=news&utm_campaign=spring";
    let fwd_url = "https://example.com/f";
    for (code, line) in [
        (own, format!("2 1 {} localhost {own_url}", now + 86_400)),
        (
            fwd,
            format!("3 1 {} localhost {fwd_url} {{\"f\":true}}", now + 86_400),
        ),
    ] {
        support::redis_cmd(
            &url,
            &["SET", &format!("su:1:link:localhost/{code}"), &line],
        )
        .unwrap();
    }
    let mmdb = testkit::country_mmdb();
    let (pingora, lua) = edges_behind_a_proxy(&redis, &mmdb, "dim", false);
    // The database's answer for the addresses the requests come from.
    let db = maxminddb::Reader::open_readfile(&mmdb).expect("the country database");
    let db_country = |ip: &str| -> Option<[u8; 2]> {
        let found = db.lookup(ip.parse().ok()?).ok()?;
        let rec: serde_json::Value = found.decode().ok()??;
        rec["country_code"].as_str()?.as_bytes().try_into().ok()
    };
    let wechat = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.47(0x18002f2c) NetType/WIFI Language/zh_CN";
    let langs = [
        Some("zh-CN,zh;q=0.9,en;q=0.8"),
        Some("en-US"),
        Some("*"),
        None,
        Some("de"),
        Some("x-klingon"),
    ];
    let queries = [
        None,
        Some("qr=1"),
        Some("utm_source=mail&qr=1"),
        Some("utm_campaign=a%20b&utm_medium=cpc"),
        Some("utm_source=bad!"),
    ];
    let addrs = ["8.8.8.8", "1.1.1.1", "203.0.113.9", "2001:4860:4860::8888"];
    let mut reqs = Vec::new();
    let uas = BROWSERS.iter().copied().chain([wechat, "curl/8.4"]);
    for (i, ua) in uas.enumerate() {
        for j in 0..3 {
            let k = i * 3 + j;
            let code = if k % 2 == 0 { own } else { fwd };
            let mut r = Req::get(code, Some(ua), None);
            r.lang = langs[k % langs.len()].map(str::to_owned);
            r.query = queries[k % queries.len()].map(str::to_owned);
            match k % 3 {
                0 => {
                    // A trusted proxy's header, upper-cased.
                    let c = ["JP", "BR", "de"][(k / 3) % 3];
                    r.cf_country = Some(c.to_owned());
                    r.country = c.to_ascii_uppercase().as_bytes().try_into().ok();
                }
                1 => {
                    let a = addrs[k % addrs.len()];
                    r.xff = Some(a.to_owned());
                    r.country = db_country(a);
                }
                _ => {}
            }
            if code == fwd {
                // A link with options: its clicks have destination lines.
                r.destination = Some(link_rules::Destination::Link);
            }
            let base = if code == own { own_url } else { fwd_url };
            r.location = Some(match (&r.query, code == fwd) {
                (Some(q), true) => link_rules::forward_query(base, q).into_owned(),
                _ => base.to_owned(),
            });
            reqs.push(r);
        }
    }
    assert!(
        reqs.iter().any(|r| r.xff.is_some() && r.country.is_some()),
        "the database answers some of the addresses"
    );
    clicks::away_from_hour_end(120);
    let mut answers = Vec::new();
    for edge in [&pingora, &lua] {
        let mut conns: Vec<Conn> = (0..3).map(|_| Conn::open(edge.port).unwrap()).collect();
        answers.push(clicks::send(&mut conns, &reqs));
    }
    let statuses = |i: usize| answers[i].iter().map(|a| a.0).collect::<Vec<_>>();
    assert_eq!(statuses(0), statuses(1), "the edges answered differently");
    assert!(statuses(0).iter().all(|s| *s == 302), "{:?}", statuses(0));
    let n = reqs.len() as u64;
    let from_pingora = clicks::await_clicks(&url, "dim-pingora:", n);
    let from_lua = clicks::await_clicks(&url, "dim-lua:", n);
    for b in from_pingora.iter().chain(&from_lua) {
        assert!(b.counted_dims, "every batch is version 4: {}", b.id);
    }
    // The visitors, by the day's salt both edges fetched from Redis.
    let day = shorturl_common::clicks::day_start(answers[0][0].1);
    with_visitors(&url, &mut reqs, day);
    let want = clicks::lines_of(&clicks::expected(&reqs, &answers[0]));
    let want_uniques = clicks::uniques_of(&clicks::expected(&reqs, &answers[0]));
    let (pu, lu) = (
        clicks::uniques_of(&from_pingora),
        clicks::uniques_of(&from_lua),
    );
    assert_eq!(pu, lu, "the two edges' visitors");
    assert_eq!(
        pu, want_uniques,
        "the visitors against common::clicks::uniq"
    );
    assert!(
        pu.values().all(|s| s.estimate() >= 5),
        "several visitors per link: {pu:?}"
    );
    let p = clicks::lines_of(&from_pingora);
    let l = clicks::lines_of(&from_lua);
    for (k, v) in &p {
        assert_eq!(
            l.get(k),
            Some(v),
            "line {k:?}: pingora {v}, openresty {:?}",
            l.get(k)
        );
    }
    assert_eq!(p, l, "the two edges' lines");
    assert_eq!(p, want, "the lines against common::clicks::Accumulator");
    let x = |prefix: &str| p.keys().any(|k| k.0 == 'x' && k.3.starts_with(prefix));
    for dim in [
        "country:JP",
        "browser:wechat",
        "browser:chrome",
        "os:ios",
        "lang:zh",
        "lang:de",
        "source:qr",
        "utm_source:news",
        "utm_source:mail",
        "utm_source:~other",
        "utm_campaign:a%20b",
        "utm_medium:cpc",
    ] {
        assert!(x(dim), "no {dim} line: {p:?}");
    }
}

/// The city of protocol 3.9 (`clicks.city`) alike on both edges and as
/// `common::clicks::Accumulator` counts the values `testkit::mmdb` lists:
/// both behind a trusted proxy with the test city database
/// (`testkit/data/city-test.mmdb`) as their `geo.mmdb_path`; GeoLite2's
/// records and ip-location-db's, a name sent as `~other`, records without
/// a city, an address with no record, and a trusted country header (which
/// has no city: the address's database answer is counted).
#[test]
fn the_two_edges_count_cities_alike() {
    let redis = Redis::start();
    let url = redis.url();
    let now = shorturl_common::time::now_unix();
    let code = "dimCity01";
    let dest = "https://example.com/c";
    support::redis_cmd(
        &url,
        &[
            "SET",
            &format!("su:1:link:localhost/{code}"),
            &format!("2 1 {} localhost {dest}", now + 86_400),
        ],
    )
    .unwrap();
    let mmdb = testkit::mmdb::city_test_db_path();
    let (pingora, lua) = edges_behind_a_proxy(&redis, &mmdb, "city", true);
    let country = |city: &str| -> Option<[u8; 2]> { city.as_bytes()[..2].try_into().ok() };
    let mut reqs = Vec::new();
    for (i, (ip, city)) in testkit::mmdb::CITY_TEST_NETWORKS
        .iter()
        .chain(&[("10.9.8.7", None)])
        .enumerate()
    {
        // Each address once or twice, from two browsers.
        for j in 0..=(i % 2) {
            let mut r = Req::get(code, Some(BROWSERS[j % BROWSERS.len()]), None);
            r.xff = Some((*ip).to_owned());
            r.city = city.map(str::to_owned);
            r.country = match (*ip, city) {
                ("67.43.156.7" | "216.160.83.4", _) => Some(*b"US"),
                ("175.16.199.3", _) => Some(*b"CN"),
                (_, Some(c)) => country(c),
                _ => None,
            };
            r.location = Some(dest.to_owned());
            reqs.push(r);
        }
    }
    // A trusted header names the country; the city is still the address's.
    let mut r = Req::get(code, Some(BROWSERS[0]), None);
    r.xff = Some("81.2.69.77".into());
    r.cf_country = Some("FR".into());
    r.country = Some(*b"FR");
    r.city = Some("GB-London".into());
    r.location = Some(dest.to_owned());
    reqs.push(r);
    // A bot: in no dimension.
    let mut r = Req::get(code, Some("curl/8.4"), None);
    r.xff = Some("81.2.69.5".into());
    r.location = Some(dest.to_owned());
    reqs.push(r);
    clicks::away_from_hour_end(120);
    let mut answers = Vec::new();
    for edge in [&pingora, &lua] {
        let mut conns: Vec<Conn> = (0..2).map(|_| Conn::open(edge.port).unwrap()).collect();
        answers.push(clicks::send(&mut conns, &reqs));
    }
    assert!(answers.iter().flatten().all(|a| a.0 == 302), "{answers:?}");
    let n = reqs.len() as u64;
    let from_pingora = clicks::await_clicks(&url, "city-pingora:", n);
    let from_lua = clicks::await_clicks(&url, "city-lua:", n);
    with_visitors(
        &url,
        &mut reqs,
        shorturl_common::clicks::day_start(answers[0][0].1),
    );
    let want = clicks::lines_of(&clicks::expected(&reqs, &answers[0]));
    let p = clicks::lines_of(&from_pingora);
    let l = clicks::lines_of(&from_lua);
    assert_eq!(p, l, "the two edges' lines");
    assert_eq!(p, want, "the lines against common::clicks::Accumulator");
    let city = |v: &str| {
        p.iter()
            .find(|(k, _)| k.0 == 'x' && k.3 == format!("city:{v}"))
            .map(|(_, n)| *n)
    };
    // London: twice from 81.2.69.5 (i = 0 sends once; the header's once).
    assert_eq!(city("GB-London"), Some(2), "{p:?}");
    assert_eq!(city("SE-Link%C3%B6ping"), Some(2), "{p:?}");
    assert_eq!(city("BR-S%C3%A3o%20Paulo"), Some(1), "{p:?}");
    assert_eq!(city("~other"), Some(1), "{p:?}");
    assert_eq!(city("DE-Berlin"), Some(1), "{p:?}");
    assert!(city("unknown").is_none(), "a default is never sent: {p:?}");
}
