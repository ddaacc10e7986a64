//! The management API: read, edit (PATCH), delete and history, with the
//! link JSON, optimistic concurrency, the audit trail and bad input.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use shorturl_common::time::{now_unix, rfc3339};
use support::{Setup, KEY};

fn link(code: &str) -> String {
    format!("/api/v1/links/{code}")
}

/// Everything a bad request must leave untouched.
fn row_state(s: &Setup, code: &str) -> String {
    s.sql(&format!(
        "SELECT state, version, long_url, expires_at, updated_at FROM short_code WHERE code = '{code}'; \
         SELECT COUNT(*) FROM link_audit WHERE code = '{code}'; SELECT COUNT(*) FROM outbox"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_is_read_edited_disabled_enabled_deleted_and_its_history_kept() {
    let s = Setup::start();
    let o = &s.origin;
    // `version` is still accepted on creation, as the deprecated name of `client_version`.
    let (st, created) = o
        .create(
            json!({"url": "https://one.example/", "app": "shop-ui", "version": "4.2", "kdt_id": 7}),
        )
        .await;
    assert_eq!(st, 201, "{created}");
    let code = created["code"].as_str().unwrap().to_owned();
    let (st, v, h) = o.call(Method::GET, &link(&code), KEY, None, &[]).await;
    assert_eq!(st, 200);
    assert_eq!(h["etag"], "\"1\"");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "app",
            "client_app",
            "client_version",
            "code",
            "created_at",
            "domain",
            "expired_url",
            "expires_at",
            "expires_at_unix",
            "forward_query",
            "inapp_guide",
            "inapp_guided",
            "kdt_id",
            "og_description",
            "og_image",
            "og_title",
            "password_protected",
            "reaped_at",
            "rules",
            "screened",
            "short_url",
            "state",
            "tags",
            "updated_at",
            "url",
            "utm_campaign",
            "utm_content",
            "utm_medium",
            "utm_source",
            "utm_term",
            "version"
        ]
    );
    assert_eq!(
        (
            &v["app"],
            &v["client_app"],
            &v["client_version"],
            &v["kdt_id"],
            &v["state"],
            &v["version"]
        ),
        (
            &json!("demo"),
            &json!("shop-ui"),
            &json!("4.2"),
            &json!(7),
            &json!("active"),
            &json!(1)
        )
    );
    assert_eq!(v["created_at"], v["updated_at"]);

    // Edit the target, with the version read.
    let (st, v, h) = o
        .call(
            Method::PATCH,
            &link(&code),
            KEY,
            Some(json!({"url": "https://two.example/"})),
            &[("If-Match", "\"1\"")],
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (&v["url"], &v["version"]),
        (&json!("https://two.example/"), &json!(2))
    );
    assert_eq!(h["etag"], "\"2\"");
    assert_eq!(
        o.follow("sho.rt", &code).await,
        (302, Some("https://two.example/".into()))
    );
    // A stale version: 412, nothing changes.
    let (st, v, _) = o
        .call(
            Method::PATCH,
            &link(&code),
            KEY,
            Some(json!({"url": "https://three.example/"})),
            &[("If-Match", "1")],
        )
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (412, Some("version_mismatch")),
        "{v}"
    );
    assert_eq!(
        o.follow("sho.rt", &code).await.1.as_deref(),
        Some("https://two.example/")
    );

    // Disable, then enable with a new expiry.
    let (st, v) = o.patch(KEY, &code, json!({"state": "disabled"})).await;
    assert_eq!(
        (st, &v["state"], &v["version"]),
        (200, &json!("disabled"), &json!(3))
    );
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);
    let new_exp = now_unix() + 10 * 86_400;
    let (st, v) = o
        .patch(
            KEY,
            &code,
            json!({"state": "active", "expires_at": rfc3339(new_exp)}),
        )
        .await;
    assert_eq!(
        (st, &v["state"], &v["version"]),
        (200, &json!("active"), &json!(4)),
        "{v}"
    );
    assert_eq!(v["expires_at_unix"], new_exp);
    assert_eq!(o.follow("sho.rt", &code).await.0, 302);
    let ttl: i64 = redis::cmd("TTL")
        .arg(shorturl_common::keys::link_key("sho.rt", &code))
        .query_async(&mut s.redis_conn().await)
        .await
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 10 * 86_400,
        "the record lives no longer than the link: {ttl}"
    );

    // The same values again: 200, no new version, no audit row.
    let before = row_state(&s, &code);
    let (st, v) = o
        .patch(
            KEY,
            &code,
            json!({"state": "active", "url": "https://two.example/"}),
        )
        .await;
    assert_eq!((st, &v["version"]), (200, &json!(4)));
    assert_eq!(row_state(&s, &code), before);

    // Delete: for good.
    let (st, v) = o.delete(KEY, &code).await;
    assert_eq!(
        (st, v),
        (200, json!({"code": code, "state": "deleted", "version": 5}))
    );
    let (st, v) = o.patch(KEY, &code, json!({"state": "active"})).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("link_deleted")),
        "{v}"
    );
    let (st, v, _) = o.call(Method::GET, &link(&code), KEY, None, &[]).await;
    assert_eq!(
        (st, &v["state"], &v["version"]),
        (200, &json!("deleted"), &json!(5))
    );
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);

    // History, newest first, each change with who, before and after.
    let (st, h, _) = o
        .call(
            Method::GET,
            &format!("{}/history", link(&code)),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200, "{h}");
    let h = h["history"].as_array().unwrap();
    let summary: Vec<(&str, u64, &str)> = h
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["version"].as_u64().unwrap(),
                e["actor"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("delete", 5, "demo"),
            ("enable", 4, "demo"),
            ("disable", 3, "demo"),
            ("edit", 2, "demo"),
            ("create", 1, "demo")
        ]
    );
    let create = &h[4];
    assert_eq!(create["before"], Value::Null);
    assert_eq!(create["after"]["url"], "https://one.example/");
    assert_eq!(
        create["after"],
        created
            .as_object()
            .map(|m| {
                let mut m = m.clone();
                m.remove("deduplicated");
                Value::Object(m)
            })
            .unwrap()
    );
    let edit = &h[3];
    assert_eq!(
        (
            &edit["before"]["url"],
            &edit["after"]["url"],
            &edit["before"]["version"]
        ),
        (
            &json!("https://one.example/"),
            &json!("https://two.example/"),
            &json!(1)
        )
    );
    assert_eq!(h[0]["after"]["state"], "deleted");
    assert!(h[0]["at"].as_str().unwrap().ends_with('Z'));
    // Exactly one audit row per change, written with it.
    assert_eq!(
        s.sql(&format!(
            "SELECT action FROM link_audit WHERE code = '{code}' ORDER BY id"
        ))
        .split_whitespace()
        .collect::<Vec<_>>(),
        ["create", "edit", "disable", "enable", "delete"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_patches_are_4xx_json_and_write_nothing() {
    let s = Setup::start_with(|o| {
        o.links_yaml
            .push_str("  default_ttl_days: 10\n  max_ttl_days: 30\n")
    });
    let o = &s.origin;
    let code = o
        .create_ok(json!({"url": "https://keep.example/", "ttl_days": 10}))
        .await;
    let before = row_state(&s, &code);
    let past = rfc3339(now_unix() - 60);
    let too_far = rfc3339(now_unix() + 31 * 86_400);
    let long = format!("https://x.example/{}", "a".repeat(2100));
    let cases: Vec<(&str, u16, &str)> = vec![
        ("", 400, "invalid_json"),
        ("{nope", 400, "invalid_json"),
        ("[1]", 400, "invalid_json"),
        ("\"url\"", 400, "invalid_json"),
        ("{}", 400, "invalid_field"),
        (r#"{"domain":"s.shop55.com"}"#, 400, "invalid_field"),
        (r#"{"url":"https://x/","owner":"me"}"#, 400, "invalid_field"),
        (r#"{"url":7}"#, 400, "invalid_url"),
        (r#"{"url":null}"#, 400, "invalid_url"),
        (r#"{"url":"javascript:alert(1)"}"#, 400, "invalid_url"),
        (r#"{"url":"https://x/a b"}"#, 400, "invalid_url"),
        (r#"{"url":"https://u:p@x/"}"#, 400, "invalid_url"),
        (r#"{"expires_at":12345}"#, 400, "invalid_expires_at"),
        (r#"{"expires_at":"next week"}"#, 400, "invalid_expires_at"),
        (
            r#"{"expires_at":"2030-02-30T00:00:00Z"}"#,
            400,
            "invalid_expires_at",
        ),
        (r#"{"state":"deleted"}"#, 400, "invalid_state"),
        (r#"{"state":1}"#, 400, "invalid_state"),
        (
            r#"{"state":"disabled","url":"ftp://x/"}"#,
            400,
            "invalid_url",
        ),
    ];
    let mut bodies: Vec<(String, u16, &str)> = cases
        .into_iter()
        .map(|(b, st, k)| (b.to_owned(), st, k))
        .collect();
    bodies.push((
        format!(r#"{{"expires_at":"{past}"}}"#),
        400,
        "invalid_expires_at",
    ));
    bodies.push((
        format!(r#"{{"expires_at":"{too_far}"}}"#),
        400,
        "invalid_expires_at",
    ));
    bodies.push((format!(r#"{{"url":"{long}"}}"#), 400, "url_too_long"));
    bodies.push((
        format!(r#"{{"url":"https://x/{}"}}"#, "a".repeat(20_000)),
        413,
        "body_too_large",
    ));
    for (body, status, kind) in &bodies {
        let r = o
            .http
            .patch(o.url(&link(&code)))
            .bearer_auth(KEY)
            .header("Content-Type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), *status, "{body}");
        assert_eq!(r.headers()["content-type"], "application/json");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], *kind, "{body} -> {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // Bad preconditions and paths.
    for (method, path, key, headers, body, status, kind) in [
        (
            Method::PATCH,
            link(&code),
            KEY,
            vec![("If-Match", "v1")],
            Some(json!({"state": "disabled"})),
            400,
            "invalid_if_match",
        ),
        (
            Method::DELETE,
            link(&code),
            KEY,
            vec![("If-Match", "\"7\"")],
            None,
            412,
            "version_mismatch",
        ),
        (
            Method::PATCH,
            link("no/pe"),
            KEY,
            vec![],
            Some(json!({"state": "disabled"})),
            404,
            "no_route",
        ),
        (
            Method::PATCH,
            link("x"),
            KEY,
            vec![],
            Some(json!({"state": "disabled"})),
            400,
            "invalid_code",
        ),
        (
            Method::PATCH,
            link(&code),
            "wrong-key",
            vec![],
            Some(json!({"state": "disabled"})),
            401,
            "unauthorized",
        ),
        (
            Method::PUT,
            link(&code),
            KEY,
            vec![],
            Some(json!({"url": "https://x/"})),
            405,
            "method_not_allowed",
        ),
        (
            Method::POST,
            format!("{}/history", link(&code)),
            KEY,
            vec![],
            None,
            405,
            "method_not_allowed",
        ),
        (
            Method::PATCH,
            link("ZZZZZZ"),
            KEY,
            vec![],
            Some(json!({"state": "disabled"})),
            404,
            "not_found",
        ),
    ] {
        let (st, v, _) = o.call(method.clone(), &path, key, body, &headers).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (status, Some(kind)),
            "{method} {path}: {v}"
        );
    }
    // Nothing was written by any of them: row, version, audit and outbox as before.
    assert_eq!(row_state(&s, &code), before);
    assert!(before.contains("\t1\thttps://keep.example/\t"), "{before}");
    assert_eq!(
        o.follow("sho.rt", &code).await.1.as_deref(),
        Some("https://keep.example/")
    );
}
