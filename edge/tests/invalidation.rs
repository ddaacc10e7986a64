//! Fleet-wide invalidation, edge side: the messages on `su:1:inval` reach
//! the edge's memory, a tombstone keeps a lookup in flight from storing or
//! serving what a change superseded, and a lost subscription bounds how long
//! memory is trusted. Real Redis, origin and MariaDB; the in-process TTLs
//! are set to 5 minutes so only invalidation can explain a change showing.
//! Needs `shorturl-origin` built (`cargo build --workspace --bins`).

use crate::support;

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use support::http::{request, Conn, Response};
use support::{
    create_link, delete_link, patch_link, start_edge, Edge, EdgeOpts, Origin, API_KEY, TIMEOUT,
};
use testkit::{wait_for, Redis, TempDir};

const DOMAIN: &str = "s.shop55.com";
/// A generous bound for a change to reach an edge's answers (the target is
/// 100 ms; the in-process TTL is 5 minutes here).
const LIVE_WITHIN: Duration = Duration::from_secs(2);
/// Long in-process TTLs, and no limit on 404s (the tests poll deleted links).
const LONG_TTLS: &str = "  cache: { positive_ttl_secs: 300, negative_ttl_secs: 300 }
  limits: { unknown_per_ip_per_sec: 0 }";

fn code_of(r: &Response) -> String {
    assert!(
        r.status == 201 || r.status == 200,
        "creation failed: {} {}",
        r.status,
        r.text()
    );
    r.json()["code"].as_str().unwrap().to_owned()
}

/// Creates `code` → `url` on the origin (a custom code).
fn create_custom(origin: &Origin, code: &str, url: &str) -> Response {
    let auth = format!("Bearer {API_KEY}");
    let body = json!({ "url": url, "domain": DOMAIN, "code": code });
    request(
        origin.port,
        "POST",
        "/api/v1/links",
        "localhost",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

/// What the edge answers for `code`: the redirect target, or `None` for 404.
fn answer(c: &mut Conn, code: &str) -> Option<String> {
    let r = c.get(&format!("/{code}"), DOMAIN).unwrap();
    match r.status {
        302 => Some(r.header("location").unwrap().to_owned()),
        404 => None,
        s => panic!("/{code} answered {s}: {}", r.text()),
    }
}

fn answer_once(edge: &Edge, code: &str) -> Option<String> {
    answer(&mut Conn::open(edge.port).unwrap(), code)
}

/// After a change the API answered at `t0`: the edge answers `want` within
/// [`LIVE_WITHIN`], and never anything else in 200 answers after that.
fn assert_live(edge: &Edge, code: &str, want: Option<&str>, t0: Instant) {
    let mut c = Conn::open(edge.port).unwrap();
    loop {
        let got = answer(&mut c, code);
        if got.as_deref() == want {
            break;
        }
        assert!(
            t0.elapsed() < LIVE_WITHIN,
            "{:?} after the change /{code} still answers {got:?}, want {want:?}",
            t0.elapsed()
        );
    }
    for i in 0..200 {
        assert_eq!(
            answer(&mut c, code).as_deref(),
            want,
            "answer {i} after the first correct one"
        );
    }
}

fn changed(r: &Response, version: u64) -> Instant {
    let t0 = Instant::now();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["version"], version, "{}", r.text());
    t0
}

/// A creation, edits, a disable, an enable and a delete each show on the
/// edge at once, although every answer was cached for 5 minutes; every
/// message dropped exactly one older entry.
#[test]
fn every_change_reaches_the_edge_at_once() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 1000);
    let edge = start_edge(EdgeOpts {
        extra: LONG_TTLS,
        ..EdgeOpts::new(redis.url(), vec![origin.addr()])
    });
    edge.wait_subscribed();
    let code = "live-0001";

    // Looked up before it exists: a negative, cached.
    assert_eq!(answer_once(&edge, code), None);
    assert_eq!(answer_once(&edge, code), None);
    assert_eq!(edge.counter("local", "hit"), 1);

    let r = create_custom(&origin, code, "https://example.com/v1");
    assert_eq!(r.status, 201, "{}", r.text());
    assert_live(&edge, code, Some("https://example.com/v1"), Instant::now());

    let t0 = changed(
        &patch_link(origin.port, code, json!({"url": "https://example.com/v2"})),
        2,
    );
    assert_live(&edge, code, Some("https://example.com/v2"), t0);

    let t0 = changed(
        &patch_link(origin.port, code, json!({"state": "disabled"})),
        3,
    );
    assert_live(&edge, code, None, t0);

    let t0 = changed(
        &patch_link(origin.port, code, json!({"state": "active"})),
        4,
    );
    assert_live(&edge, code, Some("https://example.com/v2"), t0);

    // Through the edge this time (the API is forwarded unchanged).
    let t0 = changed(&delete_link(edge.port, code), 5);
    assert_live(&edge, code, None, t0);

    let inv = edge.inval();
    assert_eq!(
        (inv.messages, inv.dropped, inv.superseded),
        (5, 5, 0),
        "{inv:?}"
    );
    assert_eq!(
        edge.metric("shorturl_inval_dropped_total{cache=\"node\"}"),
        5.0
    );
    assert_eq!(edge.metric("shorturl_inval_subscribed"), 1.0);
}

fn wait_file(what: &str, p: &Path) {
    wait_for(what, TIMEOUT, || p.exists());
}

/// A lookup reads the link from Redis, then (held by a failpoint) the
/// link is edited, or deleted, and the edge receives the message before the
/// lookup completes. The lookup's old answer is neither served nor
/// cached: the edge looks the code up once more.
#[test]
fn a_lookup_in_flight_during_a_change_neither_serves_nor_caches_the_old_state() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 1000);
    let dir = TempDir::new("hold");
    let hold = dir.path().join("hold");
    let held = dir.path().join("hold.held");
    let edge = start_edge(EdgeOpts {
        extra: LONG_TTLS,
        env: vec![(
            "SHORTURL_FAILPOINTS",
            format!("edge.lookup.hold=*@{}", hold.display()),
        )],
        ..EdgeOpts::new(redis.url(), vec![origin.addr()])
    });
    edge.wait_subscribed();

    let race = |code: &str, change: &dyn Fn() -> Instant, want: Option<&str>, messages: u64| {
        let _ = std::fs::remove_file(&held);
        std::fs::write(&hold, b"").unwrap();
        let port = edge.port;
        let path = format!("/{code}");
        let inflight = std::thread::spawn(move || support::http::get(port, &path, DOMAIN));
        wait_file("the edge's lookup to read Redis and hold", &held);
        let t0 = change();
        // The edge has the message before the lookup goes on.
        wait_for("the edge to receive the change", TIMEOUT, || {
            edge.inval().messages == messages
        });
        std::fs::remove_file(&hold).unwrap();
        let r = inflight.join().unwrap();
        let got = match r.status {
            302 => r.header("location").map(str::to_owned),
            _ => None,
        };
        assert_eq!(
            got.as_deref(),
            want,
            "the held request was answered {}",
            r.status
        );
        // Not cached either: memory holds the new state.
        let hits = edge.counter("local", "hit");
        assert_eq!(answer_once(&edge, code).as_deref(), want);
        assert_eq!(edge.counter("local", "hit"), hits + 1);
        t0
    };

    let a = "race-0001";
    let r = create_custom(&origin, a, "https://example.com/old");
    assert_eq!(r.status, 201, "{}", r.text());
    wait_for("the creation's message", TIMEOUT, || {
        edge.inval().messages == 1
    });
    race(
        a,
        &|| {
            changed(
                &patch_link(origin.port, a, json!({"url": "https://example.com/new"})),
                2,
            )
        },
        Some("https://example.com/new"),
        2,
    );
    assert_eq!(edge.inval().superseded, 1);
    // Redis was read twice: the superseded answer, then the new one.
    assert_eq!(edge.counter("redis", "hit"), 2);

    let b = "race-0002";
    let r = create_custom(&origin, b, "https://example.com/doomed");
    assert_eq!(r.status, 201, "{}", r.text());
    wait_for("the creation's message", TIMEOUT, || {
        edge.inval().messages == 3
    });
    race(b, &|| changed(&delete_link(origin.port, b), 2), None, 4);
    assert_eq!(edge.inval().superseded, 2);
    assert_eq!(
        edge.metric("shorturl_inval_superseded_total"),
        2.0,
        "{}",
        edge.log()
    );
}

/// Redis stops: both edges see the subscription go. Within its grace an
/// edge still answers from memory; past it, it looks links up (the origin
/// answers from MySQL), so a change made meanwhile shows on the short-grace
/// edge although nothing announces it. Redis comes back: both resubscribe,
/// and the long-grace edge drops everything it cached before the loss.
#[test]
fn a_lost_subscription_bounds_how_long_memory_is_trusted() {
    let mut redis = Redis::start();
    let origin = Origin::start(&redis, 1000);
    let edge_with = |grace_ms: u64| {
        let extra = format!(
            "  cache: {{ positive_ttl_secs: 300, negative_ttl_secs: 300, unsubscribed_grace_ms: {grace_ms} }}"
        );
        let extra: &'static str = Box::leak(extra.into_boxed_str());
        start_edge(EdgeOpts {
            extra,
            ..EdgeOpts::new(redis.url(), vec![origin.addr()])
        })
    };
    let long = edge_with(600_000);
    let short = edge_with(500);
    const BEFORE: &str = "https://example.com/before";
    const UNCHANGED: &str = "https://example.com/unchanged";
    const DURING: &str = "https://example.com/during";
    let (before, unchanged, during) = (Some(BEFORE), Some(UNCHANGED), Some(DURING));
    let a = code_of(&create_link(origin.port, BEFORE, Some(DOMAIN)));
    // `b` never changes: only the resubscription can drop it.
    let b = code_of(&create_link(origin.port, UNCHANGED, Some(DOMAIN)));
    for e in [&long, &short] {
        e.wait_subscribed();
        assert_eq!(answer_once(e, &a).as_deref(), before);
        assert_eq!(answer_once(e, &a).as_deref(), before);
        assert_eq!(e.counter("local", "hit"), 1);
    }
    assert_eq!(answer_once(&long, &b).as_deref(), unchanged);

    redis.stop();
    for e in [&long, &short] {
        wait_for("the edge to notice the lost subscription", TIMEOUT, || {
            !e.inval().subscribed
        });
        assert_eq!(e.metric("shorturl_inval_subscribed"), 0.0);
    }
    // Within its grace: from memory.
    let hits = long.counter("local", "hit");
    assert_eq!(answer_once(&long, &a).as_deref(), before);
    assert_eq!(answer_once(&long, &b).as_deref(), unchanged);
    assert_eq!(long.counter("local", "hit"), hits + 2);
    // Past it: looked up (Redis is down, the origin answers from MySQL).
    wait_for(
        "the short-grace edge to look the link up instead of trusting memory",
        Duration::from_secs(10),
        || {
            let forwarded = short.counter("origin", "forward");
            answer_once(&short, &a).as_deref() == before
                && short.counter("origin", "forward") == forwarded + 1
        },
    );

    // A change while Redis is down: committed, its Redis side left to the
    // outbox, nothing announced. The short-grace edge shows it within its
    // grace (what it looks up meanwhile is cached no longer than that).
    changed(&patch_link(origin.port, &a, json!({ "url": DURING })), 2);
    wait_for(
        "the change to show on the short-grace edge",
        Duration::from_secs(10),
        || answer_once(&short, &a).as_deref() == during,
    );

    redis.restart();
    for e in [&long, &short] {
        e.wait_subscribed();
        assert_eq!(e.inval().reconnects, 1);
        assert_eq!(e.metric("shorturl_inval_subscriptions_total"), 2.0);
    }
    // Resubscribed: the long-grace edge no longer serves what it cached
    // before the loss (a miss, then Redis or the origin)...
    let misses = long.counter("local", "miss");
    assert_eq!(answer_once(&long, &b).as_deref(), unchanged);
    assert_eq!(long.counter("local", "miss"), misses + 1);
    // ...so the change made while Redis was down shows there too.
    assert_eq!(answer_once(&long, &a).as_deref(), during);
    // And the subscription works again: the next change shows at once.
    let t0 = changed(
        &patch_link(origin.port, &a, json!({"url": "https://example.com/after"})),
        3,
    );
    assert_live(&long, &a, Some("https://example.com/after"), t0);
}

/// Redis stops answering without closing anything (frozen, as behind a
/// network cut): the subscriber's ping notices, the subscription counts as
/// lost, and it is re-established when Redis answers again.
#[test]
fn a_silent_subscription_is_noticed_by_its_ping() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 100);
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![origin.addr()]));
    edge.wait_subscribed();
    redis.pause();
    wait_for("the edge to notice a frozen Redis", TIMEOUT, || {
        !edge.inval().subscribed
    });
    redis.resume();
    edge.wait_subscribed();
    assert_eq!(edge.inval().reconnects, 1);
}

/// The subscriber speaks the protocol itself (`inval/resp.rs`) and
/// authenticates as the URL says: a password alone, or an ACL user and
/// its password; with a wrong one it never counts as subscribed.
#[test]
fn the_subscription_authenticates_as_the_url_says() {
    let redis = Redis::start();
    let admin = redis::Client::open(redis.url()).unwrap();
    let mut c = admin.get_connection().unwrap();
    for args in [
        &[
            "ACL", "SETUSER", "edge", "on", ">edge-pw", "~*", "&*", "+@all",
        ][..],
        &["CONFIG", "SET", "requirepass", "sekret"],
    ] {
        let mut cmd = redis::cmd(args[0]);
        args[1..].iter().for_each(|a| {
            cmd.arg(*a);
        });
        cmd.query::<()>(&mut c).unwrap();
    }
    let port = redis.port();
    for url in [
        format!("redis://:sekret@127.0.0.1:{port}/"),
        format!("redis://edge:edge-pw@127.0.0.1:{port}/"),
    ] {
        let edge = start_edge(EdgeOpts::new(url.clone(), vec!["127.0.0.1:1".into()]));
        edge.wait_subscribed();
        let before = edge.inval().messages;
        let mut p = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let heard: i64 = redis::cmd("PUBLISH")
            .arg(shorturl_common::keys::INVAL_CHANNEL)
            .arg("3 abcdef localhost")
            .query(&mut p)
            .unwrap();
        assert_eq!(heard, 1, "{url}: one subscriber");
        wait_for("the message heard", TIMEOUT, || {
            edge.inval().messages == before + 1
        });
    }
    let edge = start_edge(EdgeOpts::new(
        format!("redis://:wrong@127.0.0.1:{port}/"),
        vec!["127.0.0.1:1".into()],
    ));
    wait_for("the refused password in the edge's log", TIMEOUT, || {
        edge.log().contains("cannot subscribe to invalidations")
    });
    assert!(
        !edge.inval().subscribed,
        "a wrong password subscribes nothing"
    );
    assert!(edge.log().contains("WRONGPASS"), "{}", edge.log());
    let mut admin = redis::Client::open(format!("redis://:sekret@127.0.0.1:{port}/").as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    wait_for("no subscriber left", TIMEOUT, || {
        let n: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(shorturl_common::keys::INVAL_CHANNEL)
            .query(&mut admin)
            .unwrap();
        n.get(1) == Some(&redis::Value::Int(0))
    });
}
