//! Destination screening through real origins (protocol 4.7): a list file
//! and managed entries refuse screened destinations at creation and edit;
//! a policy change reaches every origin and switches existing links to the
//! warning page (warn: a way on; block: none) and back.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;
use support::pages::{fetch, header};
use support::{eventually, metric_value, Origin, Setup, ADMIN_KEY, KEY};

const SHOP: &str = "s.shop55.com";
const HTML: (&str, &str) = ("Accept", "text/html");

fn setup(list: &std::path::Path) -> Setup {
    let yaml = format!(
        "screening:\n  refresh_secs: 1\n  files:\n    - path: {}\n      action: block\n",
        list.display()
    );
    Setup::start_with(|o| {
        o.pregen = 300;
        o.extra_yaml = yaml;
    })
}

async fn put_entry(o: &Origin, key: &str, domain: &str, body: Value) -> (u16, Value) {
    let path = format!("/api/v1/screening/domains/{domain}");
    let (st, v, _) = o.call(Method::PUT, &path, key, Some(body), &[]).await;
    (st, v)
}

async fn screened(o: &Origin, code: &str) -> Value {
    let (st, v, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/links/{code}"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200, "{v}");
    v["screened"].clone()
}

async fn wait_screened(s: &Setup, code: &str, want: Value) {
    eventually(
        &format!("{code} screened {want}"),
        Duration::from_secs(20),
        || {
            let want = want.clone();
            async move { screened(&s.origin, code).await == want }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screened_destinations_are_refused_and_existing_links_warn() {
    let dir = testkit::TempDir::new("screening-list");
    let list = dir.path().join("hosts.txt");
    std::fs::write(
        &list,
        "# a hosts-file feed\n0.0.0.0 malware.example\nphish.example\n",
    )
    .unwrap();
    let s = setup(&list);
    let o = &s.origin;

    // The list refuses its domains and their subdomains, for everyone.
    for url in [
        "https://malware.example/",
        "http://a.b.PHISH.example:8080/x",
    ] {
        let (st, e) = o.create(json!({"url": url, "domain": SHOP})).await;
        assert_eq!(
            (st, e["error"].as_str()),
            (400, Some("destination_blocked")),
            "{url}: {e}"
        );
    }
    let (st, e) = o
        .create(json!({"url": "https://shop.example/", "domain": SHOP,
                       "rules": [{"when": {"device": ["ios"]}, "url": "https://phish.example/ios"}]}))
        .await;
    assert_eq!(
        (st, e["error"].as_str()),
        (400, Some("destination_blocked")),
        "{e}"
    );

    let news = o
        .create_ok(json!({"url": "https://news.example/today", "domain": SHOP}))
        .await;
    let split = o
        .create_ok(json!({"url": "https://ok.example/", "domain": SHOP,
                          "rules": [{"when": {"device": ["android"]}, "url": "https://www.bad.example/a"}]}))
        .await;
    let clean = o
        .create_ok(json!({"url": "https://shop.example/", "domain": SHOP}))
        .await;
    assert_eq!(screened(o, &news).await, Value::Null);

    // Managed entries: admins only, validated.
    let (st, e) = put_entry(o, KEY, "news.example", json!({"action": "warn"})).await;
    assert_eq!(
        (st, e["error"].as_str()),
        (403, Some("insufficient_scope")),
        "{e}"
    );
    for (domain, body, error) in [
        ("news.example", json!({"action": "ban"}), "invalid_action"),
        ("news.example", json!({}), "invalid_action"),
        (
            "bad!domain.example",
            json!({"action": "warn"}),
            "invalid_domain",
        ),
        ("nodot", json!({"action": "warn"}), "invalid_domain"),
        (
            "news.example",
            json!({"action": "warn", "note": 7}),
            "invalid_note",
        ),
        (
            "news.example",
            json!({"action": "warn", "why": "x"}),
            "unknown_field",
        ),
    ] {
        let (st, e) = put_entry(o, ADMIN_KEY, domain, body.clone()).await;
        assert_eq!(
            (st, e["error"].as_str()),
            (400, Some(error)),
            "{domain} {body}: {e}"
        );
    }
    let (st, e) = put_entry(
        o,
        ADMIN_KEY,
        "News.Example",
        json!({"action": "warn", "note": "<fraud report>"}),
    )
    .await;
    assert_eq!(st, 201, "{e}");
    assert_eq!(
        (e["domain"].as_str(), e["action"].as_str()),
        (Some("news.example"), Some("warn"))
    );
    let (st, _) = put_entry(o, ADMIN_KEY, "bad.example", json!({"action": "block"})).await;
    assert_eq!(st, 201);

    // A second origin on the same database follows the managed entries.
    let mut opts = o.opts.clone();
    opts.port = testkit::free_port();
    let o2 = Origin::start(opts);
    eventually(
        "the second origin refuses news.example",
        Duration::from_secs(10),
        || async {
            let (st, _) = o2
                .create(json!({"url": "https://news.example/other", "domain": SHOP}))
                .await;
            st == 400
        },
    )
    .await;

    // Existing links switch: warn for news, block for the rule's host.
    wait_screened(&s, &news, json!("warn")).await;
    wait_screened(&s, &split, json!("block")).await;
    assert_eq!(screened(o, &clean).await, Value::Null);
    eventually(
        "news's record carries w",
        Duration::from_secs(10),
        || async {
            s.redis_record_on(SHOP, &news)
                .await
                .is_some_and(|r| r.ends_with(r#"{"w":"warn"}"#))
        },
    )
    .await;

    // Browsers get the warning page (warn: a way on), API clients the 403.
    let (st, h, page) = fetch(&s, &format!("/{news}"), SHOP, &[HTML]).await;
    assert_eq!(st, 200);
    assert_eq!(header(&h, "cache-control"), "no-store");
    let page = String::from_utf8(page).unwrap();
    assert!(page.contains("Continue to news.example"), "{page}");
    assert!(
        page.contains("href=\"https://news.example/today\""),
        "{page}"
    );
    let (st, h, direct) = fetch(&s, &format!("/{news}.warning"), SHOP, &[]).await;
    assert_eq!((st, String::from_utf8(direct).unwrap()), (200, page));
    assert!(header(&h, "content-security-policy").contains("default-src 'none'"));
    let (st, h, body) = fetch(&s, &format!("/{news}"), SHOP, &[]).await;
    assert_eq!(st, 403);
    assert_eq!(header(&h, "cache-control"), "no-store");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"], "destination_flagged");
    let (st, _, page) = fetch(&s, &format!("/{split}"), SHOP, &[HTML]).await;
    let page = String::from_utf8(page).unwrap();
    assert_eq!(st, 200);
    assert!(
        page.contains("www.bad.example") && !page.contains("href=\"http"),
        "{page}"
    );
    let (st, _, body) = fetch(&s, &format!("/{split}"), SHOP, &[]).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (st, v["error"].as_str()),
        (403, Some("destination_blocked"))
    );
    let (st, _, preview) = fetch(&s, &format!("/{split}+"), SHOP, &[]).await;
    assert!(
        st == 200
            && String::from_utf8(preview)
                .unwrap()
                .contains("flagged as unsafe")
    );
    let (st, _, _) = fetch(&s, &format!("/{clean}.warning"), SHOP, &[]).await;
    assert_eq!(st, 404, "a clean link has no warning page");

    // The policy and the flagged links, as the API lists them.
    let (st, p, _) = o
        .call(Method::GET, "/api/v1/screening", ADMIN_KEY, None, &[])
        .await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["domains"], 4, "{p}");
    assert_eq!(p["lists"][0]["domains"], 2, "{p}");
    assert_eq!(p["entries"][1]["note"], "<fraud report>", "{p}");
    let (st, l, _) = o
        .call(Method::GET, "/api/v1/screening/links", ADMIN_KEY, None, &[])
        .await;
    assert_eq!(st, 200);
    let listed: Vec<(&str, &str)> = l["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["code"].as_str().unwrap(), x["screened"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, [(split.as_str(), "block"), (news.as_str(), "warn")]);

    // An edit to a screened destination is refused; an edit away from it
    // clears the screening at once.
    let (st, e) = o
        .patch(KEY, &clean, json!({"url": "https://x.bad.example/"}))
        .await;
    assert_eq!(
        (st, e["error"].as_str()),
        (400, Some("destination_blocked")),
        "{e}"
    );
    let (st, e) = o.patch(KEY, &split, json!({"rules": []})).await;
    assert_eq!((st, &e["screened"]), (200, &Value::Null), "{e}");

    // Removing the entry brings the link back (once: then it is unknown);
    // allow opens a subdomain.
    for want in [200, 404] {
        let (st, _, _) = o
            .call(
                Method::DELETE,
                "/api/v1/screening/domains/news.example",
                ADMIN_KEY,
                None,
                &[],
            )
            .await;
        assert_eq!(st, want);
    }
    wait_screened(&s, &news, Value::Null).await;
    eventually("news redirects again", Duration::from_secs(10), || async {
        o.follow(SHOP, &news).await == (302, Some("https://news.example/today".into()))
    })
    .await;
    let (st, _) = put_entry(
        o,
        ADMIN_KEY,
        "cdn.malware.example",
        json!({"action": "allow"}),
    )
    .await;
    assert_eq!(st, 201);
    let (st, v) = o
        .create(json!({"url": "https://cdn.malware.example/f", "domain": SHOP}))
        .await;
    assert_eq!(st, 201, "{v}");

    // A list file's change is read without a restart.
    std::fs::write(&list, "malware.example\nnews.example\n").unwrap();
    wait_screened(&s, &news, json!("block")).await;

    assert!(
        metric_value(o, "shorturl_screening_refused_total")
            .await
            .unwrap()
            >= 4.0
    );
    assert_eq!(
        metric_value(o, "shorturl_screening_entries").await,
        Some(4.0)
    );
    drop(o2);
}
