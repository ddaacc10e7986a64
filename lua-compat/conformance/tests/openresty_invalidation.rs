//! The OpenResty module's side of invalidation (protocol section 3.2) that
//! the shared table cannot show: a message reaches the LRU of every worker,
//! a tombstone keeps a lookup that raced a change from storing or serving
//! the older answer, and a lost subscription bounds what the module trusts
//! (the grace while down, everything dropped on resubscription, a silent
//! connection noticed by its PINGs). The module runs 2 workers; requests
//! go over many connections so every worker serves some (nginx
//! `reuseport`: the kernel spreads connections over the workers).

use crate::support;

use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use support::http::{self, Conn, Request, Response};
use support::{Edge, Origin, API_KEY};
use testkit::{free_port, wait_for, Redis, TempDir};

/// Connections per test: with 2 workers, the chance that one worker gets
/// none of them is 2^-39.
const CONNS: usize = 40;
const WORKERS: u64 = 2;
/// The custom code the origin's write-back failpoint holds.
const RACE_CODE: &str = "tombRace01";

struct Stack {
    redis: Mutex<Redis>,
    origin: Origin,
    dir: TempDir,
}

impl Stack {
    /// The file that holds the origin's write-back of RACE_CODE while it exists.
    fn hold(&self) -> PathBuf {
        self.dir.path().join("hold")
    }

    fn redis_url(&self) -> String {
        self.redis.lock().unwrap().url()
    }

    fn redis_addr(&self) -> String {
        format!("127.0.0.1:{}", self.redis.lock().unwrap().port())
    }
}

fn stack() -> &'static Stack {
    static S: OnceLock<Stack> = OnceLock::new();
    S.get_or_init(|| {
        let dir = TempDir::new("inval-stack");
        let redis = Redis::start();
        let hold = dir.path().join("hold");
        let origin = Origin::start_with(
            &redis,
            50,
            &[(
                "SHORTURL_FAILPOINTS",
                format!("origin.writeback.hold={RACE_CODE}@{}", hold.display()),
            )],
        );
        Stack {
            redis: Mutex::new(redis),
            origin,
            dir,
        }
    })
}

/// The tests restart the shared Redis: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A module (2 workers) with its metrics on their own port.
struct Module {
    edge: Edge,
    metrics_port: u16,
}

impl Module {
    fn start(env: &[(&str, String)]) -> Module {
        let s = stack();
        let metrics_port = free_port();
        let mut all: Vec<(&str, String)> = vec![
            ("SU_WORKERS", WORKERS.to_string()),
            ("SU_METRICS_PORT", metrics_port.to_string()),
        ];
        all.extend(env.iter().cloned());
        let edge = Edge::openresty_with(&s.redis_addr(), &s.origin.addr(), &all);
        let m = Module { edge, metrics_port };
        m.await_metric(
            "every worker to subscribe",
            "shorturl_inval_subscribed",
            WORKERS,
        );
        m
    }

    /// The value of the metric line starting with `series` (name and labels).
    fn metric(&self, series: &str) -> u64 {
        let text = http::get(self.metrics_port, "/metrics", "localhost").text();
        testkit::metrics::metric_in(&text, series)
            .unwrap_or_else(|| panic!("no {series} in\n{text}")) as u64
    }

    fn await_metric(&self, what: &str, series: &str, want: u64) {
        wait_for(
            &format!("{what} ({series} = {want})"),
            Duration::from_secs(15),
            || self.metric(series) == want,
        );
    }

    fn messages(&self) -> u64 {
        self.metric("shorturl_inval_messages_total{result=\"applied\"}")
    }

    /// `CONNS` keep-alive connections.
    fn conns(&self) -> Vec<Conn> {
        (0..CONNS)
            .map(|_| Conn::open(self.edge.port).unwrap())
            .collect()
    }

    fn counter(&self, dim: &str, field: &str) -> i64 {
        self.edge.status()[dim][field].as_i64().unwrap()
    }
}

/// Where `GET /code` sends each connection (`None`: not a redirect).
fn locations(conns: &mut [Conn], code: &str) -> Vec<Option<String>> {
    conns
        .iter_mut()
        .map(|c| {
            let r = c.get(&format!("/{code}"), "localhost").unwrap();
            (r.status == 302).then(|| r.header("location").unwrap_or("").to_owned())
        })
        .collect()
}

fn all_to(conns: &mut [Conn], code: &str, url: &str) -> bool {
    locations(conns, code)
        .iter()
        .all(|l| l.as_deref() == Some(url))
}

fn redis(args: &[&str]) {
    support::redis_cmd(&stack().redis_url(), args).unwrap();
}

fn record(code: &str, version: u64, url: &str) {
    let exp = shorturl_common::time::now_unix() + 3600;
    redis(&[
        "SET",
        &format!("su:1:link:localhost/{code}"),
        &format!("2 {version} {exp} localhost {url}"),
    ]);
}

/// A request to the origin's API with the suite's key.
fn api(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut h: Vec<(String, String)> = vec![
        ("Authorization".into(), format!("Bearer {API_KEY}")),
        ("Content-Type".into(), "application/json".into()),
    ];
    h.extend(
        headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    http::send(
        stack().origin.port,
        &Request {
            method: method.into(),
            path: path.into(),
            host: Some("localhost".into()),
            headers: h,
            body: body.as_bytes().to_vec(),
            ..Default::default()
        },
    )
    .unwrap()
}

fn create(url: &str, code: Option<&str>) -> String {
    let mut body = serde_json::json!({ "url": url });
    if let Some(c) = code {
        body["code"] = Value::from(c);
    }
    let r = api("POST", "/api/v1/links", &[], &body.to_string());
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["code"].as_str().unwrap().to_owned()
}

fn edit_url(code: &str, url: &str) {
    let r = api(
        "PATCH",
        &format!("/api/v1/links/{code}"),
        &[],
        &serde_json::json!({ "url": url }).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_message_reaches_the_cache_of_every_worker() {
    let _one = serial();
    let m = Module::start(&[]);
    let code = "everyWkr01";
    record(code, 1, "https://example.com/every-v1");
    let mut conns = m.conns();
    assert!(all_to(&mut conns, code, "https://example.com/every-v1"));
    // A newer record without a message: every worker keeps serving its
    // cached copy (no Redis read).
    record(code, 2, "https://example.com/every-v2");
    let redis_reads = m.counter("redis", "hit");
    assert!(all_to(&mut conns, code, "https://example.com/every-v1"));
    assert_eq!(m.counter("redis", "hit"), redis_reads);

    let before = m.messages();
    redis(&["PUBLISH", "su:1:inval", &format!("2 {code} localhost")]);
    m.await_metric(
        "both workers to apply the message",
        "shorturl_inval_messages_total{result=\"applied\"}",
        before + WORKERS,
    );
    // Each worker held the entry in its own LRU and dropped it.
    assert_eq!(
        m.metric("shorturl_inval_dropped_total{cache=\"worker\"}"),
        WORKERS
    );
    assert!(all_to(&mut conns, code, "https://example.com/every-v2"));
    // Read from Redis once: the first worker to miss shares its answer
    // through the node cache.
    assert_eq!(m.counter("redis", "hit") - redis_reads, 1);
}

#[test]
fn a_lookup_that_raced_a_change_neither_stores_nor_serves_the_older_answer() {
    let _one = serial();
    let s = stack();
    let m = Module::start(&[]);
    create("https://example.com/race-v1", Some(RACE_CODE));
    // The edge's lookup misses Redis and asks the origin, which reads MySQL
    // (version 1) and then waits before its write-back.
    redis(&["DEL", &format!("su:1:link:localhost/{RACE_CODE}")]);
    let held = s.hold().with_extension("held");
    let _ = std::fs::remove_file(&held);
    std::fs::write(s.hold(), b"").unwrap();
    let port = m.edge.port;
    let racing = std::thread::spawn(move || http::get(port, &format!("/{RACE_CODE}"), "localhost"));
    wait_for(
        "the origin to hold its write-back",
        Duration::from_secs(10),
        || held.exists(),
    );

    // The change lands meanwhile: Redis holds version 2, the message is out.
    let before = m.messages();
    edit_url(RACE_CODE, "https://example.com/race-v2");
    m.await_metric(
        "both workers to apply the message",
        "shorturl_inval_messages_total{result=\"applied\"}",
        before + WORKERS,
    );
    // The origin's lookup finishes with version 1 (its write-back refused
    // by the compare-and-set): the module looks up once more.
    std::fs::remove_file(s.hold()).unwrap();
    let r = racing.join().unwrap();
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/race-v2"));
    assert_eq!(m.metric("shorturl_inval_superseded_total"), 1);

    // And version 1 was not stored: every worker answers version 2.
    let mut conns = m.conns();
    assert!(all_to(&mut conns, RACE_CODE, "https://example.com/race-v2"));
}

#[test]
fn while_unsubscribed_cached_links_are_served_at_most_the_grace() {
    let _one = serial();
    let s = stack();
    let m = Module::start(&[
        ("SU_UNSUBSCRIBED_GRACE_MS", "3000".into()),
        ("SU_POSITIVE_TTL_SECS", "120".into()),
    ]);
    let code = create("https://example.com/grace-v1", None);
    let mut conns = m.conns();
    assert!(all_to(&mut conns, &code, "https://example.com/grace-v1"));

    s.redis.lock().unwrap().stop();
    m.await_metric("the subscriptions to drop", "shorturl_inval_subscribed", 0);
    // Redis down: the edit commits (its outbox row waits for Redis) and no
    // message can reach the module.
    edit_url(&code, "https://example.com/grace-v2");
    // Within the grace the cached target is still served...
    let mut c = Conn::open(m.edge.port).unwrap();
    let r = c.get(&format!("/{code}"), "localhost").unwrap();
    assert_eq!(r.header("location"), Some("https://example.com/grace-v1"));
    // ...then no longer (120 s before its TTL would end it): the origin
    // answers from MySQL.
    let forwarded = m.counter("origin", "forward");
    wait_for(
        "every worker to stop trusting its cached target",
        Duration::from_secs(15),
        || all_to(&mut conns, &code, "https://example.com/grace-v2"),
    );
    assert!(m.counter("origin", "forward") > forwarded);

    s.redis.lock().unwrap().restart();
    m.await_metric(
        "the workers to resubscribe",
        "shorturl_inval_subscribed",
        WORKERS,
    );
}

#[test]
fn resubscribing_drops_everything_cached_before_the_disconnect() {
    let _one = serial();
    let s = stack();
    // A grace and TTL far longer than the test: only the resubscription can
    // end the cached answer.
    let m = Module::start(&[
        ("SU_UNSUBSCRIBED_GRACE_MS", "60000".into()),
        ("SU_POSITIVE_TTL_SECS", "120".into()),
    ]);
    let subscriptions = m.metric("shorturl_inval_subscriptions_total");
    let code = "resubWkr01";
    record(code, 1, "https://example.com/resub-v1");
    let mut conns = m.conns();
    assert!(all_to(&mut conns, code, "https://example.com/resub-v1"));

    // Redis restarts (empty); the change made meanwhile was announced to
    // no one.
    s.redis.lock().unwrap().restart();
    record(code, 2, "https://example.com/resub-v2");
    m.await_metric(
        "both workers to resubscribe",
        "shorturl_inval_subscriptions_total",
        subscriptions + WORKERS,
    );
    m.await_metric(
        "the workers to be subscribed",
        "shorturl_inval_subscribed",
        WORKERS,
    );
    assert!(all_to(&mut conns, code, "https://example.com/resub-v2"));
}

#[test]
fn a_silent_subscription_is_noticed_and_treated_as_lost() {
    let _one = serial();
    // PINGs every 200 ms; 600 ms without any answer means lost.
    let m = Module::start(&[
        ("SU_UNSUBSCRIBED_GRACE_MS", "1000".into()),
        ("SU_POSITIVE_TTL_SECS", "120".into()),
    ]);
    let subscriptions = m.metric("shorturl_inval_subscriptions_total");
    let code = "silentWk01";
    record(code, 1, "https://example.com/silent-v1");
    let mut conns = m.conns();
    assert!(all_to(&mut conns, code, "https://example.com/silent-v1"));
    record(code, 2, "https://example.com/silent-v2");

    // Redis stops answering without closing anything (as behind a network
    // cut): the subscriptions go quiet, their PINGs unanswered.
    let t0 = Instant::now();
    redis(&["CLIENT", "PAUSE", "2000", "ALL"]);
    m.await_metric(
        "both workers to resubscribe after the pause",
        "shorturl_inval_subscriptions_total",
        subscriptions + WORKERS,
    );
    eprintln!("resubscribed {:?} after the pause began", t0.elapsed());
    let logs = m.edge.logs();
    assert!(
        logs.contains("invalidation subscription on ") && logs.contains(" lost (no answer to PING"),
        "{logs}"
    );
    assert!(all_to(&mut conns, code, "https://example.com/silent-v2"));
}
