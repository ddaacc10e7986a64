//! Creation, resolution and the API's rules, end to end through a real
//! origin process over real MariaDB and Redis.

use crate::support;

use serde_json::json;
use shorturl_common::status::{LockDim, MysqlDim, RedisDim};
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
    assert_eq!(r.headers()["etag"], "\"1\"");
    let info: serde_json::Value = r.json().await.unwrap();
    assert_eq!(info["url"], "https://example.com/a?b=c");
    assert_eq!(info["app"], "demo");
    assert_eq!(info["state"], "active");
    assert_eq!(info["version"], 1);
    // The creation answered the same link object (plus `deduplicated`).
    let mut created = v.clone();
    created.as_object_mut().unwrap().remove("deduplicated");
    assert_eq!(created, info);
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
        // (`/%00abc` is a malformed request: tests/odd_requests.rs.)
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
    // "other" has burst 3 and 2/s: the burst passes, then requests faster
    // than 2/s are refused (a token may refill while they run, never more).
    let started = std::time::Instant::now();
    let mut statuses = Vec::new();
    let mut refused = 0;
    for i in 0..8 {
        let r = o
            .http
            .post(o.url("/api/v1/links"))
            .bearer_auth(OTHER_KEY)
            .json(&json!({"url": format!("https://x.com/{i}")}))
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        if st == 429 {
            refused += 1;
            assert!(
                r.headers().contains_key("retry-after"),
                "429 without Retry-After"
            );
            let v: serde_json::Value = r.json().await.unwrap();
            assert_eq!(v["error"], "rate_limited");
        }
        statuses.push(st);
    }
    let refills = (started.elapsed().as_secs_f64() * 2.0).floor() as usize;
    assert_eq!(&statuses[..3], &[201, 201, 201], "{statuses:?}");
    assert!(
        refused >= 5 - refills.min(5) && refused >= 1,
        "{statuses:?} in {:?}",
        started.elapsed()
    );
    assert_eq!(refused + statuses.iter().filter(|&&s| s == 201).count(), 8);
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
    assert_eq!(
        (st, v["error"].as_str().unwrap()),
        (409, "code_unavailable")
    );
    assert_eq!(
        o.follow("sho.rt", "promo-2026").await.1.as_deref(),
        Some("https://a.example/")
    );

    // Take a pre-generated code that has not been issued yet (the last row).
    let future_code = s
        .sql("SELECT code FROM code_pool WHERE id = 200")
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
    assert!(status.issuer.exhausted, "{status:?}");
    assert_eq!(status.issuer.remaining, 0, "{status:?}");
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
    let key =
        shorturl_common::keys::dedup_key("sho.rt", "demo", None, 730, "https://dedup.example/p");
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
    let key = shorturl_common::keys::link_key("sho.rt", &code);
    let rec: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut r)
        .await
        .unwrap();
    // `2 <version> <expires_at> <domain> <url>`
    let mut parts: Vec<&str> = rec.splitn(5, ' ').collect();
    let past = (shorturl_common::time::now_unix() - 5).to_string();
    parts[2] = &past;
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
async fn delete_is_for_good_and_leaves_a_versioned_negative() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://gone.example/"})).await;
    assert_eq!(o.follow("sho.rt", &code).await.0, 302);
    // Another app cannot see it: the 404 of an unknown code, nothing changes.
    let r = o
        .http
        .delete(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(OTHER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(o.follow("sho.rt", &code).await.0, 302);
    let r = o
        .http
        .delete(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        json!({"code": code, "state": "deleted", "version": 2})
    );
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);
    let mut r = s.redis_conn().await;
    let v: String = redis::cmd("GET")
        .arg(shorturl_common::keys::link_key("sho.rt", &code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(v, "- 2");
    // Deleting again changes nothing and answers the same.
    let r = o
        .http
        .delete(o.url(&format!("/api/v1/links/{code}")))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["version"], 2);
    assert_eq!(
        s.sql(&format!(
            "SELECT state, version FROM short_code WHERE code = '{code}'"
        ))
        .trim(),
        "4\t2"
    );
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
        .get(o.url(&format!("/internal/v1/records/{code}?domain=s.shop55.com")))
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
        (rec.version, rec.domain.as_str(), rec.url.as_str()),
        (1, "s.shop55.com", "https://rec.example/x")
    );
    assert!(body.starts_with("2 1 "), "{body}");
    let max_age: u64 = cc.strip_prefix("max-age=").unwrap().parse().unwrap();
    assert!(max_age > 5 * 86_400 && max_age <= 6 * 86_400, "{cc}");
    let cached: String = redis::cmd("GET")
        .arg(shorturl_common::keys::link_key("s.shop55.com", &code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(cached, body);
    // Protocol 3.5: nothing under the legacy key (`redis.legacy_keys` off).
    let legacy: Option<String> = redis::cmd("GET")
        .arg(shorturl_common::keys::legacy_link_key(&code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(legacy, None);
    // The code on another domain is no link there: `- 0`, cached under
    // that domain's key; the link's own key is untouched.
    let (st, text) = o
        .get_text(
            &format!("/internal/v1/records/{code}?domain=go.brand91.cn"),
            "sho.rt",
        )
        .await;
    assert_eq!((st, text.as_str()), (404, "- 0"));
    let other: String = redis::cmd("GET")
        .arg(shorturl_common::keys::link_key("go.brand91.cn", &code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(other, "- 0");
    // A domain that is not a normalised host is the caller's mistake.
    for bad in ["S.Shop55.com", "s.shop55.com:80", "a_b.com", ""] {
        let (st, text) = o
            .get_text(
                &format!("/internal/v1/records/{code}?domain={bad}"),
                "sho.rt",
            )
            .await;
        assert_eq!(st, 400, "{bad:?}: {text}");
        assert!(text.contains("invalid_domain"), "{text}");
    }
    // An edge of the previous version asks for the code alone: its record.
    let (st, text) = o
        .get_text(&format!("/internal/v1/records/{code}"), "sho.rt")
        .await;
    assert_eq!((st, text), (200, body.clone()));
    let ttl: i64 = redis::cmd("TTL")
        .arg(shorturl_common::keys::link_key("s.shop55.com", &code))
        .query_async(&mut r)
        .await
        .unwrap();
    assert!(ttl > 5 * 86_400 && ttl <= 6 * 86_400, "record TTL {ttl}");
    // Unknown code: 404 "-", and the negative is cached in Redis with its short TTL.
    let resp = o
        .http
        .get(o.url("/internal/v1/records/ZZZZZZ?domain=sho.rt"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.text().await.unwrap(), "- 0");
    let neg: String = redis::cmd("GET")
        .arg(shorturl_common::keys::link_key("sho.rt", "ZZZZZZ"))
        .query_async(&mut r)
        .await
        .unwrap();
    assert_eq!(neg, "- 0");
    let resp = o
        .http
        .get(o.url("/internal/v1/records/a.b"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // Status counts the dimensions exactly: one creation (one claimed row),
    // then four uncached lookups (the link, the code on another domain, the
    // code alone, the unknown code), each a Redis miss, a re-read of Redis
    // under the single-flight, and one MySQL read; the refused domains
    // looked nothing up.
    let st = o.status().await;
    assert_eq!(st.service, "origin");
    assert_eq!(
        st.mysql,
        MysqlDim {
            update: 1,
            select: 4,
            error: 0
        }
    );
    assert_eq!(
        st.redis,
        RedisDim {
            hit: 0,
            miss: 8,
            error: 0
        }
    );
    assert_eq!(st.lock, LockDim { get: 0, error: 0 });
    assert_eq!(st.issuer.capacity, 5000);
    let metrics = o.metrics().await;
    // Protocol section 7: one family for the status dimensions, no service name.
    for line in [
        "shorturl_status_total{dimension=\"redis\",result=\"miss\"} 8",
        "shorturl_status_total{dimension=\"mysql\",result=\"select\"} 4",
        "shorturl_status_total{dimension=\"mysql\",result=\"update\"} 1",
        "shorturl_status_total{dimension=\"lock\",result=\"get\"} 0",
        "shorturl_status_total{dimension=\"issuer\",result=\"error\"} 0",
        "shorturl_issuer_capacity 5000",
        "shorturl_creations_total{outcome=\"created\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in\n{metrics}"
        );
    }
    assert!(metrics.contains("shorturl_request_duration_seconds_bucket{route=\"record\""));
    assert!(!metrics.contains("shorturl_origin_"), "{metrics}");
}

/// A link whose target is a domain this fleet serves would redirect back
/// into the fleet: a loop when it names itself, a chain that counts every
/// hop as a click otherwise (issue 23, item 5: a merchant's link to
/// `http://s.shop55.com:8080/loopzz1` under the code `loopzz1` gave 30
/// redirects). Refused on creation, in batches and on edits, unless the
/// app is allowed (`apps[].allow_short_domain_targets`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_on_the_fleets_own_domains_are_refused() {
    const CHAINER: &str = "test-key-chainer";
    let s = Setup::start_with(|o| {
        o.links_yaml =
            "  allowed_domains: [go.brand91.cn]\n  merchant_domains: {'55': [s.shop55.com]}\n"
                .into();
        o.apps_yaml.push_str(&format!(
            "  - {{name: chainer, key_sha256: {}, allow_short_domain_targets: true}}\n",
            support::sha256_hex(CHAINER)
        ));
    });
    let o = &s.origin;
    for url in [
        "http://s.shop55.com:8080/loopzz1",
        "https://SHO.RT./abc123",
        "https://go.brand91.cn/x?y=1",
        "http://sho.rt/",
    ] {
        let (st, v) = o.create(json!({"url": url, "code": "loopzz1"})).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (400, Some("url_is_short_link")),
            "{url}: {v}"
        );
        let (st, v, _) = o
            .call(
                reqwest::Method::POST,
                "/api/v1/links/batch",
                KEY,
                Some(json!({"links": [{"url": url}, {"url": format!("https://fine.example/{url}")}]})),
                &[],
            )
            .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["results"][0]["status"], 400, "{v}");
        assert_eq!(
            v["results"][0]["error"]["error"], "url_is_short_link",
            "{v}"
        );
        assert_eq!(v["results"][1]["status"], 201, "{v}");
    }
    assert_eq!(
        o.follow("sho.rt", "loopzz1").await.0,
        404,
        "nothing was created"
    );
    // Other hosts that merely contain a fleet domain are fine.
    for url in [
        "https://sho.rt.example/",
        "https://notsho.rt/",
        "https://example.com/sho.rt",
    ] {
        let (st, v) = o.create(json!({"url": url})).await;
        assert_eq!(st, 201, "{url}: {v}");
    }
    // An edit cannot point an existing link back into the fleet either.
    let code = o.create_ok(json!({"url": "https://before.example/"})).await;
    let (st, v) = o
        .patch(KEY, &code, json!({"url": "https://s.shop55.com/x"}))
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("url_is_short_link")),
        "{v}"
    );
    assert_eq!(
        o.follow("sho.rt", &code).await.1.as_deref(),
        Some("https://before.example/")
    );
    // An app allowed to chain may.
    let (st, v) = o
        .create_with_key(CHAINER, json!({"url": "https://go.brand91.cn/next"}))
        .await;
    assert_eq!(st, 201, "{v}");
}

/// A target is stored, shown and served as a browser reads it (WHATWG):
/// `https://evil.example\@good.example/` goes to evil.example, so that is
/// what the link and its preview say (issue 23, item 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_stored_as_browsers_read_them() {
    let s = Setup::start();
    let o = &s.origin;
    for (given, stored) in [
        (
            r"https://evil.example\@good.example/",
            "https://evil.example/@good.example/",
        ),
        ("HTTPS://Example.COM", "https://example.com/"),
        ("https://example.com/a/../b/./c", "https://example.com/b/c"),
        ("https://example.com:443/x", "https://example.com/x"),
        (
            "https://例え.jp/パス",
            "https://xn--r8jz45g.jp/%E3%83%91%E3%82%B9",
        ),
    ] {
        let (st, v) = o.create(json!({"url": given})).await;
        assert_eq!((st, v["url"].as_str()), (201, Some(stored)), "{given}: {v}");
        let code = v["code"].as_str().unwrap();
        assert_eq!(
            o.follow("sho.rt", code).await.1.as_deref(),
            Some(stored),
            "{given}"
        );
    }
    let (_, v) = o
        .create(json!({"url": r"https://evil.example\@good.example/"}))
        .await;
    let code = v["code"].as_str().unwrap();
    let (st, page) = o.get_text(&format!("/{code}+"), "sho.rt").await;
    assert_eq!(st, 200);
    assert!(
        page.contains("the site <strong>evil.example</strong>"),
        "{page}"
    );
    // A look-alike host shows its punycode next to it.
    let v = o
        .create(json!({"url": "https://xn--pple-43d.com/login"}))
        .await
        .1;
    let code = v["code"].as_str().unwrap();
    let (_, page) = o.get_text(&format!("/{code}+"), "sho.rt").await;
    assert!(
        page.contains(
            "<strong>\u{430}pple.com</strong> (<span class=\"ascii\">xn--pple-43d.com</span>)"
        ),
        "{page}"
    );
}
