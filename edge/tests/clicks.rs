//! Click counting on the Pingora edge (issue 12), against a real Redis:
//! every count is read back from the stream `su:1:clicks` by decoding its
//! batches, and asserted exactly. Shutdown and upgrade: `clicks_shutdown.rs`;
//! through the origin to the stats API: `clicks_e2e.rs`.

use crate::support;

use shorturl_common::clicks::STREAM_KEY;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::clicks::{links, stream_sums, wait_stream_total, DOMAIN};
use support::http::{get, Conn};
use support::{redis_set, start_edge, EdgeOpts, TIMEOUT};
use testkit::{free_port, wait_for, Redis};

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
const IPAD: &str = "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";
const XBOX: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; Xbox; Xbox One) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36 Edge/44.18363.8131";
/// Bot user agents matching patterns of `common/data/bots.txt`.
const BOTS: [&str; 5] = [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "curl/8.5.0",
    "python-requests/2.31.0",
];

fn click(conn: &mut Conn, method: &str, code: &str, headers: &[(&str, &str)]) -> u16 {
    conn.send(method, &format!("/{code}"), Some(DOMAIN), headers, b"")
        .unwrap()
        .status
}

fn edge_with(redis: &Redis, extra: &'static str) -> support::Edge {
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = extra;
    start_edge(opts)
}

#[test]
fn humans_bots_devices_and_referrers_are_counted_exactly() {
    let redis = Redis::start();
    links(&redis, &["clkA01", "clkB02"]);
    let edge = edge_with(
        &redis,
        "  clicks: { flush_interval_ms: 200, edge_name: count-test }",
    );
    let mut c = Conn::open(edge.port).unwrap();
    let ua = |u: &'static str| [("User-Agent", u)];
    // Humans: 3 desktop, 2 mobile, 1 tablet, 1 other.
    for _ in 0..3 {
        assert_eq!(click(&mut c, "GET", "clkA01", &ua(CHROME)), 302);
    }
    for _ in 0..2 {
        assert_eq!(click(&mut c, "GET", "clkA01", &ua(IPHONE)), 302);
    }
    assert_eq!(click(&mut c, "GET", "clkA01", &ua(IPAD)), 302);
    assert_eq!(click(&mut c, "GET", "clkA01", &ua(XBOX)), 302);
    // Bots: the list's user agents, an empty one, none, and a HEAD with a
    // browser's.
    for b in BOTS {
        assert_eq!(click(&mut c, "GET", "clkA01", &ua(b)), 302);
    }
    assert_eq!(click(&mut c, "GET", "clkA01", &[("User-Agent", "")]), 302);
    assert_eq!(click(&mut c, "GET", "clkA01", &[]), 302);
    assert_eq!(click(&mut c, "HEAD", "clkA01", &ua(CHROME)), 302);
    // 404s are not clicks: a negative record, a link asked on another host.
    redis_set(&redis, &format!("su:1:link:{DOMAIN}/nOpe99"), "-");
    assert_eq!(click(&mut c, "GET", "nOpe99", &ua(CHROME)), 404);
    // A record under the other host's key that names DOMAIN: no link there.
    let line = support::record_line(DOMAIN, "https://example.com/a", 3600);
    redis_set(&redis, "su:1:link:other.example/clkA01", &line);
    let other_host = c
        .send("GET", "/clkA01", Some("other.example"), &ua(CHROME), b"")
        .unwrap();
    assert_eq!(other_host.status, 404);
    assert_eq!(click(&mut c, "GET", "clkA01", &[]), 302);
    // 25 referrer hosts on the other link: h00 30 times ... h24 6 times.
    let mut per_host = Vec::new();
    for i in 0..25u64 {
        let referer = format!("https://H{i:02}.example.com:8443/page?q=1");
        for _ in 0..(30 - i) {
            let h = [("User-Agent", CHROME), ("Referer", referer.as_str())];
            assert_eq!(click(&mut c, "GET", "clkB02", &h), 302);
        }
        per_host.push((format!("h{i:02}.example.com"), 30 - i));
    }
    let on_b: u64 = per_host.iter().map(|(_, n)| n).sum();

    let humans_a = 7;
    let bots_a = BOTS.len() as u64 + 4;
    let s = wait_stream_total(&redis, humans_a + bots_a + on_b);
    assert_eq!(s.codes["clkA01"], (humans_a, bots_a));
    assert_eq!(s.codes["clkB02"], (on_b, 0));
    assert!(!s.codes.contains_key("nOpe99"));
    let want_devices: BTreeMap<String, u64> = [
        ("desktop", 3 + on_b),
        ("mobile", 2),
        ("tablet", 1),
        ("other", 1),
        ("bot", bots_a),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(s.devices, want_devices);
    assert_eq!(
        s.referrers[&("clkA01".to_owned(), "-".to_owned())],
        humans_a + bots_a
    );
    // Per batch the top 20 hosts are named, the rest summed as `~other`;
    // summed over batches, every host's clicks are accounted for.
    let named_b: u64 = s
        .referrers
        .iter()
        .filter(|((code, _), _)| code == "clkB02")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(named_b, on_b);
    for (host, n) in per_host.iter().take(20) {
        let got = s.referrers.get(&("clkB02".to_owned(), host.clone()));
        let other = s
            .referrers
            .get(&("clkB02".to_owned(), "~other".to_owned()))
            .copied()
            .unwrap_or(0);
        // A top-20 host can only be short by what landed in `~other`.
        assert!(got.copied().unwrap_or(0) + other >= *n, "{host}: {got:?}");
    }
    if s.entries == 1 {
        // All in one batch: exactly the top 20 and `~other` = 10+9+8+7+6.
        for (host, n) in per_host.iter().take(20) {
            assert_eq!(s.referrers[&("clkB02".to_owned(), host.clone())], *n);
        }
        assert_eq!(
            s.referrers[&("clkB02".to_owned(), "~other".to_owned())],
            10 + 9 + 8 + 7 + 6
        );
    }
    assert!(s.ids.iter().all(|id| id.starts_with("count-test:")));
    assert_eq!(s.duplicates, 0);

    // The status and the metrics say the same.
    wait_for("status to show every click sent", TIMEOUT, || {
        edge.typed_status().clicks.is_some_and(|d| d.buffered == 0)
    });
    let d = edge.typed_status().clicks.unwrap();
    assert!(d.enabled);
    assert_eq!((d.counted, d.sent, d.dropped), (s.total(), s.total(), 0));
    assert!(d.last_flush_unix.is_some());
    assert_eq!(
        edge.metric("shorturl_edge_clicks_total{kind=\"human\"}"),
        (humans_a + on_b) as f64
    );
    assert_eq!(
        edge.metric("shorturl_edge_clicks_total{kind=\"bot\"}"),
        bots_a as f64
    );
    assert_eq!(
        edge.metric("shorturl_edge_click_batches_total{result=\"sent\"}"),
        s.entries as f64
    );
}

#[test]
fn a_flush_follows_each_interval() {
    let redis = Redis::start();
    links(&redis, &["flsh01"]);
    let edge = edge_with(&redis, "  clicks: { flush_interval_ms: 1000 }");
    for round in 1..=3u64 {
        let sent = Instant::now();
        assert_eq!(get(edge.port, "/flsh01", DOMAIN).status, 302);
        wait_stream_total(&redis, round);
        // One interval, one drain, and slack for a loaded machine.
        let took = sent.elapsed();
        assert!(
            took < Duration::from_millis(2500),
            "round {round}: {took:?}"
        );
    }
}

#[test]
fn disabled_counts_nothing() {
    let redis = Redis::start();
    links(&redis, &["dsbl01"]);
    let edge = edge_with(
        &redis,
        "  clicks: { enabled: false, flush_interval_ms: 50 }",
    );
    for _ in 0..5 {
        assert_eq!(get(edge.port, "/dsbl01", DOMAIN).status, 302);
    }
    let d = edge.typed_status().clicks.unwrap();
    assert!(!d.enabled);
    assert_eq!((d.counted, d.sent, d.buffered), (0, 0, 0));
    assert_eq!(stream_sums(&redis).entries, 0);
}

/// Redis restarts (empty): what was counted meanwhile is kept, retried and
/// delivered once.
#[test]
fn clicks_wait_out_a_redis_outage_and_arrive_once() {
    let mut redis = Redis::start();
    links(&redis, &["outg01"]);
    // The cached record must outlive the outage (no Redis, no origin).
    let edge = edge_with(
        &redis,
        "  clicks: { flush_interval_ms: 100 }\n  cache: { unsubscribed_grace_ms: 600000, positive_ttl_secs: 600 }",
    );
    assert_eq!(get(edge.port, "/outg01", DOMAIN).status, 302);
    wait_stream_total(&redis, 1);
    redis.stop();
    let ua = [("User-Agent", CHROME)];
    let mut c = Conn::open(edge.port).unwrap();
    for _ in 0..40 {
        assert_eq!(click(&mut c, "GET", "outg01", &ua), 302);
    }
    for _ in 0..7 {
        assert_eq!(click(&mut c, "GET", "outg01", &[]), 302);
    }
    wait_for("47 clicks buffered and retried", TIMEOUT, || {
        let d = edge.typed_status().clicks.unwrap();
        d.buffered == 47
            && edge.metric("shorturl_edge_click_batches_total{result=\"retried\"}") >= 2.0
    });
    assert_eq!(edge.metric("shorturl_edge_clicks_buffered"), 47.0);
    redis.restart();
    let s = wait_stream_total(&redis, 47);
    assert_eq!(s.codes["outg01"], (40, 7));
    // A stopped Redis refused the connection: no attempt landed twice.
    assert_eq!(s.duplicates, 0);
    // Nothing more arrives later (no second copy of a retried batch).
    wait_for("buffer empty", TIMEOUT, || {
        edge.typed_status().clicks.unwrap().buffered == 0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stream_sums(&redis).total(), 47);
    let d = edge.typed_status().clicks.unwrap();
    assert_eq!((d.counted, d.sent, d.dropped), (48, 48, 0));
}

/// Redis frozen (no answer, connections open): attempts time out and are
/// retried with the same batch id; when it wakes up, an attempt it had
/// received may land next to its retry, and the origin applies that id
/// once, so the sum per id is every click, once.
#[test]
fn a_frozen_redis_gets_each_batch_under_one_id() {
    let redis = Redis::start();
    links(&redis, &["frzn01"]);
    let edge = edge_with(
        &redis,
        "  clicks: { flush_interval_ms: 100 }\n  cache: { unsubscribed_grace_ms: 600000, positive_ttl_secs: 600 }",
    );
    assert_eq!(get(edge.port, "/frzn01", DOMAIN).status, 302);
    wait_stream_total(&redis, 1);
    redis.pause();
    let mut c = Conn::open(edge.port).unwrap();
    for _ in 0..30 {
        assert_eq!(
            click(&mut c, "GET", "frzn01", &[("User-Agent", IPHONE)]),
            302
        );
    }
    wait_for("attempts to time out", TIMEOUT, || {
        edge.metric("shorturl_edge_click_batches_total{result=\"retried\"}") >= 2.0
    });
    redis.resume();
    let s = wait_stream_total(&redis, 31);
    assert_eq!(s.codes["frzn01"], (30, 1));
    wait_for("buffer empty", TIMEOUT, || {
        edge.typed_status().clicks.unwrap().buffered == 0
    });
    let s = stream_sums(&redis);
    assert_eq!((s.total(), s.devices["mobile"]), (31, 30), "{s:?}");
    eprintln!("{} entries, {} repeated an id", s.entries, s.duplicates);
}

/// Past `max_buffered_clicks` whole oldest batches go, never the newest,
/// and exactly their clicks are reported as dropped.
#[test]
fn the_buffer_bound_drops_oldest_batches_and_says_how_many() {
    let mut redis = Redis::start();
    links(&redis, &["bufr01"]);
    let edge = edge_with(
        &redis,
        "  clicks: { flush_interval_ms: 100, max_buffered_clicks: 8 }\n  cache: { unsubscribed_grace_ms: 600000, positive_ttl_secs: 600 }",
    );
    assert_eq!(get(edge.port, "/bufr01", DOMAIN).status, 302);
    wait_stream_total(&redis, 1);
    redis.stop();
    let mut c = Conn::open(edge.port).unwrap();
    for _ in 0..5 {
        assert_eq!(click(&mut c, "GET", "bufr01", &[]), 302);
    }
    // Some of them cut into a batch (bytes held), so the next five cannot
    // all join them in one batch.
    wait_for("5 buffered, a batch cut", TIMEOUT, || {
        edge.typed_status().clicks.unwrap().buffered == 5
            && edge.metric("shorturl_edge_clicks_buffered_bytes") > 0.0
    });
    for _ in 0..5 {
        assert_eq!(click(&mut c, "GET", "bufr01", &[]), 302);
    }
    wait_for("a batch dropped", TIMEOUT, || {
        let d = edge.typed_status().clicks.unwrap();
        d.counted == 11 && d.dropped > 0 && d.buffered + d.dropped == 10
    });
    // What is held is the newest batch at least (the flusher, blocked on
    // the dead Redis, may have cut up to nine clicks into it, over the
    // bound by itself): bytes until Redis is back.
    wait_for("the kept batch's bytes", TIMEOUT, || {
        edge.metric("shorturl_edge_clicks_buffered_bytes") > 0.0
    });
    redis.restart();
    // A cut still on its way may drop more; once nothing is held, what was
    // kept has arrived and, with what was dropped, is every click.
    wait_for("nothing held", TIMEOUT, || {
        edge.typed_status().clicks.unwrap().buffered == 0
            && edge.metric("shorturl_edge_clicks_buffered_bytes") == 0.0
    });
    let d = edge.typed_status().clicks.unwrap();
    assert_eq!(
        edge.metric("shorturl_edge_clicks_dropped_total{reason=\"buffer_full\"}"),
        d.dropped as f64
    );
    let s = stream_sums(&redis);
    assert!(s.total() >= 1 && d.dropped >= 1, "{s:?} {d:?}");
    assert_eq!(s.total() + d.dropped, 10);
    assert_eq!((d.sent, d.counted), (1 + s.total(), 11));
}

/// An append to a stream at its `MAXLEN` trims an older entry: the edge
/// counts the clicks it appended then (and the batch itself is kept).
#[test]
fn appends_to_a_full_stream_are_counted() {
    let redis = Redis::start();
    links(&redis, &["full01"]);
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let len: u64 = redis::cmd("EVAL")
        .arg(
            "for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'f', '1') end \
             return redis.call('XLEN', KEYS[1])",
        )
        .arg(1)
        .arg(STREAM_KEY)
        .arg(shorturl_common::clicks::STREAM_MAXLEN)
        .query(&mut con)
        .unwrap();
    assert_eq!(len, shorturl_common::clicks::STREAM_MAXLEN);
    let edge = edge_with(&redis, "  clicks: { flush_interval_ms: 100 }");
    for _ in 0..3 {
        assert_eq!(get(edge.port, "/full01", DOMAIN).status, 302);
    }
    let s = wait_stream_total(&redis, 3);
    assert_eq!(s.codes["full01"], (0, 3));
    wait_for("stream_full to be counted", TIMEOUT, || {
        edge.metric("shorturl_edge_clicks_dropped_total{reason=\"stream_full\"}") == 3.0
    });
    let d = edge.typed_status().clicks.unwrap();
    assert_eq!((d.sent, d.dropped), (3, 3));
}
