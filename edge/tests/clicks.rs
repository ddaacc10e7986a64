//! Click counting on the Pingora edge (issue 12), against a real Redis (and,
//! end to end, a real origin on MariaDB): every count is read back from the
//! stream `su:1:clicks` by decoding its batches, and asserted exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use shorturl_common::clicks::{Batch, STREAM_KEY};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::http::{get, Conn};
use support::{edge_bin, record_line, redis_set, start_edge, EdgeOpts, TIMEOUT};
use testkit::{free_port, spawn, wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
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

/// What the stream holds, summed over its decoded batches.
#[derive(Debug, Default)]
struct Sums {
    human: u64,
    bot: u64,
    devices: BTreeMap<String, u64>,
    /// (code, host) → clicks.
    referrers: BTreeMap<(String, String), u64>,
    /// code → (human, bot).
    codes: BTreeMap<String, (u64, u64)>,
    entries: usize,
    ids: BTreeSet<String>,
}

impl Sums {
    fn total(&self) -> u64 {
        self.human + self.bot
    }
}

fn stream_sums(redis: &Redis) -> Sums {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(STREAM_KEY)
        .arg("-")
        .arg("+")
        .query(&mut con)
        .unwrap();
    let mut s = Sums::default();
    for (_, fields) in entries {
        let field = |k: &str| {
            fields
                .chunks(2)
                .find(|kv| kv[0] == k)
                .map(|kv| kv[1].clone())
                .unwrap_or_else(|| panic!("entry without {k}: {fields:?}"))
        };
        let b = Batch::decode(&field("id"), &field("v"), &field("b"))
            .unwrap_or_else(|e| panic!("undecodable batch: {e}"));
        s.entries += 1;
        s.ids.insert(b.id.clone());
        for h in &b.hours {
            s.human += h.human;
            s.bot += h.bot;
            let c = s.codes.entry(h.code.clone()).or_default();
            c.0 += h.human;
            c.1 += h.bot;
        }
        for r in &b.referrers {
            *s.referrers
                .entry((r.code.clone(), r.host.clone()))
                .or_default() += r.n;
        }
        for d in &b.devices {
            *s.devices.entry(d.device.as_str().to_owned()).or_default() += d.n;
        }
    }
    s
}

/// Waits until the stream holds `total` clicks and returns its sums.
fn wait_stream_total(redis: &Redis, total: u64) -> Sums {
    wait_for(&format!("{total} clicks in the stream"), TIMEOUT, || {
        stream_sums(redis).total() >= total
    });
    let s = stream_sums(redis);
    assert_eq!(s.total(), total, "{s:?}");
    assert_eq!(s.entries, s.ids.len(), "a batch id repeats: {s:?}");
    s
}

fn links(redis: &Redis, codes: &[&str]) {
    for c in codes {
        redis_set(
            redis,
            &format!("su:1:link:{c}"),
            &record_line(DOMAIN, "https://example.com/x", 3600),
        );
    }
}

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
    redis_set(&redis, "su:1:link:nOpe99", "-");
    assert_eq!(click(&mut c, "GET", "nOpe99", &ua(CHROME)), 404);
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
    // Nothing more arrives later (no second copy of a retried batch).
    wait_for("buffer empty", TIMEOUT, || {
        edge.typed_status().clicks.unwrap().buffered == 0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stream_sums(&redis).total(), 47);
    let d = edge.typed_status().clicks.unwrap();
    assert_eq!((d.counted, d.sent, d.dropped), (48, 48, 0));
}

/// Past `max_buffered_clicks` whole oldest batches go, and exactly their
/// clicks are reported as dropped.
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
    wait_for("5 buffered", TIMEOUT, || {
        edge.typed_status().clicks.unwrap().buffered == 5
    });
    for _ in 0..5 {
        assert_eq!(click(&mut c, "GET", "bufr01", &[]), 302);
    }
    wait_for("a batch dropped", TIMEOUT, || {
        let d = edge.typed_status().clicks.unwrap();
        d.counted == 11 && d.dropped > 0 && d.buffered + d.dropped == 10
    });
    let d = edge.typed_status().clicks.unwrap();
    assert!(d.buffered <= 8 && d.dropped >= 2, "{d:?}");
    assert_eq!(
        edge.metric("shorturl_edge_clicks_dropped_total{reason=\"buffer_full\"}"),
        d.dropped as f64
    );
    redis.restart();
    // What was kept arrives; with what was dropped it is every click.
    let s = wait_stream_total(&redis, d.buffered);
    assert_eq!(s.total() + d.dropped, 10);
}

/// Load, then `SIGTERM`: every redirect a client received is in the
/// stream, though the flush interval (5 s) never came.
#[test]
fn graceful_shutdown_delivers_every_click() {
    let redis = Redis::start();
    links(&redis, &["term01"]);
    let mut edge = edge_with(
        &redis,
        "  clicks: { flush_interval_ms: 5000, edge_name: term }",
    );
    let port = edge.port;
    let loaders = load(port, "term01", 3);
    wait_for("load to start", TIMEOUT, || {
        get(port, "/term01", DOMAIN).status == 302
    });
    std::thread::sleep(Duration::from_millis(300));
    edge.proc.signal(libc::SIGTERM);
    wait_for("edge to exit", TIMEOUT, || !edge.proc.is_running());
    let served = loaders.finish() + 1;
    let s = wait_stream_total(&redis, served);
    assert_eq!(s.bot, served);
    assert!(s.ids.iter().all(|id| id.starts_with("term:")));
}

/// Graceful upgrade under load: the old process's clicks (flushed at its
/// end) and the new one's add up to every redirect served.
#[test]
fn graceful_upgrade_delivers_every_click_of_both_processes() {
    let redis = Redis::start();
    links(&redis, &["upgr01"]);
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.threads = 1;
    opts.extra = "  clicks: { flush_interval_ms: 5000, edge_name: upg }";
    let old = start_edge(opts);
    let port = old.port;
    let loaders = load(port, "upgr01", 3);
    wait_for("load to start", TIMEOUT, || {
        get(port, "/upgr01", DOMAIN).status == 302
    });
    old.proc.signal(libc::SIGQUIT);
    let mut cmd = Command::new(edge_bin());
    cmd.arg("-u")
        .arg("-c")
        .arg(&old.conf)
        .env("RUST_LOG", "info");
    let mut new = spawn(
        "shorturl-edge-new",
        cmd,
        &old.dir.path().join("edge-new.log"),
    );
    let mut old = old;
    wait_for("old edge to exit", TIMEOUT, || !old.proc.is_running());
    for _ in 0..20 {
        assert_eq!(get(port, "/upgr01", DOMAIN).status, 302);
    }
    let served = loaders.finish() + 1 + 20;
    new.signal(libc::SIGTERM);
    wait_for("new edge to exit", TIMEOUT, || !new.is_running());
    let s = wait_stream_total(&redis, served);
    let nonces: BTreeSet<&str> = s.ids.iter().filter_map(|id| id.split(':').nth(1)).collect();
    assert_eq!(nonces.len(), 2, "one nonce per process: {:?}", s.ids);
}

/// Clients on fresh connections until told to stop; counts the 302s.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Load {
    /// Stops the clients (once the server is gone, they stop by themselves)
    /// and returns the redirects they received.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

fn load(port: u16, code: &'static str, n: usize) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..n)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut ok = 0u64;
                let mut refused = 0;
                while !stop.load(Ordering::Relaxed) && refused < 50 {
                    match Conn::open(port).and_then(|mut c| c.get(&format!("/{code}"), DOMAIN)) {
                        Ok(r) if r.status == 302 => ok += 1,
                        Ok(r) => panic!("status {}", r.status),
                        // The listener is gone (shutdown): keep trying a
                        // little in case it comes back (upgrade).
                        Err(_) => {
                            refused += 1;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
                ok
            })
        })
        .collect();
    Load { stop, threads }
}
