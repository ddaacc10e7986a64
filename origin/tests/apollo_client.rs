//! The Apollo feed in-process, against the Apollo stand-in: protocol,
//! signing, hot swaps, invalid values, failures and start-up fallbacks.
//! (`apollo_whitelist.rs` checks the same rules through a real origin.)

use serde_json::Value;
use shorturl_origin::apollo::client::{Client, Identity, Url};
use shorturl_origin::apollo::{self, ApolloConfig};
use shorturl_origin::whitelist::{Denied, Source, Whitelist};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::apollo::{ApolloServer, Fault};
use testkit::TempDir;

const APP: &str = "shorturl-origin";
const KEY: &str = "merchant_domains";
const WAIT: Duration = Duration::from_secs(15);

/// Short timings: polls held 1 s, client poll timeout 5 s, backoff 50→500 ms.
fn config(urls: &[String], file: &Path, extra: &str) -> ApolloConfig {
    let servers: Vec<String> = urls.iter().map(|u| format!("'{u}'")).collect();
    let yaml = format!(
        "config_servers: [{}]\napp_id: {APP}\nlast_good_file: '{}'\nstartup_timeout_ms: 2000\n\
         request_timeout_ms: 1000\npoll_timeout_ms: 5000\nbackoff_initial_ms: 50\nbackoff_max_ms: 500\n{extra}",
        servers.join(", "),
        file.display()
    );
    ApolloConfig::from_file(serde_yaml::from_str(&yaml).unwrap(), &|_| None).unwrap()
}

fn whitelist() -> Arc<Whitelist> {
    Arc::new(Whitelist::new(
        "sho.rt".into(),
        ["static.example".to_string()].into_iter().collect(),
    ))
}

/// Starts the feed as the origin does (`start` returns once the first
/// list is in force) and runs its refresh loop in a task (abort it to
/// stop).
async fn feed(cfg: ApolloConfig, w: &Arc<Whitelist>) -> tokio::task::JoinHandle<()> {
    let run = apollo::start(cfg, Arc::clone(w)).await;
    tokio::spawn(run.expect("the feed starts"))
}

fn allowed(w: &Whitelist, domain: &str) -> bool {
    w.is_listed(domain)
}

/// Polls `cond` until true; panics naming `what` after `timeout`.
async fn eventually(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn server() -> ApolloServer {
    ApolloServer::start(APP, Duration::from_secs(1))
}

fn saved(file: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

fn file_in(dir: &TempDir) -> PathBuf {
    dir.path().join("state/apollo-config.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stand_in_follows_apollos_protocol() {
    let s = server();
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{}{path}", s.url());
        async move {
            let r = http.get(url).send().await.unwrap();
            let st = r.status().as_u16();
            (st, r.text().await.unwrap())
        }
    };
    assert_eq!(
        get(format!("/configs/{APP}/default/application")).await.0,
        404,
        "unreleased namespace"
    );
    let rk = s.release_value("application", KEY, r#"{"55":"s.shop55.com"}"#);
    let (st, body) = get(format!("/configs/{APP}/default/application?ip=10.0.0.1")).await;
    assert_eq!(st, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["appId"], APP);
    assert_eq!(v["cluster"], "default");
    assert_eq!(v["namespaceName"], "application");
    assert_eq!(v["releaseKey"], rk.as_str());
    assert_eq!(v["configurations"][KEY], r#"{"55":"s.shop55.com"}"#);
    // `.properties` is the same namespace; the current releaseKey gives 304.
    assert_eq!(
        get(format!(
            "/configs/{APP}/default/application.properties?releaseKey={rk}"
        ))
        .await,
        (304, String::new())
    );
    assert_eq!(
        get("/configs/other-app/default/application".into()).await.0,
        404
    );

    let poll = |id: i64| {
        format!("/notifications/v2?appId={APP}&cluster=default&notifications=%5B%7B%22namespaceName%22%3A%22application%22%2C%22notificationId%22%3A{id}%7D%5D")
    };
    // A client behind gets the newest id at once.
    let (st, body) = get(poll(-1)).await;
    assert_eq!(st, 200);
    let n: Value = serde_json::from_str(&body).unwrap();
    let id = n[0]["notificationId"].as_i64().unwrap();
    assert_eq!(n[0]["namespaceName"], "application");
    assert_eq!(
        n[0]["messages"]["details"][format!("{APP}+default+application")],
        id
    );
    // Up to date: held for the hold time, then 304.
    let t = Instant::now();
    assert_eq!(get(poll(id)).await, (304, String::new()));
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "poll was not held: {:?}",
        t.elapsed()
    );
    // Held, then released: answered with the new id.
    s.set_hold(Duration::from_secs(30));
    let held = tokio::spawn(get(poll(id)));
    eventually("the poll to be held", WAIT, || s.stats().notifications >= 3).await;
    s.release_value("other", "k", "v"); // another namespace does not wake it
    s.release_value("application", KEY, "{}");
    let (st, body) = held.await.unwrap();
    assert_eq!(st, 200);
    let n: Value = serde_json::from_str(&body).unwrap();
    assert!(n[0]["notificationId"].as_i64().unwrap() > id + 1, "{n}");
    assert_eq!(
        get("/notifications/v2?appId=x&cluster=default".into())
            .await
            .0,
        400
    );
    assert_eq!(
        get(format!(
            "/notifications/v2?appId={APP}&cluster=default&notifications=%5B%5D"
        ))
        .await
        .0,
        400
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_signed_when_a_secret_is_set() {
    let s = server();
    s.release_value("application", KEY, "{}");
    s.set_secret(Some("df23df3f59884980844ff3dada30fa97"));
    let server_url = Url::parse(&s.url()).unwrap();
    let client = |secret: Option<&str>| {
        let id = Identity {
            app_id: APP.into(),
            cluster: "default".into(),
            namespace: "application".into(),
            secret: secret.map(str::to_owned),
            ip: Some("10.0.0.1".into()),
        };
        Client::new(id, Duration::from_secs(1)).unwrap()
    };
    let t = Duration::from_secs(2);
    let good = client(Some("df23df3f59884980844ff3dada30fa97"));
    let r = good
        .fetch(&server_url, None, None, t)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.namespace_name, "application");
    assert_eq!(
        good.fetch(&server_url, Some(&r.release_key), Some(3), t)
            .await
            .unwrap(),
        None
    );
    assert!(good.poll(&server_url, -1, t).await.unwrap().is_some());
    assert_eq!(s.stats().unauthorized, 0);
    for bad in [client(None), client(Some("wrong"))] {
        let e = bad.fetch(&server_url, None, None, t).await.unwrap_err();
        assert!(e.to_string().contains("HTTP 401"), "{e}");
        assert!(bad
            .poll(&server_url, -1, t)
            .await
            .unwrap_err()
            .to_string()
            .contains("HTTP 401"));
    }
    assert_eq!(s.stats().unauthorized, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_swapped_in_and_persisted() {
    let s = server();
    s.release_value(
        "application",
        KEY,
        r#"{"55": "s.shop55.com", "91": "go.brand91.cn"}"#,
    );
    let dir = TempDir::new("apollo-feed");
    let file = file_in(&dir);
    let w = whitelist();
    let task = feed(config(&[s.url()], &file, ""), &w).await;
    // In force before start() returns.
    assert!(
        allowed(&w, "s.shop55.com")
            && allowed(&w, "go.brand91.cn")
            && allowed(&w, "static.example")
    );
    assert_eq!(
        w.check("go.brand91.cn", Some(55)),
        Err(Denied::MerchantMismatch {
            domain: "go.brand91.cn".into(),
            kdt_id: 55
        })
    );
    let st = w.status();
    assert_eq!(
        (st.source.as_str(), st.dynamic_size, st.size),
        ("apollo", 2, 4)
    );
    assert!(st.last_refresh_unix.is_some());
    assert_eq!(saved(&file)["releaseKey"], st.release_key.unwrap().as_str());

    // Added and removed without a restart.
    let rk = s.release_value(
        "application",
        KEY,
        r#"{"55": "s.shop55.com", "77": "new.shop77.com"}"#,
    );
    eventually("new.shop77.com to be allowed", WAIT, || {
        allowed(&w, "new.shop77.com")
    })
    .await;
    assert!(!allowed(&w, "go.brand91.cn"));
    assert_eq!(w.status().release_key.as_deref(), Some(rk.as_str()));
    eventually("the file to follow", WAIT, || {
        saved(&file)["releaseKey"] == rk.as_str()
    })
    .await;

    // Not a JSON object of string → string: empty (not the previous value), counted.
    for (n, bad) in [r#"["s.shop55.com"]"#, r#"{"55": 55}"#, "not json"]
        .iter()
        .enumerate()
    {
        let rk = s.release_value("application", KEY, bad);
        eventually("the invalid value to be in force", WAIT, || {
            w.status().release_key.as_deref() == Some(rk.as_str())
        })
        .await;
        let st = w.status();
        assert_eq!(
            (st.dynamic_size, st.invalid_values, st.source.as_str()),
            (0, n as u64 + 1, "apollo"),
            "{bad}"
        );
        assert!(!allowed(&w, "s.shop55.com") && allowed(&w, "static.example"));
    }

    // Empty value: static list only, not an error.
    s.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
    eventually("s.shop55.com back", WAIT, || allowed(&w, "s.shop55.com")).await;
    let rk = s.release_value("application", KEY, "");
    eventually("the empty value", WAIT, || {
        w.status().release_key.as_deref() == Some(rk.as_str())
    })
    .await;
    assert_eq!((w.status().dynamic_size, w.status().invalid_values), (0, 3));
    assert!(!allowed(&w, "s.shop55.com"));

    // Polls carried the notification ids Apollo handed out.
    assert!(s
        .requests()
        .iter()
        .any(|r| r.starts_with("/notifications/v2?") && !r.contains("%3A-1%7D")));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_namespace_delivers_content() {
    let s = server();
    s.release_content("merchants.json", r#"{"91": "go.brand91.cn"}"#);
    let dir = TempDir::new("apollo-json");
    let w = whitelist();
    let task = feed(
        config(&[s.url()], &file_in(&dir), "namespace: merchants.json\n"),
        &w,
    )
    .await;
    assert!(allowed(&w, "go.brand91.cn"));
    s.release_content(
        "merchants.json",
        r#"{"91": "go.brand91.cn", "92": "x.brand92.cn"}"#,
    );
    eventually("x.brand92.cn", WAIT, || allowed(&w, "x.brand92.cn")).await;
    assert!(
        s.requests().iter().any(|r| r.contains("merchants.json%22")),
        "polls name the .json namespace"
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_keep_the_last_good_value_and_recover() {
    let s = server();
    s.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
    let dir = TempDir::new("apollo-fail");
    let w = whitelist();
    let task = feed(config(&[s.url()], &file_in(&dir), ""), &w).await;
    assert!(allowed(&w, "s.shop55.com"));
    let errors = || w.status().refresh_errors;

    for fault in [
        Fault::Status(503),
        Fault::Status(500),
        Fault::Garbage,
        Fault::Delay(Duration::from_secs(8)),
    ] {
        let before = errors();
        s.set_fault(fault.clone());
        eventually(&format!("errors under {fault:?}"), WAIT, || {
            errors() > before
        })
        .await;
        assert!(allowed(&w, "s.shop55.com"), "{fault:?}");
        assert_eq!(w.source(), Source::Apollo);
        s.set_fault(Fault::None);
    }

    // Connection refused; a release while down is picked up after restart.
    s.stop();
    let before = errors();
    eventually("errors while stopped", WAIT, || errors() >= before + 2).await;
    assert!(allowed(&w, "s.shop55.com"));
    s.release_value("application", KEY, r#"{"91": "go.brand91.cn"}"#);
    s.restart();
    eventually("the release made while down", WAIT, || {
        allowed(&w, "go.brand91.cn")
    })
    .await;
    assert!(!allowed(&w, "s.shop55.com"));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_config_server_is_used_when_the_first_is_down() {
    let s = server();
    s.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
    let dead = format!("http://127.0.0.1:{}", testkit::free_port());
    let dir = TempDir::new("apollo-two");
    let w = whitelist();
    let task = feed(config(&[dead, s.url()], &file_in(&dir), ""), &w).await;
    assert_eq!(w.source(), Source::Apollo);
    assert!(allowed(&w, "s.shop55.com"));
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_refresh_finds_a_lost_notification() {
    let s = server();
    s.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
    let dir = TempDir::new("apollo-refresh");
    let w = whitelist();
    let cfg = config(&[s.url()], &file_in(&dir), "refresh_interval_ms: 300\n");
    let task = feed(cfg, &w).await;
    s.release_unannounced("application", &[(KEY, r#"{"91": "go.brand91.cn"}"#)]);
    eventually("the unannounced release", WAIT, || {
        allowed(&w, "go.brand91.cn")
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_without_apollo_uses_the_file_or_nothing() {
    let s = server();
    let rk = s.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
    let dir = TempDir::new("apollo-start");
    let file = file_in(&dir);
    // A first run writes the last-good file.
    let task = feed(config(&[s.url()], &file, ""), &whitelist()).await;
    task.abort();
    s.stop();

    // Apollo down, file present: the file's list, marked as such.
    let w = whitelist();
    let task = feed(config(&[s.url()], &file, ""), &w).await;
    let st = w.status();
    assert_eq!(
        (st.source.as_str(), st.release_key.as_deref()),
        ("file", Some(rk.as_str()))
    );
    assert!(allowed(&w, "s.shop55.com"));
    // Apollo back with the same release: confirmed (304), now from Apollo.
    s.restart();
    eventually("source apollo", WAIT, || w.source() == Source::Apollo).await;
    assert!(allowed(&w, "s.shop55.com"));
    assert!(s.stats().configs_not_modified >= 1);
    task.abort();
    s.stop();

    // Apollo down, no file: static only, and start() still returns.
    std::fs::remove_file(&file).unwrap();
    let w = whitelist();
    let task = feed(config(&[s.url()], &file, ""), &w).await;
    assert_eq!(w.source(), Source::StaticOnly);
    assert!(!allowed(&w, "s.shop55.com") && allowed(&w, "static.example") && allowed(&w, "sho.rt"));
    s.restart();
    eventually("Apollo's list once it answers", WAIT, || {
        allowed(&w, "s.shop55.com")
    })
    .await;
    assert_eq!(w.source(), Source::Apollo);
    assert!(file.exists());
    task.abort();

    // A file for another namespace is not used.
    s.stop();
    let w = whitelist();
    let task = feed(config(&[s.url()], &file, "namespace: other\n"), &w).await;
    assert_eq!(w.source(), Source::StaticOnly);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_its_own_release_reads_default_and_its_file_is_used() {
    let s = server();
    s.release_value("application", KEY, r#"{"55": "s.shop55.com"}"#);
    let dir = TempDir::new("apollo-cluster");
    let file = file_in(&dir);
    let w = whitelist();
    let task = feed(config(&[s.url()], &file, "cluster: sh-idc\n"), &w).await;
    assert!(allowed(&w, "s.shop55.com"));
    assert_eq!(saved(&file)["cluster"], "default");
    task.abort();
    s.stop();
    let w = whitelist();
    let task = feed(config(&[s.url()], &file, "cluster: sh-idc\n"), &w).await;
    assert_eq!(w.source(), Source::File);
    assert!(allowed(&w, "s.shop55.com"));
    task.abort();
}
