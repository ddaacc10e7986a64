//! Fault injection with real processes: Redis killed and restarted, origin
//! killed and restarted, while the edge keeps serving.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use support::http::{get, Conn};
use support::{create_link, record_line, redis_set, start_edge, EdgeOpts, Origin, TIMEOUT};
use testkit::{wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";

fn code_of(r: &support::http::Response) -> String {
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["code"].as_str().unwrap().to_owned()
}

/// Hammers `paths` from a thread until stopped; returns every status seen.
fn load(port: u16, paths: Vec<String>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<u16>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            for p in &paths {
                let status = Conn::open(port)
                    .and_then(|mut c| c.get(p, DOMAIN))
                    .map(|r| r.status)
                    .unwrap_or(0);
                seen.push(status);
            }
        }
        seen
    })
}

#[test]
fn redis_outage_serves_from_memory_and_origin_then_reconnects() {
    let mut redis = Redis::start();
    let origin = Origin::start(&redis, 1000);
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![origin.addr()]));
    // `hot` is in the edge's memory; `cold` only in Redis/MySQL.
    let hot = code_of(&create_link(
        edge.port,
        "https://example.com/hot",
        Some(DOMAIN),
    ));
    assert_eq!(get(edge.port, &format!("/{hot}"), DOMAIN).status, 302);
    let cold = code_of(&create_link(
        origin.port,
        "https://example.com/cold",
        Some(DOMAIN),
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let loader = load(edge.port, vec![format!("/{hot}")], Arc::clone(&stop));
    redis.stop();
    // The cold link: Redis fails fast, the origin answers from MySQL.
    let r = get(edge.port, &format!("/{cold}"), DOMAIN);
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/cold"));
    assert_eq!(
        edge.counter("redis", "error"),
        1,
        "one lookup, one Redis failure"
    );
    redis.restart();
    stop.store(true, Ordering::Relaxed);
    let seen = loader.join().unwrap();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|s| *s == 302),
        "failures during the Redis outage: {seen:?}"
    );

    // Redis came back empty: the edge must reconnect by itself and read
    // records from it again (a fresh code each try, so no negative caching
    // of an early attempt can hide the result).
    let mut n = 0;
    wait_for("edge to read from the restarted Redis", TIMEOUT, || {
        n += 1;
        let code = format!("rc{n:04}");
        support::redis_set(
            &redis,
            &format!("su:1:link:{DOMAIN}/{code}"),
            &support::record_line(DOMAIN, "https://example.com/r", 600),
        );
        get(edge.port, &format!("/{code}"), DOMAIN).status == 302
    });

    // Redis restarts again while the edge's connection is idle: the very
    // first read after it must still come from Redis (the dead connection
    // costs one retry, not an error and an origin trip; the origin would
    // answer 404 here, since the code exists only in Redis).
    redis.restart();
    let errors = edge.counter("redis", "error");
    support::redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/idle01"),
        &support::record_line(DOMAIN, "https://example.com/idle", 600),
    );
    let r = get(edge.port, "/idle01", DOMAIN);
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(edge.counter("redis", "error"), errors);
}

#[test]
fn origin_outage_keeps_cached_links_and_fails_fast_then_recovers() {
    let redis = Redis::start();
    let mut origin = Origin::start(&redis, 1000);
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![origin.addr()]));
    let hot = code_of(&create_link(
        edge.port,
        "https://example.com/hot",
        Some(DOMAIN),
    ));
    assert_eq!(get(edge.port, &format!("/{hot}"), DOMAIN).status, 302);

    origin.stop();
    assert_eq!(
        get(edge.port, &format!("/{hot}"), DOMAIN).status,
        302,
        "cached link failed with the origin down"
    );
    // A miss (not cached, not in Redis) and a creation fail fast with a JSON 5xx.
    let t = Instant::now();
    let miss = get(edge.port, "/unkn01", DOMAIN);
    let miss_took = t.elapsed();
    assert_eq!(miss.status, 503, "{}", miss.text());
    assert_eq!(miss.json()["error"], "unavailable");
    assert!(miss.header("retry-after").is_some());
    let t = Instant::now();
    let c = create_link(edge.port, "https://example.com/new", Some(DOMAIN));
    let create_took = t.elapsed();
    assert!(
        c.status == 502 || c.status == 503,
        "{} {}",
        c.status,
        c.text()
    );
    assert!(c.json()["error"].is_string());
    eprintln!("origin down: miss answered in {miss_took:?}, creation in {create_took:?}");
    let st = edge.typed_status();
    assert!(!st.origin_reachable);
    assert_eq!(st.origin.error, 2, "the miss and the creation: {st:?}");

    origin.restart();
    wait_for("creations through the edge to recover", TIMEOUT, || {
        create_link(edge.port, "https://example.com/back", Some(DOMAIN)).status == 201
    });
    // The unavailable answer was only remembered briefly.
    wait_for("misses to recover", TIMEOUT, || {
        get(edge.port, "/unkn01", DOMAIN).status == 404
    });
}

/// A lookup task that panics must leave nothing behind: before the shared
/// single-flight, its in-flight entry stayed in the table, and every later
/// request for that code joined a dead channel and got 503 until restart.
#[test]
fn a_lookup_task_that_panics_leaves_nothing_behind() {
    let redis = Redis::start();
    let mut opts = EdgeOpts::new(
        redis.url(),
        vec![format!("127.0.0.1:{}", testkit::free_port())],
    );
    // The first lookup task for pan1c0 panics (failpoint, once).
    opts.env = vec![(
        shorturl_common::failpoint::ENV,
        "edge.lookup.panic=pan1c0".to_owned(),
    )];
    let edge = start_edge(opts);
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/pan1c0"),
        &record_line(DOMAIN, "https://example.com/p", 3600),
    );
    let r = get(edge.port, "/pan1c0", DOMAIN);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"], "unavailable");
    assert_eq!(r.header("retry-after"), Some("1"));
    // Nothing was cached and no dead flight remains: a new lookup runs.
    let r = get(edge.port, "/pan1c0", DOMAIN);
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/p"));
    let st = edge.typed_status();
    assert_eq!(st.redis.hit, 1, "{st:?}");
    assert_eq!((st.lock.get, st.lock.error), (0, 0), "{st:?}");
    edge.log_line(" /pan1c0 503 FAIL ");
    edge.log_line(" /pan1c0 302 REDIS ");
}

/// An origin whose health check answers `Shorturl-Health: draining` (it is
/// stopping) gets no new requests: within two health checks of it starting
/// to drain, every API request goes to the other origin. A 503 without the
/// header (an origin whose MySQL is down) keeps it in the pool. The origins
/// are stand-in peers: what matters is what the edge sends where.
#[test]
fn a_draining_origin_gets_no_new_requests() {
    use testkit::peer::{Health, Peer};
    let redis = Redis::start();
    let (a, b) = (Peer::start(), Peer::start());
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![a.addr(), b.addr()]));
    let api = |p: &Peer| p.count(|s| s.path.starts_with("/api/"));
    let send = |n: usize| {
        for _ in 0..n {
            let r = get(edge.port, "/api/v1/links/ping0001", DOMAIN);
            assert_eq!(r.status, 200, "{}", r.text());
        }
    };
    let two_checks = |p: &Peer| {
        let since = p.health_checks();
        wait_for("two health checks of the origin", TIMEOUT, || {
            p.health_checks() >= since + 2
        });
    };
    // Both healthy (after a check each): round robin over both.
    two_checks(&b);
    send(10);
    assert_eq!((api(&a), api(&b)), (5, 5));

    b.set_health(Health::Draining);
    two_checks(&b);
    send(20);
    assert_eq!(
        (api(&a), api(&b)),
        (25, 5),
        "the draining origin got requests"
    );

    b.set_health(Health::Unavailable);
    two_checks(&b);
    send(20);
    assert_eq!(
        (api(&a), api(&b)),
        (35, 15),
        "a 503 without the header left the pool"
    );
}

/// Contract C of issue 23: the edge's own GETs to an origin (a record fetch
/// here) survive the origin closing their pooled connection just as it is
/// reused: the fetch is made once more on a fresh connection instead of
/// turning into a 503.
#[test]
fn a_pooled_origin_connection_closed_under_a_fetch_is_retried_fresh() {
    use testkit::peer::Peer;
    let redis = Redis::start();
    let peer = Peer::start();
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![peer.addr()]));
    let records = |p: &Peer| p.count(|s| s.path.starts_with("/internal/v1/records/"));
    // The first fetch leaves its connection in the pool.
    assert_eq!(get(edge.port, "/pooled01", DOMAIN).status, 404);
    assert_eq!(records(&peer), 1);
    // The origin now closes a connection when a second request comes on it.
    peer.set_drop_reused(true);
    let r = get(edge.port, "/pooled02", DOMAIN);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(
        peer.dropped(),
        1,
        "the fetch did not reuse the pooled connection"
    );
    assert_eq!(records(&peer), 2);
}

/// `edge.origin.pool_idle_timeout_ms`: an idle pooled connection to an
/// origin is closed by the edge once it has been idle that long (well
/// before the origin would close it).
#[test]
fn idle_origin_connections_are_closed_after_the_pool_idle_timeout() {
    use testkit::peer::Peer;
    let redis = Redis::start();
    let peer = Peer::start();
    let edge = start_edge(EdgeOpts {
        pool_idle_timeout_ms: Some(300),
        ..EdgeOpts::new(redis.url(), vec![peer.addr()])
    });
    assert_eq!(get(edge.port, "/idle0001", DOMAIN).status, 404);
    let fetched = Instant::now();
    testkit::wait_for(
        "the pooled connection to be closed",
        std::time::Duration::from_secs(3),
        || peer.closed_idle() >= 1,
    );
    let idle = fetched.elapsed();
    assert!(
        idle >= std::time::Duration::from_millis(250),
        "closed after {idle:?}"
    );
}
