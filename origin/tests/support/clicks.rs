//! Click-analytics helpers: batches XADDed as an edge would, the stats API,
//! the consumer's metrics and the group's pending count.

use super::{eventually, sha256_hex, Origin, Setup};
use reqwest::Method;
use serde_json::Value;
use shorturl_common::clicks::{
    day_start, Batch, Device, DeviceLine, HourLine, ReferrerLine, CONSUMER_GROUP, NO_REFERRER,
    STREAM_KEY, STREAM_MAXLEN,
};
use shorturl_common::time::rfc3339;
use std::collections::BTreeMap;
use std::time::Duration;

/// YAML for a consumer that claims quickly (tests do not wait 30 s).
pub const FAST_CLAIM: &str = "clicks: {claim_idle_ms: 500, block_ms: 200}\n";

/// A batch `id` of `(code, hour, human, bot)` lines with the daily lines an
/// edge sends with them (humans on desktop, bots as `bot`, no referrer), so
/// every link-day adds up as the decoder requires.
pub fn hours_batch(id: &str, hours: &[(&str, u64, u64, u64)]) -> Batch {
    let mut b = Batch::new(id);
    let mut days: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
    for &(code, hour, human, bot) in hours {
        b.hours.push(HourLine {
            code: code.to_owned(),
            hour,
            human,
            bot,
        });
        let d = days.entry((code.to_owned(), day_start(hour))).or_default();
        d.0 += human;
        d.1 += bot;
    }
    for ((code, day), (human, bot)) in days {
        b.referrers.push(ReferrerLine {
            code: code.clone(),
            day,
            host: NO_REFERRER.into(),
            n: human + bot,
        });
        for (device, n) in [(Device::Desktop, human), (Device::Bot, bot)] {
            if n > 0 {
                b.devices.push(DeviceLine {
                    code: code.clone(),
                    day,
                    device,
                    n,
                });
            }
        }
    }
    b
}

/// `XADD su:1:clicks MAXLEN ~ 1000000 * id <id> v <1|2> b <body>`, as an edge does.
pub async fn xadd(s: &Setup, b: &Batch) {
    xadd_fields(
        s,
        &[("id", &b.id), ("v", b.version()), ("b", &b.encode_body())],
    )
    .await;
}

/// [`xadd`] to the Redis at `url` (a test with a stack of its own).
pub async fn xadd_to(url: &str, b: &Batch) {
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    xadd_on(
        &mut c,
        &[("id", &b.id), ("v", b.version()), ("b", &b.encode_body())],
    )
    .await;
}

/// An entry with exactly these fields.
pub async fn xadd_fields(s: &Setup, fields: &[(&str, &str)]) {
    xadd_on(&mut s.redis_conn().await, fields).await;
}

async fn xadd_on(c: &mut redis::aio::MultiplexedConnection, fields: &[(&str, &str)]) {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(STREAM_KEY)
        .arg("MAXLEN")
        .arg("~")
        .arg(STREAM_MAXLEN)
        .arg("*");
    for (k, v) in fields {
        cmd.arg(*k).arg(*v);
    }
    let _: String = cmd.query_async(c).await.unwrap();
}

/// Entries of the group read and not acknowledged (0 without a group).
pub async fn pending(s: &Setup) -> i64 {
    let mut c = s.redis_conn().await;
    let r: redis::RedisResult<redis::Value> = redis::cmd("XPENDING")
        .arg(STREAM_KEY)
        .arg(CONSUMER_GROUP)
        .query_async(&mut c)
        .await;
    match r {
        Ok(redis::Value::Array(v)) => match v.first() {
            Some(redis::Value::Int(n)) => *n,
            _ => 0,
        },
        _ => 0,
    }
}

/// The value of one series of `/metrics` (`name{labels}` exactly), 0 if absent.
pub async fn metric(o: &Origin, series: &str) -> u64 {
    super::metric_value(o, series).await.map_or(0, |v| v as u64)
}

/// `shorturl_clicks_batches_total{result="<result>"}`.
pub async fn batches(o: &Origin, result: &str) -> u64 {
    metric(
        o,
        &format!("shorturl_clicks_batches_total{{result=\"{result}\"}}"),
    )
    .await
}

/// `GET /api/v1/links/{code}/stats?<query>` with `key`.
pub async fn link_stats(o: &Origin, key: &str, code: &str, query: &str) -> (u16, Value) {
    let (st, v, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/links/{code}/stats?{query}"),
            key,
            None,
            &[],
        )
        .await;
    (st, v)
}

/// `GET /api/v1/stats?<query>` with `key`.
pub async fn tenant_stats(o: &Origin, key: &str, query: &str) -> (u16, Value) {
    let (st, v, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/stats?{query}"),
            key,
            None,
            &[],
        )
        .await;
    (st, v)
}

/// `(human, bot)` totals of a stats answer.
pub fn totals(v: &Value) -> (u64, u64) {
    (
        v["totals"]["human"].as_u64().unwrap(),
        v["totals"]["bot"].as_u64().unwrap(),
    )
}

pub const ADMIN: &str = "clk-admin";
pub const SHOP: &str = "clk-shop";
pub const M55: &str = "clk-m55";
pub const WAIT: Duration = Duration::from_secs(30);
/// 2027-01-15T00:00:00Z: the clicks' day.
pub const DAY: u64 = 1_800_000_000 - 1_800_000_000 % 86_400;

/// The day before DAY to the end of the day after it (72 hours).
pub fn range() -> String {
    format!(
        "from={}&to={}",
        rfc3339(DAY - 86_400),
        rfc3339(DAY + 2 * 86_400)
    )
}

/// A setup with the keys `ADMIN`, `SHOP` (its own links) and `M55`
/// (merchant 55), a fast-claiming consumer and optional failpoints.
pub fn setup_with(failpoints: Option<&str>) -> Setup {
    setup_clicks(failpoints, FAST_CLAIM)
}

/// [`setup_with`] with `clicks_yaml` (a whole `clicks:` line) instead of
/// [`FAST_CLAIM`].
pub fn setup_clicks(failpoints: Option<&str>, clicks_yaml: &str) -> Setup {
    Setup::start_with(|o| {
        for (name, key, extra) in [
            ("ops", ADMIN, "scopes: [admin]"),
            (
                "shop",
                SHOP,
                "scopes: [links:create, links:read, stats:read]",
            ),
            (
                "m55",
                M55,
                "scopes: [links:read, stats:read], merchants: [55]",
            ),
        ] {
            o.apps_yaml.push_str(&format!(
                "  - {{name: {name}, key_sha256: {}, {extra}}}\n",
                sha256_hex(key)
            ));
        }
        o.extra_yaml.push_str(clicks_yaml);
        if let Some(f) = failpoints {
            o.env
                .push((shorturl_common::failpoint::ENV.into(), f.into()));
        }
    })
}

/// Creates a link with `key`; its code.
pub async fn create(s: &Setup, key: &str, body: Value) -> String {
    let (st, v) = s.origin.create_with_key(key, body).await;
    assert_eq!(st, 201, "{v}");
    v["code"].as_str().unwrap().to_owned()
}

/// Waits until the stats API reports `want` for `code`.
pub async fn wait_totals(o: &Origin, code: &str, want: (u64, u64)) {
    eventually(&format!("{code} totals {want:?}"), WAIT, || async {
        let (st, v) = link_stats(o, ADMIN, code, &range()).await;
        st == 200 && totals(&v) == want
    })
    .await;
}
