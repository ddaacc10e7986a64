//! An Apollo config service for the tests (no Apollo can be installed here).
//!
//! It implements the part of the config-service HTTP API that clients use,
//! as Apollo documents and implements it:
//! - `GET /configs/{appId}/{cluster}/{namespace}`: 200 with
//!   `{appId, cluster, namespaceName, configurations, releaseKey}`, 304 when
//!   the `releaseKey` parameter is the current one, 404 for an unknown app or
//!   an unreleased namespace. `.properties` is stripped from namespace names;
//!   other formats (`x.json`) keep their suffix and carry their text under
//!   `configurations.content`. A cluster without its own release falls back
//!   to `default`.
//! - `GET /notifications/v2?appId=&cluster=&notifications=[...]`: answers at
//!   once (200, the newest ids) when a namespace's id is newer than the
//!   client's, otherwise holds the request until a release of one of those
//!   namespaces (200) or the hold time (60 s in Apollo; short in tests) (304).
//!   Notification ids are one global sequence over all releases, like
//!   Apollo's `ReleaseMessage` ids; 400 for a missing or empty parameter.
//! - Access keys: with a secret set, requests need `Timestamp` (within 60 s)
//!   and `Authorization: Apollo {appId}:{Base64(HMAC-SHA1(secret,
//!   timestamp + "\n" + path?query))}` over the raw request line; 401 otherwise.
//!
//! Faults for tests: stop (connections refused, held polls cut) and restart
//! on the same port with the same releases; answer every request with a
//! status (e.g. 503) or with a garbage 200 body; delay answers (timeouts).
//! It runs on its own runtime thread, so sync and async tests can use it.

use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A fault the server applies to every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Answer with this status (e.g. 500, 503) and a short text body.
    Status(u16),
    /// Answer 200 with a body that is not Apollo's JSON.
    Garbage,
    /// Wait this long before answering normally (client timeouts).
    Delay(Duration),
}

/// Request counters.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub configs: u64,
    pub configs_not_modified: u64,
    pub notifications: u64,
    pub notifications_held_to_304: u64,
    pub unauthorized: u64,
}

#[derive(Debug, Clone)]
struct Namespace {
    /// Name as released (without `.properties`).
    name: String,
    configurations: BTreeMap<String, String>,
    release_key: String,
    notification_id: i64,
}

struct State {
    app_id: String,
    cluster: String,
    secret: Option<String>,
    hold: Duration,
    /// Keyed by lower-cased name without `.properties` (Apollo matches
    /// namespace names case-insensitively).
    namespaces: BTreeMap<String, Namespace>,
    next_id: i64,
    fault: Fault,
    stats: Stats,
    /// Path and query of every request, in order.
    log: Vec<String>,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on every release; held polls wait on it.
    releases: tokio::sync::watch::Sender<u64>,
}

/// The server. Dropping it stops it.
pub struct ApolloServer {
    shared: Arc<Shared>,
    port: u16,
    rt: Mutex<Option<tokio::runtime::Runtime>>,
}

fn norm(ns: &str) -> String {
    ns.strip_suffix(".properties")
        .unwrap_or(ns)
        .to_ascii_lowercase()
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

impl ApolloServer {
    /// Starts serving `app_id` (cluster `default`) on a free port; polls
    /// are held `hold` (Apollo: 60 s).
    pub fn start(app_id: &str, hold: Duration) -> ApolloServer {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                app_id: app_id.to_owned(),
                cluster: "default".into(),
                secret: None,
                hold,
                namespaces: BTreeMap::new(),
                next_id: 1,
                fault: Fault::None,
                stats: Stats::default(),
                log: Vec::new(),
            }),
            releases: tokio::sync::watch::channel(0).0,
        });
        let s = ApolloServer {
            shared,
            port,
            rt: Mutex::new(None),
        };
        s.restart();
        s
    }

    /// `http://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Requires signed requests with this access-key secret (`None`: open).
    pub fn set_secret(&self, secret: Option<&str>) {
        self.shared.state.lock().unwrap().secret = secret.map(str::to_owned);
    }

    pub fn set_hold(&self, hold: Duration) {
        self.shared.state.lock().unwrap().hold = hold;
    }

    pub fn set_fault(&self, fault: Fault) {
        self.shared.state.lock().unwrap().fault = fault;
    }

    pub fn stats(&self) -> Stats {
        self.shared.state.lock().unwrap().stats.clone()
    }

    /// Path and query of every request so far.
    pub fn requests(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().log.clone()
    }

    /// Releases a namespace with these configurations; returns the release key.
    pub fn release(&self, namespace: &str, configurations: &[(&str, &str)]) -> String {
        let key = {
            let mut st = self.shared.state.lock().unwrap();
            let id = st.next_id;
            st.next_id += 1;
            let release_key = format!("{}-{:08x}{id:04x}", now_ms() / 1000, std::process::id());
            let name = namespace
                .strip_suffix(".properties")
                .unwrap_or(namespace)
                .to_owned();
            let configurations = configurations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            st.namespaces.insert(
                norm(namespace),
                Namespace {
                    name,
                    configurations,
                    release_key: release_key.clone(),
                    notification_id: id,
                },
            );
            release_key
        };
        self.shared.releases.send_modify(|n| *n += 1);
        key
    }

    /// Changes a namespace's configurations and release key without a
    /// release message: what a client sees when a notification is lost.
    /// Only a full re-read finds it.
    pub fn release_unannounced(&self, namespace: &str, configurations: &[(&str, &str)]) -> String {
        let mut st = self.shared.state.lock().unwrap();
        let ns = st
            .namespaces
            .get_mut(&norm(namespace))
            .expect("namespace released before");
        ns.release_key = format!("{}-unannounced{:04x}", now_ms() / 1000, ns.notification_id);
        ns.configurations = configurations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ns.release_key.clone()
    }

    /// Releases a properties namespace holding `key = value`.
    pub fn release_value(&self, namespace: &str, key: &str, value: &str) -> String {
        self.release(namespace, &[(key, value)])
    }

    /// Releases a `.json` (or other format) namespace: Apollo delivers the
    /// text under `content`.
    pub fn release_content(&self, namespace: &str, content: &str) -> String {
        self.release(namespace, &[("content", content)])
    }

    /// Stops: the port refuses connections and held polls are cut.
    pub fn stop(&self) {
        if let Some(rt) = self.rt.lock().unwrap().take() {
            rt.shutdown_background();
        }
    }

    /// Starts (again) on the same port with the same releases.
    pub fn restart(&self) {
        let mut guard = self.rt.lock().unwrap();
        if guard.is_some() {
            return;
        }
        // The old runtime's listener closes asynchronously after a stop.
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match std::net::TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("apollo test server: rebind port {}: {e}", self.port),
            }
        };
        listener.set_nonblocking(true).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("apollo-test-server")
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::clone(&self.shared);
        rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |req| handle(Arc::clone(&shared), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        *guard = Some(rt);
    }
}

impl Drop for ApolloServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn reply(status: u16, body: impl Into<Bytes>, content_type: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r.headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    r
}

fn empty(status: u16) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r
}

fn error(status: u16, message: &str) -> Response<Full<Bytes>> {
    // Apollo's error body shape.
    let body = json!({"status": status, "message": message, "timestamp": now_ms().to_string()});
    reply(status, body.to_string(), "application/json;charset=UTF-8")
}

fn json_ok(v: Value) -> Response<Full<Bytes>> {
    reply(200, v.to_string(), "application/json;charset=UTF-8")
}

fn signature(secret: &str, timestamp: &str, path_and_query: &str) -> String {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{timestamp}\n{path_and_query}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Apollo's `ClientAuthenticationFilter`: timestamp within 60 s, then the
/// signature over the raw path and query.
fn authorized(secret: &str, app_id: &str, req: &Request<hyper::body::Incoming>) -> bool {
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (Some(ts), Some(auth)) = (header("Timestamp"), header("Authorization")) else {
        return false;
    };
    let Ok(ms) = ts.parse::<i128>() else {
        return false;
    };
    if (now_ms() as i128 - ms).abs() >= 60_000 {
        return false;
    }
    let pq = match req.uri().query() {
        Some(q) if !q.is_empty() => format!("{}?{q}", req.uri().path()),
        _ => req.uri().path().to_owned(),
    };
    auth == format!("Apollo {app_id}:{}", signature(secret, &ts, &pq))
}

fn query(req: &Request<hyper::body::Incoming>) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let (fault, secret, app_id) = {
        let mut st = shared.state.lock().unwrap();
        st.log.push(pq);
        (st.fault.clone(), st.secret.clone(), st.app_id.clone())
    };
    match fault {
        Fault::None => {}
        Fault::Status(s) => return Ok(reply(s, format!("test fault {s}"), "text/plain")),
        Fault::Garbage => {
            return Ok(reply(
                200,
                "<html><body>upstream says hi</body></html>",
                "text/html",
            ))
        }
        Fault::Delay(d) => tokio::time::sleep(d).await,
    }
    if req.method() != hyper::Method::GET {
        return Ok(error(405, "Method Not Allowed"));
    }
    if let Some(secret) = &secret {
        if !authorized(secret, &app_id, &req) {
            shared.state.lock().unwrap().stats.unauthorized += 1;
            return Ok(error(401, "Unauthorized"));
        }
    }
    let segments: Vec<String> = req
        .uri()
        .path()
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    Ok(match segments.as_slice() {
        ["configs", app, cluster, namespace] => {
            configs(&shared, app, cluster, namespace, &query(&req))
        }
        ["notifications", "v2"] => notifications(&shared, &query(&req)).await,
        _ => error(404, "Not Found"),
    })
}

fn configs(
    shared: &Shared,
    app: &str,
    cluster: &str,
    namespace: &str,
    q: &BTreeMap<String, String>,
) -> Response<Full<Bytes>> {
    let mut st = shared.state.lock().unwrap();
    st.stats.configs += 1;
    // A cluster without its own release falls back to `default`.
    let served_cluster = if cluster == st.cluster || st.cluster == "default" {
        st.cluster.clone()
    } else {
        String::new()
    };
    let ns = st.namespaces.get(&norm(namespace)).cloned();
    let (Some(ns), false, true) = (ns, served_cluster.is_empty(), app == st.app_id) else {
        return error(404, &format!("Could not load configurations with appId: {app}, clusterName: {cluster}, namespace: {namespace}"));
    };
    if q.get("releaseKey") == Some(&ns.release_key) {
        st.stats.configs_not_modified += 1;
        return empty(304);
    }
    json_ok(json!({
        "appId": st.app_id,
        "cluster": served_cluster,
        "namespaceName": ns.name,
        "configurations": ns.configurations,
        "releaseKey": ns.release_key,
    }))
}

async fn notifications(shared: &Shared, q: &BTreeMap<String, String>) -> Response<Full<Bytes>> {
    let (Some(app), Some(cluster), Some(raw)) =
        (q.get("appId"), q.get("cluster"), q.get("notifications"))
    else {
        return error(400, "Required request parameter is missing");
    };
    let wanted: Vec<(String, i64)> = match serde_json::from_str::<Vec<Value>>(raw) {
        Ok(list) => list
            .iter()
            .filter_map(|n| {
                Some((
                    n["namespaceName"].as_str()?.to_owned(),
                    n["notificationId"].as_i64().unwrap_or(-1),
                ))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    if wanted.is_empty() {
        return error(400, &format!("Invalid format of notifications: {raw}"));
    }
    let (hold, app_ok) = {
        let mut st = shared.state.lock().unwrap();
        st.stats.notifications += 1;
        (st.hold, *app == st.app_id)
    };
    let mut rx = shared.releases.subscribe();
    let deadline = tokio::time::Instant::now() + hold;
    loop {
        // Check after subscribing, so a release in between is not missed.
        if app_ok {
            let st = shared.state.lock().unwrap();
            let newer: Vec<Value> = wanted
                .iter()
                .filter_map(|(name, id)| {
                    let ns = st.namespaces.get(&norm(name))?;
                    (ns.notification_id > *id).then(|| {
                        let key = format!("{app}+{cluster}+{}", ns.name);
                        json!({"namespaceName": name, "notificationId": ns.notification_id,
                               "messages": {"details": {key: ns.notification_id}}})
                    })
                })
                .collect();
            if !newer.is_empty() {
                return json_ok(Value::Array(newer));
            }
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            _ => {
                shared.state.lock().unwrap().stats.notifications_held_to_304 += 1;
                return empty(304);
            }
        }
    }
}
