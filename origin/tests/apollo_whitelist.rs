//! Per-merchant domains end to end: a real origin process (private MariaDB
//! and Redis) whose dynamic whitelist comes from the Apollo stand-in. Each
//! rule of the whitelist is checked through the creation API.

use crate::support;

use serde_json::{json, Value};
use shorturl_common::status::WhitelistDim;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{eventually, Origin, Setup};
use testkit::apollo::{ApolloServer, Fault};
use testkit::TempDir;

const APP: &str = "shorturl-origin";
const KEY: &str = "merchant_domains";
const SECRET: &str = "df23df3f59884980844ff3dada30fa97";
/// "Within a few seconds of its release."
const WAIT: Duration = Duration::from_secs(10);

/// The origin's `apollo:` section with test timings (polls held 1 s by the
/// stand-in, backoff 50→500 ms).
fn apollo_yaml(server: &ApolloServer, file: &Path) -> String {
    format!(
        "apollo:\n  config_servers: ['{}']\n  app_id: {APP}\n  namespace: application\n  key: {KEY}\n  \
         secret: {SECRET}\n  last_good_file: '{}'\n  startup_timeout_ms: 1500\n  request_timeout_ms: 1000\n  \
         poll_timeout_ms: 5000\n  backoff_initial_ms: 50\n  backoff_max_ms: 500\n",
        server.url(),
        file.display()
    )
}

fn start(server: &ApolloServer, file: &Path, static_list: &str) -> Setup {
    let extra = apollo_yaml(server, file);
    let links = format!("  allowed_domains: [{static_list}]\n");
    Setup::start_with(move |o| {
        // Each restart of the origin abandons its block of ids.
        o.pregen = 3000;
        o.extra_yaml = extra;
        o.links_yaml = links;
    })
}

fn apollo() -> ApolloServer {
    let s = ApolloServer::start(APP, Duration::from_secs(1));
    s.set_secret(Some(SECRET));
    s
}

fn last_good(dir: &TempDir) -> PathBuf {
    dir.path().join("var/apollo-config.json")
}

/// Creation on `domain` (optionally for merchant `kdt_id`): status and body.
async fn create(o: &Origin, domain: &str, kdt_id: Option<u64>) -> (u16, Value) {
    let n = {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
    let mut body = json!({"url": format!("https://example.com/{domain}/{n}"), "domain": domain});
    if let Some(k) = kdt_id {
        body["kdt_id"] = json!(k);
    }
    // An admin key: the only unbound key that may name any merchant.
    o.create_with_key(support::ADMIN_KEY, body).await
}

async fn assert_allowed(o: &Origin, domain: &str, kdt_id: Option<u64>) -> String {
    let (st, v) = create(o, domain, kdt_id).await;
    assert_eq!(st, 201, "{domain} kdt_id={kdt_id:?}: {v}\n{}", o.log());
    assert_eq!(v["domain"], domain);
    v["code"].as_str().unwrap().to_owned()
}

async fn assert_refused(o: &Origin, domain: &str, kdt_id: Option<u64>, error: &str) {
    let (st, v) = create(o, domain, kdt_id).await;
    assert_eq!(st, 403, "{domain} kdt_id={kdt_id:?}: {v}");
    assert_eq!(v["error"], error, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains(domain),
        "the error names the domain: {v}"
    );
}

/// Whether merchant `kdt_id` can create on `domain` now.
async fn usable(o: &Origin, domain: &str, kdt_id: u64) -> bool {
    create(o, domain, Some(kdt_id)).await.0 == 201
}

async fn whitelist_status(o: &Origin) -> WhitelistDim {
    o.status().await.whitelist
}

async fn release_key_is(o: &Origin, rk: &str) -> bool {
    whitelist_status(o).await.release_key.as_deref() == Some(rk)
}

async fn errors_above(o: &Origin, n: u64) -> bool {
    whitelist_status(o).await.refresh_errors > n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whitelist_is_static_union_apollo_and_follows_releases() {
    let apollo = apollo();
    let rk1 = apollo.release_value(
        "application",
        KEY,
        r#"{"55": "s.shop55.com", "91": "go.brand91.cn", "60": "both.shop.com"}"#,
    );
    let dir = TempDir::new("apollo-e2e");
    let s = start(&apollo, &last_good(&dir), "static.shop.com, both.shop.com");
    let o = &s.origin;

    // 1. Static list; 2. dynamic list, with the owning merchant id (a
    // merchant domain without one is refused, whoever asks).
    assert_allowed(o, "static.shop.com", None).await;
    assert_allowed(o, "static.shop.com", Some(55)).await;
    assert_refused(o, "s.shop55.com", None, "kdt_id_required").await;
    assert_allowed(o, "s.shop55.com", Some(55)).await;
    assert_allowed(o, "sho.rt", Some(91)).await;
    assert_refused(o, "unknown.shop.com", None, "domain_not_allowed").await;
    // 10. A merchant cannot create links on another merchant's domain.
    assert_refused(o, "s.shop55.com", Some(91), "merchant_domain_mismatch").await;
    assert_refused(o, "go.brand91.cn", Some(55), "merchant_domain_mismatch").await;
    let code91 = assert_allowed(o, "go.brand91.cn", Some(91)).await;

    // Status: source, size (default + static ∪ dynamic), release key, refresh time.
    let w = whitelist_status(o).await;
    assert_eq!(w.source, "apollo", "{w:?}");
    assert_eq!(w.size, 5, "{w:?}");
    assert_eq!(w.release_key.as_deref(), Some(rk1.as_str()));
    assert!(w.last_refresh_unix.unwrap() > 0, "{w:?}");
    assert_eq!(w.invalid_values, 0);

    // 3. Added in Apollo: usable without a restart, within seconds.
    let rk2 = apollo.release_value(
        "application",
        KEY,
        r#"{"55": "s.shop55.com", "77": "new.shop77.com"}"#,
    );
    eventually("new.shop77.com to become usable", WAIT, || {
        usable(o, "new.shop77.com", 77)
    })
    .await;
    assert_allowed(o, "new.shop77.com", Some(77)).await;
    assert_eq!(
        whitelist_status(o).await.release_key.as_deref(),
        Some(rk2.as_str())
    );
    // 4. Removed, not static: refused, naming the domain.
    assert_refused(o, "go.brand91.cn", None, "domain_not_allowed").await;
    assert_refused(o, "go.brand91.cn", Some(91), "domain_not_allowed").await;
    // 5. Removed but static: still usable (and no longer anyone's merchant domain).
    assert_allowed(o, "both.shop.com", None).await;
    assert_allowed(o, "both.shop.com", Some(91)).await;
    // 9. Redirects never consult the whitelist.
    let (st, loc) = o.follow("go.brand91.cn", &code91).await;
    assert_eq!(st, 302);
    assert!(loc
        .unwrap()
        .starts_with("https://example.com/go.brand91.cn/"));

    // 7. Not a JSON object of string → string: empty (not the old value), logged, counted.
    for (n, bad) in [
        r#"["s.shop55.com"]"#,
        r#"{"55": 55}"#,
        "{not json",
        r#"{"x": "a.com"}"#,
    ]
    .iter()
    .enumerate()
    {
        let rk = apollo.release_value("application", KEY, bad);
        eventually("the invalid value to be read", WAIT, || {
            release_key_is(o, &rk)
        })
        .await;
        let w = whitelist_status(o).await;
        assert_eq!(
            (w.invalid_values, w.dynamic_size),
            (n as u64 + 1, 0),
            "{w:?}"
        );
        assert_eq!(w.source, "apollo");
        assert_refused(o, "s.shop55.com", None, "domain_not_allowed").await;
        assert_allowed(o, "static.shop.com", None).await;
        // Back to a valid value between the bad ones, so each one is seen to empty the list.
        apollo.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
        eventually("s.shop55.com back", WAIT, || usable(o, "s.shop55.com", 55)).await;
    }
    assert!(
        o.log().contains("not a JSON object of kdt_id to domain"),
        "error log for invalid values"
    );

    // 6. An empty value leaves only the static list (and is not an error).
    for empty in ["", "{}"] {
        let rk = apollo.release_value("application", KEY, empty);
        eventually("the empty value", WAIT, || release_key_is(o, &rk)).await;
        assert_refused(o, "s.shop55.com", None, "domain_not_allowed").await;
        assert_allowed(o, "static.shop.com", None).await;
        assert_allowed(o, "both.shop.com", None).await;
        let w = whitelist_status(o).await;
        assert_eq!((w.size, w.invalid_values), (3, 4), "{w:?}");
    }

    assert_eq!(
        apollo.stats().unauthorized,
        0,
        "the origin signs its requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apollo_outages_fall_back_to_the_last_good_value() {
    let apollo = apollo();
    let rk = apollo.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
    let dir = TempDir::new("apollo-e2e-down");
    let file = last_good(&dir);
    let mut s = start(&apollo, &file, "static.shop.com");
    assert_allowed(&s.origin, "s.shop55.com", Some(55)).await;
    // Persisted on every successful change.
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["releaseKey"], rk.as_str());

    // 8. 5xx, garbage, timeouts, connection refused: the last value read stays in force.
    for fault in [
        Fault::Status(503),
        Fault::Status(500),
        Fault::Garbage,
        Fault::Delay(Duration::from_secs(7)),
    ] {
        let before = whitelist_status(&s.origin).await.refresh_errors;
        apollo.set_fault(fault.clone());
        eventually(&format!("the origin to see {fault:?}"), WAIT, || {
            errors_above(&s.origin, before)
        })
        .await;
        assert_allowed(&s.origin, "s.shop55.com", Some(55)).await;
        assert_refused(
            &s.origin,
            "s.shop55.com",
            Some(91),
            "merchant_domain_mismatch",
        )
        .await;
        apollo.set_fault(Fault::None);
    }
    apollo.stop();
    let before = whitelist_status(&s.origin).await.refresh_errors;
    eventually("the origin to see Apollo down", WAIT, || {
        errors_above(&s.origin, before)
    })
    .await;
    assert_allowed(&s.origin, "s.shop55.com", Some(55)).await;

    // Start-up with Apollo unreachable: the file is loaded.
    s.origin.restart();
    let w = whitelist_status(&s.origin).await;
    assert_eq!(
        (w.source.as_str(), w.release_key.as_deref()),
        ("file", Some(rk.as_str())),
        "{w:?}"
    );
    assert_allowed(&s.origin, "s.shop55.com", Some(55)).await;
    assert_refused(
        &s.origin,
        "s.shop55.com",
        Some(91),
        "merchant_domain_mismatch",
    )
    .await;

    // Start-up with Apollo answering too slowly: the file too.
    apollo.restart();
    apollo.set_fault(Fault::Delay(Duration::from_secs(30)));
    s.origin.restart();
    assert_eq!(whitelist_status(&s.origin).await.source, "file");
    assert_allowed(&s.origin, "s.shop55.com", Some(55)).await;
    apollo.stop();
    apollo.set_fault(Fault::None);

    // Neither Apollo nor the file: static list only, and the origin still starts.
    std::fs::remove_file(&file).unwrap();
    s.origin.restart();
    let w = whitelist_status(&s.origin).await;
    assert_eq!((w.source.as_str(), w.size), ("static-only", 2), "{w:?}");
    assert_refused(&s.origin, "s.shop55.com", None, "domain_not_allowed").await;
    assert_allowed(&s.origin, "static.shop.com", None).await;

    // Apollo back (with a release made while it was away): picked up without a restart.
    apollo.release_value(
        "application",
        KEY,
        r#"{"55": "s.shop55.com", "91": "go.brand91.cn"}"#,
    );
    apollo.restart();
    eventually("go.brand91.cn once Apollo is back", WAIT, || {
        usable(&s.origin, "go.brand91.cn", 91)
    })
    .await;
    assert_eq!(whitelist_status(&s.origin).await.source, "apollo");
    assert!(file.exists(), "the file is written again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whitelist_metrics_match_the_status() {
    let apollo = apollo();
    apollo.release_value(
        "application",
        KEY,
        r#"{"55": "s.shop55.com", "91": "go.brand91.cn"}"#,
    );
    let dir = TempDir::new("apollo-e2e-metrics");
    let s = start(&apollo, &last_good(&dir), "static.shop.com");
    let o = &s.origin;
    let rk = apollo.release_value("application", KEY, "[]");
    eventually("the invalid value", WAIT, || release_key_is(o, &rk)).await;
    let w = whitelist_status(o).await;
    let metrics = o.metrics().await;
    for line in [
        format!("shorturl_whitelist_size {}", w.size),
        "shorturl_whitelist_size 2".to_string(),
        "shorturl_whitelist_dynamic_size 0".to_string(),
        "shorturl_whitelist_source{source=\"apollo\"} 1".to_string(),
        "shorturl_whitelist_source{source=\"file\"} 0".to_string(),
        "shorturl_apollo_invalid_values_total 1".to_string(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in /metrics:\n{metrics}"
        );
    }
    let refreshed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("shorturl_whitelist_last_refresh_timestamp_seconds "))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(refreshed.unwrap_or(0) > 0, "last refresh time in /metrics");
}
