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

use shorturl_common::code::link_key;
use shorturl_common::link_rules::LinkOptions;
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
