//! End to end: edge → Redis → origin → MariaDB, all real processes.
//! Needs `shorturl-origin` built (`cargo build --workspace`).

use crate::support;

use shorturl_common::status::EdgeStatus;
use std::sync::{Arc, Barrier};
use support::http::{get, request};
use support::{
    create_link, origin_route_count, redis_del, redis_get, start_edge, EdgeOpts, Origin,
};
use testkit::{wait_for, Redis, TempDir};

const DOMAIN: &str = "s.shop55.com";

fn code_of(created: &support::http::Response) -> String {
    assert!(
        created.status == 201 || created.status == 200,
        "creation failed: {} {}",
        created.status,
        created.text()
    );
    created.json()["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no code in {}", created.text()))
        .to_owned()
}

#[test]
fn creation_origin_miss_coalescing_and_merged_status() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 2000);
    // The coalescing check below holds the first lookup (after its read)
    // while the file `hold` exists, so the others surely find it in flight.
    let dir = TempDir::new("hold");
    let hold = dir.path().join("hold");
    let held = dir.path().join("hold.held");
    let edge = start_edge(EdgeOpts {
        env: vec![(
            "SHORTURL_FAILPOINTS",
            format!("edge.lookup.hold=*@{}", hold.display()),
        )],
        ..EdgeOpts::new(redis.url(), vec![origin.addr()])
    });

    // Creation through the edge, then following the link through the edge.
    let created = create_link(edge.port, "https://example.com/created", Some(DOMAIN));
    assert_eq!(created.status, 201, "{}", created.text());
    let code = code_of(&created);
    let r = get(edge.port, &format!("/{code}"), DOMAIN);
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/created"));
    // The creation was forwarded; the redirect came from Redis (the origin
    // wrote the record there), not from the origin.
    assert_eq!(edge.counter("origin", "forward"), 1);

    // Invalid creation: the origin's 4xx JSON comes back unchanged.
    let bad = create_link(edge.port, "not a url", Some(DOMAIN));
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert_eq!(bad.json()["error"], "invalid_url");
    let unauth = request(
        edge.port,
        "POST",
        "/api/v1/links",
        "localhost",
        &[],
        br#"{"url":"https://e.com/"}"#,
    );
    assert_eq!(unauth.status, 401);

    // Origin miss: not in the edge's memory, not in Redis → the origin's record.
    let created = create_link(edge.port, "https://example.com/miss", Some(DOMAIN));
    let miss = code_of(&created);
    redis_del(&redis, &format!("su:1:link:{DOMAIN}/{miss}"));
    let before = edge.counter("origin", "forward");
    let r = get(edge.port, &format!("/{miss}"), DOMAIN);
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/miss"));
    assert_eq!(edge.counter("origin", "forward"), before + 1);
    edge.log_line(&format!(" /{miss} 302 ORIGIN "));
    // Bound to its domain even when it came from the origin.
    assert_eq!(get(edge.port, &format!("/{miss}"), "localhost").status, 404);

    // Unknown code via the origin: negative, cached.
    let before = edge.counter("origin", "forward");
    assert_eq!(get(edge.port, "/zzzzz9", DOMAIN).status, 404);
    assert_eq!(get(edge.port, "/zzzzz9", DOMAIN).status, 404);
    assert_eq!(
        edge.counter("origin", "forward"),
        before + 1,
        "one origin lookup, then the cached negative answer"
    );

    // Coalescing: 100 concurrent requests for a cold code → one origin
    // lookup. The first one's lookup is held until the 99 others wait on it
    // (on a loaded machine it could otherwise finish before they arrive).
    let created = create_link(edge.port, "https://example.com/cold", Some(DOMAIN));
    let cold = code_of(&created);
    redis_del(&redis, &format!("su:1:link:{DOMAIN}/{cold}"));
    std::fs::write(&hold, b"").unwrap();
    let st0 = edge.status();
    let barrier = Arc::new(Barrier::new(100));
    let port = edge.port;
    let threads: Vec<_> = (0..100u8)
        .map(|i| {
            let b = Arc::clone(&barrier);
            let path = format!("/{cold}");
            std::thread::spawn(move || {
                // Four client addresses: under the per-client connection cap.
                let from = [127, 0, 6, 1 + i % 4].into();
                let mut c = support::http::Conn::open_from(from, port).unwrap();
                b.wait();
                c.get(&path, DOMAIN).map(|r| r.status).unwrap_or(0)
            })
        })
        .collect();
    wait_for("the first lookup to hold", support::TIMEOUT, || {
        held.exists()
    });
    wait_for("99 requests waiting on it", support::TIMEOUT, || {
        edge.metric("shorturl_edge_lookup_waiting") == 99.0
    });
    std::fs::remove_file(&hold).unwrap();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap_or(0)).collect();
    assert!(statuses.iter().all(|s| *s == 302), "{statuses:?}");
    assert_eq!(edge.metric("shorturl_edge_lookup_waiting"), 0.0);
    let st1 = edge.status();
    let delta = |d: &str, k: &str| st1[d][k].as_u64().unwrap() - st0[d][k].as_u64().unwrap();
    assert_eq!(
        delta("origin", "forward"),
        1,
        "100 concurrent misses must reach the origin once"
    );
    assert_eq!(delta("redis", "miss"), 1);
    assert_eq!(delta("local", "hit") + delta("local", "miss"), 100);
    // The misses that found the lookup in flight waited on it (lock.get).
    assert_eq!(delta("lock", "get"), 99, "{st1}");
    assert_eq!(delta("local", "miss"), 100, "{st1}");
    // The origin wrote the record back to Redis for the next edge.
    wait_for("origin write-back", support::TIMEOUT, || {
        redis_get(&redis, &format!("su:1:link:{DOMAIN}/{cold}")).is_some()
    });

    // Status merges the origin's mysql and issuer dimensions.
    let st = edge.typed_status();
    assert!(st.origin_reachable, "{st:?}");
    assert!(st.mysql.is_some(), "{st:?}");
    assert_eq!(st.issuer.map(|i| i.capacity), Some(2000), "{st:?}");
}

/// `/shorturl_status` costs the origin at most one status request per
/// second, whatever the number of callers.
#[test]
fn status_fetches_the_origins_part_once_for_concurrent_callers() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 100);
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![origin.addr()]));
    assert_eq!(origin_route_count(origin.port, "status"), 0);
    let port = edge.port;
    let barrier = Arc::new(Barrier::new(50));
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut c = support::http::Conn::open(port).unwrap();
                b.wait();
                c.get("/shorturl_status", "localhost").unwrap()
            })
        })
        .collect();
    for t in callers {
        let r = t.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let st: EdgeStatus = serde_json::from_slice(&r.body).unwrap();
        assert!(st.origin_reachable, "{st:?}");
        assert_eq!(st.issuer.map(|i| i.capacity), Some(100));
    }
    assert_eq!(
        origin_route_count(origin.port, "status"),
        1,
        "50 concurrent status requests must cost the origin one"
    );
    // A second later the next caller refreshes it, once.
    wait_for(
        "the origin's part to be refreshed",
        support::TIMEOUT,
        || {
            edge.typed_status();
            origin_route_count(origin.port, "status") >= 2
        },
    );
    assert_eq!(origin_route_count(origin.port, "status"), 2);
}

/// Creations the origin refuses (401/403) spend a stricter per-client
/// budget; past it the edge answers 429 without asking the origin, while
/// other clients still create.
#[test]
fn refused_creations_spend_a_stricter_budget() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 100);
    let mut opts = EdgeOpts::new(redis.url(), vec![origin.addr()]);
    opts.extra = "  limits: { refused_creations_per_ip_per_min: 3 }\n";
    let edge = start_edge(opts);
    let create = |from: [u8; 4], key: &str, domain: &str| {
        let auth = format!("Bearer {key}");
        let body = serde_json::json!({ "url": "https://example.com/r", "domain": domain });
        let mut c = support::http::Conn::open_from(from.into(), edge.port).unwrap();
        let r = c
            .send(
                "POST",
                "/api/v1/links",
                Some("localhost"),
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                body.to_string().as_bytes(),
            )
            .unwrap();
        (
            r.status,
            r.json()["error"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let bad = [127, 0, 5, 1];
    assert_eq!(create(bad, "wrong-key", DOMAIN).0, 401);
    assert_eq!(create(bad, "wrong-key", DOMAIN).0, 401);
    assert_eq!(create(bad, support::API_KEY, "not-allowed.example").0, 403);
    // Budget spent: refused at the edge, a valid creation included.
    assert_eq!(
        create(bad, "wrong-key", DOMAIN),
        (429, "rate_limited".into())
    );
    assert_eq!(
        create(bad, support::API_KEY, DOMAIN),
        (429, "rate_limited".into())
    );
    // Another client is not affected.
    assert_eq!(create([127, 0, 5, 2], support::API_KEY, DOMAIN).0, 201);
    assert_eq!(origin_route_count(origin.port, "create"), 4);
    assert_eq!(
        edge.metric("shorturl_limits_refused_total{limit=\"refused_creations\"}"),
        2.0
    );
}

/// A rolling restart of four origins under a mixed load of creations and
/// redirects that reach the origins, through the edge: not one request
/// fails. Each origin, on SIGTERM, drains (its `/healthz` says `draining`,
/// the edge's health check stops choosing it) before it stops accepting,
/// and the edge pools no connection it is about to close (issue 23,
/// "Rolling restarts lose requests").
#[test]
fn a_rolling_restart_of_four_origins_fails_no_request() {
    let redis = Redis::start();
    // The edge's own Redis never holds a record (the origins write theirs
    // to `redis`), and its memory keeps them 1 s: a redirect of a code
    // created a moment ago is a record fetch from an origin.
    let edge_redis = Redis::start();
    // Codes for the paced load (testkit::load::PACE: at most 240 creations
    // a second) over the longest the restarts may take (4 x 2 waits of
    // 30 s): 57,600.
    let first = Origin::start_with(&redis, 60_000, "drain_secs: 2\n");
    let mut origins = vec![first];
    for _ in 0..3 {
        let o = origins[0].sibling();
        origins.push(o);
    }
    let mut opts = EdgeOpts::new(edge_redis.url(), origins.iter().map(|o| o.addr()).collect());
    opts.extra = "  cache: { positive_ttl_secs: 1, negative_ttl_secs: 1 }\n  \
                  limits: { creations_per_ip_per_sec: 0, unknown_per_ip_per_sec: 0 }\n";
    let edge = start_edge(opts);
    let port = edge.port;

    let load = testkit::load::CreateAndFollow::start(port, support::API_KEY, DOMAIN, 6);
    let served =
        |o: &Origin| origin_route_count(o.port, "create") + origin_route_count(o.port, "record");
    wait_for(
        "the load to reach every origin",
        std::time::Duration::from_secs(30),
        || origins.iter().all(|o| served(o) > 0),
    );
    for o in &mut origins {
        o.terminate();
        o.restart();
        // The edge sends it requests again before the next one goes.
        wait_for(
            "the restarted origin back in rotation",
            std::time::Duration::from_secs(30),
            || served(o) > 0,
        );
    }
    let (done, failed) = load.stop();
    assert!(
        failed.is_empty(),
        "{} failed requests across the rolling restart: {:?}\nedge log:\n{}",
        failed.len(),
        &failed[..failed.len().min(5)],
        edge.log()
    );
    assert!(done > 0);
    eprintln!("{done} creations, each followed, across a rolling restart of 4 origins, 0 failed");
}
