//! `POST /api/v1/links/batch`: many creations in one call, each answered on
//! its own, through the group commit, with the creation rules and the
//! per-item rate limit.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use std::collections::HashSet;
use support::{sha256_hex, Setup, KEY};

const M55: &str = "key-merchant-55";
const READER: &str = "key-reader";
const SLOW: &str = "key-slow";

fn setup_with(links_extra: &str) -> Setup {
    let links_extra = links_extra.to_owned();
    Setup::start_with(move |o| {
        o.links_yaml = format!(
            "  allowed_domains: [static.shop.com]\n  merchant_domains: {{'55': [s.shop55.com]}}\n{links_extra}"
        );
        for (name, key, extra) in [
            ("merchant55", M55, "merchants: [55]"),
            ("reader", READER, "scopes: [links:read]"),
            ("slow", SLOW, "rate_per_sec: 0.001, burst: 3"),
        ] {
            o.apps_yaml.push_str(&format!(
                "  - {{name: {name}, key_sha256: {}, {extra}}}\n",
                sha256_hex(key)
            ));
        }
    })
}

async fn batch(s: &Setup, key: &str, body: Value) -> (u16, Value, reqwest::header::HeaderMap) {
    s.origin
        .call(Method::POST, "/api/v1/links/batch", key, Some(body), &[])
        .await
}

/// `(status, code or error kind)` of each result.
fn outcomes(v: &Value) -> Vec<(u64, String)> {
    v["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {v}"))
        .iter()
        .map(|r| {
            let what = r["link"]["code"]
                .as_str()
                .or(r["error"]["error"].as_str())
                .unwrap()
                .to_owned();
            (r["status"].as_u64().unwrap(), what)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_item_is_answered_in_order_as_its_own_creation_would_be() {
    let s = setup_with("");
    let o = &s.origin;
    let earlier = o
        .create_ok(json!({"url": "https://b.example/earlier"}))
        .await;
    let taken = o
        .create_ok(json!({"url": "https://b.example/custom", "code": "taken-1"}))
        .await;
    let (st, v, _) = batch(
        &s,
        KEY,
        json!({"links": [
            {"url": "https://b.example/1"},
            {"url": "ftp://b.example/bad"},
            {"url": "https://b.example/earlier"},
            {"url": "https://b.example/2", "code": taken},
            {"url": "https://b.example/3", "code": "fresh-1", "ttl_days": 7},
            {"url": "https://b.example/1"},
            {"url": "https://b.example/4", "domain": "s.shop55.com"},
            // An unbound key may not name the merchant of its domain.
            {"url": "https://b.example/5", "domain": "s.shop55.com", "kdt_id": 55},
            {"url": "https://b.example/6", "evil": true},
            "not an object",
            {"url": "https://b.example/7", "domain": "unknown.example"},
            // Other tags, or options: another creation, not a repeat.
            {"url": "https://b.example/1", "tags": ["x"]},
            {"url": "https://b.example/1", "forward_query": true},
        ]}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let got = outcomes(&v);
    let first = got[0].1.clone();
    assert_eq!(
        got,
        vec![
            (201, first.clone()),
            (400, "invalid_url".into()),
            // Deduplicated against a link created before the batch...
            (200, earlier.clone()),
            (409, "code_unavailable".into()),
            (201, "fresh-1".into()),
            // ...and against an earlier item of the same batch.
            (200, first.clone()),
            (403, "kdt_id_required".into()),
            (403, "forbidden_merchant".into()),
            (400, "invalid_field".into()),
            (400, "invalid_json".into()),
            (403, "domain_not_allowed".into()),
            (201, got[11].1.clone()),
            (201, got[12].1.clone()),
        ]
    );
    let codes = [&first, &got[11].1, &got[12].1];
    assert!(codes[0] != codes[1] && codes[1] != codes[2] && codes[0] != codes[2]);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results[0]["link"]["deduplicated"], false);
    assert_eq!(results[5]["link"]["deduplicated"], true);
    assert_eq!(results[5]["link"]["url"], "https://b.example/1");
    assert_eq!(results[4]["link"]["app"], "demo");
    // Exactly the four new links were written, each with its audit row,
    // and each redirects (its record reached Redis or resolves from MySQL).
    let count = s.sql(
        "SELECT COUNT(*) FROM short_code WHERE state <> 0; SELECT COUNT(*) FROM link_audit WHERE action = 'create'",
    );
    assert_eq!(count.split_whitespace().collect::<Vec<_>>(), ["6", "6"]);
    assert_eq!(
        o.follow("sho.rt", &first).await,
        (302, Some("https://b.example/1".into()))
    );
    assert_eq!(o.follow("sho.rt", "fresh-1").await.0, 302);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_items_in_one_call() {
    let s = setup_with("");
    let items: Vec<Value> = (0..1000)
        .map(|i| json!({"url": format!("https://bulk.example/item/{i}"), "app": "import"}))
        .collect();
    let (st, v, _) = batch(&s, KEY, json!({ "links": items })).await;
    assert_eq!(st, 200);
    let got = outcomes(&v);
    assert_eq!(got.len(), 1000);
    assert!(got.iter().all(|(st, _)| *st == 201), "{got:?}");
    let codes: HashSet<&String> = got.iter().map(|(_, c)| c).collect();
    assert_eq!(codes.len(), 1000);
    // In request order.
    for (i, r) in v["results"].as_array().unwrap().iter().enumerate() {
        assert_eq!(r["link"]["url"], format!("https://bulk.example/item/{i}"));
    }
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE app = 'demo' AND client_app = 'import'")
            .trim(),
        "1000"
    );
    assert_eq!(s.sql("SELECT COUNT(*) FROM link_audit").trim(), "1000");
    // One more is too many; none is too few; neither writes anything.
    let mut items: Vec<Value> = (0..1001)
        .map(|i| json!({"url": format!("https://x.example/{i}")}))
        .collect();
    let (st, v, _) = batch(&s, KEY, json!({ "links": items.clone() })).await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_batch")));
    items.clear();
    for body in [
        json!({ "links": items }),
        json!({}),
        json!({"links": {}}),
        json!([]),
    ] {
        let (st, v, _) = batch(&s, KEY, body.clone()).await;
        assert_eq!(st, 400, "{body}: {v}");
    }
    let (st, v, _) = batch(
        &s,
        KEY,
        json!({"links": [{"url": "https://x.example/"}], "more": 1}),
    )
    .await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_field")));
    assert_eq!(s.sql("SELECT COUNT(*) FROM link_audit").trim(), "1000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_item_costs_a_token_and_scopes_and_size_apply() {
    let s = setup_with("  max_batch_body_bytes: 4000\n");
    let items: Vec<Value> = (0..5)
        .map(|i| json!({"url": format!("https://r.example/{i}")}))
        .collect();
    // Burst 3: the first three items are created, the other two refused.
    let (st, v, _) = batch(&s, SLOW, json!({ "links": items })).await;
    assert_eq!(st, 200, "{v}");
    let statuses: Vec<u64> = outcomes(&v).iter().map(|(st, _)| *st).collect();
    assert_eq!(statuses, [201, 201, 201, 429, 429]);
    assert_eq!(v["results"][3]["error"]["error"], "rate_limited");
    // No token left: the whole call is refused.
    let (st, v, h) = batch(&s, SLOW, json!({"links": [{"url": "https://r.example/x"}]})).await;
    assert_eq!((st, v["error"].as_str()), (429, Some("rate_limited")));
    assert!(h["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE app = 'slow'")
            .trim(),
        "3"
    );

    let (st, v, _) = batch(
        &s,
        READER,
        json!({"links": [{"url": "https://r.example/"}]}),
    )
    .await;
    assert_eq!((st, v["error"].as_str()), (403, Some("insufficient_scope")));
    let (st, v, _) = batch(
        &s,
        "wrong",
        json!({"links": [{"url": "https://r.example/"}]}),
    )
    .await;
    assert_eq!((st, v["error"].as_str()), (401, Some("unauthorized")));
    // A merchant key: the tenancy rules per item.
    let (st, v, _) = batch(
        &s,
        M55,
        json!({"links": [{"url": "https://r.example/m", "domain": "s.shop55.com"}, {"url": "https://r.example/n"}]}),
    )
    .await;
    assert_eq!(st, 200);
    let got = outcomes(&v);
    assert_eq!(
        (got[0].0, got[1].clone()),
        (201, (403, "domain_not_allowed".to_owned()))
    );
    // The batch body limit (here 4000 bytes) is its own.
    let big: Vec<Value> = (0..60)
        .map(|i| json!({"url": format!("https://r.example/{i:080}")}))
        .collect();
    let (st, v, _) = batch(&s, KEY, json!({ "links": big })).await;
    assert_eq!((st, v["error"].as_str()), (413, Some("body_too_large")));
    // The path is batch creation only (`batch` is a reserved code).
    let (st, _, h) = s
        .origin
        .call(Method::GET, "/api/v1/links/batch", KEY, None, &[])
        .await;
    assert_eq!((st, h["allow"].to_str().unwrap()), (405, "POST"));
    let (st, v) = s
        .origin
        .create(json!({"url": "https://r.example/", "code": "batch"}))
        .await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_code")));
}
