//! Link options at the origin (issue 25, protocol 3.1.1): the API takes,
//! validates, shows and edits them; the record the edges read carries
//! them; the origin's own `/{code}` answer follows them; a disabled or
//! expired link with `expired_url` keeps answering with its fallback.

use crate::support;

use serde_json::{json, Value};
use support::{count, Setup, KEY};

const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148";
const WECHAT: &str =
    "Mozilla/5.0 (Linux; Android 14) Mobile Safari/537.36 MicroMessenger/8.0.47 NetType/WIFI";
const DESKTOP: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/126.0 Safari/537.36";

/// Request headers, query, and the Location they should get.
type Visit<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

fn rules_body() -> Value {
    json!({
        "url": "https://shop.example/p?id=7",
        "forward_query": true,
        "utm_source": "newsletter",
        "utm_campaign": "spring sale",
        "expired_url": "https://shop.example/over",
        "rules": [
            {"when": {"app": ["wechat"]}, "url": "https://shop.example/wechat"},
            {"when": {"device": ["ios"]}, "url": "https://apps.apple.com/app/id1"},
            {"when": {"language": ["zh"], "query": {"name": "ref", "value": "tw"}}, "url": "https://shop.example/zh"},
            {"when": {"device": ["desktop"]}, "split": [
                {"url": "https://shop.example/a", "weight": 50},
                {"url": "https://shop.example/b", "weight": 50}
            ]}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_with_rules_is_created_shown_cached_and_followed() {
    let s = Setup::start();
    let o = &s.origin;
    let (st, v) = o.create(rules_body()).await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let host = v["domain"].as_str().unwrap().to_owned();
    // UTM fields are merged into the URL and shown apart.
    assert_eq!(
        v["url"],
        "https://shop.example/p?id=7&utm_source=newsletter&utm_campaign=spring+sale"
    );
    assert_eq!(
        (&v["utm_source"], &v["utm_campaign"], &v["utm_medium"]),
        (&json!("newsletter"), &json!("spring sale"), &Value::Null)
    );
    assert_eq!(v["forward_query"], true);
    assert_eq!(
        v["rules"][2]["when"]["query"],
        json!({"name": "ref", "value": "tw"})
    );
    assert_eq!(v["rules"][3]["split"][1]["weight"], 50);
    // A read shows the same.
    let (st, read, _) = o
        .call(
            reqwest::Method::GET,
            &format!("/api/v1/links/{code}"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(read["rules"], v["rules"]);

    // The record is protocol 3, with the compact options.
    let rec = s.redis_record(&code).await.unwrap();
    assert!(rec.starts_with("3 1 "), "{rec}");
    assert!(rec.ends_with(r#"{"f":true,"x":"https://shop.example/over","r":[{"c":{"app":["wechat"]},"u":"https://shop.example/wechat"},{"c":{"dev":["ios"]},"u":"https://apps.apple.com/app/id1"},{"c":{"lang":["zh"],"q":["ref","tw"]},"u":"https://shop.example/zh"},{"c":{"dev":["desktop"]},"s":[["https://shop.example/a",50],["https://shop.example/b",50]]}]}"#), "{rec}");

    // The origin's own answer follows the rules, first match wins.
    let path = format!("/{code}");
    let cases: [Visit<'_>; 5] = [
        (&[("User-Agent", WECHAT)], "", "https://shop.example/wechat"),
        (&[("User-Agent", IPHONE)], "?x=1", "https://apps.apple.com/app/id1?x=1"),
        (
            &[("User-Agent", "curl/8"), ("Accept-Language", "zh-CN,zh;q=0.9,en;q=0.5")],
            "?ref=tw",
            "https://shop.example/zh?ref=tw",
        ),
        // No rule holds: the link's URL, the request's query merged in
        // (the link's own parameters win).
        (
            &[("User-Agent", "curl/8")],
            "?id=9&utm_medium=sms&gclid=abc",
            "https://shop.example/p?id=7&utm_source=newsletter&utm_campaign=spring+sale&utm_medium=sms&gclid=abc",
        ),
        (&[("User-Agent", "curl/8"), ("Accept-Language", "en")], "?ref=tw", "https://shop.example/p?id=7&utm_source=newsletter&utm_campaign=spring+sale&ref=tw"),
    ];
    for (headers, query, want) in cases {
        let (st, loc) = o
            .follow_with(&host, &format!("{path}{query}"), headers)
            .await;
        assert_eq!(
            (st, loc.as_deref()),
            (302, Some(want)),
            "{headers:?} {query}"
        );
    }
    // A split: one of its destinations, the same on every visit.
    let (st, first) = o
        .follow_with(&host, &path, &[("User-Agent", DESKTOP)])
        .await;
    assert_eq!(st, 302);
    let first = first.unwrap();
    assert!(
        ["https://shop.example/a", "https://shop.example/b"].contains(&first.as_str()),
        "{first}"
    );
    for _ in 0..5 {
        let (_, again) = o
            .follow_with(&host, &path, &[("User-Agent", DESKTOP)])
            .await;
        assert_eq!(again.as_deref(), Some(first.as_str()));
    }
    // Nothing a request carries reaches Location raw.
    let (st, loc) = o
        .follow_with(&host, &format!("{path}?x=%0D%0ASet-Cookie:a%22<b>"), &[])
        .await;
    assert_eq!(st, 302);
    assert!(loc.unwrap().ends_with("&x=%0D%0ASet-Cookie:a%22%3Cb%3E"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_are_refused_naming_the_problem_and_nothing_is_written() {
    let s = Setup::start();
    let o = &s.origin;
    let before = count(&s, "SELECT COUNT(*) FROM short_code WHERE state <> 0");
    for (body, kind, says) in [
        (
            json!({"url": "https://x.example/", "rules": [{"when": {"os": ["ios"]}, "url": "https://x.example/i"}]}),
            "invalid_rules",
            "unknown condition \"os\"",
        ),
        (
            json!({"url": "https://x.example/", "rules": [{"when": {"device": ["phone"]}, "url": "https://x.example/i"}]}),
            "invalid_rules",
            "unknown device \"phone\"",
        ),
        (
            json!({"url": "https://x.example/", "rules": [{"when": {"country": ["China"]}, "url": "https://x.example/i"}]}),
            "invalid_rules",
            "ISO 3166",
        ),
        (
            json!({"url": "https://x.example/", "rules": [{"url": "javascript:alert(1)"}]}),
            "invalid_rules",
            "http(s)",
        ),
        (
            json!({"url": "https://x.example/", "rules": [{"split": [{"url": "https://x.example/a", "weight": 1}]}]}),
            "invalid_rules",
            "split",
        ),
        (
            json!({"url": "https://x.example/", "rules": [{"when": {"from": 9, "until": 3}, "url": "https://x.example/i"}]}),
            "invalid_rules",
            "from must be before until",
        ),
        (
            json!({"url": "https://x.example/", "expired_url": "ftp://x"}),
            "invalid_expired_url",
            "expired_url",
        ),
        (
            json!({"url": "https://x.example/", "forward_query": 1}),
            "invalid_forward_query",
            "boolean",
        ),
        (
            json!({"url": "https://x.example/", "utm_source": ""}),
            "invalid_utm",
            "utm_source",
        ),
    ] {
        let (st, v) = o.create(body.clone()).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(v["error"], kind, "{body}: {v}");
        assert!(v["message"].as_str().unwrap().contains(says), "{body}: {v}");
    }
    let many: Vec<Value> = (0..21)
        .map(|_| json!({"url": "https://x.example/r"}))
        .collect();
    let (st, v) = o
        .create(json!({"url": "https://x.example/", "rules": many}))
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_rules")),
        "{v}"
    );
    assert_eq!(
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state <> 0"),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_are_edited_with_a_new_version_a_history_entry_and_a_new_record() {
    let s = Setup::start();
    let o = &s.origin;
    let (st, v) = o
        .create(json!({"url": "https://shop.example/", "utm_source": "mail"}))
        .await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let host = v["domain"].as_str().unwrap().to_owned();
    assert_eq!(v["url"], "https://shop.example/?utm_source=mail");
    // A bad edit changes nothing.
    let (st, e) = o
        .patch(
            KEY,
            &code,
            json!({"rules": [{"when": {"planet": ["mars"]}, "url": "https://x.example/"}]}),
        )
        .await;
    assert_eq!(
        (st, e["error"].as_str()),
        (400, Some("invalid_rules")),
        "{e}"
    );
    let (st, e) = o
        .patch(KEY, &code, json!({"rules": [{"when": {"device": ["android"]}, "url": "https://play.example/app"}], "utm_source": null, "utm_medium": "sms"}))
        .await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["version"], 2);
    assert_eq!(e["url"], "https://shop.example/?utm_medium=sms");
    assert_eq!(e["rules"][0]["url"], "https://play.example/app");
    let rec = s.redis_record(&code).await.unwrap();
    assert!(rec.starts_with("3 2 "), "{rec}");
    let (_, loc) = o
        .follow_with(
            &host,
            &format!("/{code}"),
            &[(
                "User-Agent",
                "Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile",
            )],
        )
        .await;
    assert_eq!(loc.as_deref(), Some("https://play.example/app"));
    let (st, h, _) = o
        .call(
            reqwest::Method::GET,
            &format!("/api/v1/links/{code}/history"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200);
    let last = &h["history"][0];
    assert_eq!(
        (last["action"].as_str(), last["version"].as_u64()),
        (Some("edit"), Some(2)),
        "{h}"
    );
    assert_eq!(last["before"]["rules"], json!([]));
    assert_eq!(
        last["after"]["rules"][0]["when"]["device"],
        json!(["android"])
    );
    // Removing every option makes the record protocol 2 again.
    let (st, e) = o
        .patch(KEY, &code, json!({"rules": [], "utm_medium": null}))
        .await;
    assert_eq!(st, 200, "{e}");
    let rec = s.redis_record(&code).await.unwrap();
    assert!(
        rec.starts_with("2 3 ") && rec.ends_with(" https://shop.example/"),
        "{rec}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_or_expired_link_answers_its_fallback_until_deleted() {
    let s = Setup::start();
    let o = &s.origin;
    let (st, v) = o
        .create(json!({"url": "https://shop.example/sale", "expired_url": "https://shop.example/over", "rules": [{"url": "https://shop.example/all"}]}))
        .await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let host = v["domain"].as_str().unwrap().to_owned();
    let (_, loc) = o.follow(&host, &code).await;
    assert_eq!(loc.as_deref(), Some("https://shop.example/all"));

    let (st, _) = o.patch(KEY, &code, json!({"state": "disabled"})).await;
    assert_eq!(st, 200);
    let rec = s.redis_record(&code).await.unwrap();
    assert!(
        rec.starts_with("3 2 ") && rec.ends_with(r#" {"x":"https://shop.example/over","d":true}"#),
        "{rec}"
    );
    assert_eq!(
        o.follow(&host, &code).await,
        (302, Some("https://shop.example/over".into()))
    );
    // Another domain still gets the 404.
    assert_eq!(o.follow("elsewhere.example", &code).await.0, 404);

    // Past its expiry (read from MySQL): the fallback too.
    let (st, _) = o.patch(KEY, &code, json!({"state": "active"})).await;
    assert_eq!(st, 200);
    s.sql(&format!(
        "UPDATE short_code SET expires_at = UNIX_TIMESTAMP() - 5 WHERE code = '{code}'"
    ));
    let mut c = s.redis_conn().await;
    let _: () = redis::cmd("DEL")
        .arg(shorturl_common::keys::link_key("sho.rt", &code))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        o.follow(&host, &code).await,
        (302, Some("https://shop.example/over".into()))
    );
    let rec = s.redis_record(&code).await.unwrap();
    assert!(
        rec.ends_with(r#" {"x":"https://shop.example/over","d":true}"#),
        "{rec}"
    );

    // Deleted: gone for good.
    let (st, _) = o.delete(KEY, &code).await;
    assert_eq!(st, 200);
    assert_eq!(o.follow(&host, &code).await.0, 404);
    assert!(s.redis_record(&code).await.unwrap().starts_with("- "));

    // Without a fallback a disabled link is the plain negative.
    let plain = o
        .create_ok(json!({"url": "https://shop.example/x", "forward_query": true}))
        .await;
    let (st, _) = o.patch(KEY, &plain, json!({"state": "disabled"})).await;
    assert_eq!(st, 200);
    assert!(s.redis_record(&plain).await.unwrap().starts_with("- "));
    assert_eq!(o.follow(&host, &plain).await.0, 404);
}
