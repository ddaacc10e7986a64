//! Fleet-wide invalidation, origin side: versioned records written by
//! compare-and-set, the `su:1:inval` messages, and the outbox that makes the
//! Redis side of a change survive a Redis outage.

use crate::support;

use serde_json::json;
use std::path::Path;
use std::time::Duration;
use support::{eventually, Setup, KEY};
use testkit::TempDir;

const WAIT: Duration = Duration::from_secs(20);

fn wait_file(what: &str, p: &Path) {
    testkit::wait_for(what, WAIT, || p.exists());
}

/// A lookup reads MySQL (the link is live), then the link is deleted and
/// the delete reaches Redis and the channel, then the lookup's write-back
/// runs: the compare-and-set refuses it, so Redis keeps the negative and the
/// link stays gone. (With a plain SET the old record would be back in Redis
/// for its whole TTL, redirecting on every edge that misses.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_racing_a_delete_cannot_resurrect_the_link() {
    let dir = TempDir::new("race");
    let hold = dir.path().join("hold");
    let spec = format!("origin.writeback.hold=race-0001@{}", hold.display());
    let s = Setup::start_with(|o| *o = o.clone().failpoints(&spec));
    let o = &s.origin;
    let code = o
        .create_ok(json!({"url": "https://race.example/", "code": "race-0001"}))
        .await;
    let rec = s.redis_record(&code).await.unwrap();
    assert!(rec.starts_with("2 1 "), "{rec}");
    // Make the next lookup miss Redis, and hold its write-back.
    let mut r = s.redis_conn().await;
    let _: () = redis::cmd("DEL")
        .arg(shorturl_common::keys::link_key("sho.rt", &code))
        .query_async(&mut r)
        .await
        .unwrap();
    std::fs::write(&hold, b"").unwrap();
    let lookup = {
        let http = o.http.clone();
        let url = o.url(&format!("/internal/v1/records/{code}?domain=sho.rt"));
        tokio::spawn(async move {
            let r = http.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    let held = dir.path().join("hold.held");
    tokio::task::spawn_blocking(move || wait_file("the lookup to read MySQL and hold", &held))
        .await
        .unwrap();

    // The delete commits, reaches Redis and is announced while the lookup waits.
    let mut sub = s.subscribe().await;
    let (st, v) = o.delete(KEY, &code).await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(2)), "{v}");
    assert_eq!(sub.next_for(&code, WAIT).await, format!("2 {code} sho.rt"));
    assert_eq!(s.redis_record(&code).await.as_deref(), Some("- 2"));

    // Release the stale write-back.
    std::fs::remove_file(&hold).unwrap();
    let (st, body) = lookup.await.unwrap();
    // The lookup started before the delete and answers what it read then...
    assert_eq!(st, 200, "{body}");
    assert!(body.starts_with("2 1 "), "{body}");
    // ...but Redis keeps the newer negative, and the link stays gone.
    assert_eq!(s.redis_record(&code).await.as_deref(), Some("- 2"));
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);
    let (st, body) = o
        .get_text(
            &format!("/internal/v1/records/{code}?domain=sho.rt"),
            "sho.rt",
        )
        .await;
    assert_eq!((st, body.as_str()), (404, "- 2"));
}

/// An edit is announced exactly once, with the new version, after Redis
/// holds the new record; an edit that changes nothing is not announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_publishes_exactly_one_message_with_the_new_version() {
    let s = Setup::start();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://v1.example/"})).await;
    let mut sub = s.subscribe().await;
    let (st, v) = o
        .patch(KEY, &code, json!({"url": "https://v2.example/"}))
        .await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(2)), "{v}");
    assert_eq!(sub.next_for(&code, WAIT).await, format!("2 {code} sho.rt"));
    let rec = s.redis_record(&code).await.unwrap();
    assert!(rec.starts_with("2 2 "), "{rec}");
    assert!(rec.ends_with(" sho.rt https://v2.example/"), "{rec}");
    // The same value again: 200, no new version, no message. The next
    // message on the channel is the next real change's, so neither a
    // duplicate of version 2 nor a message for the no-op was sent.
    let (st, v) = o
        .patch(KEY, &code, json!({"url": "https://v2.example/"}))
        .await;
    assert_eq!((st, v["version"].as_u64()), (200, Some(2)), "{v}");
    let (st, v) = o.patch(KEY, &code, json!({"state": "disabled"})).await;
    assert_eq!((st, v["state"].as_str()), (200, Some("disabled")), "{v}");
    assert_eq!(sub.next(WAIT).await.unwrap(), format!("3 {code} sho.rt"));
    assert_eq!(s.redis_record(&code).await.as_deref(), Some("- 3"));
    assert_eq!(o.follow("sho.rt", &code).await.0, 404);
    // Each request answered only once its row was applied and deleted (by
    // itself, or by the drainer it waited for)...
    assert_eq!(s.sql("SELECT COUNT(*) FROM outbox").trim(), "0");
    // ...but `pending` is the drainer's last look (every 200 ms), which may
    // have fallen between the last patch's commit and its apply: wait for
    // the next look, then the counters are exact.
    eventually("the drainer's backlog figure to clear", WAIT, || async {
        o.status().await.outbox.pending == 0
    })
    .await;
    let st = o.status().await;
    assert_eq!(
        (st.outbox.pending, st.outbox.applied, st.outbox.failed),
        (0, 2, 0),
        "{st:?}"
    );
}

/// A creation is announced too (best-effort): a negative cached for a
/// custom code before it existed is replaced at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_replaces_a_cached_negative_and_is_announced() {
    let s = Setup::start();
    let o = &s.origin;
    assert_eq!(o.follow("sho.rt", "soon-0001").await.0, 404);
    assert_eq!(s.redis_record("soon-0001").await.as_deref(), Some("- 0"));
    let mut sub = s.subscribe().await;
    o.create_ok(json!({"url": "https://soon.example/", "code": "soon-0001"}))
        .await;
    assert_eq!(sub.next_for("soon-0001", WAIT).await, "1 soon-0001 sho.rt");
    let rec = s.redis_record("soon-0001").await.unwrap();
    assert!(rec.starts_with("2 1 "), "{rec}");
    assert_eq!(o.follow("sho.rt", "soon-0001").await.0, 302);
}

/// Redis down during a delete: the delete answers 200 (MySQL is the
/// truth), its outbox row stays, the drainer keeps retrying; once Redis is
/// back the drainer writes `- <v>` and publishes `<v> <code>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_during_a_delete_then_the_outbox_drains() {
    let dir = TempDir::new("outbox");
    let hold = dir.path().join("hold");
    let spec = format!("origin.outbox.hold={}", hold.display());
    let mut s = Setup::start_with(|o| *o = o.clone().failpoints(&spec));
    let code = s
        .origin
        .create_ok(json!({"url": "https://doomed.example/"}))
        .await;
    assert_eq!(s.origin.follow("sho.rt", &code).await.0, 302);

    s.redis.stop();
    let (st, v) = s.origin.delete(KEY, &code).await;
    assert_eq!(
        (st, v),
        (200, json!({"code": code, "state": "deleted", "version": 2}))
    );
    assert_eq!(
        s.sql("SELECT code, version FROM outbox").trim(),
        format!("{code}\t2")
    );
    // The origin itself already answers from MySQL.
    assert_eq!(s.origin.follow("sho.rt", &code).await.0, 404);
    // The drainer sees the row and keeps failing on it (the request's own
    // attempt failed first).
    let o = &s.origin;
    eventually("the drainer to retry", WAIT, || async {
        let st = o.status().await.outbox;
        st.pending == 1 && st.failed >= 2 && st.applied == 0
    })
    .await;
    // Hold the drainer (the failpoint only pauses it, so the subscription
    // below cannot miss the message), bring Redis back, empty.
    std::fs::write(&hold, b"").unwrap();
    let held = dir.path().join("hold.held");
    tokio::task::spawn_blocking(move || wait_file("the drainer to hold", &held))
        .await
        .unwrap();
    s.redis.restart();
    let mut sub = s.subscribe().await;
    assert_eq!(s.redis_record(&code).await, None);
    let st = s.origin.status().await.outbox;
    assert_eq!(st.pending, 1, "{st:?}");
    assert!(st.oldest_age_ms > 0, "{st:?}");
    std::fs::remove_file(&hold).unwrap();

    assert_eq!(sub.next_for(&code, WAIT).await, format!("2 {code} sho.rt"));
    assert_eq!(s.redis_record(&code).await.as_deref(), Some("- 2"));
    assert_eq!(s.sql("SELECT COUNT(*) FROM outbox").trim(), "0");
    let o = &s.origin;
    eventually("the backlog figures to clear", WAIT, || async {
        let st = o.status().await.outbox;
        (st.pending, st.applied, st.oldest_age_ms) == (0, 1, 0)
    })
    .await;
    let metrics = o.metrics().await;
    for line in [
        "shorturl_outbox_pending 0",
        "shorturl_outbox_applied_total 1",
        "shorturl_outbox_oldest_age_seconds 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in\n{metrics}"
        );
    }
    assert!(o.log().contains("outbox"), "{}", o.log());
}
