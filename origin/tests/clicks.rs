//! Click analytics, origin side, against real Redis and MariaDB: batches an
//! edge would XADD are applied exactly once (redelivered, claimed from a
//! consumer killed with SIGKILL, across a Redis restart), malformed ones
//! are rejected whole, the stats API reports exactly what was sent, and
//! rotating referrer hosts cannot grow a link-day past its bound (the stats
//! API and its tenancy: `clicks_api.rs`).

use crate::support;

use serde_json::json;
use shorturl_common::clicks::{is_bot, Accumulator, Batch, BatchIds, Click};
use std::collections::BTreeMap;
use support::clicks::{
    batches, create, hours_batch, link_stats, pending, range, setup_clicks, setup_with,
    tenant_stats, totals, wait_totals, xadd, xadd_fields, ADMIN, DAY, SHOP, WAIT,
};
use support::{count, eventually, Origin, OriginOpts, KEY};

/// A second origin on the same MySQL and Redis: a new port, no
/// pre-generation, no failpoints.
fn another(o: &OriginOpts) -> OriginOpts {
    let mut o = o.clone();
    o.port = testkit::free_port();
    o.pregen = 0;
    o.env.clear();
    o
}

const UAS: [&str; 6] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "curl/8.5.0",
    "SomeTV/1.0",
];

/// What was sent for one link, counted independently of the accumulator.
#[derive(Default, Debug)]
struct Sent {
    human: u64,
    bot: u64,
    hours: BTreeMap<u64, (u64, u64)>,
}

/// `n` clicks over `codes` (a deterministic mix of browsers, bots, HEADs,
/// referrers and hours of DAY and the day after), as the batches of edge
/// `edge` flushing every `flush_every` clicks (so link-hours recur across
/// batches and must add up).
fn clicks(
    codes: &[&str],
    n: u64,
    edge: &str,
    flush_every: u64,
) -> (Vec<Batch>, BTreeMap<String, Sent>) {
    let mut out = Vec::new();
    let ids = BatchIds::new(edge, "boot1").unwrap();
    let mut acc = Accumulator::new();
    let mut sent: BTreeMap<String, Sent> = BTreeMap::new();
    let refs = ["https://news.example.cn/a", "http://t.co/x", ""];
    for i in 0..n {
        let code = codes[(i % codes.len() as u64) as usize];
        let ua = UAS[(i % 6) as usize];
        let head = i % 11 == 0;
        let at = DAY + (i * 7919) % (2 * 86_400);
        let r = refs[(i % 3) as usize];
        assert!(acc.add(&Click {
            head,
            user_agent: Some(ua),
            referer: (!r.is_empty()).then_some(r),
            ..Click::new(code, at)
        }));
        if (i + 1) % flush_every == 0 {
            out.extend(acc.take_batches(&ids, 1000));
        }
        let bot = head || is_bot(ua);
        let s = sent.entry(code.to_owned()).or_default();
        let h = s.hours.entry(at - at % 3600).or_default();
        if bot {
            s.bot += 1;
            h.1 += 1;
        } else {
            s.human += 1;
            h.0 += 1;
        }
    }
    out.extend(acc.take_batches(&ids, 1000));
    (out, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_counted_exactly_once_and_reported_exactly() {
    let s = setup_with(None);
    let o = &s.origin;
    let a = create(&s, SHOP, json!({"url": "https://a.example/"})).await;
    let b = create(&s, KEY, json!({"url": "https://b.example/", "kdt_id": 55})).await;
    let (all, sent) = clicks(&[&a, &b], 5000, "edge-1", 500);
    assert!(all.len() > 3, "{} batches", all.len());
    for batch in &all {
        xadd(&s, batch).await;
    }
    for (code, want) in &sent {
        wait_totals(o, code, (want.human, want.bot)).await;
    }
    // The counter moves after the commit the totals show, before the
    // acknowledgement: once nothing is pending, every batch is counted.
    eventually("nothing pending", WAIT, || async { pending(&s).await == 0 }).await;
    assert_eq!(batches(o, "applied").await, all.len() as u64);

    // Hourly series: every hour exactly as sent.
    let (st, v) = link_stats(o, ADMIN, &a, &format!("{}&interval=hour", range())).await;
    assert_eq!(st, 200, "{v}");
    let series = v["series"].as_array().unwrap();
    assert_eq!(series.len(), 72);
    let want = &sent[&a];
    for (i, p) in series.iter().enumerate() {
        let hour = DAY - 86_400 + i as u64 * 3600;
        let (h, b) = want.hours.get(&hour).copied().unwrap_or((0, 0));
        assert_eq!(
            (p["human"].as_u64(), p["bot"].as_u64()),
            (Some(h), Some(b)),
            "hour {i}"
        );
    }
    // Referrers and devices sum to the link's clicks.
    let n = want.human + want.bot;
    let refs: u64 = v["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["n"].as_u64().unwrap())
        .sum();
    let devs: u64 = v["devices"]
        .as_object()
        .unwrap()
        .values()
        .map(|d| d.as_u64().unwrap())
        .sum();
    assert_eq!((refs, devs), (n, n));
    assert_eq!(v["devices"]["bot"].as_u64(), Some(want.bot));
    let hosts: Vec<&str> = v["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 3);
    for h in ["news.example.cn", "t.co", "-"] {
        assert!(hosts.contains(&h), "{hosts:?}");
    }
    // Daily series of the same range.
    let (_, v) = link_stats(o, ADMIN, &a, &range()).await;
    let days: Vec<u64> = v["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["human"].as_u64().unwrap())
        .collect();
    assert_eq!(days.len(), 3);
    assert_eq!(days[0], 0);
    assert_eq!(days.iter().sum::<u64>(), want.human);

    // The same batch again (a redelivery): acknowledged, not counted.
    xadd(&s, &all[0]).await;
    eventually("the duplicate", WAIT, || async {
        batches(o, "duplicate").await == 1
    })
    .await;
    for (code, want) in &sent {
        let (_, v) = link_stats(o, ADMIN, code, &range()).await;
        assert_eq!(totals(&v), (want.human, want.bot));
    }
    assert_eq!(batches(o, "applied").await, all.len() as u64);
    eventually("nothing pending", WAIT, || async { pending(&s).await == 0 }).await;
    assert_eq!(
        count(&s, "SELECT COUNT(*) FROM click_batches"),
        all.len() as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_batch_is_rejected_whole_and_acknowledged() {
    let s = setup_with(None);
    let o = &s.origin;
    let a = create(&s, SHOP, json!({"url": "https://a.example/"})).await;
    let good =
        format!("h {a} {DAY} 3 1\nr {a} {DAY} - 4\nd {a} {DAY} mobile 3\nd {a} {DAY} bot 1\n");
    // A good line then a bad one: nothing of it may be applied.
    xadd_fields(
        &s,
        &[
            ("id", "e:n:1"),
            ("v", "1"),
            ("b", &format!("{good}h {a} {DAY} x 1\n")),
        ],
    )
    .await;
    xadd_fields(&s, &[("id", "e:n:2"), ("v", "9"), ("b", &good)]).await;
    xadd_fields(&s, &[("id", "e:n:3"), ("b", &good)]).await;
    xadd_fields(&s, &[("id", "not-an-id"), ("v", "1"), ("b", &good)]).await;
    // Every line well-formed, but the day's devices do not add up.
    xadd_fields(
        &s,
        &[
            ("id", "e:n:5"),
            ("v", "1"),
            ("b", &format!("{good}d {a} {DAY} tablet 1\n")),
        ],
    )
    .await;
    eventually("5 malformed", WAIT, || async {
        batches(o, "malformed").await == 5
    })
    .await;
    eventually("nothing pending", WAIT, || async { pending(&s).await == 0 }).await;
    let (st, v) = link_stats(o, ADMIN, &a, &range()).await;
    assert_eq!((st, totals(&v)), (200, (0, 0)));
    assert_eq!(count(&s, "SELECT COUNT(*) FROM click_hour"), 0);
    assert_eq!(batches(o, "applied").await, 0);
    // A good batch still goes through.
    xadd_fields(&s, &[("id", "e:n:4"), ("v", "1"), ("b", &good)]).await;
    wait_totals(o, &a, (3, 1)).await;
}

/// An origin killed with SIGKILL while holding a batch (read but not
/// applied, or applied but not acknowledged): a second origin claims it and
/// the batch counts exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_held_by_a_killed_origin_is_claimed_and_counted_once() {
    for stage in ["read", "ack"] {
        let hold = testkit::TempDir::new("clicks-hold");
        let path = hold.path().join("hold");
        std::fs::write(&path, b"").unwrap();
        let fp = format!("origin.clicks.{stage}.hold=e1:b:0@{}", path.display());
        let mut s = setup_with(Some(&fp));
        let a = create(&s, SHOP, json!({"url": "https://a.example/"})).await;
        let batch = hours_batch("e1:b:0", &[(&a, DAY + 3600, 7, 2)]);
        xadd(&s, &batch).await;
        let held = format!("{}.held", path.display());
        testkit::wait_for("the consumer to hold the batch", WAIT, || {
            std::path::Path::new(&held).exists()
        });
        s.origin.kill();
        let committed = count(&s, "SELECT COUNT(*) FROM click_batches WHERE id = 'e1:b:0'");
        assert_eq!(committed, u64::from(stage == "ack"), "{stage}");
        assert_eq!(pending(&s).await, 1, "{stage}");
        // A second origin (no failpoint) on the same MySQL and Redis.
        let b = Origin::start(another(&s.origin.opts));
        eventually("nothing pending", WAIT, || async { pending(&s).await == 0 }).await;
        wait_totals(&b, &a, (7, 2)).await;
        let (applied, dup) = (batches(&b, "applied").await, batches(&b, "duplicate").await);
        assert_eq!(
            (applied, dup),
            if stage == "read" { (1, 0) } else { (0, 1) },
            "{stage}"
        );
        let (_, v) = link_stats(&b, ADMIN, &a, &range()).await;
        assert_eq!(totals(&v), (7, 2), "{stage}");
        s.origin = b;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_loses_nothing_acknowledged_and_the_consumer_recovers() {
    let mut s = setup_with(None);
    let a = create(&s, SHOP, json!({"url": "https://a.example/"})).await;
    let (first, sent1) = clicks(&[&a], 300, "edge-r", 50);
    for b in &first {
        xadd(&s, b).await;
    }
    let want1 = (sent1[&a].human, sent1[&a].bot);
    wait_totals(&s.origin, &a, want1).await;
    // Redis restarts empty (no persistence): stream and group are gone.
    s.redis.restart();
    let (second, sent2) = clicks(&[&a], 200, "edge-r2", 50);
    for b in &second {
        xadd(&s, b).await;
    }
    let want = (want1.0 + sent2[&a].human, want1.1 + sent2[&a].bot);
    wait_totals(&s.origin, &a, want).await;
    // Counted after the commit, before the acknowledgement (see above).
    eventually("nothing pending", WAIT, || async { pending(&s).await == 0 }).await;
    assert_eq!(
        batches(&s.origin, "applied").await,
        (first.len() + second.len()) as u64
    );
    // Same counts through the tenant view (SHOP sees its app).
    let (st, v) = tenant_stats(&s.origin, SHOP, &format!("app=shop&{}", range())).await;
    assert_eq!((st, totals(&v)), (200, want), "{v}");
    assert_eq!(v["links"][0]["code"], a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_referrer_hosts_keep_a_link_day_bounded() {
    // At most 5 named hosts (and `~other`) per link-day.
    let s = setup_clicks(
        None,
        "clicks: {claim_idle_ms: 500, block_ms: 200, referrers_per_day: 5}\n",
    );
    // Two origins apply the batches concurrently.
    let b = Origin::start(another(&s.origin.opts));
    let code = create(&s, SHOP, json!({"url": "https://a.example/spam"})).await;
    // The real referrers: no Referer and four sites, every batch.
    let real: [(&str, u64); 5] = [
        ("", 9),
        ("https://news.example.cn/a", 8),
        ("http://t.co/x", 7),
        ("https://weibo.com/p", 6),
        ("https://mail.example/inbox", 5),
    ];
    // Three edges, four flushes each; every flush also carries 30 hosts
    // never seen before, one click each (the edge names 15 of them and
    // folds the rest into `~other`).
    let mut all = Vec::new();
    for edge in ["edge-1", "edge-2", "edge-3"] {
        let ids = BatchIds::new(edge, "boot1").unwrap();
        let mut acc = Accumulator::new();
        for flush in 0..4 {
            let mut click = |referer: Option<&str>, i: u64| {
                assert!(acc.add(&Click {
                    user_agent: Some(UAS[0]),
                    referer,
                    ..Click::new(&code, DAY + 3600 + i)
                }));
            };
            for (r, n) in real {
                for i in 0..n {
                    click((!r.is_empty()).then_some(r), i);
                }
            }
            for i in 0..30 {
                click(
                    Some(&format!("https://spam-{edge}-{flush}-{i}.example/")),
                    i,
                );
            }
            all.extend(acc.take_batches(&ids, 1000));
        }
    }
    assert_eq!(all.len(), 12);
    for batch in &all {
        xadd(&s, batch).await;
    }
    let per_batch: u64 = real.iter().map(|(_, n)| n).sum::<u64>() + 30;
    let clicks = per_batch * 12;
    wait_totals(&s.origin, &code, (clicks, 0)).await;
    eventually("nothing pending", WAIT, || async { pending(&s).await == 0 }).await;
    // Every batch applied once, none failed on a lock race.
    assert_eq!(
        batches(&s.origin, "applied").await + batches(&b, "applied").await,
        12
    );
    assert_eq!(
        batches(&s.origin, "failed").await + batches(&b, "failed").await,
        0
    );

    // The table: exactly the five real hosts and `~other`, counts exact.
    let rows = s.sql(&format!(
        "SELECT host, n FROM click_day_referrer WHERE code = '{code}' AND day = {DAY} ORDER BY host"
    ));
    let want = format!(
        "-\t108\nmail.example\t60\nnews.example.cn\t96\nt.co\t84\nweibo.com\t72\n~other\t{}",
        30 * 12
    );
    assert_eq!(rows.trim(), want);

    // The stats API: the same, and the referrers sum to the day's clicks.
    let (st, v) = link_stats(&s.origin, ADMIN, &code, &range()).await;
    assert_eq!(st, 200, "{v}");
    let refs: Vec<(&str, u64)> = v["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["host"].as_str().unwrap(), r["n"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        refs,
        [
            ("-", 108),
            ("news.example.cn", 96),
            ("t.co", 84),
            ("weibo.com", 72),
            ("mail.example", 60),
            ("~other", 360),
        ]
    );
    assert_eq!(refs.iter().map(|(_, n)| n).sum::<u64>(), clicks);
}

/// Destination lines (batch format 2): applied exactly once like the rest,
/// shown per destination with the URL each names now, in the link's
/// order; a version 1 batch carrying them is rejected whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_per_destination_are_the_ab_result() {
    use shorturl_common::link_rules::Destination;
    let s = setup_with(None);
    let o = &s.origin;
    let code = create(
        &s,
        SHOP,
        json!({
            "url": "https://a.example/shop",
            "expired_url": "https://a.example/over",
            "rules": [
                {"when": {"device": ["ios"]}, "url": "https://a.example/ios"},
                {"split": [{"url": "https://a.example/A", "weight": 1},
                           {"url": "https://a.example/B", "weight": 1}]}
            ]
        }),
    )
    .await;
    let ids = BatchIds::new("edge-d", "n1").unwrap();
    let mut acc = Accumulator::new();
    let ua = UAS[0];
    let r2 = |v| Destination::Rule {
        rule: 1,
        variant: Some(v),
    };
    let mut add = |dest: Destination, head: bool, n: u64| {
        for i in 0..n {
            assert!(acc.add(&Click {
                head,
                user_agent: Some(ua),
                destination: Some(dest),
                ..Click::new(&code, DAY + 3600 + i)
            }));
        }
    };
    add(r2(0), false, 30);
    add(r2(1), false, 45);
    add(r2(1), true, 7); // HEADs: bot clicks, in no destination
    add(
        Destination::Rule {
            rule: 0,
            variant: None,
        },
        false,
        5,
    );
    add(Destination::Expired, false, 2);
    let made = acc.take_batches(&ids, 1000);
    assert_eq!(made.len(), 1);
    assert_eq!(made[0].version(), "2");
    // The same lines as version 1: rejected whole, nothing counted.
    xadd_fields(
        &s,
        &[
            ("id", "edge-d:n1:99"),
            ("v", "1"),
            ("b", &made[0].encode_body()),
        ],
    )
    .await;
    eventually("the version 1 batch rejected", WAIT, || async {
        batches(o, "malformed").await == 1
    })
    .await;
    xadd(&s, &made[0]).await;
    xadd(&s, &made[0]).await; // redelivered: once
    wait_totals(o, &code, (82, 7)).await;
    eventually("the duplicate", WAIT, || async {
        batches(o, "duplicate").await == 1
    })
    .await;
    let (st, v) = link_stats(o, ADMIN, &code, &range()).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["destinations"],
        json!([
            {"destination": "r1", "url": "https://a.example/ios", "human": 5},
            {"destination": "r2v1", "url": "https://a.example/A", "human": 30},
            {"destination": "r2v2", "url": "https://a.example/B", "human": 45},
            {"destination": "expired", "url": "https://a.example/over", "human": 2},
        ]),
        "{v}"
    );
    // An edit that drops the split: its clicks stay, without a URL.
    let (st, e) = o
        .patch(
            ADMIN,
            &code,
            json!({"rules": [{"when": {"device": ["ios"]}, "url": "https://a.example/ios2"}]}),
        )
        .await;
    assert_eq!(st, 200, "{e}");
    let (_, v) = link_stats(o, ADMIN, &code, &range()).await;
    assert_eq!(v["destinations"][0]["url"], "https://a.example/ios2", "{v}");
    assert_eq!(v["destinations"][1]["url"], json!(null), "{v}");
    assert_eq!(v["destinations"][1]["human"], 30, "{v}");
    // A plain link has none.
    let plain = create(&s, SHOP, json!({"url": "https://a.example/plain"})).await;
    let (_, v) = link_stats(o, ADMIN, &plain, &range()).await;
    assert_eq!(v["destinations"], json!([]), "{v}");
}

/// `(day, dim, value, n)` rows of `click_day_dim` for `code`, tab-separated
/// lines in key order.
fn dim_rows(s: &support::Setup, code: &str) -> String {
    s.sql(&format!(
        "SELECT day, dim, value, n FROM click_day_dim WHERE code = '{code}' ORDER BY day, dim, value"
    ))
    .trim()
    .to_owned()
}

/// Dimension lines (batch format 4, protocol 3.7; written as format 5,
/// protocol 3.8, without the implied lines) from an accumulator
/// counting dimensions as an edge does: the named values and every
/// dimension's default (the day's human clicks the lines leave out) are
/// stored, per day, exactly once however often the batch is delivered;
/// bots are in no dimension; a batch of an older format adds no row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dimension_lines_are_stored_with_their_defaults_exactly_once() {
    let s = setup_with(None);
    let o = &s.origin;
    let code = create(&s, SHOP, json!({"url": "https://a.example/"})).await;
    let old = create(&s, SHOP, json!({"url": "https://a.example/old"})).await;
    let ids = BatchIds::new("edge-dims", "boot1").unwrap();
    let mut acc = Accumulator::with_dimensions();
    let at = DAY + 3600;
    for i in 0..3 {
        assert!(acc.add(&Click {
            user_agent: Some(UAS[0]),
            accept_language: Some("de-DE,de;q=0.9"),
            country: Some(*b"DE"),
            query: Some("qr=1"),
            location: Some("https://a.example/?utm_source=mail&utm_campaign=spring"),
            city: Some(["DE-K%C3%B6ln", "DE-K%C3%B6ln", "DE-Berlin"][i as usize]),
            ..Click::new(&code, at + i)
        }));
    }
    for i in 0..2 {
        assert!(acc.add(&Click {
            user_agent: Some(UAS[1]),
            location: Some("https://a.example/"),
            ..Click::new(&code, at + 10 + i)
        }));
    }
    // Bots: counted, in no dimension.
    assert!(acc.add(&Click {
        user_agent: Some(UAS[3]),
        country: Some(*b"US"),
        ..Click::new(&code, at + 20)
    }));
    assert!(acc.add(&Click {
        head: true,
        user_agent: Some(UAS[0]),
        ..Click::new(&code, at + 21)
    }));
    // The next day: one click with nothing known, every default.
    assert!(acc.add(&Click {
        user_agent: Some("SomeTV/1.0"),
        ..Click::new(&code, DAY + 86_400 + 5)
    }));
    let taken = acc.take_batches(&ids, 1000);
    assert_eq!(taken.len(), 1);
    let b = &taken[0];
    // Written as version 5: no `r ... -` or `d ... bot` line in the body;
    // the origin derives them and stores every kind as before.
    assert_eq!(b.version(), "5");
    assert!(b.counted_dims && !b.dims.is_empty());
    let body = b.encode_body();
    assert!(!body.contains(" - ") && !body.contains(" bot "), "{body}");
    xadd(&s, b).await;
    wait_totals(o, &code, (6, 2)).await;
    let d1 = DAY + 86_400;
    let sorted = |sql: String| {
        let mut rows: Vec<String> = s.sql(&sql).trim().lines().map(str::to_owned).collect();
        rows.sort();
        rows.join("\n")
    };
    assert_eq!(
        sorted(format!(
            "SELECT day, host, n FROM click_day_referrer WHERE code = '{code}'"
        )),
        format!("{DAY}\t-\t7\n{d1}\t-\t1")
    );
    assert_eq!(
        sorted(format!(
            "SELECT day, class, n FROM click_day_device WHERE code = '{code}'"
        )),
        format!("{DAY}\tbot\t2\n{DAY}\tdesktop\t3\n{DAY}\tmobile\t2\n{d1}\tother\t1")
    );
    let want: Vec<String> = [
        (DAY, "browser", "chrome", 3),
        (DAY, "browser", "safari", 2),
        (DAY, "city", "DE-Berlin", 1),
        (DAY, "city", "DE-K%C3%B6ln", 2),
        (DAY, "city", "unknown", 2),
        (DAY, "country", "DE", 3),
        (DAY, "country", "unknown", 2),
        (DAY, "lang", "-", 2),
        (DAY, "lang", "de", 3),
        (DAY, "os", "ios", 2),
        (DAY, "os", "windows", 3),
        (DAY, "source", "link", 2),
        (DAY, "source", "qr", 3),
        (DAY, "utm_campaign", "-", 2),
        (DAY, "utm_campaign", "spring", 3),
        (DAY, "utm_medium", "-", 5),
        (DAY, "utm_source", "-", 2),
        (DAY, "utm_source", "mail", 3),
        (d1, "browser", "other", 1),
        (d1, "city", "unknown", 1),
        (d1, "country", "unknown", 1),
        (d1, "lang", "-", 1),
        (d1, "os", "other", 1),
        (d1, "source", "link", 1),
        (d1, "utm_campaign", "-", 1),
        (d1, "utm_medium", "-", 1),
        (d1, "utm_source", "-", 1),
    ]
    .iter()
    .map(|(d, dim, v, n)| format!("{d}\t{dim}\t{v}\t{n}"))
    .collect();
    assert_eq!(dim_rows(&s, &code), want.join("\n"));

    // Delivered again (a lost acknowledgement): counted once.
    xadd(&s, b).await;
    eventually("the redelivery is a duplicate", WAIT, || async {
        batches(o, "duplicate").await >= 1
    })
    .await;
    assert_eq!(dim_rows(&s, &code), want.join("\n"));

    // A batch of an older format (no dimensions counted): no row.
    let mut acc = Accumulator::new();
    assert!(acc.add(&Click {
        user_agent: Some(UAS[0]),
        country: Some(*b"DE"),
        ..Click::new(&old, at)
    }));
    let older = acc.take_batches(&ids, 1000);
    assert!(older.iter().all(|b| b.version() < "4" && !b.counted_dims));
    for b in &older {
        xadd(&s, b).await;
    }
    wait_totals(o, &old, (1, 0)).await;
    assert_eq!(dim_rows(&s, &old), "");
}

/// A link-day-dimension keeps at most 20 named values and `~other` besides
/// its default, across batches (the edge bounds each batch alone): the
/// values past the top 20 are summed into `~other`, ties keep the value
/// stored first, the default is never folded, and the stats API reads the
/// same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dimension_values_past_the_top_20_are_folded_into_other() {
    let s = setup_with(None);
    let o = &s.origin;
    let code = create(&s, SHOP, json!({"url": "https://a.example/many"})).await;
    let ids = BatchIds::new("edge-fold", "boot1").unwrap();
    let mut acc = Accumulator::with_dimensions();
    let mut all = Vec::new();
    // Batch 1: 15 countries, 2 clicks each; batch 2: 15 others, 1 click
    // each; each batch one click of no country (the default).
    for (first, clicks) in [(b'A', 2), (b'B', 1)] {
        for c in 0..15u8 {
            for i in 0..clicks {
                assert!(acc.add(&Click {
                    user_agent: Some(UAS[0]),
                    country: Some([first, b'A' + c]),
                    ..Click::new(&code, DAY + 60 * u64::from(c) + i)
                }));
            }
        }
        assert!(acc.add(&Click {
            user_agent: Some(UAS[0]),
            ..Click::new(&code, DAY + 7200)
        }));
        all.extend(acc.take_batches(&ids, 1000));
    }
    assert_eq!(all.len(), 2);
    for (i, b) in all.iter().enumerate() {
        xadd(&s, b).await;
        // In order: the second batch folds into what the first stored.
        let n = i as u64 + 1;
        eventually("applied", WAIT, || async {
            batches(o, "applied").await >= n
        })
        .await;
    }
    wait_totals(o, &code, (30 + 15 + 2, 0)).await;
    let mut want: Vec<String> = (0..15u8)
        .map(|c| format!("A{}\t2", char::from(b'A' + c)))
        .collect();
    want.extend((0..5u8).map(|c| format!("B{}\t1", char::from(b'A' + c))));
    want.push("unknown\t2".into());
    want.push("~other\t10".into());
    let rows = s.sql(&format!(
        "SELECT value, n FROM click_day_dim WHERE code = '{code}' AND dim = 'country' ORDER BY value"
    ));
    assert_eq!(rows.trim(), want.join("\n"));
    // Another dimension of the same days: one value, all clicks.
    let rows = s.sql(&format!(
        "SELECT value, n FROM click_day_dim WHERE code = '{code}' AND dim = 'browser'"
    ));
    assert_eq!(rows.trim(), "chrome\t47");

    let (st, v) = link_stats(o, ADMIN, &code, &format!("{}&group_by=country", range())).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["group_by"], "country");
    let groups: Vec<(&str, u64)> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["value"].as_str().unwrap(), g["human"].as_u64().unwrap()))
        .collect();
    let mut expect: Vec<(String, u64)> = (0..15u8)
        .map(|c| (format!("A{}", char::from(b'A' + c)), 2))
        .collect();
    expect.push(("unknown".into(), 2));
    expect.extend((0..5u8).map(|c| (format!("B{}", char::from(b'A' + c)), 1)));
    expect.push(("~other".into(), 10));
    let expect: Vec<(&str, u64)> = expect.iter().map(|(v, n)| (v.as_str(), *n)).collect();
    assert_eq!(groups, expect);
    assert_eq!(groups.iter().map(|(_, n)| n).sum::<u64>(), 47);
}

/// Unique visitors (protocol 3.7): the `u` sketches of two edges' batches
/// merge per link-day, a visitor seen by both counts once, a batch
/// delivered twice adds nothing, and the stats API merges the range's
/// days; exact while sparse, within 2% past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_visitors_merge_across_edges_days_and_redeliveries() {
    use shorturl_common::clicks::uniq::visitor;
    let s = setup_with(None);
    let o = &s.origin;
    let code = create(&s, SHOP, json!({"url": "https://u.example/"})).await;
    let salt = b"00112233445566778899aabbccddeeff";
    let v = |i: u32| {
        visitor(
            salt,
            &format!("198.51.{}.{}", i >> 8, i & 255),
            UAS[0].as_bytes(),
        )
    };
    let at = DAY + 3600;
    let batch = |edge: &str, visitors: &mut dyn Iterator<Item = (u32, u64)>| {
        let mut acc = Accumulator::with_dimensions();
        for (i, t) in visitors {
            assert!(acc.add(&Click {
                user_agent: Some(UAS[0]),
                visitor: Some(v(i)),
                ..Click::new(&code, t)
            }));
        }
        let mut b = acc.take_batches(&BatchIds::new(edge, "boot1").unwrap(), 100_000);
        assert_eq!(b.len(), 1);
        b.remove(0)
    };
    // Edge a: visitors 0..100 twice each on day 1; edge b: 50..150 on day
    // 1 and 0..10 on day 2.
    let a = batch(
        "edge-a",
        &mut (0..200).map(|i| (i % 100, at + u64::from(i))),
    );
    let b = batch(
        "edge-b",
        &mut (50..150)
            .map(|i| (i, at + 1000))
            .chain((0..10).map(|i| (i, at + 86_400))),
    );
    xadd(&s, &a).await;
    xadd(&s, &b).await;
    xadd(&s, &a).await;
    wait_totals(o, &code, (310, 0)).await;
    let day = shorturl_common::time::rfc3339;
    let code = &code;
    let uniques = |from: u64, to: u64| {
        let q = format!("from={}&to={}", day(from), day(to));
        async move {
            let (st, v) = link_stats(o, ADMIN, code, &q).await;
            assert_eq!(st, 200, "{v}");
            v["uniques"].as_u64().unwrap()
        }
    };
    // Day 1: 150 distinct (sparse: exact); day 2: 10, all seen on day 1.
    let (d1, d2, d3) = (DAY, DAY + 86_400, DAY + 2 * 86_400);
    assert_eq!(uniques(d1, d2).await, 150);
    assert_eq!(uniques(d2, d3).await, 10);
    assert_eq!(uniques(d1, d3).await, 150);
    assert_eq!(count(&s, "SELECT COUNT(*) FROM click_day_uniques"), 2);

    // Past 256: dense, within 2%.
    let many = batch("edge-c", &mut (1000..3000).map(|i| (i, at + 2000)));
    xadd(&s, &many).await;
    wait_totals(o, code, (2310, 0)).await;
    let e = uniques(d1, d2).await as f64;
    assert!((e - 2150.0).abs() / 2150.0 < 0.02, "{e}");
}
