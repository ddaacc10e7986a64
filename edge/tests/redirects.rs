//! Redirects through a real edge and a real Redis (the origin is a closed
//! port here: every answer must come from memory or Redis).

use crate::support;

use std::time::Duration;
use support::http::{get, request, Conn};
use support::{record_line, redis_del, redis_set, start_edge, EdgeOpts};
use testkit::{free_port, wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";

fn edge_on(redis: &Redis, extra: &'static str) -> support::Edge {
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = extra;
    start_edge(opts)
}

#[test]
fn redis_hit_then_memory_hit_with_protocol_headers() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "");
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/aB3xYz"),
        &record_line(DOMAIN, "https://example.com/a?b=1", 3600),
    );

    let r = get(edge.port, "/aB3xYz", DOMAIN);
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/a?b=1"));
    assert_eq!(r.header("content-length"), Some("0"));
    assert_eq!(r.header("cache-control"), Some("private, max-age=60"));
    assert_eq!(edge.counter("redis", "hit"), 1);

    // Gone from Redis: the edge still answers from memory, without Redis.
    redis_del(&redis, &format!("su:1:link:{DOMAIN}/aB3xYz"));
    let r = get(edge.port, "/aB3xYz?utm=x", "S.Shop55.COM.:8080");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/a?b=1"));
    let st = edge.typed_status();
    assert_eq!(st.service, "edge");
    assert_eq!(st.protocol, shorturl_common::PROTOCOL_VERSION);
    assert_eq!(
        st.redis.hit, 1,
        "second request must not reach Redis: {st:?}"
    );
    assert_eq!((st.local.hit, st.local.miss), (1, 1));
    assert_eq!(st.origin.forward, 0);
    assert!(!st.origin_reachable);
    assert_eq!((st.mysql, st.issuer), (None, None));

    // Case-sensitive codes: a different code is a different lookup (not in
    // Redis, and the origin is down: unavailable, not the other code's URL).
    let r = get(edge.port, "/Ab3xYz", DOMAIN);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(edge.typed_status().redis.miss, 1);

    edge.log_line(" /aB3xYz 302 REDIS ");
    edge.log_line(" /aB3xYz 302 HIT ");
}

#[test]
fn negative_records_head_invalid_paths_and_host_binding() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "");
    redis_set(&redis, &format!("su:1:link:{DOMAIN}/neg123"), "-");
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/good12"),
        &record_line(DOMAIN, "https://example.com/g", 3600),
    );

    // Negative record: 404 JSON, then served from the negative cache.
    for _ in 0..2 {
        let r = get(edge.port, "/neg123", DOMAIN);
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("cache-control"), Some("no-store"));
        assert_eq!(r.json()["error"], "not_found");
    }
    assert_eq!(
        edge.counter("redis", "hit"),
        1,
        "negative answer must be cached in memory"
    );
    edge.log_line(" /neg123 404 NEG ");

    // HEAD: same status and headers, no body.
    let mut c = Conn::open(edge.port).unwrap();
    let h = c.send("HEAD", "/good12", Some(DOMAIN), &[], b"").unwrap();
    assert_eq!(h.status, 302);
    assert_eq!(h.header("location"), Some("https://example.com/g"));
    assert_eq!(h.header("content-length"), Some("0"));
    let h404 = c.send("HEAD", "/neg123", Some(DOMAIN), &[], b"").unwrap();
    assert_eq!(h404.status, 404);
    let g404 = c.get("/neg123", DOMAIN).unwrap();
    assert_eq!(h404.header("content-length"), g404.header("content-length"));
    assert!(h404.body.is_empty());

    // Host binding: any other domain is the very same 404 — even a record
    // that names DOMAIN found under the other domain's key (protocol 3.5).
    redis_set(
        &redis,
        "su:1:link:other.example.com/good12",
        &record_line(DOMAIN, "https://example.com/g", 3600),
    );
    let other = get(edge.port, "/good12", "other.example.com");
    assert_eq!(other.status, 404);
    assert_eq!(other.body, g404.body);
    // An invalid Host is a malformed request (protocol 2.1).
    assert_eq!(get(edge.port, "/good12", "bad host!").status, 400);

    // Invalid codes: 404 at once, no lookup anywhere.
    let before = edge.status();
    for path in [
        "/abc",
        "/a.b.c.d",
        "/abcdef/",
        "/abcdef/x",
        &format!("/{}", "a".repeat(33)),
        "/%41bcdef",
        "/",
    ] {
        let r = get(edge.port, path, DOMAIN);
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.json()["error"], "not_found", "{path}");
    }
    // Never forwarded to the origin, never looked up.
    assert_eq!(
        get(edge.port, "/internal/v1/records/good12", DOMAIN).status,
        404
    );
    let after = edge.status();
    assert_eq!(
        before["local"], after["local"],
        "invalid paths touched the cache"
    );
    assert_eq!(before["redis"], after["redis"]);
    assert_eq!(after["origin"]["forward"], 0);

    // Other methods on a code path are a 4xx JSON, not a lookup.
    let r = request(edge.port, "POST", "/good12", DOMAIN, &[], b"x");
    assert_eq!(r.status, 405);
    assert_eq!(r.json()["error"], "method_not_allowed");
}

#[test]
fn keepalive_is_kept_on_302_and_404() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "");
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/keep01"),
        &record_line(DOMAIN, "https://example.com/k", 3600),
    );
    redis_set(&redis, &format!("su:1:link:{DOMAIN}/nope00"), "-");
    let mut c = Conn::open(edge.port).unwrap();
    for i in 0..5 {
        let r = c
            .get("/keep01", DOMAIN)
            .unwrap_or_else(|e| panic!("request {i} on one connection: {e}"));
        assert_eq!(r.status, 302);
        assert_ne!(r.header("connection"), Some("close"));
        let r = c
            .get("/nope00", DOMAIN)
            .unwrap_or_else(|e| panic!("404 {i} on one connection: {e}"));
        assert_eq!(r.status, 404);
        assert_ne!(r.header("connection"), Some("close"));
        let r = c.get("/x/y", DOMAIN).unwrap();
        assert_eq!(r.status, 404);
    }
}

#[test]
fn expired_records_are_404_even_from_memory() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "");
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/soon01"),
        &record_line(DOMAIN, "https://example.com/s", 2),
    );
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/past01"),
        &format!("1 {} {DOMAIN} https://example.com/p", 1_000_000),
    );
    assert_eq!(get(edge.port, "/past01", DOMAIN).status, 404);
    assert_eq!(get(edge.port, "/past01", DOMAIN).status, 404);
    assert_eq!(
        edge.counter("redis", "hit"),
        1,
        "an expired record is remembered like a negative"
    );
    assert_eq!(get(edge.port, "/soon01", DOMAIN).status, 302);
    // Re-arm Redis with a live record: a 404 can then only come from the
    // cached (now expired) entry, not from a fresh lookup.
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/soon01"),
        &record_line(DOMAIN, "https://example.com/s", 3600),
    );
    wait_for("cached record to expire", Duration::from_secs(10), || {
        get(edge.port, "/soon01", DOMAIN).status == 404
    });
}

#[test]
fn malformed_redis_values_count_as_errors() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "");
    redis_set(&redis, &format!("su:1:link:{DOMAIN}/bad001"), "2 garbage");
    let r = get(edge.port, "/bad001", DOMAIN);
    // Redis is unusable and the origin is down: an honest 503, never a 302 to garbage.
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(edge.counter("redis", "error"), 1);
}

#[test]
fn unknown_code_scans_are_rate_limited_per_ip_with_keepalive() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "  limits: { unknown_per_ip_per_sec: 5 }\n");
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/live01"),
        &record_line(DOMAIN, "https://example.com/l", 3600),
    );
    for i in 0..40 {
        redis_set(&redis, &format!("su:1:link:{DOMAIN}/scan{i:02}"), "-");
    }
    assert_eq!(get(edge.port, "/live01", DOMAIN).status, 302);
    let mut c = Conn::open(edge.port).unwrap();
    // Exact per-client counts: the window starts at the first 404, so a
    // burst gets exactly the limit's worth of answers, then 429s.
    let statuses: Vec<u16> = (0..40)
        .map(|i| c.get(&format!("/scan{i:02}"), DOMAIN).unwrap().status)
        .collect();
    assert_eq!(statuses[..5], [404; 5], "{statuses:?}");
    assert!(statuses[5..].iter().all(|s| *s == 429), "{statuses:?}");
    let r = c.get("/scan00", DOMAIN).unwrap();
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"], "rate_limited");
    assert_eq!(r.header("retry-after"), Some("1"));
    // Keep-alive survives the 429, and cached links still work.
    assert_eq!(c.get("/live01", DOMAIN).unwrap().status, 302);
    edge.log_line(" 429 LIMIT ");
    assert_eq!(
        edge.metric("shorturl_limits_refused_total{limit=\"unknown\"}"),
        36.0
    );
}

#[test]
fn prometheus_metrics_on_their_own_port() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "");
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/prom01"),
        &record_line(DOMAIN, "https://example.com/m", 3600),
    );
    assert_eq!(get(edge.port, "/prom01", DOMAIN).status, 302);
    assert_eq!(get(edge.port, "/prom01", DOMAIN).status, 302);
    // Histograms are updated in the logging phase, just after the response.
    let want = [
        "shorturl_request_duration_seconds_count{outcome=\"HIT\"} 1\n",
        "shorturl_request_duration_seconds_count{outcome=\"REDIS\"} 1\n",
        "shorturl_status_total{dimension=\"redis\",result=\"hit\"} 1\n",
    ];
    let mut text = String::new();
    wait_for("metrics to show both requests", support::TIMEOUT, || {
        let m = get(edge.metrics_port, "/metrics", "localhost");
        assert_eq!(m.status, 200);
        text = m.text();
        want.iter().all(|w| text.contains(w))
    });
}

#[test]
fn a_request_without_host_resolves_nothing() {
    let redis = Redis::start();
    let edge = edge_on(&redis, "");
    redis_set(
        &redis,
        "su:1:link:localhost/nohost",
        &record_line("localhost", "https://example.com/n", 3600),
    );
    // HTTP/1.0 without Host: a request for no domain, the same 404 as the
    // origin gives; HTTP/1.1 without Host is refused (protocol 2.1).
    let mut c = Conn::open(edge.port).unwrap();
    let r = c
        .send_version("1.0", "GET", "/nohost", None, &[], b"")
        .unwrap();
    assert_eq!(r.status, 404);
    let mut c = Conn::open(edge.port).unwrap();
    let r = c.send("GET", "/nohost", None, &[], b"").unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "bad_request");
    assert_eq!(get(edge.port, "/nohost", "localhost").status, 302);
}

#[test]
fn status_is_answered_only_to_status_allow_clients() {
    let redis = Redis::start();
    let edge = edge_on(
        &redis,
        "  status_allow: [127.0.0.1/32]\n  trusted_proxies: [127.0.0.3/32]\n",
    );
    let from = |ip: [u8; 4], xff: Option<&str>| {
        let mut c = Conn::open_from(ip.into(), edge.port).unwrap();
        let headers: Vec<(&str, &str)> = xff.map(|v| ("X-Forwarded-For", v)).into_iter().collect();
        c.send("GET", "/shorturl_status", Some("localhost"), &headers, b"")
            .unwrap()
    };
    let ok = from([127, 0, 0, 1], None);
    assert_eq!(ok.status, 200, "{}", ok.text());
    let st: shorturl_common::status::EdgeStatus = serde_json::from_slice(&ok.body).unwrap();
    assert_eq!(st.service, "edge");
    // Outside the list: exactly the protocol 404, as for any unknown path.
    let denied = from([127, 0, 0, 2], None);
    assert_eq!(denied.status, 404);
    assert_eq!(denied.body, shorturl_common::error::NOT_FOUND_BODY);
    assert_eq!(denied.header("cache-control"), Some("no-store"));
    // An untrusted peer cannot claim an allowed address...
    assert_eq!(from([127, 0, 0, 2], Some("127.0.0.1")).status, 404);
    // ...and behind a trusted proxy the client it names is what counts.
    assert_eq!(from([127, 0, 0, 3], Some("203.0.113.9")).status, 404);
    assert_eq!(from([127, 0, 0, 3], Some("127.0.0.1")).status, 200);
}
