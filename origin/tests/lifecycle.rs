//! The link lifecycle (issue 11): the reaper marks links past their expiry
//! `expired` (exactly those), one origin at a time under a lease that a
//! survivor takes over once a killed holder's lease ran out; a reaped link's
//! Redis record is negative and announced; its owner renews it with PATCH;
//! `shorturl-origin reap` runs a pass by hand under the same lease.
//!
//! Time is the test's: links get a past `expires_at` by SQL, so nothing
//! waits for a real expiry.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use shorturl_common::time::{now_unix, rfc3339};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use support::{count, eventually, origin_bin, Origin, Setup, KEY};

const WAIT: Duration = Duration::from_secs(30);
/// A pass every second and a 2 s lease (heartbeat every ~0.67 s).
const FAST: &str = "lifecycle: {reap_interval_secs: 1, lease_ttl_secs: 2}\n";

fn quoted(codes: &[String]) -> String {
    codes
        .iter()
        .map(|c| format!("'{c}'"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Puts the expiry of `codes` 10 s in the past (one statement).
fn expire(s: &Setup, codes: &[String]) {
    s.sql(&format!(
        "UPDATE short_code SET expires_at = UNIX_TIMESTAMP() - 10 WHERE code IN ({})",
        quoted(codes)
    ));
}

fn reaped_codes(s: &Setup) -> BTreeSet<String> {
    s.sql("SELECT code FROM short_code WHERE state = 5")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The value of an unlabelled metric of `o` (it must be there).
async fn metric(o: &Origin, name: &str) -> i64 {
    support::metric_value(o, name)
        .await
        .unwrap_or_else(|| panic!("{name} not in /metrics")) as i64
}

async fn create_many(o: &Origin, tag: &str, n: usize) -> Vec<String> {
    let mut codes = Vec::new();
    for i in 0..n {
        codes.push(
            o.create_ok(json!({"url": format!("https://{tag}.example/{i}")}))
                .await,
        );
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_marks_exactly_the_expired_links_and_their_owner_can_renew_them() {
    let s = Setup::start_with(|o| o.extra_yaml = FAST.into());
    let o = &s.origin;
    let codes = create_many(o, "life", 20).await;
    // 0..8 active, 8..10 disabled, 10 deleted: all past their expiry.
    // 11..20 live. Deleted stays deleted; the rest must not change.
    for c in &codes[8..10] {
        assert_eq!(o.patch(KEY, c, json!({"state": "disabled"})).await.0, 200);
    }
    assert_eq!(o.delete(KEY, &codes[10]).await.0, 200);
    for c in &codes[0..8] {
        let rec = s.redis_record(c).await.unwrap();
        assert!(rec.starts_with("2 1 "), "{rec}");
    }
    let mut sub = s.subscribe().await;
    expire(&s, &codes[0..11]);
    let expected: BTreeSet<String> = codes[0..10].iter().cloned().collect();
    eventually("10 links reaped and applied to Redis", WAIT, || async {
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 5") == 10
            && count(&s, "SELECT COUNT(*) FROM outbox") == 0
    })
    .await;
    assert_eq!(reaped_codes(&s), expected);
    assert_eq!(
        count(
            &s,
            "SELECT COUNT(*) FROM link_audit WHERE action = 'expire' AND actor = 'reaper'"
        ),
        10
    );
    assert_eq!(
        s.sql(&format!(
            "SELECT state FROM short_code WHERE code = '{}'",
            codes[10]
        ))
        .trim(),
        "4"
    );
    assert_eq!(
        count(
            &s,
            &format!(
                "SELECT COUNT(*) FROM short_code WHERE state = 1 AND version = 1 AND reaped_at IS NULL \
                 AND code IN ({})",
                quoted(&codes[11..])
            )
        ),
        9
    );

    // Redis holds the negative of the new version, and every edge was told.
    let versions: BTreeMap<String, u64> = s
        .sql(&format!(
            "SELECT code, version FROM short_code WHERE code IN ({})",
            quoted(&codes[0..10])
        ))
        .lines()
        .map(|l| {
            let (c, v) = l.split_once('\t').unwrap();
            (c.to_owned(), v.parse().unwrap())
        })
        .collect();
    let mut announced: BTreeMap<String, u64> = BTreeMap::new();
    while announced.len() < 10 {
        let m = sub.next(WAIT).await.expect("an invalidation message");
        let mut parts = m.split(' ');
        let (v, c) = (parts.next().unwrap(), parts.next().unwrap());
        assert_eq!(parts.next(), Some("sho.rt"), "{m}");
        assert!(
            announced.insert(c.to_owned(), v.parse().unwrap()).is_none(),
            "{m}"
        );
    }
    assert_eq!(announced, versions);
    for (c, v) in &versions {
        assert_eq!(s.redis_record(c).await, Some(format!("- {v}")), "{c}");
        assert_eq!(o.follow("sho.rt", c).await.0, 404);
    }

    // The API shows them expired, with when; the search finds exactly them.
    let (st, v, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/links/{}", codes[0]),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!((st, &v["state"]), (200, &json!("expired")), "{v}");
    assert!(v["reaped_at"].is_string(), "{v}");
    let (st, page, _) = o
        .call(Method::GET, "/api/v1/links?state=expired", KEY, None, &[])
        .await;
    assert_eq!(st, 200);
    let found: BTreeSet<String> = page["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(found, expected);

    // Metrics: what this (only) origin reaped, and no backlog left.
    eventually("the reaper metrics", WAIT, || async {
        metric(o, "shorturl_lifecycle_reaped_total").await == 10
            && metric(o, "shorturl_lifecycle_backlog").await == 0
    })
    .await;
    assert_eq!(metric(o, "shorturl_lifecycle_lease_held").await, 1);
    assert!(
        metric(o, "shorturl_lifecycle_last_run_timestamp_seconds").await >= now_unix() as i64 - 60
    );

    // Renewal: a later expiry makes it active again (disabled ones too).
    let later = now_unix() + 5 * 86_400;
    for c in [&codes[0], &codes[8]] {
        let (st, v) = o.patch(KEY, c, json!({"expires_at": rfc3339(later)})).await;
        assert_eq!(
            (st, &v["state"], &v["reaped_at"], &v["expires_at_unix"]),
            (200, &json!("active"), &Value::Null, &json!(later)),
            "{v}"
        );
    }
    assert_eq!(
        o.follow("sho.rt", &codes[0]).await,
        (302, Some("https://life.example/0".into()))
    );
    let (_, h, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/links/{}/history", codes[0]),
            KEY,
            None,
            &[],
        )
        .await;
    let actions: Vec<(&str, &str)> = h["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [("renew", "demo"), ("expire", "reaper"), ("create", "demo")]
    );
    // Any other edit of an expired link is refused and changes nothing.
    let (st, v) = o
        .patch(KEY, &codes[1], json!({"url": "https://other.example/"}))
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("link_expired")),
        "{v}"
    );
    let (st, v) = o.patch(KEY, &codes[1], json!({"state": "active"})).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("link_expired")),
        "{v}"
    );
    assert_eq!(
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 5"),
        8
    );
    assert_eq!(o.follow("sho.rt", &codes[1]).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_origin_reaps_at_a_time_and_a_killed_holder_is_taken_over() {
    let s = Setup::start_with(|o| o.extra_yaml = FAST.into());
    let a = &s.origin;
    let mut opts = a.opts.clone();
    opts.port = testkit::free_port();
    opts.pregen = 0;
    let b = Origin::start(opts);
    let codes = create_many(a, "lease", 50).await;

    eventually("one origin to hold the lease", WAIT, || async {
        metric(a, "shorturl_lifecycle_lease_held").await
            + metric(&b, "shorturl_lifecycle_lease_held").await
            == 1
    })
    .await;
    let (holder, other) = if metric(a, "shorturl_lifecycle_lease_held").await == 1 {
        (a, &b)
    } else {
        (&b, a)
    };
    let lease = s.sql("SELECT holder FROM leases WHERE name = 'reaper'");
    assert!(
        lease.starts_with(&format!("{}/serve/", holder.proc.pid())),
        "{lease}"
    );

    // 30 expire: the holder reaps each exactly once, the other none.
    expire(&s, &codes[0..30]);
    eventually("30 links reaped", WAIT, || async {
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 5") == 30
    })
    .await;
    assert_eq!(reaped_codes(&s), codes[0..30].iter().cloned().collect());
    assert_eq!(
        count(
            &s,
            "SELECT COUNT(*) FROM link_audit WHERE action = 'expire'"
        ),
        30
    );
    assert_eq!(metric(holder, "shorturl_lifecycle_reaped_total").await, 30);
    assert_eq!(metric(other, "shorturl_lifecycle_reaped_total").await, 0);
    assert_eq!(metric(other, "shorturl_lifecycle_lease_held").await, 0);

    // The holder dies; the other takes over once the lease ran out (2 s
    // after its last heartbeat, at most ~0.67 s before the kill).
    let killed = Instant::now();
    holder.crash();
    expire(&s, &codes[30..50]);
    eventually("the survivor to take the lease over", WAIT, || async {
        metric(other, "shorturl_lifecycle_lease_held").await == 1
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(1200),
        "taken over after {took:?}"
    );
    let lease = s.sql("SELECT holder FROM leases WHERE name = 'reaper'");
    assert!(
        lease.starts_with(&format!("{}/serve/", other.proc.pid())),
        "{lease}"
    );
    eventually("the other 20 reaped by the survivor", WAIT, || async {
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 5") == 50
            && count(&s, "SELECT COUNT(*) FROM outbox") == 0
    })
    .await;
    assert_eq!(
        count(
            &s,
            "SELECT COUNT(*) FROM link_audit WHERE action = 'expire'"
        ),
        50
    );
    assert_eq!(metric(other, "shorturl_lifecycle_reaped_total").await, 20);
    for c in &codes[30..50] {
        let rec = s.redis_record(c).await.unwrap();
        assert!(rec.starts_with("- "), "{c}: {rec}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_by_hand_takes_the_lease_and_applies_to_redis() {
    let s = Setup::start_with(|o| o.extra_yaml = "lifecycle: {enabled: false}\n".into());
    let o = &s.origin;
    let codes = create_many(o, "manual", 15).await;
    expire(&s, &codes[0..12]);

    // While another process holds the lease, a manual run refuses.
    s.sql(
        "INSERT INTO leases (name, holder, expires_at_ms) VALUES ('reaper', '999/serve/x', \
           UNIX_TIMESTAMP() * 1000 + 600000)",
    );
    let out = std::process::Command::new(origin_bin())
        .arg("-c")
        .arg(&o.config)
        .args(["reap", "--quiet"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(text.contains("held by 999/serve/x"), "{text}");
    assert_eq!(
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 5"),
        0
    );

    // Once it ran out, the run reaps exactly the 12 and applies them.
    s.sql("UPDATE leases SET expires_at_ms = 0");
    let text = testkit::origin::run(&o.config, &["reap", "--quiet"]);
    assert!(text.contains("reap: 12 links marked expired"), "{text}");
    assert_eq!(reaped_codes(&s), codes[0..12].iter().cloned().collect());
    // The run applied the outbox before it ended (the serving origin's
    // drainer may have taken some of the rows: together, all of them).
    eventually("the outbox applied", WAIT, || async {
        count(&s, "SELECT COUNT(*) FROM outbox") == 0
    })
    .await;
    for c in &codes[0..12] {
        let rec = s.redis_record(c).await.unwrap();
        assert!(rec.starts_with("- "), "{c}: {rec}");
    }
    // It gave the lease up; a second run finds nothing.
    assert_eq!(
        count(&s, "SELECT expires_at_ms FROM leases WHERE name = 'reaper'"),
        0
    );
    let text = testkit::origin::run(&o.config, &["reap", "--quiet"]);
    assert!(text.contains("reap: 0 links marked expired"), "{text}");
    assert_eq!(
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 5"),
        12
    );
}

/// The reaper's read is an index range, never a scan, even when almost
/// every row is a link that has not expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_reads_an_index_range() {
    let s = Setup::start_with(|o| {
        o.pregen = 2000;
        o.extra_yaml = "lifecycle: {enabled: false}\n".into();
    });
    s.sql(
        "INSERT INTO short_code (id, code, state, created_at, expires_at) \
         SELECT id, code, 1, 1, 4000000000 FROM code_pool WHERE id <= 1900; \
         DELETE FROM code_pool WHERE id <= 1900; \
         UPDATE short_code SET expires_at = 1000 WHERE id <= 5; ANALYZE TABLE short_code",
    );
    let sql = shorturl_origin::store::lifecycle::REAP_FROM
        .replacen('?', "1", 1)
        .replacen('?', "3", 1)
        .replacen('?', &now_unix().to_string(), 1);
    // ANALYZE runs the statement: `type`, `key` and `r_rows` (rows read).
    let plan = s.sql(&format!("ANALYZE SELECT id {sql}"));
    let cols: Vec<&str> = plan.trim().split('\t').collect();
    assert_eq!(
        (cols[2], cols[3], cols[5]),
        ("short_code", "range", "idx_state_expires"),
        "{plan}"
    );
    assert_eq!(cols[9].parse::<f64>().ok(), Some(5.0), "{plan}");
}
