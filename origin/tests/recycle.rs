//! Code recycling (issue 11, item 2): a pre-generated code whose link was
//! deleted or reaped at least the quarantine ago, with no click since and
//! never served with a permanent redirect, is appended to the pool again
//! (a new row past the end), its old row archived, in one transaction; the
//! issuer hands it out again exactly once, with a version above the old
//! link's. One test per condition: each keeps a code that breaks only it
//! beside a control code that is recycled in the same pass.
//!
//! Time is the test's: `ended_at` is written into the past by SQL.

use crate::support;

use reqwest::Method;
use serde_json::json;
use shorturl_common::keys;
use shorturl_common::time::{now_unix, rfc3339};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use support::{check_config, count, eventually, Origin, OriginOpts, Setup, KEY};
use tokio::sync::Barrier;

const WAIT: Duration = Duration::from_secs(30);
const DAY: u64 = 86_400;
/// A pass every second, a 2 s lease, recycling on (quarantine 180 days).
const RECYCLE: &str = "lifecycle: {reap_interval_secs: 1, lease_ttl_secs: 2, recycle: true}\n";

fn one(s: &Setup, sql: &str) -> String {
    s.sql(sql).trim().to_owned()
}

/// Sets when `code`'s link ended to `days_ago` days (and `extra` seconds) ago.
fn ended_ago(s: &Setup, code: &str, days_ago: u64, extra: u64) {
    s.sql(&format!(
        "UPDATE short_code SET ended_at = UNIX_TIMESTAMP() - {} WHERE code = '{code}'",
        days_ago * DAY + extra
    ));
}

fn archived(s: &Setup) -> BTreeSet<String> {
    s.sql("SELECT code FROM short_code_archive")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The value of metric line `name` (with its labels) of `o`, 0 if absent.
async fn metric(o: &Origin, name: &str) -> i64 {
    support::metric_value(o, name).await.unwrap_or(0.0) as i64
}

/// Waits until `o`'s reaper finished a pass that started after this call.
async fn next_pass(o: &Origin) {
    let after = now_unix() as i64;
    eventually("a reaper pass", WAIT, || async {
        metric(o, "shorturl_lifecycle_last_run_timestamp_seconds").await > after
    })
    .await;
}

/// Creates and deletes a link; returns its code.
async fn deleted(o: &Origin, tag: &str) -> String {
    let code = o
        .create_ok(json!({"url": format!("https://{tag}.example/")}))
        .await;
    assert_eq!(o.delete(KEY, &code).await.0, 200);
    code
}

/// Waits until `code` is in the archive and its outbox row applied.
async fn wait_recycled(s: &Setup, code: &str) {
    eventually(&format!("{code} recycled and applied"), WAIT, || async {
        archived(s).contains(code) && count(s, "SELECT COUNT(*) FROM outbox") == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recycled_code_never_resolves_to_its_old_link_and_is_issued_again_above_its_version() {
    const ADMIN: &str = "recycle-admin";
    let s = Setup::start_with(|o| {
        o.extra_yaml = RECYCLE.into();
        o.pregen = 10;
        o.apps_yaml = format!(
            "  - {{name: ops, key_sha256: {}, scopes: [admin]}}\n",
            support::sha256_hex(ADMIN)
        );
    });
    let o = &s.origin;
    let mut codes = Vec::new();
    for i in 0..10 {
        codes.push(
            o.create_ok(json!({"url": format!("https://old.example/{i}")}))
                .await,
        );
    }
    let old = codes[3].clone();
    // Creation records the status the link is served with (the default 302).
    assert_eq!(
        one(
            &s,
            &format!("SELECT redirect_status FROM short_code WHERE code = '{old}'")
        ),
        "302"
    );
    assert_eq!(o.delete(KEY, &old).await.0, 200);
    assert_eq!(
        one(
            &s,
            &format!("SELECT ended_at IS NOT NULL FROM short_code WHERE code = '{old}'")
        ),
        "1"
    );
    let old_id: u64 = one(
        &s,
        &format!("SELECT id FROM short_code WHERE code = '{old}'"),
    )
    .parse()
    .unwrap();
    // A fresh deletion is in quarantine: a pass leaves it.
    next_pass(o).await;
    assert!(archived(&s).is_empty());

    let mut sub = s.subscribe().await;
    ended_ago(&s, &old, 181, 0);
    wait_recycled(&s, &old).await;
    // One transaction did all of it: archived with the old link, deleted
    // from the live table, appended free at id 11 one version up.
    assert_eq!(
        one(
            &s,
            &format!(
                "SELECT id, state, long_url, version, archived_at > 0 FROM short_code_archive \
                 WHERE code = '{old}'"
            )
        ),
        format!("{old_id}\t4\thttps://old.example/3\t2\t1")
    );
    assert_eq!(
        one(
            &s,
            &format!("SELECT id, version FROM code_pool WHERE code = '{old}'")
        ),
        "11\t3"
    );
    assert_eq!(
        one(&s, "SELECT value FROM meta WHERE name = 'pregen_done'"),
        "11"
    );
    assert_eq!(
        one(&s, "SELECT value FROM meta WHERE name = 'recycled_total'"),
        "1"
    );
    assert_eq!(
        count(
            &s,
            &format!(
                "SELECT COUNT(*) FROM link_audit WHERE code = '{old}' AND action = 'recycle' \
                 AND actor = 'reaper' AND version = 3"
            )
        ),
        1
    );
    // Redis holds the free row's negative, and every edge was told.
    assert_eq!(sub.next_for(&old, WAIT).await, format!("3 {old} sho.rt"));
    assert_eq!(s.redis_record(&old).await.as_deref(), Some("- 3"));
    assert_eq!(
        o.get_text(
            &format!("/internal/v1/records/{old}?domain=sho.rt"),
            "sho.rt"
        )
        .await,
        (404, "- 3".to_owned())
    );
    assert_eq!(o.follow("sho.rt", &old).await.0, 404);
    // The old link is gone for its owner: no renewal, no read, no history.
    let (st, v) = o
        .patch(
            KEY,
            &old,
            json!({"expires_at": rfc3339(now_unix() + 30 * DAY)}),
        )
        .await;
    assert_eq!((st, v["error"].as_str()), (404, Some("not_found")), "{v}");
    assert_eq!(o.read_raw(KEY, &old).await.0, 404);
    // A stale write-back of the old link (version 2) loses the compare-and-set.
    let mut r = s.redis_conn().await;
    let wrote: i64 = redis::Script::new(shorturl_origin::cache::CAS_SCRIPT)
        .key(keys::link_key("sho.rt", &old))
        .arg(2)
        .arg("2 2 4102444800 sho.rt https://old.example/3")
        .arg(60)
        .arg("")
        .arg("")
        .invoke_async(&mut r)
        .await
        .unwrap();
    assert_eq!(wrote, 0);

    // The pool grew by one; the next creation gets the recycled code.
    eventually("the pool to show the recycled code", WAIT, || async {
        let p = o.status().await.pool;
        (p.size, p.issued, p.free, p.recycled) == (11, 10, 1, 1)
    })
    .await;
    assert_eq!(metric(o, "shorturl_lifecycle_recycled_total").await, 1);
    assert_eq!(metric(o, "shorturl_pool_recycled").await, 1);
    let (st, v) = o.create(json!({"url": "https://new.example/"})).await;
    assert_eq!((st, v["code"].as_str()), (201, Some(old.as_str())), "{v}");
    assert_eq!(v["version"], 4, "{v}");
    assert_eq!(
        o.follow("sho.rt", &old).await,
        (302, Some("https://new.example/".into()))
    );
    let rec = s.redis_record(&old).await.unwrap();
    assert!(
        rec.starts_with("2 4 ") && rec.ends_with(" https://new.example/"),
        "{rec}"
    );
    let (st, body) = o
        .get_text(
            &format!("/internal/v1/records/{old}?domain=sho.rt"),
            "sho.rt",
        )
        .await;
    assert!(
        st == 200 && body.starts_with("2 4 ") && body.ends_with("https://new.example/"),
        "{body}"
    );
    // The new link's history is its own: the old life stays in link_audit
    // (rows up to the `recycle` row) and short_code_archive.
    let (st, h, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/links/{old}/history"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200, "{h}");
    let actions: Vec<&str> = h["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["create"], "{h}");
    assert_eq!(
        count(
            &s,
            &format!("SELECT COUNT(*) FROM link_audit WHERE code = '{old}'")
        ),
        4
    );
    // The old link's clicks (from before its quarantine) are not the new
    // owner's: the stats count from the new link's creation on.
    let now = shorturl_common::time::now_unix();
    let (then, today) = (now - 200 * 86_400, now - now % 86_400);
    let then_day = then - then % 86_400;
    s.sql(&format!(
        "INSERT INTO click_hour (code, hour, human, bot) VALUES ('{old}', {h}, 50, 5); \
         INSERT INTO click_day_device (code, day, class, n) VALUES \
         ('{old}', {then_day}, 'desktop', 50), ('{old}', {then_day}, 'bot', 5), \
         ('{old}', {today}, 'mobile', 3), ('{old}', {today}, 'bot', 1);",
        h = then - then % 3600,
    ));
    let range = format!(
        "from={}&to={}",
        shorturl_common::time::rfc3339(now - 300 * 86_400),
        shorturl_common::time::rfc3339(now + 86_400)
    );
    for interval in ["day", "hour"] {
        let (st, v, _) = o
            .call(
                Method::GET,
                &format!("/api/v1/links/{old}/stats?{range}&interval={interval}"),
                ADMIN,
                None,
                &[],
            )
            .await;
        if interval == "hour" {
            // 300 days of hours is over the series bound: a 400, not the old clicks.
            assert_eq!(st, 400, "{v}");
            continue;
        }
        assert_eq!(st, 200, "{v}");
        assert_eq!(
            (&v["totals"]["human"], &v["totals"]["bot"]),
            (&json!(3), &json!(1)),
            "{v}"
        );
    }
    // Exhausted again: the recycled code was issued once.
    assert_eq!(
        o.create(json!({"url": "https://more.example/"})).await.0,
        503
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_link_is_recycled_from_its_reaping() {
    let s = Setup::start_with(|o| o.extra_yaml = RECYCLE.into());
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://exp.example/"})).await;
    s.sql(&format!(
        "UPDATE short_code SET expires_at = UNIX_TIMESTAMP() - 10 WHERE code = '{code}'"
    ));
    eventually("reaped with ended_at", WAIT, || async {
        one(
            &s,
            &format!("SELECT state, ended_at = reaped_at FROM short_code WHERE code = '{code}'"),
        ) == "5\t1"
    })
    .await;
    ended_ago(&s, &code, 181, 0);
    wait_recycled(&s, &code).await;
    assert_eq!(
        one(
            &s,
            &format!("SELECT state FROM short_code_archive WHERE code = '{code}'")
        ),
        "5"
    );
    assert_eq!(
        one(
            &s,
            &format!("SELECT id, version FROM code_pool WHERE code = '{code}'")
        ),
        "5001\t3"
    );
    // pregen extends the pool after the appended row: new ids, new codes,
    // the recycled row untouched, no code twice.
    support::pregen(&o.config, 5010);
    assert_eq!(
        one(&s, "SELECT value FROM meta WHERE name = 'pregen_done'"),
        "5010"
    );
    assert_eq!(
        one(
            &s,
            "SELECT COUNT(*), COUNT(DISTINCT code), MIN(id), MAX(id) FROM code_pool \
             WHERE id > 5000 AND id < 1099511627776"
        ),
        "10\t10\t5001\t5010"
    );
    assert_eq!(
        one(
            &s,
            &format!("SELECT id FROM code_pool WHERE code = '{code}'")
        ),
        "5001"
    );
    // Migration 6 runs again harmlessly (a crash before it was recorded).
    s.sql(include_str!("../migrations/0006_recycle.sql"));
    assert_eq!(
        one(&s, "SELECT value FROM meta WHERE name = 'recycled_total'"),
        "1"
    );
    assert_eq!(count(&s, "SELECT COUNT(*) FROM short_code_archive"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_code_is_never_recycled() {
    let s = Setup::start_with(|o| o.extra_yaml = RECYCLE.into());
    let o = &s.origin;
    let custom = o
        .create_ok(json!({"url": "https://c.example/", "code": "promo-2030"}))
        .await;
    assert_eq!(o.delete(KEY, &custom).await.0, 200);
    let control = deleted(o, "control").await;
    // The custom code ended first: it is examined before the control.
    ended_ago(&s, &custom, 181, 10);
    ended_ago(&s, &control, 181, 0);
    wait_recycled(&s, &control).await;
    assert_eq!(archived(&s), BTreeSet::from([control]));
    assert_eq!(
        one(
            &s,
            &format!("SELECT state FROM short_code WHERE code = '{custom}'")
        ),
        "4"
    );
    assert_eq!(
        metric(
            o,
            "shorturl_lifecycle_recycle_kept_total{reason=\"custom\"}"
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_in_its_quarantine_is_kept_until_the_quarantine_is_over() {
    let s = Setup::start_with(|o| o.extra_yaml = RECYCLE.into());
    let o = &s.origin;
    let young = deleted(o, "young").await;
    let control = deleted(o, "control").await;
    ended_ago(&s, &young, 179, 0);
    ended_ago(&s, &control, 181, 0);
    wait_recycled(&s, &control).await;
    // Another pass: still kept.
    next_pass(o).await;
    assert_eq!(archived(&s), BTreeSet::from([control.clone()]));
    assert_eq!(
        one(
            &s,
            &format!("SELECT state FROM short_code WHERE code = '{young}'")
        ),
        "4"
    );
    // Its quarantine ends (one minute past 180 days): recycled.
    ended_ago(&s, &young, 180, 60);
    wait_recycled(&s, &young).await;
    assert_eq!(archived(&s), BTreeSet::from([control, young]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_clicked_after_its_end_is_kept_hourly_or_daily() {
    let s = Setup::start_with(|o| o.extra_yaml = RECYCLE.into());
    let o = &s.origin;
    let by_hour = deleted(o, "hour").await;
    let by_day = deleted(o, "day").await;
    let control = deleted(o, "control").await;
    let now: u64 = one(&s, "SELECT UNIX_TIMESTAMP()").parse().unwrap();
    let end = now - 181 * DAY;
    // A click counted in an hour after the end; another only in a daily
    // row (its hourly rows pruned); the control clicked before its end.
    // The clicks go in first: a pass may run at any moment.
    let hour = (end + 2 + 3600) / 3600 * 3600;
    let day = (end + 1 + DAY) / DAY * DAY;
    s.sql(&format!(
        "INSERT INTO click_hour (code, hour, human, bot) VALUES ('{by_hour}', {hour}, 1, 0), \
         ('{control}', {}, 5, 0); \
         INSERT INTO click_day_device (code, day, class, n) VALUES ('{by_day}', {day}, 'mobile', 1), \
         ('{control}', {}, 'mobile', 5)",
        (end - 7200) / 3600 * 3600,
        (end - 2 * DAY) / DAY * DAY,
    ));
    // In the order the recycler reads them, the control last.
    for (c, at) in [(&by_day, end + 1), (&by_hour, end + 2), (&control, end + 3)] {
        s.sql(&format!(
            "UPDATE short_code SET ended_at = {at} WHERE code = '{c}'"
        ));
    }
    wait_recycled(&s, &control).await;
    eventually("both clicked codes examined", WAIT, || async {
        metric(
            o,
            "shorturl_lifecycle_recycle_kept_total{reason=\"clicked\"}",
        )
        .await
            == 2
    })
    .await;
    assert_eq!(archived(&s), BTreeSet::from([control]));
    assert_eq!(
        count(
            &s,
            &format!("SELECT COUNT(*) FROM short_code WHERE state = 4 AND code IN ('{by_hour}', '{by_day}')")
        ),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_served_with_a_permanent_or_unknown_redirect_is_kept() {
    let s = Setup::start_with(|o| o.extra_yaml = RECYCLE.into());
    let o = &s.origin;
    // A second origin serves 301: a change through it records the
    // permanent status on the link for good.
    let mut opts: OriginOpts = o.opts.clone();
    opts.port = testkit::free_port();
    opts.pregen = 0;
    opts.extra_yaml = "redirect: {status: 301}\nlifecycle: {enabled: false}\n".into();
    let mut permanent = Origin::start(opts);
    let by_patch = o.create_ok(json!({"url": "https://p.example/"})).await;
    assert_eq!(
        permanent
            .patch(KEY, &by_patch, json!({"url": "https://p.example/2"}))
            .await
            .0,
        200
    );
    assert_eq!(
        one(
            &s,
            &format!("SELECT redirect_status FROM short_code WHERE code = '{by_patch}'")
        ),
        "301"
    );
    // A later change under 302 does not forget it.
    assert_eq!(o.delete(KEY, &by_patch).await.0, 200);
    assert_eq!(
        one(
            &s,
            &format!("SELECT redirect_status FROM short_code WHERE code = '{by_patch}'")
        ),
        "301"
    );
    let by_creation = permanent
        .create_ok(json!({"url": "https://p308.example/"}))
        .await;
    assert_eq!(
        one(
            &s,
            &format!("SELECT redirect_status FROM short_code WHERE code = '{by_creation}'")
        ),
        "301"
    );
    assert_eq!(o.delete(KEY, &by_creation).await.0, 200);
    let s308 = deleted(o, "s308").await;
    s.sql(&format!(
        "UPDATE short_code SET redirect_status = 308 WHERE code = '{s308}'"
    ));
    // Created before the status was recorded: unknown, kept.
    let unknown = deleted(o, "unknown").await;
    s.sql(&format!(
        "UPDATE short_code SET redirect_status = NULL WHERE code = '{unknown}'"
    ));
    // Served by this origin as 302 all its life, but while the other origin
    // served 301: a browser may have met it there. Kept.
    let by_era = deleted(o, "era").await;
    assert_eq!(
        one(
            &s,
            &format!("SELECT redirect_status FROM short_code WHERE code = '{by_era}'")
        ),
        "302"
    );
    let mark: u64 = one(
        &s,
        "SELECT value FROM meta WHERE name = 'permanent_redirect_until'",
    )
    .parse()
    .unwrap();
    assert!(mark > now_unix(), "the mark stays ahead of now: {mark}");
    // The 301 origin stops; its era ends (put 1000 s back, as time would).
    permanent.kill();
    s.sql(
        "UPDATE meta SET value = UNIX_TIMESTAMP() - 1000 WHERE name = 'permanent_redirect_until'; \
         UPDATE short_code SET created_at = UNIX_TIMESTAMP() - 1010 WHERE code IN ('{by_era}')"
            .replace("{by_era}", &by_era)
            .as_str(),
    );
    let control = deleted(o, "control").await;
    for (i, c) in [&by_patch, &by_creation, &s308, &unknown, &by_era]
        .iter()
        .enumerate()
    {
        ended_ago(&s, c, 181, 10 - i as u64);
    }
    ended_ago(&s, &control, 181, 0);
    wait_recycled(&s, &control).await;
    assert_eq!(archived(&s), BTreeSet::from([control]));
    assert_eq!(
        metric(
            o,
            "shorturl_lifecycle_recycle_kept_total{reason=\"permanent\"}"
        )
        .await,
        4
    );
    assert_eq!(
        metric(
            o,
            "shorturl_lifecycle_recycle_kept_total{reason=\"unknown_redirect\"}"
        )
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_origins_issue_each_recycled_code_exactly_once() {
    let block = "issuer: {block: 10, low_water: 2}\n";
    let s = Setup::start_with(|o| {
        o.extra_yaml = format!("{RECYCLE}{block}");
        o.pregen = 40;
    });
    let mut origins = vec![&s.origin];
    let mut others = Vec::new();
    for _ in 0..3 {
        let mut opts = s.origin.opts.clone();
        opts.port = testkit::free_port();
        opts.pregen = 0;
        others.push(Origin::start(opts));
    }
    origins.extend(others.iter());
    let mut codes = Vec::new();
    for i in 0..40 {
        let o = origins[i % 4];
        codes.push(
            o.create_ok(json!({"url": format!("https://fill.example/{i}")}))
                .await,
        );
    }
    let recycled: BTreeSet<String> = codes.iter().step_by(8).cloned().collect();
    assert_eq!(recycled.len(), 5);
    for c in &recycled {
        assert_eq!(s.origin.delete(KEY, c).await.0, 200);
    }
    let listed: Vec<String> = recycled.iter().map(|c| format!("'{c}'")).collect();
    s.sql(&format!(
        "UPDATE short_code SET ended_at = UNIX_TIMESTAMP() - {} WHERE code IN ({})",
        181 * DAY,
        listed.join(",")
    ));
    eventually("5 codes recycled", WAIT, || async {
        archived(&s) == recycled && count(&s, "SELECT COUNT(*) FROM outbox") == 0
    })
    .await;
    for o in &origins {
        eventually("every origin to see the pool of 45", WAIT, || async {
            o.status().await.issuer.capacity == 45
        })
        .await;
    }
    // 4 origins x 5 creations at once: exactly 5 succeed, with the 5
    // recycled codes, each once; the rest find the pool exhausted.
    let barrier = Arc::new(Barrier::new(20));
    let mut tasks = Vec::new();
    for (i, o) in origins.iter().enumerate() {
        for j in 0..5 {
            let http = o.http.clone();
            let url = o.url("/api/v1/links");
            let barrier = Arc::clone(&barrier);
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let r = http
                    .post(url)
                    .bearer_auth(KEY)
                    .json(&json!({"url": format!("https://again.example/{i}/{j}")}))
                    .send()
                    .await
                    .unwrap();
                let st = r.status().as_u16();
                (st, r.json::<serde_json::Value>().await.unwrap())
            }));
        }
    }
    let mut got = Vec::new();
    for t in tasks {
        let (st, v) = t.await.unwrap();
        match st {
            201 => got.push(v["code"].as_str().unwrap().to_owned()),
            503 => assert_eq!(v["error"], "codes_exhausted", "{v}"),
            _ => panic!("{st} {v}"),
        }
    }
    got.sort();
    let want: Vec<String> = recycled.iter().cloned().collect();
    assert_eq!(got, want);
    assert_eq!(
        count(
            &s,
            "SELECT COUNT(*) FROM short_code WHERE state = 1 AND id BETWEEN 41 AND 45 \
             AND long_url LIKE 'https://again.example/%' AND version = 4"
        ),
        5
    );
    for c in &recycled {
        let (st, loc) = origins[3].follow("sho.rt", c).await;
        assert!(
            st == 302 && loc.unwrap().starts_with("https://again.example/"),
            "{c}"
        );
    }
}

/// The recycler's read is a range of `idx_ended` after its cursor: it
/// reads neither live links nor the tombstones it already examined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recycler_reads_an_index_range_after_its_cursor() {
    let s = Setup::start_with(|o| {
        o.pregen = 2000;
        o.extra_yaml = "lifecycle: {enabled: false}\n".into();
    });
    s.sql(
        "INSERT INTO short_code (id, code, state, created_at, expires_at) \
         SELECT id, code, 1, 1, 4000000000 FROM code_pool WHERE id <= 1900; \
         DELETE FROM code_pool WHERE id <= 1900; \
         UPDATE short_code SET state = 4, ended_at = 1000 WHERE id <= 100; \
         UPDATE short_code SET state = 4, ended_at = UNIX_TIMESTAMP() WHERE id > 100 AND id <= 200; \
         ANALYZE TABLE short_code",
    );
    // Cursor (1000, 50): rows 51..100 are left of the 100 past the cutoff.
    let sql = shorturl_origin::store::recycle::RECYCLE_FROM
        .replacen('?', &(now_unix() - 180 * DAY).to_string(), 1)
        .replacen('?', "1000", 1)
        .replacen('?', "1000", 1)
        .replacen('?', "50", 1);
    // ANALYZE runs the statement: `type`, `key` and `r_rows` (rows read).
    let plan = s.sql(&format!("ANALYZE SELECT id {sql}"));
    let cols: Vec<&str> = plan.trim().split('\t').collect();
    assert_eq!(
        (cols[2], cols[3], cols[5]),
        ("short_code", "range", "idx_ended"),
        "{plan}"
    );
    assert_eq!(cols[9].parse::<f64>().ok(), Some(50.0), "{plan}");
}

#[test]
fn a_quarantine_not_longer_than_every_cache_ttl_is_refused() {
    let dir = testkit::TempDir::new("recycle-conf");
    let base =
        "listen: 127.0.0.1:1\ndefault_domain: sho.rt\nmysql: {url: 'mysql://root@127.0.0.1:1/x'}\n";
    for (extra, field) in [
        // Redis records live 6 days by default.
        ("redis: {url: 'redis://127.0.0.1:1/'}\nlifecycle: {recycle: true, quarantine_days: 5}\n", "redis.record_ttl_secs"),
        (
            "redis: {url: 'redis://127.0.0.1:1/', record_ttl_secs: 3600}\nlifecycle: {recycle: true, quarantine_days: 1}\n",
            "redis.dedup_ttl_secs",
        ),
        (
            "redis: {url: 'redis://127.0.0.1:1/'}\nredirect: {cache_control: 'public, max-age=31536000'}\nlifecycle: {recycle: true}\n",
            "redirect.cache_control",
        ),
        (
            "redis: {url: 'redis://127.0.0.1:1/'}\nlifecycle: {recycle: true, max_edge_cache_ttl_secs: 15552000}\n",
            "lifecycle.max_edge_cache_ttl_secs",
        ),
    ] {
        let p = dir.path().join("origin.yaml");
        std::fs::write(&p, format!("{base}{extra}")).unwrap();
        let out = check_config(&p);
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{extra}: accepted");
        assert!(
            text.contains("lifecycle.quarantine_days") && text.contains(field),
            "{extra}: {text}"
        );
    }
    // The same quarantine with recycling off is not checked.
    let p = dir.path().join("origin.yaml");
    std::fs::write(
        &p,
        format!(
            "{base}redis: {{url: 'redis://127.0.0.1:1/'}}\nlifecycle: {{quarantine_days: 5}}\n"
        ),
    )
    .unwrap();
    let out = check_config(&p);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
