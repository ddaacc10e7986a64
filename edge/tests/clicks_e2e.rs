//! Clicks end to end: redirects through the Pingora edge → batches on the
//! stream → the origin's consumer → MariaDB rollups → the stats API, all
//! real processes. Needs `shorturl-origin` built (`cargo build --workspace`).

use crate::support;

use support::http::Conn;
use support::{create_link, start_edge, stats_app, EdgeOpts, Origin, TIMEOUT};
use testkit::{wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
const CHROME: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15";
const ANDROID: &str = "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.144 Mobile Safari/537.36";

#[test]
fn the_stats_api_shows_exactly_the_clicks_the_edge_answered() {
    let redis = Redis::start();
    // A second key (appended to the origin's `apps:` list) that may read stats.
    let origin = Origin::start_with(&redis, 500, &stats_app());
    let mut opts = EdgeOpts::new(redis.url(), vec![origin.addr()]);
    opts.extra = "  clicks: { flush_interval_ms: 200 }";
    let edge = start_edge(opts);

    let created = create_link(edge.port, "https://example.com/stats", Some(DOMAIN));
    assert_eq!(created.status, 201, "{}", created.text());
    let code = created.json()["code"].as_str().unwrap().to_owned();
    let path = format!("/{code}");
    let mut c = Conn::open(edge.port).unwrap();
    let mut send = |method: &str, headers: &[(&str, &str)]| {
        let r = c.send(method, &path, Some(DOMAIN), headers, b"").unwrap();
        assert_eq!(r.status, 302, "{}", r.text());
    };
    for _ in 0..4 {
        send(
            "GET",
            &[("User-Agent", CHROME), ("Referer", "https://t.co/x")],
        );
    }
    for _ in 0..3 {
        send("GET", &[("User-Agent", ANDROID)]);
    }
    for _ in 0..2 {
        send("GET", &[("User-Agent", "curl/8.5.0")]);
    }
    send("HEAD", &[("User-Agent", CHROME)]);
    // Not clicks: an unknown code (404 from the origin's answer).
    let r = c.send("GET", "/zzzzzz", Some(DOMAIN), &[], b"").unwrap();
    assert_eq!(r.status, 404);

    wait_for("the stats API to show 10 clicks", TIMEOUT, || {
        let v = origin.stats(&code);
        v["totals"]["human"].as_u64().unwrap_or(0) + v["totals"]["bot"].as_u64().unwrap_or(0) >= 10
    });
    let v = origin.stats(&code);
    assert_eq!(
        v["totals"],
        serde_json::json!({"human": 7, "bot": 3}),
        "{v}"
    );
    assert_eq!(
        v["devices"],
        serde_json::json!({"mobile": 3, "desktop": 4, "tablet": 0, "bot": 3, "other": 0}),
        "{v}"
    );
    let mut refs: Vec<(String, u64)> = v["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["host"].as_str().unwrap().to_owned(),
                r["n"].as_u64().unwrap(),
            )
        })
        .collect();
    refs.sort();
    assert_eq!(
        refs,
        vec![("-".to_owned(), 6), ("t.co".to_owned(), 4)],
        "{v}"
    );
    let d = edge.typed_status().clicks.unwrap();
    assert_eq!((d.counted, d.dropped), (10, 0));
}
