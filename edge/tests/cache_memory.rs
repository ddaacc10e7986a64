//! The in-process cache's memory bound, seen from outside: many distinct
//! links through a small cache, then its own gauges on `/metrics`.

use crate::support;

use support::http::{get, Conn};
use support::{record_line, start_edge, EdgeOpts};
use testkit::{free_port, Redis};

fn metric(text: &str, name: &str) -> u64 {
    testkit::metrics::metric_in(text, name)
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}")) as u64
}

#[test]
fn a_small_cache_stays_within_max_bytes_and_reports_it() {
    const LINKS: u64 = 1500;
    const MAX: u64 = 65536;
    let redis = Redis::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut pipe = redis::pipe();
    for i in 0..LINKS {
        let url = format!("https://shop.example.com/p/{i:07}?utm_source=newsletter");
        pipe.cmd("SET")
            .arg(format!("su:1:link:localhost/m{i:05}"))
            .arg(record_line("localhost", &url, 3600))
            .ignore();
    }
    pipe.query::<()>(&mut con).unwrap();

    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = "  cache: { max_bytes: 65536 }\n  limits: { unknown_per_ip_per_sec: 0 }\n";
    let edge = start_edge(opts);
    let before = get(edge.metrics_port, "/metrics", "localhost").text();
    assert_eq!(metric(&before, "shorturl_cache_max_bytes"), MAX);
    assert_eq!(metric(&before, "shorturl_cache_entries"), 0);
    // An empty cache is a slot array, not a budget-sized reservation.
    assert!(metric(&before, "shorturl_cache_bytes") <= 1024, "{before}");

    let mut c = Conn::open(edge.port).unwrap();
    let mut last = 0;
    for i in 0..LINKS {
        // 503 only if a Redis GET outlived the harness's 50 ms timeout on a
        // busy machine: that answer is cached too (for 1 s).
        last = c.get(&format!("/m{i:05}"), "localhost").unwrap().status;
        assert!(last == 302 || last == 503, "m{i:05}: {last}");
    }
    let m = get(edge.metrics_port, "/metrics", "localhost").text();
    let entries = metric(&m, "shorturl_cache_entries");
    let bytes = metric(&m, "shorturl_cache_bytes");
    let evicted = metric(&m, "shorturl_cache_evictions_total");
    assert!(bytes <= MAX, "{bytes} bytes held with max_bytes {MAX}");
    assert!(
        bytes > MAX * 8 / 10,
        "a full cache uses its budget: {bytes}"
    );
    // Every request was a miss whose answer was cached: each link is
    // either held or was evicted, exactly once.
    assert_eq!(entries + evicted, LINKS, "{m}");
    // ~230 bytes per link: a few hundred fit, not all 1500.
    assert!((200..400).contains(&entries), "{entries} entries");
    // The most recent link is held: the same answer again, from memory.
    assert_eq!(
        c.get(&format!("/m{:05}", LINKS - 1), "localhost")
            .unwrap()
            .status,
        last
    );
    assert_eq!(edge.counter("local", "hit"), 1);
}

/// `THP_enabled` of a process's `/proc/<pid>/status` (Linux ≥ 5.0).
fn thp_enabled(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("THP_enabled:"))?;
    Some(line.split_whitespace().nth(1)? == "1")
}

#[test]
fn transparent_huge_pages_are_off_unless_configured() {
    // Without the field (an older kernel) there is nothing to check.
    let Some(ours) = thp_enabled(std::process::id()) else {
        return;
    };
    let redis = Redis::start();
    let opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    let edge = start_edge(opts);
    assert_eq!(thp_enabled(edge.proc.pid()), Some(false));
    // Turned back on: the process keeps what it inherited.
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = "  cache: { transparent_huge_pages: true }\n";
    let edge = start_edge(opts);
    assert_eq!(thp_enabled(edge.proc.pid()), Some(ours));
}
