//! Miss coalescing at the origin: concurrent misses for one code share one
//! MySQL read (`common::singleflight`), however they interleave with the
//! write-back, and a lookup that dies leaves nothing behind.

use crate::support;

use serde_json::json;
use shorturl_common::error::ErrorBody;
use support::Setup;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_for_one_code_share_one_mysql_lookup() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://cold.example/"})).await;
    // Ten waves of 200 concurrent misses (the Redis record removed before
    // each): one MySQL read per wave, however the requests interleave with
    // the write-back. A last wave without removal reads MySQL not at all.
    const WAVES: u64 = 10;
    for wave in 0..=WAVES {
        let mut r = s.redis_conn().await;
        if wave < WAVES {
            let _: () = redis::cmd("DEL")
                .arg(shorturl_common::keys::link_key("sho.rt", &code))
                .query_async(&mut r)
                .await
                .unwrap();
        }
        let before = o.status().await;
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(200));
        let mut tasks = Vec::new();
        for _ in 0..200 {
            let http = o.http.clone();
            let url = o.url(&format!("/{code}"));
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                http.get(url)
                    .header("Host", "sho.rt")
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 302);
        }
        let st = o.status().await;
        let selects = st.mysql.select - before.mysql.select;
        assert_eq!(selects, u64::from(wave < WAVES), "wave {wave}: {st:?}");
        assert_eq!(st.mysql.error, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_that_panics_fails_once_and_the_next_request_resolves() {
    let s = Setup::start_with(|o| {
        *o = o.clone().failpoints("origin.lookup.panic=pan1c0");
    });
    let o = &s.origin;
    o.create_ok(json!({"url": "https://panic.example/", "code": "pan1c0"}))
        .await;
    let mut r = s.redis_conn().await;
    let _: () = redis::cmd("DEL")
        .arg(shorturl_common::keys::link_key("sho.rt", "pan1c0"))
        .query_async(&mut r)
        .await
        .unwrap();
    let resp = o
        .http
        .get(o.url("/pan1c0"))
        .header("Host", "sho.rt")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert!(resp.headers().contains_key("retry-after"));
    let body: ErrorBody = resp.json().await.unwrap();
    assert_eq!(body.error, "unavailable");
    // The dead leader left nothing behind: the next request starts a new
    // lookup, which resolves (the failpoint fires once per process).
    assert_eq!(
        o.follow("sho.rt", "pan1c0").await,
        (302, Some("https://panic.example/".into()))
    );
    assert!(o.log().contains("lookup task failed"), "{}", o.log());
}
