//! Protocol 3.5 (issue 25): records keyed by (domain, code), and the
//! upgrade from the code-only keys — origins writing both forms while
//! `redis.legacy_keys` is on, and `shorturl-origin migrate-keys`.

use crate::support::{origin_bin, Setup, KEY};
use serde_json::{json, Value};
use shorturl_common::keys::{legacy_link_key, link_key};
use std::collections::BTreeSet;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

async fn get(s: &Setup, key: &str) -> Option<String> {
    let mut r = s.redis_conn().await;
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut r)
        .await
        .unwrap()
}

async fn set(s: &Setup, key: &str, value: &str) {
    let mut r = s.redis_conn().await;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut r)
        .await
        .unwrap();
}

async fn ttl(s: &Setup, key: &str) -> i64 {
    let mut r = s.redis_conn().await;
    redis::cmd("TTL")
        .arg(key)
        .query_async(&mut r)
        .await
        .unwrap()
}

/// Runs `shorturl-origin migrate-keys` with `args`; its JSON report.
fn migrate_keys(s: &Setup, args: &[&str]) -> Value {
    let out = std::process::Command::new(origin_bin())
        .arg("-c")
        .arg(&s.origin.config)
        .arg("migrate-keys")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "migrate-keys failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    v["migrate_keys"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_legacy_keys_every_change_is_written_and_announced_in_both_forms() {
    let s = Setup::start_with(|o| o.legacy_keys = true);
    let o = &s.origin;
    let code = o
        .create_ok(json!({"url": "https://both.example/1", "domain": "s.shop55.com"}))
        .await;
    let new = link_key("s.shop55.com", &code);
    let old = legacy_link_key(&code);
    let created = get(&s, &new).await.unwrap();
    assert!(created.starts_with("2 1 "), "{created}");
    assert_eq!(get(&s, &old).await, Some(created));

    let mut sub = s.subscribe().await;
    let (st, v) = o
        .patch(KEY, &code, json!({"url": "https://both.example/2"}))
        .await;
    assert_eq!(st, 200, "{v}");
    let mut heard = BTreeSet::new();
    while heard.len() < 2 {
        heard.insert(sub.next_for(&code, WAIT).await);
    }
    let want: BTreeSet<String> = [format!("2 {code} s.shop55.com"), format!("2 {code}")].into();
    assert_eq!(heard, want);
    let edited = get(&s, &new).await.unwrap();
    assert!(edited.ends_with("https://both.example/2"), "{edited}");
    assert_eq!(get(&s, &old).await, Some(edited.clone()));
    // An edge of the previous version asks for the code alone.
    let (st, body) = o
        .get_text(&format!("/internal/v1/records/{code}"), "sho.rt")
        .await;
    assert_eq!((st, body), (200, edited));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_keys_moves_what_the_legacy_keys_cached_and_never_an_older_state() {
    let s = Setup::start();
    let o = &s.origin;
    let mut codes = Vec::new();
    for i in 0..3 {
        let url = format!("https://mig.example/{i}");
        codes.push(
            o.create_ok(json!({"url": url, "domain": "s.shop55.com"}))
                .await,
        );
    }
    let (a, b, c) = (&codes[0], &codes[1], &codes[2]);
    let truth = get(&s, &link_key("s.shop55.com", a)).await.unwrap();
    // Redis as an origin of protocol 3.4 left it: `a` and `b` cached under
    // their legacy keys (`a` with a stale value), `c` not at all; `b`'s
    // new key already holds a newer version than MySQL's (written after).
    let mut r = s.redis_conn().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut r).await.unwrap();
    set(
        &s,
        &legacy_link_key(a),
        "2 0 4102444800 s.shop55.com https://stale/",
    )
    .await;
    set(&s, &legacy_link_key(b), "- 0").await;
    let newer = "2 9 4102444800 s.shop55.com https://newer.example/";
    set(&s, &link_key("s.shop55.com", b), newer).await;

    let r = migrate_keys(&s, &["--quiet"]);
    assert_eq!(r, json!({"rows": 3, "cached": 2, "written": 1, "newer": 1}));
    assert_eq!(
        get(&s, &link_key("s.shop55.com", a)).await,
        Some(truth.clone())
    );
    let t = ttl(&s, &link_key("s.shop55.com", a)).await;
    assert!(t > 5 * 86_400 && t <= 6 * 86_400, "record TTL {t}");
    assert_eq!(
        get(&s, &link_key("s.shop55.com", b)).await.as_deref(),
        Some(newer)
    );
    assert_eq!(get(&s, &link_key("s.shop55.com", c)).await, None);
    // The legacy keys are left for edges of the previous version.
    assert!(get(&s, &legacy_link_key(a)).await.is_some());

    // `--all` writes every link bound to a domain; a second run changes
    // nothing it already wrote (same version: refreshed).
    let r = migrate_keys(&s, &["--all", "--quiet"]);
    assert_eq!(r, json!({"rows": 3, "cached": 3, "written": 2, "newer": 1}));
    let rec = get(&s, &link_key("s.shop55.com", c)).await.unwrap();
    assert!(rec.ends_with("https://mig.example/2"), "{rec}");
    // And the edges' path reads them: the origin's own redirect too.
    assert_eq!(o.follow("s.shop55.com", a).await.0, 302);
}
