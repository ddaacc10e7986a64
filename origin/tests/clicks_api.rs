//! The stats API over real Redis and MariaDB: tenancy (a link the caller
//! may not see is the unknown-code 404; tenant totals narrowed to what the
//! caller may see), `clicks` in the links list, and bad ranges.

use crate::support;

use serde_json::json;
use shorturl_common::clicks::{Accumulator, BatchIds, Click};
use support::clicks::{
    create, hours_batch, link_stats, range, setup_with, tenant_stats, totals, wait_totals, xadd,
    ADMIN, DAY, M55, SHOP,
};
use support::KEY;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_follow_tenancy_and_bad_ranges_are_400() {
    let s = setup_with(None);
    let o = &s.origin;
    let mine = create(&s, SHOP, json!({"url": "https://a.example/"})).await;
    let m55 = create(&s, KEY, json!({"url": "https://b.example/", "kdt_id": 55})).await;
    let b = hours_batch("t:n:1", &[(&mine, DAY, 5, 1), (&m55, DAY, 3, 2)]);
    xadd(&s, &b).await;
    wait_totals(o, &m55, (3, 2)).await;
    let r = range();
    // A link the caller may not see answers exactly as an unknown code.
    let (st, unknown) = link_stats(o, SHOP, "zzzzzz", &r).await;
    assert_eq!(st, 404);
    for (key, code, visible) in [
        (SHOP, &mine, true),
        (SHOP, &m55, false),
        (M55, &m55, true),
        (M55, &mine, false),
        (ADMIN, &mine, true),
    ] {
        let (st, v) = link_stats(o, key, code, &r).await;
        if visible {
            assert_eq!(st, 200, "{key} {code}: {v}");
        } else {
            assert_eq!((st, &v), (404, &unknown), "{key} {code}");
        }
    }
    let (st, v) = link_stats(o, KEY, &m55, &r).await;
    assert_eq!((st, v["error"].as_str()), (403, Some("insufficient_scope")));
    for (key, q, want) in [
        (ADMIN, "kdt_id=55", (3, 2)),
        (ADMIN, "app=shop", (5, 1)),
        (ADMIN, "domain=sho.rt", (8, 3)),
        (M55, "kdt_id=55", (3, 2)),
        (M55, "kdt_id=91", (0, 0)),
        (M55, "app=shop", (0, 0)),
        (M55, "domain=sho.rt", (3, 2)),
        (SHOP, "app=shop", (5, 1)),
        (SHOP, "app=demo", (0, 0)),
        (SHOP, "domain=sho.rt", (5, 1)),
    ] {
        let (st, v) = tenant_stats(o, key, &format!("{q}&{r}")).await;
        assert_eq!((st, totals(&v)), (200, want), "{key} {q}: {v}");
    }
    let (_, v) = tenant_stats(o, ADMIN, &format!("domain=sho.rt&{r}")).await;
    assert_eq!(
        v["links"][0],
        json!({"code": mine, "domain": "sho.rt", "human": 5, "bot": 1})
    );
    // The list carries each link's total human clicks.
    let (st, v, _) = o
        .call(reqwest::Method::GET, "/api/v1/links", SHOP, None, &[])
        .await;
    assert_eq!((st, &v["links"][0]["clicks"]), (200, &json!(5)), "{v}");
    for (q, kind) in [
        ("interval=week", "invalid_interval"),
        (
            "from=2027-01-02T00:00:00Z&to=2027-01-01T00:00:00Z",
            "invalid_range",
        ),
        (
            "interval=hour&from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z",
            "range_too_long",
        ),
    ] {
        let (st, v) = link_stats(o, SHOP, &mine, q).await;
        assert_eq!((st, v["error"].as_str()), (400, Some(kind)), "{q}");
    }
    let (st, v) = tenant_stats(o, SHOP, "from=2027-01-01T00:00:00Z").await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_tenant")));
}

/// A tenant's statistics narrowed to one tag (issue 28 item 4): only the
/// clicks of its links that carry the tag now, the top links among them;
/// a bad tag is 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_stats_narrow_to_a_tag() {
    let s = setup_with(None);
    let o = &s.origin;
    let spring = create(
        &s,
        SHOP,
        json!({"url": "https://a.example/1", "tags": ["spring"]}),
    )
    .await;
    let both = create(
        &s,
        SHOP,
        json!({"url": "https://a.example/2", "tags": ["autumn", "spring"]}),
    )
    .await;
    let none = create(&s, SHOP, json!({"url": "https://a.example/3"})).await;
    let b = hours_batch(
        "t:tags:1",
        &[
            (&spring, DAY, 5, 1),
            (&both, DAY, 7, 0),
            (&none, DAY, 11, 2),
        ],
    );
    xadd(&s, &b).await;
    wait_totals(o, &none, (11, 2)).await;
    let r = range();
    for (q, want) in [
        ("tag=spring", (12, 1)),
        ("tag=autumn", (7, 0)),
        ("tag=Spring", (0, 0)),
    ] {
        let (st, v) = tenant_stats(o, SHOP, &format!("app=shop&{q}&{r}")).await;
        assert_eq!((st, totals(&v)), (200, want), "{q}: {v}");
    }
    let (_, v) = tenant_stats(o, SHOP, &format!("app=shop&tag=spring&{r}")).await;
    let top: Vec<&str> = v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["code"].as_str().unwrap())
        .collect();
    assert_eq!(top, [both.as_str(), spring.as_str()]);
    let (st, v) = tenant_stats(o, SHOP, &format!("app=shop&tag=a,b&{r}")).await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_tags")));
}

/// Bytes per rollup row on this MariaDB (`docs/architecture.md`): 100,000
/// rows in each rollup (and batch ids), then `information_schema` after
/// `ANALYZE TABLE`.
/// Run: `cargo test -p shorturl-origin --test it -- clicks_api:: --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn bytes_per_rollup_row() {
    let s = setup_with(None);
    const N: u64 = 100_000;
    // 6-character codes, 24 hours (or 5 hosts, 5 classes) each.
    s.sql(&format!(
        "INSERT INTO click_hour (code, hour, human, bot) SELECT CONCAT('c', LPAD(seq DIV 24, 5, '0')), \
         {DAY} + (seq % 24) * 3600, 1 + seq % 1000, seq % 7 FROM seq_0_to_{last}; \
         INSERT INTO click_day_referrer (code, day, host, n) SELECT CONCAT('c', LPAD(seq DIV 5, 5, '0')), \
         {DAY}, CONCAT('news', seq % 5, '.example.com'), 1 + seq % 1000 FROM seq_0_to_{last}; \
         INSERT INTO click_day_device (code, day, class, n) SELECT CONCAT('c', LPAD(seq DIV 5, 5, '0')), \
         {DAY} + (seq DIV 500000) * 86400, ELT(1 + seq % 5, 'mobile', 'desktop', 'tablet', 'bot', 'other'), \
         1 + seq % 1000 FROM seq_0_to_{last}; \
         INSERT INTO click_batches (id, applied_at) SELECT CONCAT('edge-', LPAD(seq % 50, 2, '0'), \
         ':9f3a1c7e5b2d4f60:', seq), {DAY} FROM seq_0_to_{last}; \
         ANALYZE TABLE click_hour, click_day_referrer, click_day_device, click_batches",
        last = N - 1
    ));
    let out = s.sql(&format!(
        "SELECT table_name, data_length, index_length FROM information_schema.tables \
         WHERE table_schema = '{}' AND table_name LIKE 'click\\_%' ORDER BY table_name",
        s.db
    ));
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (data, index): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        println!(
            "{}: data {data} B, index {index} B, {:.1} B per row ({N} rows)",
            f[0],
            (data + index) as f64 / N as f64
        );
    }
}

/// `group_by` on both stats endpoints (protocol 3.7): exact numbers per
/// value, defaults included, over what the caller may see (another app's
/// key: the unknown-code 404, or no groups); `destination` only for a link;
/// a bad `group_by` or `format` is 400; `format=csv` is the groups as a
/// file, formulas defused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_by_a_dimension_on_both_endpoints() {
    let s = setup_with(None);
    let o = &s.origin;
    let mine = create(&s, SHOP, json!({"url": "https://a.example/"})).await;
    let m55 = create(&s, KEY, json!({"url": "https://b.example/", "kdt_id": 55})).await;
    let ids = BatchIds::new("edge-groups", "boot1").unwrap();
    let mut acc = Accumulator::with_dimensions();
    let ua = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    for i in 0..3 {
        assert!(acc.add(&Click {
            user_agent: Some(ua),
            accept_language: Some("de-DE"),
            country: Some(*b"DE"),
            location: Some("https://a.example/?utm_source=mail&utm_campaign=-sum"),
            ..Click::new(&mine, DAY + i)
        }));
    }
    for i in 0..2 {
        assert!(acc.add(&Click {
            user_agent: Some(ua),
            ..Click::new(&mine, DAY + 100 + i)
        }));
    }
    for i in 0..4 {
        assert!(acc.add(&Click {
            user_agent: Some(ua),
            country: Some(*b"FR"),
            ..Click::new(&m55, DAY + 200 + i)
        }));
    }
    for b in acc.take_batches(&ids, 1000) {
        xadd(&s, &b).await;
    }
    wait_totals(o, &mine, (5, 0)).await;
    wait_totals(o, &m55, (4, 0)).await;
    let r = range();
    let groups = |v: &serde_json::Value| -> Vec<(String, u64)> {
        v["groups"]
            .as_array()
            .unwrap_or_else(|| panic!("no groups: {v}"))
            .iter()
            .map(|g| {
                (
                    g["value"].as_str().unwrap().to_owned(),
                    g["human"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let g = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
        pairs.iter().map(|(v, n)| ((*v).to_owned(), *n)).collect()
    };

    // One link.
    let (st, v) = link_stats(o, SHOP, &mine, &format!("{r}&group_by=country")).await;
    assert_eq!((st, &v["group_by"]), (200, &json!("country")), "{v}");
    assert_eq!(groups(&v), g(&[("DE", 3), ("unknown", 2)]));
    assert_eq!(totals(&v), (5, 0));
    for (by, want) in [
        ("language", g(&[("de", 3), ("-", 2)])),
        ("browser", g(&[("chrome", 5)])),
        ("os", g(&[("windows", 5)])),
        ("source", g(&[("link", 5)])),
        ("utm_source", g(&[("mail", 3), ("-", 2)])),
        ("utm_medium", g(&[("-", 5)])),
        ("utm_campaign", g(&[("-sum", 3), ("-", 2)])),
        // Counted by no edge with a city database: every click `unknown`.
        ("city", g(&[("unknown", 5)])),
        // A link without options answered every click with its URL, but
        // counts no destination lines: no groups.
        ("destination", g(&[])),
    ] {
        let (st, v) = link_stats(o, SHOP, &mine, &format!("{r}&group_by={by}")).await;
        assert_eq!((st, &v["group_by"]), (200, &json!(by)), "{v}");
        assert_eq!(groups(&v), want, "{by}");
    }
    // Without group_by: no such fields.
    let (_, v) = link_stats(o, SHOP, &mine, &r).await;
    assert!(
        v.get("groups").is_none() && v.get("group_by").is_none(),
        "{v}"
    );
    // Tenancy: a link the caller may not see is the unknown-code 404.
    let (_, unknown) = link_stats(o, M55, "zzzzzz", &format!("{r}&group_by=country")).await;
    let (st, v) = link_stats(o, M55, &mine, &format!("{r}&group_by=country")).await;
    assert_eq!((st, &v), (404, &unknown));
    let (st, v) = link_stats(o, M55, &m55, &format!("{r}&group_by=country")).await;
    assert_eq!((st, groups(&v)), (200, g(&[("FR", 4)])));

    // A tenant: over the links the caller may see.
    for (key, q, want) in [
        (
            ADMIN,
            "domain=sho.rt",
            g(&[("FR", 4), ("DE", 3), ("unknown", 2)]),
        ),
        (SHOP, "domain=sho.rt", g(&[("DE", 3), ("unknown", 2)])),
        (SHOP, "app=shop", g(&[("DE", 3), ("unknown", 2)])),
        (M55, "domain=sho.rt", g(&[("FR", 4)])),
        (M55, "app=shop", g(&[])),
        (SHOP, "kdt_id=55", g(&[])),
    ] {
        let (st, v) = tenant_stats(o, key, &format!("{q}&{r}&group_by=country")).await;
        assert_eq!(
            (st, &v["group_by"]),
            (200, &json!("country")),
            "{key} {q}: {v}"
        );
        assert_eq!(groups(&v), want, "{key} {q}");
    }
    let (_, v) = tenant_stats(o, ADMIN, &format!("domain=sho.rt&{r}&group_by=language")).await;
    assert_eq!(groups(&v), g(&[("-", 6), ("de", 3)]));

    // Bad groupings and formats.
    for (q, kind) in [
        ("group_by=lang", "invalid_group_by"),
        ("group_by=", "invalid_group_by"),
        ("format=csv", "invalid_format"),
        ("group_by=os&format=xlsx", "invalid_format"),
    ] {
        let (st, v) = link_stats(o, SHOP, &mine, q).await;
        assert_eq!((st, v["error"].as_str()), (400, Some(kind)), "{q}");
    }
    for (q, kind) in [
        ("app=shop&group_by=destination", "invalid_group_by"),
        ("app=shop&group_by=region", "invalid_group_by"),
        ("app=shop&format=csv", "invalid_format"),
    ] {
        let (st, v) = tenant_stats(o, SHOP, q).await;
        assert_eq!((st, v["error"].as_str()), (400, Some(kind)), "{q}");
    }

    // CSV: the groups alone, RFC 4180 lines, a formula-like value defused
    // (a lone `-` is no formula).
    let csv = |path: String| async move {
        let r = o
            .http
            .get(o.url(&path))
            .bearer_auth(SHOP)
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
        let cd = r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .to_owned();
        (st, ct, cd, r.text().await.unwrap())
    };
    let (st, ct, cd, body) = csv(format!(
        "/api/v1/links/{mine}/stats?{r}&group_by=utm_campaign&format=csv"
    ))
    .await;
    assert_eq!((st, ct.as_str()), (200, "text/csv; charset=utf-8"));
    assert_eq!(
        cd,
        format!("attachment; filename=\"{mine}-utm_campaign.csv\"")
    );
    assert_eq!(body, "value,human\r\n\"'-sum\",3\r\n-,2\r\n");
    let (st, _, cd, body) = csv(format!(
        "/api/v1/stats?app=shop&{r}&group_by=country&format=csv"
    ))
    .await;
    assert_eq!(st, 200);
    assert_eq!(cd, "attachment; filename=\"clicks-country.csv\"");
    assert_eq!(body, "value,human\r\nDE,3\r\nunknown,2\r\n");
}
