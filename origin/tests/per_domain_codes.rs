//! Custom codes unique per domain (protocol 3.6, issue 25): the same custom
//! code is two merchants' links on two domains, each managed, counted and
//! resolved on its own; codes of the pre-generated grammar stay one link in
//! the fleet; a store of protocol 3.5 is migrated.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;
use support::clicks::{hours_batch, range, totals, xadd, DAY};
use support::{eventually, sha256_hex, Setup, ADMIN_KEY};

const ADMIN: &str = "key-admin";
const M55: &str = "key-merchant-55";
const M91: &str = "key-merchant-91";

const S55: &str = "s.shop55.com";
const B91: &str = "go.brand91.cn";

fn setup() -> Setup {
    Setup::start_with(|o| {
        o.links_yaml = "  merchant_domains: {'55': [s.shop55.com], 91: [go.brand91.cn]}\n".into();
        o.extra_yaml
            .push_str("clicks: {claim_idle_ms: 500, block_ms: 200}\n");
        for (name, key, extra) in [
            ("ops", ADMIN, "scopes: [admin]"),
            (
                "merchant55",
                M55,
                "merchants: [55], scopes: [links:create, links:read, links:manage, stats:read]",
            ),
            (
                "merchant91",
                M91,
                "merchants: [91], scopes: [links:create, links:read, links:manage, stats:read]",
            ),
        ] {
            o.apps_yaml.push_str(&format!(
                "  - {{name: {name}, key_sha256: {}, {extra}}}\n",
                sha256_hex(key)
            ));
        }
    })
}

async fn call(s: &Setup, m: Method, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    let (st, v, _) = s.origin.call(m, path, key, body, &[]).await;
    (st, v)
}

async fn get(s: &Setup, path: &str, key: &str) -> (u16, Value) {
    call(s, Method::GET, path, key, None).await
}

async fn create(s: &Setup, key: &str, domain: &str, code: &str, url: &str) -> (u16, Value) {
    s.origin
        .create_with_key(key, json!({"url": url, "domain": domain, "code": code}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_custom_code_is_two_links_on_two_domains() {
    let s = setup();
    let o = &s.origin;
    let (st, v) = create(&s, M55, S55, "sale", "https://shop55.example/sale").await;
    assert_eq!(st, 201, "{v}");
    // Merchant 91 learns nothing about merchant 55's `sale`: it is free
    // on its own domain.
    let (st, v) = create(&s, M91, B91, "sale", "https://brand91.example/sale").await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        (v["code"].as_str(), v["domain"].as_str()),
        (Some("sale"), Some(B91))
    );
    // On one domain a code is still one link.
    let (st, v) = create(&s, M55, S55, "sale", "https://shop55.example/other").await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("code_unavailable")),
        "{v}"
    );
    assert_eq!(
        count_rows(&s, "SELECT COUNT(*) FROM short_code WHERE code = 'sale'"),
        2
    );

    // Each resolves on its own domain to its own target.
    assert_eq!(
        o.follow(S55, "sale").await,
        (302, Some("https://shop55.example/sale".into()))
    );
    assert_eq!(
        o.follow(B91, "sale").await,
        (302, Some("https://brand91.example/sale".into()))
    );
    assert_eq!(o.follow("sho.rt", "sale").await.0, 404);
    // The edges' record endpoint answers per domain.
    for (domain, url) in [
        (S55, "https://shop55.example/sale"),
        (B91, "https://brand91.example/sale"),
    ] {
        let (st, body) = o
            .get_text(&format!("/internal/v1/records/sale?domain={domain}"), "x")
            .await;
        assert_eq!(st, 200);
        assert!(body.contains(url) && body.contains(domain), "{body}");
    }

    // Each merchant sees its own link by code alone.
    for (key, url) in [
        (M55, "https://shop55.example/sale"),
        (M91, "https://brand91.example/sale"),
    ] {
        let (st, v) = get(&s, "/api/v1/links/sale", key).await;
        assert_eq!((st, v["url"].as_str()), (200, Some(url)), "{v}");
    }
    // A merchant naming the other's domain gets the answer of an unknown link.
    let (st, v) = get(&s, &format!("/api/v1/links/sale?domain={B91}"), M55).await;
    assert_eq!((st, v["error"].as_str()), (404, Some("not_found")), "{v}");
    // An admin sees both: the code alone is ambiguous, the domain decides.
    let (st, v) = get(&s, "/api/v1/links/sale", ADMIN).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("domain_required")),
        "{v}"
    );
    let (st, v) = get(&s, &format!("/api/v1/links/sale?domain={B91}"), ADMIN).await;
    assert_eq!(
        (st, v["url"].as_str()),
        (200, Some("https://brand91.example/sale"))
    );
    let (st, v) = get(&s, "/api/v1/links/sale?domain=Not%20A%20Host", ADMIN).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_domain")),
        "{v}"
    );

    // An edit of one leaves the other alone, and so does its history.
    let (st, v) = call(
        &s,
        Method::PATCH,
        &format!("/api/v1/links/sale?domain={S55}"),
        ADMIN,
        Some(json!({"url": "https://shop55.example/sale2"})),
    )
    .await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(2)), "{v}");
    assert_eq!(
        o.follow(S55, "sale").await,
        (302, Some("https://shop55.example/sale2".into()))
    );
    assert_eq!(
        o.follow(B91, "sale").await,
        (302, Some("https://brand91.example/sale".into()))
    );
    let history = |key: &'static str| {
        let s = &s;
        async move {
            let (st, v) = get(s, "/api/v1/links/sale/history", key).await;
            assert_eq!(st, 200, "{v}");
            v["history"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["action"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(history(M55).await, ["edit", "create"]);
    assert_eq!(history(M91).await, ["create"]);

    // Deleting one keeps the other; the deleted one stays taken on its domain.
    let (st, v) = call(&s, Method::DELETE, "/api/v1/links/sale", M91, None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(o.follow(B91, "sale").await.0, 404);
    assert_eq!(
        o.follow(S55, "sale").await,
        (302, Some("https://shop55.example/sale2".into()))
    );
    let (st, _) = create(&s, M91, B91, "sale", "https://brand91.example/again").await;
    assert_eq!(st, 409);
    // A deleted link is still its domain's (read, never resurrected).
    let (st, v) = get(&s, &format!("/api/v1/links/sale?domain={B91}"), ADMIN).await;
    assert_eq!((st, v["state"].as_str()), (200, Some("deleted")), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_of_the_pregenerated_grammar_stay_unique_in_the_fleet() {
    let s = setup();
    let (st, v) = create(&s, M55, S55, "Promo1", "https://shop55.example/p").await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = create(&s, M91, B91, "Promo1", "https://brand91.example/p").await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("code_unavailable")),
        "{v}"
    );
    // `_` or `-` make a six-character code a per-domain one.
    for code in ["Pro_m1", "Pro-m1"] {
        for (key, domain) in [(M55, S55), (M91, B91)] {
            let (st, v) = create(&s, key, domain, code, "https://x.example/").await;
            assert_eq!(st, 201, "{code} on {domain}: {v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_count_per_link_of_a_shared_code() {
    let s = setup();
    for (key, domain) in [(M55, S55), (M91, B91)] {
        let (st, v) = create(&s, key, domain, "sale", "https://x.example/").await;
        assert_eq!(st, 201, "{v}");
    }
    // Pinned to the test day (the links were created now): from creation.
    s.sql(&format!(
        "UPDATE short_code SET created_at = {} WHERE code = 'sale'",
        DAY - 86_400
    ));
    // An edge of protocol 3.6 counts each link under its key (version 3).
    let b = hours_batch(
        "edge-a:n1:1",
        &[
            (&format!("{S55}/sale"), DAY, 5, 1),
            (&format!("{B91}/sale"), DAY, 2, 0),
        ],
    );
    assert_eq!(b.version(), "3");
    xadd(&s, &b).await;
    let stats = |key: &'static str| {
        let s = &s;
        async move {
            let (st, v) = get(s, &format!("/api/v1/links/sale/stats?{}", range()), key).await;
            assert_eq!(st, 200, "{v}");
            totals(&v)
        }
    };
    eventually("both links counted", Duration::from_secs(20), || async {
        stats(M55).await == (5, 1) && stats(M91).await == (2, 0)
    })
    .await;
    // A tenant's view names each link with its domain.
    for (kdt, domain, human, bot) in [(55, S55, 5, 1), (91, B91, 2, 0)] {
        let (st, v) = get(
            &s,
            &format!("/api/v1/stats?kdt_id={kdt}&{}", range()),
            ADMIN,
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(
            v["links"],
            json!([{"code": "sale", "domain": domain, "human": human, "bot": bot}]),
            "{v}"
        );
    }
    // A version 1 batch (an edge of 3.5) names the code alone: with two
    // links of that code it cannot say which, and neither gains a click.
    let old = hours_batch("edge-old:n1:1", &[("sale", DAY, 7, 0)]);
    assert_eq!(old.version(), "1");
    xadd(&s, &old).await;
    eventually("the old batch applied", Duration::from_secs(20), || async {
        count_rows(
            &s,
            "SELECT COUNT(*) FROM click_batches WHERE id = 'edge-old:n1:1'",
        ) == 1
    })
    .await;
    assert_eq!((stats(M55).await, stats(M91).await), ((5, 1), (2, 0)));
    assert_eq!(
        support::metric_value(&s.origin, "shorturl_clicks_unattributed_total").await,
        Some(1.0),
        "counted for ops"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_batch_names_a_custom_code_held_on_one_domain() {
    let s = setup();
    let (st, v) = create(&s, M55, S55, "solo-code", "https://x.example/").await;
    assert_eq!(st, 201, "{v}");
    s.sql(&format!(
        "UPDATE short_code SET created_at = {} WHERE code = 'solo-code'",
        DAY - 86_400
    ));
    // An edge of protocol 3.5 sends the bare code: its only link counts it.
    xadd(
        &s,
        &hours_batch("edge-old:n2:1", &[("solo-code", DAY, 3, 2)]),
    )
    .await;
    eventually(
        "counted under the link",
        Duration::from_secs(20),
        || async {
            let (st, v) = get(
                &s,
                &format!("/api/v1/links/solo-code/stats?{}", range()),
                M55,
            )
            .await;
            st == 200 && totals(&v) == (3, 2)
        },
    )
    .await;
    assert_eq!(
        count_rows(
            &s,
            &format!("SELECT COUNT(*) FROM click_hour WHERE code = '{S55}/solo-code'")
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_protocol_3_5_is_migrated() {
    // A database at migration 13 holding a custom code and a pre-generated
    // one, with rollups and history under their bare codes.
    let m = support::shared_mariadb();
    let db = support::fresh_db("mig");
    let url = m.create_database(&db);
    let mut sql = format!("USE `{db}`;\n");
    sql.push_str(
        "CREATE TABLE schema_migrations (version INT UNSIGNED NOT NULL PRIMARY KEY, \
         name VARCHAR(255) NOT NULL, applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);\n",
    );
    for (version, name, text) in shorturl_origin::schema::MIGRATIONS {
        if *version > 13 {
            break;
        }
        sql.push_str(text);
        sql.push_str(&format!(
            "\nINSERT INTO schema_migrations (version, name) VALUES ({version}, '{name}');\n"
        ));
    }
    sql.push_str(&format!(
        "INSERT INTO short_code (id, code, state, long_url, domain, app, kdt_id, created_at, \
         expires_at, version) VALUES \
         (1099512627776, 'sale', 1, 'https://old.example/sale', '{S55}', 'merchant55', 55, {c}, {e}, 1), \
         (1000000, 'aB3xYz', 1, 'https://old.example/p', '{S55}', 'merchant55', 55, {c}, {e}, 1);\n\
         INSERT INTO click_hour VALUES ('sale', {DAY}, 4, 1), ('aB3xYz', {DAY}, 6, 0);\n\
         INSERT INTO click_day_device VALUES ('sale', {DAY}, 'desktop', 4), ('sale', {DAY}, 'bot', 1), \
         ('aB3xYz', {DAY}, 'desktop', 6);\n\
         INSERT INTO click_day_referrer VALUES ('sale', {DAY}, '-', 5), ('aB3xYz', {DAY}, '-', 6);\n\
         INSERT INTO link_audit (code, at_ms, actor, action, version, after_json) VALUES \
         ('sale', 1000, 'merchant55', 'create', 1, NULL);\n",
        c = DAY - 86_400,
        e = DAY + 30 * 86_400
    ));
    m.sql(&sql);
    let s = Setup::start_on(url, db, |o| {
        o.links_yaml = "  merchant_domains: {'55': [s.shop55.com], 91: [go.brand91.cn]}\n".into();
        o.apps_yaml.push_str(&format!(
            "  - {{name: merchant55, key_sha256: {}, merchants: [55], scopes: [links:create, links:read, stats:read]}}\n",
            sha256_hex(M55)
        ));
    });
    assert_eq!(
        count_rows(&s, "SELECT MAX(version) FROM schema_migrations"),
        u64::from(shorturl_origin::schema::MIGRATIONS.last().unwrap().0)
    );
    // The custom code's rows moved under its key; the fleet code's stayed.
    assert_eq!(
        s.sql("SELECT code FROM click_hour ORDER BY code")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["aB3xYz", "s.shop55.com/sale"]
    );
    for (code, want) in [("sale", (4, 1)), ("aB3xYz", (6, 0))] {
        let (st, v) = get(&s, &format!("/api/v1/links/{code}/stats?{}", range()), M55).await;
        assert_eq!((st, totals(&v)), (200, want), "{code}: {v}");
    }
    let (st, v) = get(&s, "/api/v1/links/sale/history", M55).await;
    assert_eq!(
        (st, v["history"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{v}"
    );
    assert_eq!(
        s.origin.follow(S55, "sale").await,
        (302, Some("https://old.example/sale".into()))
    );
    // Now the code is free on another domain.
    let (st, v) = s
        .origin
        .create_with_key(
            ADMIN_KEY,
            json!({"url": "https://n.example/", "domain": "sho.rt", "code": "sale"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
}

fn count_rows(s: &Setup, sql: &str) -> u64 {
    support::count(s, sql)
}
