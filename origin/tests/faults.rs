//! Faults with real servers: Redis is a cache (losing it loses nothing),
//! MySQL down is a clean 503 with Retry-After and the origin recovers alone.

use crate::support;

use serde_json::json;
use std::time::{Duration, Instant};
use support::{Origin, OriginOpts, Setup};
use testkit::{MariaDb, Redis};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_and_restarted_loses_nothing() {
    let mut s = Setup::start();
    let before = s
        .origin
        .create_ok(json!({"url": "https://before.example/"}))
        .await;
    s.redis.stop();
    // Creation and resolution go on through MySQL.
    let during = s
        .origin
        .create_ok(json!({"url": "https://during.example/"}))
        .await;
    assert_eq!(
        s.origin.follow("sho.rt", &before).await,
        (302, Some("https://before.example/".into()))
    );
    assert_eq!(
        s.origin.follow("sho.rt", &during).await,
        (302, Some("https://during.example/".into()))
    );
    assert_eq!(s.origin.follow("sho.rt", "ZZZZZZ").await.0, 404);
    // Every Redis call failed and was counted once: the creation's dedup read
    // and write-back (2), and per lookup the read and the write-back (3 x 2;
    // after a failed read the lookup does not try Redis again before MySQL).
    let st = s.origin.status().await;
    assert_eq!(st.redis.error, 8, "{st:?}");
    assert_eq!((st.redis.hit, st.redis.miss), (0, 0), "{st:?}");
    // Redis comes back empty; the origin reconnects by itself and refills it.
    s.redis.restart();
    let mut conn = s.redis_conn().await;
    let key = shorturl_common::keys::link_key("sho.rt", &during);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert_eq!(s.origin.follow("sho.rt", &during).await.0, 302);
        let v: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        if v.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "origin never wrote back to the restarted Redis"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = s
        .origin
        .create_ok(json!({"url": "https://after.example/"}))
        .await;
    assert_eq!(s.origin.follow("sho.rt", &after).await.0, 302);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_down_is_503_with_retry_after_then_recovers() {
    // A private MariaDB: this test stops it.
    let mut m = MariaDb::start();
    let url = m.create_database("faults");
    let redis = Redis::start();
    let origin = Origin::start(OriginOpts::new(url, redis.url()));
    let cached = origin
        .create_ok(json!({"url": "https://cached.example/"}))
        .await;
    m.stop();
    // Cached in Redis: still redirects.
    assert_eq!(origin.follow("sho.rt", &cached).await.0, 302);
    // Creation, a custom code, a read, a record lookup and a redirect of an
    // uncached code (503, not 404: it may exist): 503 JSON with Retry-After,
    // in bounded time, saying what is unavailable and nothing of MySQL's text.
    let requests = [
        origin
            .http
            .post(origin.url("/api/v1/links"))
            .bearer_auth(support::KEY)
            .json(&json!({"url": "https://x.example/"})),
        origin
            .http
            .post(origin.url("/api/v1/links"))
            .bearer_auth(support::KEY)
            .json(&json!({"url": "https://x.example/", "code": "custom-down"})),
        origin
            .http
            .get(origin.url("/api/v1/links/QQQQQQ"))
            .bearer_auth(support::KEY),
        origin.http.get(origin.url("/internal/v1/records/QQQQQQ")),
        origin
            .http
            .get(origin.url("/QQQQQQ"))
            .header("Host", "sho.rt"),
        // Changes of an existing link: nothing may be half-written.
        origin
            .http
            .patch(origin.url(&format!("/api/v1/links/{cached}")))
            .bearer_auth(support::KEY)
            .json(&json!({"url": "https://changed.example/"})),
        origin
            .http
            .delete(origin.url(&format!("/api/v1/links/{cached}")))
            .bearer_auth(support::KEY),
        origin
            .http
            .get(origin.url(&format!("/api/v1/links/{cached}/history")))
            .bearer_auth(support::KEY),
        // A search, and a batch whose every item finds MySQL down: one 503.
        origin
            .http
            .get(origin.url("/api/v1/links?domain=sho.rt"))
            .bearer_auth(support::KEY),
        origin
            .http
            .post(origin.url("/api/v1/links/batch"))
            .bearer_auth(support::KEY)
            .json(
                &json!({"links": [{"url": "https://b1.example/"}, {"url": "https://b2.example/"}]}),
            ),
    ];
    for req in requests {
        let t = Instant::now();
        let r = req.send().await.unwrap();
        let what = r.url().path().to_owned();
        assert_eq!(r.status(), 503, "{what}");
        assert!(r.headers().contains_key("retry-after"), "{what}");
        assert_eq!(r.headers()["content-type"], "application/json", "{what}");
        assert_eq!(
            r.text().await.unwrap(),
            r#"{"error":"unavailable","message":"the link database is unavailable; retry shortly"}"#,
            "{what}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what} took {:?}",
            t.elapsed()
        );
    }
    // /healthz answers from the background probe (once a second): wait
    // for the probe to have seen MySQL go.
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = origin
            .http
            .get(origin.url("/healthz"))
            .send()
            .await
            .unwrap();
        if r.status() == 503 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["shorturl-health"], "degraded");
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(
        r.text().await.unwrap(),
        r#"{"status":"degraded","mysql":"unavailable"}"#
    );
    // The detail is in the log instead.
    assert!(origin.log().contains("mysql"), "{}", origin.log());
    // MySQL returns: the origin recovers without a restart.
    m.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        let (st, v) = origin
            .create(json!({"url": "https://recovered.example/"}))
            .await;
        if st == 201 {
            break v["code"].as_str().unwrap().to_owned();
        }
        assert_eq!(st, 503, "{v}");
        assert!(Instant::now() < deadline, "origin did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(origin.follow("sho.rt", &code).await.0, 302);
    // The refused edit and delete left nothing behind: the link, its one
    // audit row (the creation), no outbox row, and Redis's record as before.
    assert_eq!(
        m.sql(&format!(
            "USE faults; SELECT state, version, long_url FROM short_code WHERE code = '{cached}'; \
             SELECT COUNT(*) FROM link_audit WHERE code = '{cached}'; SELECT COUNT(*) FROM outbox; \
             SELECT COUNT(*) FROM short_code WHERE long_url LIKE 'https://b_.example/'"
        )),
        "1\t1\thttps://cached.example/\n1\n0\n0\n"
    );
    assert_eq!(
        origin.follow("sho.rt", &cached).await,
        (302, Some("https://cached.example/".into()))
    );
    // Healthy again by the probe's next round.
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin
        .http
        .get(origin.url("/healthz"))
        .send()
        .await
        .unwrap()
        .status()
        != 200
    {
        assert!(Instant::now() < deadline, "/healthz did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(origin.status().await.mysql.error > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_config_is_refused_at_start_with_the_field_named() {
    let dir = testkit::TempDir::new("badcfg");
    let p = dir.path().join("bad.yaml");
    std::fs::write(&p, "listen: 127.0.0.1:1\ndefault_domain: x.com\nmysql: {url: 'mysql://r@h/d'}\nredis: {url: 'redis://h/'}\nredirect: {status: 200}\n").unwrap();
    let out = support::check_config(&p);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("redirect.status"));
    for example in ["origin.yaml", "origin.cluster.yaml", "origin.sentinel.yaml"] {
        let out = support::check_config(format!("../conf/{example}"));
        assert!(
            out.status.success(),
            "conf/{example} must validate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
