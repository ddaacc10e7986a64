//! The API contract: `docs/openapi.yaml` is served at `/api/v1/openapi.json`,
//! and the checker every API test goes through (`support::contract`)
//! accepts what the contract says and refuses what it does not.

use crate::support;

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use support::contract::contract;
use support::Setup;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_is_served_as_json_without_a_key() {
    let s = Setup::start_with(|o| o.pregen = 100);
    let o = &s.origin;
    let before = contract().checked.load(Ordering::Relaxed);
    let r = o
        .http
        .get(o.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let served: Value = r.json().await.unwrap();
    let file: Value = serde_yaml::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.yaml"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(served, file, "the binary serves docs/openapi.yaml as it is");
    assert_eq!(served["openapi"], "3.1.0");
    let r = o
        .http
        .head(o.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = o
        .http
        .post(o.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.headers()["allow"].to_str().unwrap()),
        (405, "GET, HEAD")
    );
    // The support client checked those answers.
    o.create_ok(json!({"url": "https://c.example/"})).await;
    assert!(contract().checked.load(Ordering::Relaxed) >= before + 4);
}

fn json_headers(extra: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    for (k, v) in extra {
        h.insert(
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn link() -> Value {
    json!({
        "code": "abcdef", "short_url": "http://sho.rt/abcdef", "url": "https://x.example/",
        "domain": "sho.rt", "state": "active", "version": 1, "app": "demo",
        "client_app": null, "client_version": null, "kdt_id": 55,
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "expires_at": "2028-01-01T00:00:00Z", "expires_at_unix": 1830297600u64,
        "reaped_at": null, "forward_query": false, "expired_url": null,
        "rules": [{"when": {"device": ["ios"]}, "url": "https://x.example/ios"},
                  {"when": {}, "split": [{"url": "https://x.example/a", "weight": 1},
                                         {"url": "https://x.example/b", "weight": 3}]}],
        "utm_source": "mail", "utm_medium": null, "utm_campaign": null,
        "utm_term": null, "utm_content": null,
        "og_title": "Sale", "og_description": null, "og_image": null,
        "inapp_guide": null, "inapp_guided": false, "password_protected": false,
        "screened": null, "tags": ["spring"]
    })
}

#[test]
fn the_checker_refuses_what_the_contract_does_not_say() {
    let c = contract();
    let check = |m: Method, path: &str, st: u16, h: &HeaderMap, body: &Value| {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(body).unwrap()
        };
        c.check(&m, path, StatusCode::from_u16(st).unwrap(), h, &bytes)
    };
    let etag = json_headers(&[("etag", "\"1\"")]);
    let read = "/api/v1/links/abcdef";
    assert_eq!(check(Method::GET, read, 200, &etag, &link()), Ok(()));
    assert_eq!(check(Method::HEAD, read, 200, &etag, &Value::Null), Ok(()));
    let mut missing = link();
    missing.as_object_mut().unwrap().remove("version");
    let mut extra = link();
    extra["secret"] = json!(1);
    let mut both = link();
    both["rules"][0]["split"] = json!([{"url": "https://x.example/a", "weight": 1}, {"url": "https://x.example/b", "weight": 1}]);
    assert!(check(Method::GET, read, 200, &etag, &both).is_err());
    let mut bad_time = link();
    bad_time["created_at"] = json!("yesterday");
    let mut bad_state = link();
    bad_state["state"] = json!("gone");
    for (what, body) in [
        ("missing", missing),
        ("extra", extra),
        ("format", bad_time),
        ("enum", bad_state),
    ] {
        assert!(
            check(Method::GET, read, 200, &etag, &body).is_err(),
            "{what}"
        );
    }
    // Headers: a required one missing, one not matching its schema.
    assert!(check(Method::GET, read, 200, &json_headers(&[]), &link()).is_err());
    assert!(check(
        Method::GET,
        read,
        200,
        &json_headers(&[("etag", "W/1")]),
        &link()
    )
    .is_err());
    let err = json!({"error": "rate_limited", "message": "slow down"});
    assert!(check(Method::POST, "/api/v1/links", 429, &json_headers(&[]), &err).is_err());
    assert_eq!(
        check(
            Method::POST,
            "/api/v1/links",
            429,
            &json_headers(&[("retry-after", "3")]),
            &err
        ),
        Ok(())
    );
    // An undocumented status, an error kind the response does not list,
    // a body that is not JSON.
    let nf = json!({"error": "not_found", "message": "no such short link"});
    assert!(check(Method::GET, read, 418, &json_headers(&[]), &nf).is_err());
    assert!(check(
        Method::GET,
        read,
        404,
        &json_headers(&[]),
        &json!({"error": "teapot", "message": ""})
    )
    .is_err());
    assert_eq!(
        check(Method::GET, read, 404, &json_headers(&[]), &nf),
        Ok(())
    );
    let mut text = HeaderMap::new();
    text.insert("content-type", HeaderValue::from_static("text/plain"));
    assert!(check(Method::GET, read, 404, &text, &nf).is_err());
    // A method the path does not have must be a 405 with Allow.
    assert!(check(Method::PUT, read, 200, &etag, &link()).is_err());
    let na = json!({"error": "method_not_allowed", "message": "use GET"});
    assert_eq!(
        check(
            Method::PUT,
            read,
            405,
            &json_headers(&[("allow", "GET")]),
            &na
        ),
        Ok(())
    );
    // A redirect has no body and needs its Location.
    let loc = [
        ("location", "https://x.example/"),
        ("cache-control", "private, max-age=60"),
    ];
    let mut redirect = HeaderMap::new();
    for (k, v) in loc {
        redirect.insert(k, HeaderValue::from_static(v));
    }
    assert_eq!(
        check(Method::GET, "/abcdef", 302, &redirect, &Value::Null),
        Ok(())
    );
    assert!(check(Method::GET, "/abcdef", 302, &HeaderMap::new(), &Value::Null).is_err());
    // Batch results: each item one of the two shapes.
    let ok_item = json!({"status": 201, "link": {"deduplicated": false}});
    let mut created = link();
    created["deduplicated"] = json!(false);
    let good = json!({"results": [{"status": 201, "link": created}, {"status": 400, "error": {"error": "invalid_url", "message": "x"}}]});
    assert_eq!(
        check(
            Method::POST,
            "/api/v1/links/batch",
            200,
            &json_headers(&[]),
            &good
        ),
        Ok(())
    );
    assert!(check(
        Method::POST,
        "/api/v1/links/batch",
        200,
        &json_headers(&[]),
        &json!({"results": [ok_item]})
    )
    .is_err());
    // Outside the public contract: not checked.
    assert_eq!(
        check(
            Method::GET,
            "/metrics",
            200,
            &HeaderMap::new(),
            &Value::Null
        ),
        Ok(())
    );
}

/// `/api/docs` (issue 28): the contract as a page, without a key, under the
/// console's policy (no script, its own stylesheet), every operation of the
/// served contract on it, and the stylesheet it names served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_page_shows_every_operation_under_the_consoles_policy() {
    let s = Setup::start_with(|o| o.pregen = 100);
    let o = &s.origin;
    let r = o.http.get(o.url("/api/docs")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(
        r.headers()["content-security-policy"],
        shorturl_origin::admin::html::CSP
    );
    let page = r.text().await.unwrap();
    assert!(!page.contains("<script"), "no script");
    let served: Value = o
        .http
        .get(o.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut ops = 0;
    for item in served["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            if let Some(id) = op["operationId"].as_str() {
                assert!(page.contains(&format!("id=\"op-{id}\"")), "{id} missing");
                ops += 1;
            }
        }
    }
    assert!(ops > 20, "{ops} operations");
    // The prose's marks are markup, the error kinds listed per answer.
    assert!(page.contains("<code>links:create</code>"));
    assert!(page.contains("<code>code_unavailable</code>"));
    let css = page
        .split("rel=\"stylesheet\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    let r = reqwest::get(o.url(css)).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/css; charset=utf-8");
    let r = o.http.post(o.url("/api/docs")).send().await.unwrap();
    assert_eq!(r.status(), 405);
}
