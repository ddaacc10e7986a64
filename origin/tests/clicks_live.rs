//! The live view (`GET /api/v1/links/{code}/live`, `GET /api/v1/live`):
//! batches XADDed as edges do, some stamped in the past (explicit stream
//! ids), counted in the minute they reached Redis — exactly, the hour's
//! edge included, the same after the origin is killed and rebuilds from
//! the stream; the stats API's tenancy (other apps' links 404, tenants the
//! caller cannot see answer zeros, a merchant key its merchant's links);
//! bad queries 400.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use shorturl_common::clicks::{Batch, STREAM_KEY};
use shorturl_common::time::{now_unix, rfc3339};
use support::clicks::{create, hours_batch, setup_with, xadd, ADMIN, M55, SHOP};
use support::{Setup, KEY};

/// XADD `b` with the stream id `<ms>-0` (a batch that reached Redis then).
async fn xadd_at(s: &Setup, ms: u64, b: &Batch) {
    let mut c = s.redis_conn().await;
    let _: String = redis::cmd("XADD")
        .arg(STREAM_KEY)
        .arg(format!("{ms}-0"))
        .arg("id")
        .arg(&b.id)
        .arg("v")
        .arg(b.version())
        .arg("b")
        .arg(b.encode_body())
        .query_async(&mut c)
        .await
        .unwrap();
}

async fn get(s: &Setup, key: &str, path: &str) -> (u16, Value) {
    let (st, v, _) = s.origin.call(Method::GET, path, key, None, &[]).await;
    (st, v)
}

fn totals(v: &Value) -> (u64, u64) {
    (
        v["totals"]["human"].as_u64().unwrap_or(u64::MAX),
        v["totals"]["bot"].as_u64().unwrap_or(u64::MAX),
    )
}

/// The `(human, bot)` of the minute starting at `start` in a live answer.
fn at_minute(v: &Value, start: u64) -> (u64, u64) {
    let m = v["minutes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["start"] == rfc3339(start))
        .unwrap_or_else(|| panic!("no minute {} in {v}", rfc3339(start)));
    (m["human"].as_u64().unwrap(), m["bot"].as_u64().unwrap())
}

fn codes(v: &Value) -> Vec<(String, u64)> {
    v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["code"].as_str().unwrap().to_owned(),
                l["human"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Waits until `GET path` with `key` has the totals `want`; the answer.
async fn wait_live(s: &Setup, key: &str, path: &str, want: (u64, u64)) -> Value {
    let deadline = std::time::Instant::now() + support::clicks::WAIT;
    loop {
        let (st, v) = get(s, key, path).await;
        if st == 200 && totals(&v) == want {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path}: waited for {want:?}, last {st} {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_last_hour_per_minute_from_the_stream() {
    let mut s = setup_with(None);
    let a = create(
        &s,
        KEY,
        json!({"url": "https://a.example/live", "kdt_id": 55}),
    )
    .await;
    let b = create(
        &s,
        KEY,
        json!({"url": "https://b.example/live", "kdt_id": 77}),
    )
    .await;
    let c = create(&s, SHOP, json!({"url": "https://c.example/live"})).await;
    let hour = now_unix() - now_unix() % 3600;
    let now_ms = now_unix() * 1000;
    // 90 minutes ago: before the view. 30 minutes ago: in it.
    let old = now_ms - 90 * 60_000;
    let half = now_ms - 30 * 60_000;
    xadd_at(&s, old, &hours_batch("e1:n:1", &[(&a, hour, 100, 0)])).await;
    xadd_at(
        &s,
        half,
        &hours_batch("e1:n:2", &[(&a, hour, 3, 1), (&b, hour, 2, 0)]),
    )
    .await;
    xadd(
        &s,
        &hours_batch("e2:n:1", &[(&a, hour, 5, 0), (&c, hour, 7, 2)]),
    )
    .await;
    let minute = |ms: u64| ms / 1000 - (ms / 1000) % 60;

    let v = wait_live(&s, ADMIN, &format!("/api/v1/links/{a}/live"), (8, 1)).await;
    assert_eq!(v["minutes"].as_array().unwrap().len(), 60);
    assert_eq!(at_minute(&v, minute(half)), (3, 1));
    assert_eq!(v["code"], a.as_str());
    // The tenant views, once the owners are read.
    let v = wait_live(&s, ADMIN, "/api/v1/live?app=demo", (10, 1)).await;
    assert_eq!(codes(&v), [(a.clone(), 8), (b.clone(), 2)]);
    assert_eq!(at_minute(&v, minute(half)), (5, 1));
    let v = wait_live(&s, ADMIN, "/api/v1/live?kdt_id=55", (8, 1)).await;
    assert_eq!(codes(&v), [(a.clone(), 8)]);
    let v = wait_live(&s, ADMIN, "/api/v1/live?app=demo&limit=1", (10, 1)).await;
    assert_eq!(codes(&v), [(a.clone(), 8)]);
    // Tenancy as for stats: the shop sees its own, never the demo app's.
    wait_live(&s, SHOP, "/api/v1/live?app=shop", (7, 2)).await;
    let (st, v) = get(&s, SHOP, "/api/v1/live?app=demo").await;
    assert_eq!((st, totals(&v)), (200, (0, 0)));
    let (st, _) = get(&s, SHOP, &format!("/api/v1/links/{a}/live")).await;
    assert_eq!(st, 404, "another app's link is unknown");
    // A merchant key: its merchant's links, in any app's tenant.
    wait_live(&s, M55, "/api/v1/live?app=demo", (8, 1)).await;
    let (st, v) = get(&s, M55, "/api/v1/live?kdt_id=77").await;
    assert_eq!((st, totals(&v)), (200, (0, 0)));
    wait_live(&s, M55, &format!("/api/v1/links/{a}/live"), (8, 1)).await;
    let (st, _) = get(&s, M55, &format!("/api/v1/links/{b}/live")).await;
    assert_eq!(st, 404);

    // Bad queries and no key.
    for (path, kind) in [
        (format!("/api/v1/links/{a}/live?from=x"), "invalid_query"),
        ("/api/v1/live".to_owned(), "invalid_tenant"),
        (
            "/api/v1/live?app=demo&kdt_id=55".to_owned(),
            "invalid_tenant",
        ),
        ("/api/v1/live?kdt_id=-1".to_owned(), "invalid_kdt_id"),
        ("/api/v1/live?app=demo&limit=0".to_owned(), "invalid_limit"),
        ("/api/v1/live?app=demo&app=shop".to_owned(), "invalid_query"),
    ] {
        let (st, v) = get(&s, ADMIN, &path).await;
        assert_eq!((st, v["error"].as_str()), (400, Some(kind)), "{path}: {v}");
    }
    let r = s
        .origin
        .http
        .get(s.origin.url(&format!("/api/v1/links/{a}/live")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);

    // Killed and started again: the hour is read back from the stream,
    // the same counts, none twice.
    s.origin.restart();
    let v = wait_live(&s, ADMIN, &format!("/api/v1/links/{a}/live"), (8, 1)).await;
    assert_eq!(at_minute(&v, minute(half)), (3, 1));
    wait_live(&s, ADMIN, "/api/v1/live?app=demo", (10, 1)).await;
    // A new batch counts at once, in the current minute.
    xadd(&s, &hours_batch("e2:n:2", &[(&a, hour, 1, 0)])).await;
    wait_live(&s, ADMIN, &format!("/api/v1/links/{a}/live"), (9, 1)).await;
    assert!(support::clicks::metric(&s.origin, "shorturl_clicks_live_links").await >= 3);
}
