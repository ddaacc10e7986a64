//! Webhooks (issue 28 item 1) against a real HTTP receiver started by the
//! test: every committed change (its audit row) arrives as exactly one
//! event id, signed, in order per link, although the receiver, the origin
//! and MySQL are killed mid-run; the API's checks (https, public
//! addresses after DNS, the fleet's own domains, tenancy), the delivery
//! log, dead letters and resend.

use crate::support;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{eventually, Setup, ADMIN_KEY, KEY, OTHER_KEY};

const WEBHOOK_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const ALL: [&str; 5] = [
    "link.created",
    "link.updated",
    "link.deleted",
    "link.expired",
    "link.recycled",
];

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

/// A real HTTP server on a fixed loopback port that records every POST and
/// answers 200 (or `status` when set). `kill` closes the listener and every
/// open connection, as a crashed receiver would.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
    status: Arc<Mutex<u16>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let mut r = Receiver {
            port: testkit::free_port(),
            got: Arc::default(),
            status: Arc::new(Mutex::new(200)),
            task: None,
        };
        r.restart().await;
        r
    }

    async fn restart(&mut self) {
        self.kill();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        let (got, status) = (Arc::clone(&self.got), Arc::clone(&self.status));
        self.task = Some(tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (got, status) = (Arc::clone(&got), Arc::clone(&status));
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (got, status) = (Arc::clone(&got), Arc::clone(&status));
                        async move {
                            let h = |n: &str| {
                                req.headers()
                                    .get(n)
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("")
                                    .to_owned()
                            };
                            let (id, timestamp, signature) = (
                                h("webhook-id"),
                                h("webhook-timestamp"),
                                h("webhook-signature"),
                            );
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            got.lock().unwrap().push(Received {
                                id,
                                timestamp,
                                signature,
                                body: String::from_utf8(body.to_vec()).unwrap(),
                            });
                            let code = *status.lock().unwrap();
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .status(code)
                                    .body(http_body_util::Full::new(bytes::Bytes::from_static(
                                        b"ok",
                                    )))
                                    .unwrap(),
                            )
                        }
                    },
                );
                conns.spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        }));
    }

    /// Stops accepting and drops every connection (the JoinSet with them).
    fn kill(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }
}

fn verify(secret: &str, r: &Received) -> bool {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.{}", r.id, r.timestamp, r.body).as_bytes());
    let want = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    r.signature == want
}

/// Creates `n` links, edits each, disables every fourth and deletes every
/// fifth; the codes created (whatever answered, the audit is the oracle).
async fn round(o: &support::Origin, n: usize, tag: &str) -> Vec<String> {
    let mut made = Vec::new();
    for i in 0..n {
        let (st, v) = o
            .create(json!({"url": format!("https://example.com/{tag}/{i}")}))
            .await;
        if st == 201 || st == 200 {
            made.push(v["code"].as_str().unwrap().to_owned());
        }
    }
    for (i, c) in made.iter().enumerate() {
        let _ = o
            .patch(
                KEY,
                c,
                json!({"url": format!("https://example.com/{tag}/{i}/v2")}),
            )
            .await;
        if i % 4 == 0 {
            let _ = o.patch(KEY, c, json!({"state": "disabled"})).await;
        }
        if i % 5 == 0 {
            let _ = o.delete(KEY, c).await;
        }
    }
    made
}

fn webhooks_yaml(extra: &str) -> String {
    format!(
        "webhooks:\n  key: '{WEBHOOK_KEY}'\n  retry_base_ms: 50\n  retry_max_ms: 500\n  timeout_ms: 2000\n{extra}"
    )
}

fn open_yaml() -> String {
    webhooks_yaml("  allow_http: true\n  allow_networks: [127.0.0.0/8]\n")
}

async fn create_endpoint(s: &Setup, key: &str, body: Value) -> (u16, Value) {
    let (st, v, _) = s
        .origin
        .call(
            reqwest::Method::POST,
            "/api/v1/webhooks",
            key,
            Some(body),
            &[],
        )
        .await;
    (st, v)
}

async fn get(s: &Setup, key: &str, path: &str) -> (u16, Value) {
    let (st, v, _) = s
        .origin
        .call(reqwest::Method::GET, path, key, None, &[])
        .await;
    (st, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_arrives_once_per_id_in_order_through_receiver_origin_and_mysql_crashes() {
    let mut mysql = testkit::MariaDb::start();
    let db = "webhooks";
    let url = mysql.create_database(db);
    let mut s = Setup::start_on(url, db.into(), |o| o.extra_yaml = open_yaml());
    let mut rx = Receiver::start().await;
    let (st, ep) = create_endpoint(
        &s,
        KEY,
        json!({"url": rx.url(), "events": ALL, "description": "fault test"}),
    )
    .await;
    assert_eq!(st, 201, "{ep}");
    let secret = ep["secret"].as_str().unwrap().to_owned();
    let ep_id = ep["id"].as_str().unwrap().to_owned();

    // Changes: create, edit, disable some, delete some, between faults.
    let mut codes: Vec<String> = Vec::new();
    codes.extend(round(&s.origin, 12, "a").await);
    // The receiver dies: deliveries fail and wait.
    rx.kill();
    codes.extend(round(&s.origin, 12, "b").await);
    // A delivery failed against the dead receiver and waits for its retry.
    let pending = format!("/api/v1/webhooks/{ep_id}/deliveries?state=pending");
    eventually(
        "a failed attempt recorded",
        Duration::from_secs(30),
        || async {
            let (_, p) = get(&s, KEY, &pending).await;
            p["deliveries"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x["attempts"].as_u64() >= Some(1)))
        },
    )
    .await;
    // The origin dies with deliveries pending; the receiver comes back.
    s.origin.kill();
    rx.restart().await;
    s.origin.restart();
    codes.extend(round(&s.origin, 12, "c").await);
    // MySQL dies mid-run and comes back.
    mysql.stop();
    let during = round(&s.origin, 3, "d").await;
    mysql.restart();
    codes.extend(during);
    codes.extend(round(&s.origin, 12, "e").await);
    assert!(codes.len() >= 48, "{}", codes.len());

    // The oracle: the audit trail, one row per committed change.
    let audit = mysql.sql(&format!(
        "USE `{db}`; SELECT code, action, version FROM link_audit ORDER BY id"
    ));
    let expected: Vec<(String, String, u64)> = audit
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let ty = match f[1] {
                "create" => "link.created",
                "delete" => "link.deleted",
                _ => "link.updated",
            };
            (f[0].to_owned(), ty.to_owned(), f[2].parse().unwrap())
        })
        .collect();
    assert!(expected.len() >= 48 * 2, "{}", expected.len());
    let distinct = |r: &[Received]| {
        r.iter()
            .map(|x| x.id.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    eventually("every event delivered", Duration::from_secs(120), || {
        let n = distinct(&rx.received());
        let want = expected.len();
        async move { n >= want }
    })
    .await;
    let got = rx.received();
    assert_eq!(
        distinct(&got),
        expected.len(),
        "one id per committed change"
    );

    // Signed; the same id always carries the same body.
    let mut by_id: HashMap<String, String> = HashMap::new();
    for r in &got {
        assert!(verify(&secret, r), "bad signature on {}", r.id);
        let prev = by_id.entry(r.id.clone()).or_insert_with(|| r.body.clone());
        assert_eq!(*prev, r.body, "a repeat of {} differs", r.id);
    }
    // Exactly the audit's changes, one id each, in order per link.
    let mut seen: BTreeMap<(String, String, u64), String> = BTreeMap::new();
    let mut order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut first = std::collections::HashSet::new();
    for r in &got {
        if !first.insert(r.id.clone()) {
            continue;
        }
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["id"], r.id.as_str());
        assert_eq!(v["app"], "demo");
        let link = &v["data"]["link"];
        let code = link["code"].as_str().unwrap().to_owned();
        let version = link["version"].as_u64().unwrap();
        let key = (
            code.clone(),
            v["type"].as_str().unwrap().to_owned(),
            version,
        );
        assert!(
            seen.insert(key.clone(), r.id.clone()).is_none(),
            "two ids for {key:?}"
        );
        order.entry(code).or_default().push(version);
    }
    let want: BTreeMap<(String, String, u64), String> = expected
        .iter()
        .map(|k| (k.clone(), String::new()))
        .collect();
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "delivered events are the committed changes"
    );
    for (code, versions) in &order {
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "{code}: {versions:?}"
        );
    }
    // The log says so (once the last answers are recorded): all
    // delivered, some after retries.
    let want = json!({"pending": 0, "delivered": expected.len(), "dead": 0});
    eventually(
        "the log records every delivery",
        Duration::from_secs(30),
        || async {
            let (st, e) = get(&s, KEY, &format!("/api/v1/webhooks/{ep_id}")).await;
            st == 200 && e["deliveries"] == want
        },
    )
    .await;
    let (st, page) = get(
        &s,
        KEY,
        &format!("/api/v1/webhooks/{ep_id}/deliveries?limit=500"),
    )
    .await;
    assert_eq!(st, 200, "{page}");
    let log = page["deliveries"].as_array().unwrap();
    assert_eq!(log.len(), expected.len());
    assert!(log
        .iter()
        .all(|d| d["state"] == "delivered" && d["last_status"] == 200));
    assert!(
        log.iter().any(|d| d["attempts"].as_u64().unwrap() > 1),
        "some were retried"
    );
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_checked_private_to_their_app_and_dead_letters_can_be_resent() {
    // https only, public addresses only: no exceptions configured.
    let strict = Setup::start_with(|o| o.extra_yaml = webhooks_yaml("  give_up_after_secs: 1\n"));
    let refused = [
        (
            json!({"url": "http://example.com/h", "events": ["link.created"]}),
            "invalid_webhook_url",
        ),
        (
            json!({"url": "https://127.0.0.1/h", "events": ["link.created"]}),
            "invalid_webhook_url",
        ),
        (
            json!({"url": "https://[::1]/h", "events": ["link.created"]}),
            "invalid_webhook_url",
        ),
        (
            json!({"url": "https://169.254.169.254/h", "events": ["link.created"]}),
            "invalid_webhook_url",
        ),
        (
            json!({"url": "https://sho.rt/h", "events": ["link.created"]}),
            "invalid_webhook_url",
        ),
        (
            json!({"url": "https://u:p@example.com/h", "events": ["link.created"]}),
            "invalid_webhook_url",
        ),
        (
            json!({"url": "https://example.com/h", "events": ["link.clicked.nope"]}),
            "invalid_events",
        ),
        (
            json!({"url": "https://example.com/h", "events": []}),
            "invalid_events",
        ),
        (json!({"url": "https://example.com/h"}), "invalid_events"),
        (
            json!({"url": "https://example.com/h", "events": ["link.created"], "x": 1}),
            "invalid_json",
        ),
    ];
    for (body, kind) in refused {
        let (st, v) = create_endpoint(&strict, KEY, body.clone()).await;
        assert_eq!((st, v["error"].as_str()), (400, Some(kind)), "{body}: {v}");
    }
    // A name is checked when resolved: localhost resolves to loopback only.
    let rx = Receiver::start().await;
    let (st, ep) = create_endpoint(
        &strict,
        KEY,
        json!({"url": format!("https://localhost:{}/hook", rx.port), "events": ["link.created"]}),
    )
    .await;
    assert_eq!(st, 201, "{ep}");
    let id = ep["id"].as_str().unwrap();
    assert!(ep["secret"].as_str().unwrap().starts_with("whsec_"));
    strict
        .origin
        .create_ok(json!({"url": "https://example.com/ssrf"}))
        .await;
    let path = format!("/api/v1/webhooks/{id}/deliveries");
    eventually("the delivery is dead", Duration::from_secs(30), || async {
        let (_, p) = get(&strict, KEY, &format!("{path}?state=dead")).await;
        p["deliveries"].as_array().is_some_and(|d| d.len() == 1)
    })
    .await;
    let (_, p) = get(&strict, KEY, &path).await;
    let d = &p["deliveries"][0];
    assert_eq!(d["state"], "dead");
    assert_eq!(d["type"], "link.created");
    assert_eq!(d["last_status"], Value::Null);
    assert_eq!(
        d["last_error"], "localhost resolves to no allowed address",
        "{d}"
    );
    assert!(
        rx.received().is_empty(),
        "nothing reached the loopback receiver"
    );
    // Tenancy: another app neither sees nor touches it.
    for (m, p) in [
        (reqwest::Method::GET, format!("/api/v1/webhooks/{id}")),
        (reqwest::Method::DELETE, format!("/api/v1/webhooks/{id}")),
        (reqwest::Method::GET, path.clone()),
    ] {
        let (st, v, _) = strict.origin.call(m, &p, OTHER_KEY, None, &[]).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (404, Some("webhook_not_found")),
            "{p}"
        );
    }
    let (_, list) = get(&strict, OTHER_KEY, "/api/v1/webhooks").await;
    assert_eq!(list["endpoints"], json!([]));
    let (_, list) = get(&strict, ADMIN_KEY, "/api/v1/webhooks?app=demo").await;
    assert_eq!(list["endpoints"].as_array().unwrap().len(), 1);
    // The secret is sealed at rest and never shown again.
    let stored = support::count(&strict, &format!(
        "SELECT COUNT(*) FROM webhook_endpoint WHERE secret_sealed LIKE 'enc1:%' AND secret_sealed NOT LIKE '%{}%'",
        &ep["secret"].as_str().unwrap()[6..]
    ));
    assert_eq!(stored, 1);
    let (_, one) = get(&strict, KEY, &format!("/api/v1/webhooks/{id}")).await;
    assert!(one.get("secret").is_none());
    // Resend: pending again, due now (and dead again: still refused).
    let did = d["id"].as_str().unwrap();
    let (st, v, _) = strict
        .origin
        .call(
            reqwest::Method::POST,
            &format!("{path}/{did}/resend"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!((st, v["state"].as_str()), (202, Some("pending")), "{v}");
    let (st, v, _) = strict
        .origin
        .call(
            reqwest::Method::POST,
            &format!("{path}/99999/resend"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!((st, v["error"].as_str()), (404, Some("delivery_not_found")));
    // An app with no endpoint writes no events.
    strict
        .origin
        .create_with_key(OTHER_KEY, json!({"url": "https://example.com/none"}))
        .await;
    let (st, _, _) = strict
        .origin
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/webhooks/{id}"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 204);
    eventually("the outbox is empty", Duration::from_secs(10), || async {
        support::count(&strict, "SELECT COUNT(*) FROM webhook_event") == 0
    })
    .await;
    assert_eq!(
        support::count(&strict, "SELECT COUNT(*) FROM webhook_delivery"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_endpoints_cannot_be_created() {
    let s = Setup::start();
    let (st, v) = create_endpoint(
        &s,
        KEY,
        json!({"url": "https://example.com/h", "events": ALL}),
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("webhooks_not_configured")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_arrive_as_per_link_digests_with_exact_counts() {
    use support::clicks::{batches, hours_batch, xadd, FAST_CLAIM};
    let s = Setup::start_with(|o| {
        o.extra_yaml = format!("{}  click_digest_secs: 1\n{FAST_CLAIM}", open_yaml())
    });
    let rx = Receiver::start().await;
    let (st, ep) = create_endpoint(
        &s,
        KEY,
        json!({"url": rx.url(), "events": ["link.clicked"]}),
    )
    .await;
    assert_eq!(st, 201, "{ep}");
    let a = s
        .origin
        .create_ok(json!({"url": "https://example.com/a"}))
        .await;
    let b = s
        .origin
        .create_ok(json!({"url": "https://example.com/b"}))
        .await;
    let hour = shorturl_common::time::now_unix() / 3600 * 3600;
    let first = hours_batch("wh:b:1", &[(&a, hour, 3, 1), (&b, hour, 2, 0)]);
    xadd(&s, &first).await;
    xadd(&s, &hours_batch("wh:b:2", &[(&a, hour, 4, 2)])).await;
    // A batch delivered twice counts once.
    xadd(&s, &first).await;
    eventually("the batches applied", Duration::from_secs(30), || async {
        batches(&s.origin, "applied").await == 2 && batches(&s.origin, "duplicate").await == 1
    })
    .await;
    eventually(
        "every digest delivered",
        Duration::from_secs(30),
        || async {
            support::count(&s, "SELECT COUNT(*) FROM webhook_click_digest") == 0
                && support::count(&s, "SELECT COUNT(*) FROM webhook_event") == 0
                && support::count(&s, "SELECT COUNT(*) FROM webhook_delivery WHERE state <> 1") == 0
        },
    )
    .await;
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut ids = std::collections::HashSet::new();
    for r in rx.received() {
        if !ids.insert(r.id.clone()) {
            continue;
        }
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["type"], "link.clicked", "only the subscribed type: {v}");
        let c = &v["data"]["clicks"];
        assert!(
            c["from"].as_str().unwrap() < c["to"].as_str().unwrap(),
            "{c}"
        );
        let e = sums
            .entry(v["data"]["link"]["code"].as_str().unwrap().to_owned())
            .or_default();
        e.0 += c["human"].as_u64().unwrap();
        e.1 += c["bot"].as_u64().unwrap();
    }
    assert_eq!(sums, BTreeMap::from([(a, (7, 3)), (b, (2, 0))]));
}
