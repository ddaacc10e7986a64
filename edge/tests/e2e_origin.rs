//! End to end: edge → Redis → origin → MariaDB, all real processes.
//! Needs `shorturl-origin` built (`cargo build --workspace`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Barrier};
use support::http::{get, request};
use support::{create_link, redis_del, redis_get, start_edge, EdgeOpts, Origin};
use testkit::{wait_for, Redis};

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
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![origin.addr()]));

    // Creation through the edge, then following the link through the edge.
    let created = create_link(edge.port, "https://example.com/created", Some(DOMAIN));
    assert_eq!(created.status, 201, "{}", created.text());
    let code = code_of(&created);
    let r = get(edge.port, &format!("/{code}"), DOMAIN);
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/created"));
    // Forwarded requests carry the client address.
    assert!(edge.counter("origin", "forward") >= 1);

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
    redis_del(&redis, &format!("su:1:link:{miss}"));
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
    assert!(
        edge.counter("origin", "forward") <= before + 1,
        "negative answer not cached"
    );

    // Coalescing: 100 concurrent requests for a cold code → one origin lookup.
    let created = create_link(edge.port, "https://example.com/cold", Some(DOMAIN));
    let cold = code_of(&created);
    redis_del(&redis, &format!("su:1:link:{cold}"));
    let st0 = edge.status();
    let barrier = Arc::new(Barrier::new(100));
    let port = edge.port;
    let threads: Vec<_> = (0..100)
        .map(|_| {
            let b = Arc::clone(&barrier);
            let path = format!("/{cold}");
            std::thread::spawn(move || {
                let mut c = support::http::Conn::open(port).unwrap();
                b.wait();
                c.get(&path, DOMAIN).map(|r| r.status).unwrap_or(0)
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap_or(0)).collect();
    assert!(statuses.iter().all(|s| *s == 302), "{statuses:?}");
    let st1 = edge.status();
    let delta = |d: &str, k: &str| st1[d][k].as_u64().unwrap() - st0[d][k].as_u64().unwrap();
    assert_eq!(
        delta("origin", "forward"),
        1,
        "100 concurrent misses must reach the origin once"
    );
    assert_eq!(delta("redis", "miss"), 1);
    assert_eq!(delta("local", "hit") + delta("local", "miss"), 100);
    // Misses that found the lookup in flight waited on it (lock.get).
    assert!(
        delta("lock", "get") >= 1,
        "no request waited on the in-flight lookup: {st1}"
    );
    assert!(delta("lock", "get") < delta("local", "miss"));
    // The origin wrote the record back to Redis for the next edge.
    wait_for("origin write-back", support::TIMEOUT, || {
        redis_get(&redis, &format!("su:1:link:{cold}")).is_some()
    });

    // Status merges the origin's mysql and issuer dimensions.
    let st = edge.status();
    assert_eq!(st["origin_reachable"], true, "{st}");
    assert!(st["mysql"]["select"].is_u64(), "{st}");
    assert!(
        st["issuer"]["capacity"].as_u64().unwrap_or(0) >= 2000,
        "{st}"
    );
}
