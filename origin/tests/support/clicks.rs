//! Click-analytics helpers: batches XADDed as an edge would, the stats API,
//! the consumer's metrics and the group's pending count.

use super::{Origin, Setup};
use reqwest::Method;
use serde_json::Value;
use shorturl_common::clicks::{Batch, BATCH_VERSION, CONSUMER_GROUP, STREAM_KEY, STREAM_MAXLEN};

/// YAML for a consumer that claims quickly (tests do not wait 30 s).
pub const FAST_CLAIM: &str = "clicks: {claim_idle_ms: 500, block_ms: 200}\n";

/// `XADD su:1:clicks MAXLEN ~ 1000000 * id <id> v 1 b <body>`, as an edge does.
pub async fn xadd(s: &Setup, b: &Batch) {
    xadd_fields(
        s,
        &[("id", &b.id), ("v", BATCH_VERSION), ("b", &b.encode_body())],
    )
    .await;
}

/// An entry with exactly these fields.
pub async fn xadd_fields(s: &Setup, fields: &[(&str, &str)]) {
    let mut c = s.redis_conn().await;
    let mut cmd = redis::cmd("XADD");
    cmd.arg(STREAM_KEY)
        .arg("MAXLEN")
        .arg("~")
        .arg(STREAM_MAXLEN)
        .arg("*");
    for (k, v) in fields {
        cmd.arg(*k).arg(*v);
    }
    let _: String = cmd.query_async(&mut c).await.unwrap();
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
    let text = o
        .http
        .get(o.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse::<f64>().unwrap() as u64)
        .unwrap_or(0)
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
