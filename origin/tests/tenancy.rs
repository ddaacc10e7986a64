//! Tenant isolation: scopes, merchant binding, merchant domains, visibility
//! and deduplication, through a real origin.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use support::{sha256_hex, Setup, KEY, OTHER_KEY};

const ADMIN: &str = "key-admin";
const M55: &str = "key-merchant-55";
const M55B: &str = "key-merchant-55-b";
const M91: &str = "key-merchant-91";
const MULTI: &str = "key-merchants-55-91";
const READER: &str = "key-reader";

fn setup() -> Setup {
    Setup::start_with(|o| {
        o.links_yaml = "  allowed_domains: [static.shop.com]\n  \
                        merchant_domains: {'55': [s.shop55.com], 91: [go.brand91.cn]}\n"
            .into();
        for (name, key, extra) in [
            ("ops", ADMIN, "scopes: [admin]"),
            ("merchant55", M55, "merchants: [55]"),
            (
                "merchant55b",
                M55B,
                "merchants: [55], scopes: [links:create, links:read, links:manage, stats:read]",
            ),
            ("merchant91", M91, "merchants: [91]"),
            ("multi", MULTI, "merchants: [55, 91]"),
            ("reader", READER, "scopes: [links:read]"),
        ] {
            o.apps_yaml.push_str(&format!(
                "  - {{name: {name}, key_sha256: {}, {extra}}}\n",
                sha256_hex(key)
            ));
        }
    })
}

async fn create(s: &Setup, key: &str, body: Value) -> (u16, Value) {
    s.origin.create_with_key(key, body).await
}

async fn refused(s: &Setup, key: &str, body: Value, status: u16, kind: &str) {
    let (st, v) = create(s, key, body.clone()).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (status, Some(kind)),
        "{key} {body}: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merchant_keys_create_only_for_their_merchants_on_their_domains() {
    let s = setup();
    // The key's one merchant is the default kdt_id.
    let (st, v) = create(
        &s,
        M55,
        json!({"url": "https://a.example/", "domain": "s.shop55.com"}),
    )
    .await;
    assert_eq!(
        (st, &v["kdt_id"], &v["app"]),
        (201, &json!(55), &json!("merchant55")),
        "{v}"
    );
    // Another merchant's domain, with or without naming that merchant.
    refused(
        &s,
        M55,
        json!({"url": "https://a.example/", "domain": "go.brand91.cn"}),
        403,
        "domain_not_allowed",
    )
    .await;
    refused(
        &s,
        M55,
        json!({"url": "https://a.example/", "domain": "go.brand91.cn", "kdt_id": 91}),
        403,
        "forbidden_merchant",
    )
    .await;
    refused(
        &s,
        M55,
        json!({"url": "https://a.example/", "domain": "s.shop55.com", "kdt_id": 91}),
        403,
        "forbidden_merchant",
    )
    .await;
    // Not a merchant domain at all: the default and the static list.
    refused(
        &s,
        M55,
        json!({"url": "https://a.example/"}),
        403,
        "domain_not_allowed",
    )
    .await;
    refused(
        &s,
        M55,
        json!({"url": "https://a.example/", "domain": "static.shop.com"}),
        403,
        "domain_not_allowed",
    )
    .await;
    // A key bound to several merchants must say which.
    refused(
        &s,
        MULTI,
        json!({"url": "https://a.example/", "domain": "go.brand91.cn"}),
        403,
        "kdt_id_required",
    )
    .await;
    let (st, v) = create(
        &s,
        MULTI,
        json!({"url": "https://a.example/", "domain": "go.brand91.cn", "kdt_id": 91}),
    )
    .await;
    assert_eq!((st, &v["kdt_id"]), (201, &json!(91)), "{v}");
    // Scopes: a read-only key cannot create, and spends no token trying.
    refused(
        &s,
        READER,
        json!({"url": "https://a.example/"}),
        403,
        "insufficient_scope",
    )
    .await;
    // Nothing was written by the refusals: two links exist.
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE state <> 0")
            .trim(),
        "2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merchant_domain_needs_its_kdt_id_whoever_asks() {
    let s = setup();
    for key in [KEY, ADMIN] {
        refused(
            &s,
            key,
            json!({"url": "https://b.example/", "domain": "s.shop55.com"}),
            403,
            "kdt_id_required",
        )
        .await;
    }
    // Only a key bound to the merchant, or an admin key, may name it.
    refused(
        &s,
        ADMIN,
        json!({"url": "https://b.example/", "domain": "s.shop55.com", "kdt_id": 91}),
        403,
        "merchant_domain_mismatch",
    )
    .await;
    let (st, v) = create(
        &s,
        ADMIN,
        json!({"url": "https://b.example/", "domain": "s.shop55.com", "kdt_id": 55}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    // The message names the domain.
    let (_, v) = create(
        &s,
        KEY,
        json!({"url": "https://b.example/", "domain": "go.brand91.cn"}),
    )
    .await;
    assert!(
        v["message"].as_str().unwrap().contains("go.brand91.cn"),
        "{v}"
    );
}

/// An API key bound to no merchant (and not admin) cannot create on a
/// merchant's domain, whatever merchant it names (issue 23, item 7: the
/// production example's `demo` key created links on s.shop55.com by
/// sending `kdt_id: 55`). On the shared domains it may still name the
/// merchant a link is for (internal apps create links for merchants).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_key_cannot_create_on_a_merchant_domain() {
    let s = setup();
    for (domain, kdt) in [
        ("s.shop55.com", 55),
        ("go.brand91.cn", 91),
        ("s.shop55.com", 91),
    ] {
        refused(
            &s,
            KEY,
            json!({"url": "https://b.example/", "domain": domain, "kdt_id": kdt}),
            403,
            "forbidden_merchant",
        )
        .await;
    }
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE state = 1")
            .trim(),
        "0",
        "nothing was created"
    );
    // On the shared domains it still creates, for a merchant or not.
    for (domain, kdt) in [("sho.rt", json!(55)), ("static.shop.com", Value::Null)] {
        let (st, v) = create(
            &s,
            KEY,
            json!({"url": "https://b.example/", "domain": domain, "kdt_id": kdt}),
        )
        .await;
        assert_eq!((st, &v["kdt_id"]), (201, &kdt), "{v}");
    }
    // The bound key of that merchant does what the unbound one may not.
    let (st, v) = create(
        &s,
        M55,
        json!({"url": "https://b.example/", "domain": "s.shop55.com", "kdt_id": 55}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
}

/// A refused custom code is one answer whoever holds the code (a link of
/// another tenant on a shared domain, a pre-generated code, this tenant's
/// own link), and an app gets few refusals a minute: probing codes through
/// creation is slow and metered (issue 23, item 4). Another merchant's
/// custom code on its own domain is no refusal at all (protocol 3.6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_custom_codes_look_alike_and_are_metered() {
    let s = Setup::start_with(|o| {
        o.links_yaml =
            "  merchant_domains: {'55': [s.shop55.com]}\n  custom_code_refusals_per_min: 3\n"
                .into();
        o.apps_yaml.push_str(&format!(
            "  - {{name: merchant55, key_sha256: {}, merchants: [55]}}\n",
            sha256_hex(M55)
        ));
    });
    let o = &s.origin;
    // Merchant 55 owns `sale` on its domain; the demo app owns `mine`.
    let (st, v) = create(
        &s,
        M55,
        json!({"url": "https://shop55.example/", "domain": "s.shop55.com", "code": "sale"}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        o.create_ok(json!({"url": "https://mine.example/", "code": "mine"}))
            .await,
        "mine"
    );
    let pregenerated = s
        .sql("SELECT code FROM code_pool WHERE id = 4000")
        .trim()
        .to_owned();
    let pregenerated_issued = o.create_ok(json!({"url": "https://issued.example/"})).await;
    // Merchant 55's `sale` is its domain's: on the shared domain the same
    // code is free (protocol 3.6), so creation says nothing about it.
    assert_eq!(
        o.create_ok(json!({"url": "https://probe.example/", "code": "sale"}))
            .await,
        "sale"
    );
    let mut answers = Vec::new();
    for code in ["mine", pregenerated_issued.as_str(), "sale"] {
        let (st, v) = o
            .create(json!({"url": "https://probe.example/", "code": code}))
            .await;
        let msg = v["message"].as_str().unwrap_or("").replace(code, "<code>");
        answers.push((st, v["error"].clone(), msg));
    }
    assert!(answers.iter().all(|a| a == &answers[0]), "{answers:?}");
    assert_eq!(answers[0].0, 409, "{answers:?}");
    assert_eq!(answers[0].1, "code_unavailable", "{answers:?}");
    // The budget (3 a minute) is spent: even a free code waits now.
    let (st, v) = o
        .create(json!({"url": "https://probe.example/", "code": pregenerated}))
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (429, Some("rate_limited")),
        "{v}"
    );
    // Another app's budget is its own: merchant 55 still creates.
    let (st, v) = create(
        &s,
        M55,
        json!({"url": "https://shop55.example/2", "domain": "s.shop55.com", "code": "promo"}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    // A free code gives its attempt back: only refusals spend the budget.
    for i in 0..5 {
        let code = format!("free-{i}");
        let (st, v) = create(
            &s,
            M55,
            json!({"url": "https://shop55.example/3", "domain": "s.shop55.com", "code": code}),
        )
        .await;
        assert_eq!(st, 201, "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_link_is_exactly_an_unknown_code() {
    let s = setup();
    let o = &s.origin;
    let (_, v) = create(
        &s,
        M55,
        json!({"url": "https://m55.example/", "domain": "s.shop55.com"}),
    )
    .await;
    let m55_link = v["code"].as_str().unwrap().to_owned();
    let demo_link = o.create_ok(json!({"url": "https://demo.example/"})).await;
    let (unknown_status, unknown_body) = o.read_raw(KEY, "ZZZZZZ").await;
    assert_eq!(unknown_status, 404);
    let state = |code: &str| {
        s.sql(&format!(
            "SELECT state, version, long_url FROM short_code WHERE code = '{code}'; \
             SELECT COUNT(*) FROM link_audit"
        ))
    };
    let (before_m55, before_demo) = (state(&m55_link), state(&demo_link));
    // Other merchants, an unbound app, an app's own key for a merchant's link...
    for (key, code) in [
        (M91, m55_link.as_str()),
        (KEY, m55_link.as_str()),
        (OTHER_KEY, demo_link.as_str()),
        (M55, demo_link.as_str()),
        (M91, demo_link.as_str()),
    ] {
        let calls = [
            (Method::GET, format!("/api/v1/links/{code}"), None),
            (Method::GET, format!("/api/v1/links/{code}/history"), None),
            (
                Method::PATCH,
                format!("/api/v1/links/{code}"),
                Some(json!({"url": "https://evil.example/"})),
            ),
            (
                Method::PATCH,
                format!("/api/v1/links/{code}"),
                Some(json!({"state": "disabled"})),
            ),
            (Method::DELETE, format!("/api/v1/links/{code}"), None),
        ];
        for (method, path, body) in calls {
            let mut req = o
                .http
                .request(method.clone(), o.url(&path))
                .bearer_auth(key);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            assert_eq!(
                (status, text.as_str()),
                (unknown_status, unknown_body.as_str()),
                "{key} {method} {path}"
            );
        }
    }
    assert_eq!(
        (state(&m55_link), state(&demo_link)),
        (before_m55, before_demo)
    );
    assert_eq!(o.follow("s.shop55.com", &m55_link).await.0, 302);
    assert_eq!(o.follow("sho.rt", &demo_link).await.0, 302);
    // The owners, another key of the same merchant, and admin see them.
    for (key, code) in [
        (M55, &m55_link),
        (M55B, &m55_link),
        (MULTI, &m55_link),
        (ADMIN, &m55_link),
        (KEY, &demo_link),
        (ADMIN, &demo_link),
    ] {
        let (st, v, _) = o
            .call(
                Method::GET,
                &format!("/api/v1/links/{code}"),
                key,
                None,
                &[],
            )
            .await;
        assert_eq!(
            (st, v["code"].as_str()),
            (200, Some(code.as_str())),
            "{key}"
        );
    }
    // A read-only key may read what it owns but not change anything.
    let (st, v) = o
        .patch(READER, &demo_link, json!({"state": "disabled"}))
        .await;
    assert_eq!((st, v["error"].as_str()), (403, Some("insufficient_scope")));
    // Managing works for the same merchant's other key and for admin.
    let (st, v) = o.patch(M55B, &m55_link, json!({"state": "disabled"})).await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(2)), "{v}");
    let (st, v) = o.delete(ADMIN, &demo_link).await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(2)), "{v}");
    // The history says who did it.
    let (_, h, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/links/{m55_link}/history"),
            M55,
            None,
            &[],
        )
        .await;
    assert_eq!(h["history"][0]["actor"], "merchant55b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplication_never_hands_out_another_owners_link() {
    let s = setup();
    let url = "https://same.example/p";
    let (st, a) = create(&s, KEY, json!({"url": url})).await;
    assert_eq!(st, 201);
    // The same app again: the same link.
    let (st, again) = create(&s, KEY, json!({"url": url})).await;
    assert_eq!(
        (st, &again["code"], &again["deduplicated"]),
        (200, &a["code"], &json!(true))
    );
    // Another app, another merchant, another lifetime policy: never that code.
    let (st, b) = create(&s, OTHER_KEY, json!({"url": url})).await;
    assert_eq!((st, b["deduplicated"].as_bool()), (201, Some(false)));
    assert_ne!(a["code"], b["code"]);
    let (st, c) = create(&s, KEY, json!({"url": url, "kdt_id": 7})).await;
    assert_eq!(st, 201);
    assert_ne!(a["code"], c["code"]);
    let (st, d) = create(&s, KEY, json!({"url": url, "ttl_days": 30})).await;
    assert_eq!(st, 201);
    assert_ne!(a["code"], d["code"]);
    // Two keys of the same merchant are two apps: each gets its own link.
    let body = json!({"url": url, "domain": "s.shop55.com"});
    let (st, m1) = create(&s, M55, body.clone()).await;
    let (st2, m2) = create(&s, M55B, body.clone()).await;
    assert_eq!((st, st2), (201, 201));
    assert_ne!(m1["code"], m2["code"]);
    assert_eq!(create(&s, M55, body).await.1["code"], m1["code"]);
    // A dedup entry pointing at someone else's link (a collision, a stale
    // or tampered entry) is not trusted: MySQL says whose the link is.
    let key =
        shorturl_common::keys::dedup_key("sho.rt", "other", None, 730, "https://forged.example/");
    let mut r = s.redis_conn().await;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(a["code"].as_str().unwrap())
        .query_async(&mut r)
        .await
        .unwrap();
    let (st, e) = create(&s, OTHER_KEY, json!({"url": "https://forged.example/"})).await;
    assert_eq!(st, 201, "{e}");
    assert_ne!(e["code"], a["code"]);
}
