//! Creation, resolution and the API's rules, end to end through a real
//! origin process over real MariaDB and Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use std::collections::HashSet;
use support::{Setup, KEY, OTHER_KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_then_redirect_with_the_protocol_headers() {
    let s = Setup::start();
    let o = &s.origin;
    let (st, v) = o.create(json!({"url": "https://example.com/a?b=c"})).await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap();
    assert_eq!(code.len(), 6);
    assert!(code.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(v["short_url"], format!("http://sho.rt/{code}"));
    assert_eq!(v["domain"], "sho.rt");
    assert_eq!(v["deduplicated"], false);
    let exp = v["expires_at_unix"].as_u64().unwrap();
    let now = shorturl_common::time::now_unix();
    // Default lifetime: 2 years (730 days).
    assert!(
        (exp as i64 - (now + 730 * 86_400) as i64).abs() < 60,
        "{exp}"
    );
    assert!(v["expires_at"].as_str().unwrap().ends_with('Z'));

    let r = o
        .http
        .get(o.url(&format!("/{code}")))
        .header("Host", "SHO.RT.:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://example.com/a?b=c");
    assert_eq!(r.headers()["content-length"], "0");
    assert_eq!(r.headers()["cache-control"], "private, max-age=60");

    // HEAD: same status and headers, no body.
    let r = o
        .http
        .head(o.url(&format!("/{code}")))
        .header("Host", "sho.rt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://example.com/a?b=c");
    assert!(r.bytes().await.unwrap().is_empty());

    // Authenticated JSON read.
    let r = o
        .http
        .get(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let info: serde_json::Value = r.json().await.unwrap();
    assert_eq!(info["url"], "https://example.com/a?b=c");
    assert_eq!(info["app"], "demo");
    assert_eq!(info["state"], "active");
    // The row in MySQL records the caller's app.
    assert_eq!(
        s.sql(&format!(
            "SELECT app, state FROM short_code WHERE code = '{code}'"
        ))
        .trim(),
        "demo\t1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_invalid_and_wrong_host_are_404_json() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://example.com/x"})).await;
    for (host, path) in [
        ("sho.rt", "/zzzzzz"),
        ("other.com", &*format!("/{code}")),
        ("sho.rt", "/a"),
        ("sho.rt", "/a/b/c"),
        ("sho.rt", "/%00abc"),
    ] {
        let r = o
            .http
            .get(o.url(path))
            .header("Host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{host}{path}");
        assert_eq!(r.headers()["cache-control"], "no-store");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"], "not_found");
    }
    // A wrong method on a code path is a 405 JSON, not a redirect.
    let r = o
        .http
        .post(o.url(&format!("/{code}")))
        .header("Host", "sho.rt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let r = o.http.get(o.url("/api/v2/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["error"],
        "no_route"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_4xx_json_and_write_nothing() {
    let s = Setup::start();
    let o = &s.origin;
    let long = format!("https://x.com/{}", "a".repeat(2100));
    let cases: Vec<(serde_json::Value, u16, &str)> = vec![
        (json!({}), 400, "invalid_url"),
        (json!({"url": "ftp://x.com"}), 400, "invalid_url"),
        (json!({"url": "https://x.com/a b"}), 400, "invalid_url"),
        (json!({"url": "no scheme"}), 400, "invalid_url"),
        (json!({"url": long}), 400, "url_too_long"),
        (
            json!({"url": "https://x.com", "domain": "evil.com"}),
            403,
            "domain_not_allowed",
        ),
        (
            json!({"url": "https://x.com", "domain": "a b"}),
            400,
            "invalid_domain",
        ),
        (
            json!({"url": "https://x.com", "code": "x"}),
            400,
            "invalid_code",
        ),
        (
            json!({"url": "https://x.com", "ttl_days": 0}),
            400,
            "invalid_ttl",
        ),
        (
            json!({"url": "https://x.com", "kdt_id": -5}),
            400,
            "invalid_kdt_id",
        ),
        (
            json!({"url": "https://x.com", "surprise": true}),
            400,
            "invalid_field",
        ),
        (json!([1, 2]), 400, "invalid_json"),
    ];
    for (body, status, kind) in cases {
        let (st, v) = o.create(body.clone()).await;
        assert_eq!(
            (st, v["error"].as_str().unwrap_or("")),
            (status, kind),
            "{body} -> {v}"
        );
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // Not JSON at all.
    let r = o
        .http
        .post(o.url("/api/v1/links"))
        .bearer_auth(KEY)
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["error"],
        "invalid_json"
    );
    // Oversized body.
    let big = format!("{{\"url\":\"https://x.com/{}\"}}", "a".repeat(40_000));
    let r = o
        .http
        .post(o.url("/api/v1/links"))
        .bearer_auth(KEY)
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["error"],
        "body_too_large"
    );
    // No key, wrong key.
    let r = o
        .http
        .post(o.url("/api/v1/links"))
        .json(&json!({"url": "https://x.com"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let (st, v) = o
        .create_with_key("wrong", json!({"url": "https://x.com"}))
        .await;
    assert_eq!((st, v["error"].as_str().unwrap()), (401, "unauthorized"));
    // Nothing was written by any of those.
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE state <> 0")
            .trim(),
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_app_rate_limit_answers_429() {
    let s = Setup::start();
    let o = &s.origin;
    // "other" has burst 3 and 2/s.
    let mut statuses = Vec::new();
    for i in 0..8 {
        let (st, _) = o
            .create_with_key(OTHER_KEY, json!({"url": format!("https://x.com/{i}")}))
            .await;
        statuses.push(st);
    }
    assert!(
        statuses.iter().filter(|&&s| s == 201).count() >= 3,
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    let r = o
        .http
        .post(o.url("/api/v1/links"))
        .bearer_auth(OTHER_KEY)
        .json(&json!({"url": "https://x.com/z"}))
        .send()
        .await
        .unwrap();
    if r.status() == 429 {
        assert!(r.headers().contains_key("retry-after"));
    }
    // The demo app is not affected.
    assert_eq!(o.create(json!({"url": "https://x.com/demo"})).await.0, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_are_case_sensitive() {
    let s = Setup::start();
    let o = &s.origin;
    assert_eq!(
        o.create_ok(json!({"url": "https://one.example/", "code": "aB3xYz"}))
            .await,
        "aB3xYz"
    );
    assert_eq!(
        o.create_ok(json!({"url": "https://two.example/", "code": "Ab3xYz"}))
            .await,
        "Ab3xYz"
    );
    assert_eq!(
        o.follow("sho.rt", "aB3xYz").await,
        (302, Some("https://one.example/".into()))
    );
    assert_eq!(
        o.follow("sho.rt", "Ab3xYz").await,
        (302, Some("https://two.example/".into()))
    );
    assert_eq!(o.follow("sho.rt", "ab3xyz").await.0, 404);
    // And in MySQL the two are distinct rows.
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE code IN ('aB3xYz','Ab3xYz')")
            .trim(),
        "2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_codes_conflict_and_reserve_pregenerated_rows() {
    let s = Setup::start_with(|o| o.pregen = 200);
    let o = &s.origin;
    assert_eq!(
        o.create_ok(json!({"url": "https://a.example/", "code": "promo-2026"}))
            .await,
        "promo-2026"
    );
    let (st, v) = o
        .create(json!({"url": "https://b.example/", "code": "promo-2026"}))
        .await;
    assert_eq!((st, v["error"].as_str().unwrap()), (409, "code_taken"));
    assert_eq!(
        o.follow("sho.rt", "promo-2026").await.1.as_deref(),
        Some("https://a.example/")
    );

    // Take a pre-generated code that has not been issued yet (the last row).
    let future_code = s
        .sql("SELECT code FROM short_code WHERE id = 200")
        .trim()
        .to_owned();
    assert_eq!(
        o.create_ok(json!({"url": "https://custom.example/", "code": future_code}))
            .await,
        future_code
    );
    // An issued code can't be taken as a custom code.
    let issued = o.create_ok(json!({"url": "https://issued.example/"})).await;
    let (st, _) = o
        .create(json!({"url": "https://c.example/", "code": issued}))
        .await;
    assert_eq!(st, 409);
    // Issue every remaining id: the reserved row is skipped, never re-issued.
    let mut codes = HashSet::new();
    codes.insert(issued);
    loop {
        let (st, v) = o
            .create(json!({"url": format!("https://fill.example/{}", codes.len())}))
            .await;
        if st == 503 {
            assert_eq!(v["error"], "codes_exhausted");
            break;
        }
        assert_eq!(st, 201, "{v}");
        assert!(codes.insert(v["code"].as_str().unwrap().to_owned()));
    }
    assert!(!codes.contains(&future_code));
    assert_eq!(
        codes.len(),
        199,
        "every row but the reserved one was issued once"
    );
    assert_eq!(
        o.follow("sho.rt", &future_code).await.1.as_deref(),
        Some("https://custom.example/")
    );
    let status = o.status().await;
    assert_eq!(status["issuer"]["exhausted"], true, "{status}");
    assert!(o.log().contains("issuer exhausted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_url_same_domain_within_a_day_gets_the_same_code() {
    let s = Setup::start();
    let o = &s.origin;
    let (st, a) = o.create(json!({"url": "https://dedup.example/p"})).await;
    assert_eq!(st, 201);
    let (st, b) = o.create(json!({"url": "https://dedup.example/p"})).await;
    assert_eq!(st, 200);
    assert_eq!(a["code"], b["code"]);
    assert_eq!(b["deduplicated"], true);
    // Another domain or URL: another code.
    let (_, c) = o
        .create(json!({"url": "https://dedup.example/p", "domain": "s.shop55.com"}))
        .await;
    assert_ne!(a["code"], c["code"]);
    let (_, d) = o.create(json!({"url": "https://dedup.example/q"})).await;
    assert_ne!(a["code"], d["code"]);
    // The dedup key has a one-day TTL that a hit refreshes.
    let mut r = s.redis_conn().await;
    let key = shorturl_common::keys::dedup_key("sho.rt", "https://dedup.example/p");
    let _: () = redis::cmd("EXPIRE")
        .arg(&key)
        .arg(100)
        .query_async(&mut r)
        .await
        .unwrap();
    let (_, e) = o.create(json!({"url": "https://dedup.example/p"})).await;
    assert_eq!(e["code"], a["code"]);
    let ttl: i64 = redis::cmd("TTL")
        .arg(&key)
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(ttl > 86_000, "ttl {ttl}");
    // Past the window (key gone), a new code.
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut r)
        .await
        .unwrap();
    let (st, f) = o.create(json!({"url": "https://dedup.example/p"})).await;
    assert_eq!(st, 201);
    assert_ne!(f["code"], a["code"]);
    // A disabled link is not handed out again.
    let code = f["code"].as_str().unwrap();
    let r2 = o
        .http
        .delete(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r2.status(), 200);
    let (st, g) = o.create(json!({"url": "https://dedup.example/p"})).await;
    assert_eq!(st, 201);
    assert_ne!(g["code"], f["code"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_links_are_404_even_from_redis() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o
        .create_ok(json!({"url": "https://soon.example/", "ttl_days": 1}))
        .await;
    assert_eq!(o.follow("sho.rt", &code).await.0, 302);
    // Age the link: expiry in the past, in MySQL and in the Redis record.
    s.sql(&format!(
        "UPDATE short_code SET expires_at = UNIX_TIMESTAMP() - 5 WHERE code = '{code}'"
    ));
    let mut r = s.redis_conn().await;
    let key = shorturl_common::keys::link_key(&code);
    let rec: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut r)
        .await
        .unwrap();
    let mut parts: Vec<&str> = rec.splitn(4, ' ').collect();
    let past = (shorturl_common::time::now_unix() - 5).to_string();
    parts[1] = &past;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(parts.join(" "))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);
    // And without Redis's copy, MySQL says the same.
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);
    let info: serde_json::Value = o
        .http
        .get(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["state"], "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_resolve_only_on_their_domain() {
    let s = Setup::start();
    let o = &s.origin;
    let merchant = o
        .create_ok(json!({"url": "https://shop55.example/", "domain": "S.Shop55.com"}))
        .await;
    let default = o
        .create_ok(json!({"url": "https://default.example/"}))
        .await;
    assert_eq!(o.follow("s.shop55.com", &merchant).await.0, 302);
    assert_eq!(o.follow("s.shop55.com:443", &merchant).await.0, 302);
    assert_eq!(o.follow("S.SHOP55.COM.", &merchant).await.0, 302);
    assert_eq!(o.follow("sho.rt", &merchant).await.0, 404);
    assert_eq!(o.follow("go.brand91.cn", &merchant).await.0, 404);
    assert_eq!(o.follow("sho.rt", &default).await.0, 302);
    assert_eq!(o.follow("s.shop55.com", &default).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_disables_and_clears_redis() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://gone.example/"})).await;
    assert_eq!(o.follow("sho.rt", &code).await.0, 302);
    // Only the creating app may disable it.
    let r = o
        .http
        .delete(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(OTHER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = o
        .http
        .delete(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);
    let mut r = s.redis_conn().await;
    let v: String = redis::cmd("GET")
        .arg(shorturl_common::keys::link_key(&code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(v, "-");
    let r = o
        .http
        .delete(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_record_endpoint_and_redis_write_back() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o
        .create_ok(json!({"url": "https://rec.example/x", "domain": "s.shop55.com"}))
        .await;
    let mut r = s.redis_conn().await;
    // Drop Redis's copy: the origin reads MySQL and writes it back.
    let _: () = redis::cmd("FLUSHALL").query_async(&mut r).await.unwrap();
    let resp = o
        .http
        .get(o.url(&format!("/internal/v1/records/{code}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let cc = resp.headers()["cache-control"].to_str().unwrap().to_owned();
    let body = resp.text().await.unwrap();
    let rec = match shorturl_common::record::Lookup::decode(&body).unwrap() {
        shorturl_common::record::Lookup::Found(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (rec.domain.as_str(), rec.url.as_str()),
        ("s.shop55.com", "https://rec.example/x")
    );
    let max_age: u64 = cc.strip_prefix("max-age=").unwrap().parse().unwrap();
    assert!(max_age > 5 * 86_400 && max_age <= 6 * 86_400, "{cc}");
    let cached: String = redis::cmd("GET")
        .arg(shorturl_common::keys::link_key(&code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(cached, body);
    let ttl: i64 = redis::cmd("TTL")
        .arg(shorturl_common::keys::link_key(&code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(ttl > 5 * 86_400 && ttl <= 6 * 86_400, "record TTL {ttl}");
    // Unknown code: 404 "-", and the negative is cached in Redis with its short TTL.
    let resp = o
        .http
        .get(o.url("/internal/v1/records/ZZZZZZ"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.text().await.unwrap(), "-");
    let neg: String = redis::cmd("GET")
        .arg(shorturl_common::keys::link_key("ZZZZZZ"))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(neg, "-");
    let resp = o
        .http
        .get(o.url("/internal/v1/records/a.b"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // Status counts the dimensions.
    let st = o.status().await;
    assert!(
        st["redis"]["hit"].as_u64().unwrap() + st["redis"]["miss"].as_u64().unwrap() > 0,
        "{st}"
    );
    assert!(st["mysql"]["select"].as_u64().unwrap() >= 2, "{st}");
    assert!(st["mysql"]["update"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(st["issuer"]["capacity"], 5000);
    assert_eq!(st["service"], "origin");
    let metrics = o
        .http
        .get(o.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("shorturl_origin_redis_hit_total"));
    assert!(metrics.contains("shorturl_origin_request_duration_seconds_bucket"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_for_one_code_share_one_mysql_lookup() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://cold.example/"})).await;
    let mut r = s.redis_conn().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut r).await.unwrap();
    let before = o.status().await["mysql"]["select"].as_u64().unwrap();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let http = o.http.clone();
        let url = o.url(&format!("/{code}"));
        tasks.push(tokio::spawn(async move {
            http.get(url)
                .header("Host", "sho.rt")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 302);
    }
    let st = o.status().await;
    let selects = st["mysql"]["select"].as_u64().unwrap() - before;
    // Requests that arrive after the write-back are Redis hits; those that
    // overlap the in-flight lookup join it (lock.get).
    assert!(selects < 50, "selects {selects}, status {st}");
    assert!(
        selects + st["lock"]["get"].as_u64().unwrap() + st["redis"]["hit"].as_u64().unwrap() >= 50,
        "{st}"
    );
}
