//! Runs `cases.yaml` against the Pingora edge and the OpenResty module, both
//! in front of the same Redis, MariaDB and origin. For every case, each edge
//! gets the same setup (Redis writes, waits, faults) and the same request;
//! the answers are normalised (volatile ids and counters blanked) and must be
//! identical to each other and match the table's expectation, including
//! whether the origin handled a request (counted by the origin itself) and
//! how each edge's `/shorturl_status` counters moved.

use crate::support;

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::http::{self, Request, Response};
use support::{Edge, Origin};
use testkit::redis_topology::redis_cli;
use testkit::{Redis, RedisCluster};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Suite {
    links: BTreeMap<String, Fixture>,
    cases: Vec<Case>,
    /// Protocol 2.1: raw bytes on a socket.
    #[serde(default)]
    malformed: Vec<RawCase>,
}

/// A request sent as raw bytes on a fresh connection.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    /// The bytes: one per character (so `"\xff"` is the byte 0xFF),
    /// after placeholders are expanded.
    raw: String,
    expect: RawExpect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    /// `None`: the connection is closed without an answer.
    status: Option<u16>,
    #[serde(default)]
    location: Option<String>,
    /// Fields the JSON body must contain with these values.
    #[serde(default)]
    body: Option<Value>,
    /// An empty body (`Content-Length: 0`): Pingora's own parser answer.
    #[serde(default)]
    bare: bool,
    /// The server closes the connection after its answer.
    closed: bool,
    #[serde(default)]
    origin: bool,
}

/// A link created through the origin's API before the cases run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    url: String,
    #[serde(default)]
    domain: Option<String>,
    /// Keep the record the creation wrote to Redis (default: drop it, so the
    /// first edge lookup misses Redis).
    #[serde(default)]
    keep_in_redis: bool,
    /// More fields of the creation (link options: `rules`, ...).
    #[serde(default)]
    with: Option<serde_json::Map<String, Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    /// One-key maps (`- { del: CODE }`), hence the singleton-map encoding.
    #[serde(default, with = "serde_yaml::with::singleton_map_recursive")]
    setup: Vec<Action>,
    request: Req,
    expect: Expect,
    /// Remember `code` of the JSON answer under this name (`${cap:NAME}`).
    #[serde(default)]
    capture: Option<String>,
}

fn default_method() -> String {
    "GET".into()
}

fn default_host() -> Option<String> {
    Some("localhost".into())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Req {
    #[serde(default = "default_method")]
    method: String,
    path: String,
    /// `null`: send no Host header.
    #[serde(default = "default_host")]
    host: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
    /// Adds `Authorization: Bearer <API key>` and a JSON content type.
    #[serde(default)]
    auth: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: u16,
    #[serde(default)]
    location: Option<String>,
    /// Header values that must match exactly (names lower-case).
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Whether the origin handled a request because of this one.
    origin: bool,
    /// Fields the JSON body must contain with these values.
    #[serde(default)]
    body: Option<Value>,
    /// Status counter increments (e.g. `redis.hit: 1`); unlisted ones are
    /// only compared between the edges.
    #[serde(default)]
    counters: BTreeMap<String, i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Action {
    /// `SET su:1:link:<domain>/<code> <value>`, the domain the record's own
    /// (`localhost` for a negative or a malformed value), unless the first
    /// field is `<domain>/<code>` already.
    Set(String, String),
    /// `DEL su:1:link:<domain>/<code>` for every domain the cases use, or
    /// for the one named (`<domain>/<code>`).
    Del(String),
    /// `PUBLISH su:1:inval <message>` (protocol 3.2): both edges hear it,
    /// so a case publishing for a code of its own uses `${run}` in it.
    Publish(String),
    /// Per-edge variable `${var:NAME}`.
    Let(String, String),
    /// Waits until the Unix time is at or past the value.
    WaitUntil(String),
    Stop(String),
    Start(String),
    /// Polls the edge until `path` answers `status`.
    Await {
        path: String,
        status: u16,
    },
    /// Polls the edge until the JSON answer of `path` has `field` = `value`
    /// (e.g. the status document after its cached origin part expired);
    /// a dotted `field` names a nested member (`inval.subscribed`).
    AwaitField {
        path: String,
        field: String,
        value: Value,
    },
    /// Sends lookups of fresh unknown codes until one reaches Redis without
    /// an error (an edge may need a few lookups to reconnect after a Redis
    /// restart); prints how long that took.
    AwaitRedis,
}

/// The Redis the stack runs on: one server, or a cluster.
enum Store {
    Single(Redis),
    Cluster(RedisCluster),
}

impl Store {
    /// A command on the node serving its key (`redis-cli -c` on a cluster).
    fn cmd(&self, args: &[&str]) {
        match self {
            Store::Single(r) => {
                support::redis_cmd(&r.url(), args).unwrap();
            }
            Store::Cluster(c) => {
                let out = c.cli(args);
                assert!(!out.starts_with("ERR"), "{args:?}: {out}");
            }
        }
    }

    fn stop(&mut self) {
        match self {
            Store::Single(r) => r.stop(),
            Store::Cluster(c) => {
                for i in 0..c.ports().len() {
                    c.kill(i);
                }
            }
        }
    }

    fn restart(&mut self) {
        match self {
            Store::Single(r) => r.restart(),
            Store::Cluster(c) => {
                for i in 0..c.ports().len() {
                    c.restart(i);
                }
                c.wait_healthy();
            }
        }
    }

    /// Waits until every message published so far was applied by every
    /// edge in `edges`.
    /// PUBLISH returns once Redis has written the message to the
    /// subscribers' sockets, not once an edge has read and applied it: the
    /// next request can reach the edge first, even on one server (seen
    /// under load: a cached negative served after its message). On a
    /// cluster a message also travels from the node it was published on
    /// (for the origin's, the master of the link's slot) to the edge's
    /// subscription node over the cluster bus. A barrier message published
    /// on every master (the one server) comes after every earlier message
    /// on each path, so once an edge applied the barriers, it applied them
    /// all (the status counts messages as one subscriber heard them:
    /// OpenResty's sum over workers divided by the workers, so every worker
    /// must have had each barrier).
    ///
    /// The wait is by count, so it holds only if no other message is on its
    /// way when it starts: every edge hears every message, so a change made
    /// through one edge is waited for on all of them. Waiting on the edge
    /// that made it alone let the message arrive late at the other edge,
    /// inside that edge's next barrier, standing in for one of its barriers
    /// (a CI failure on the cluster, where the bus adds the delay).
    fn barrier(&self, edges: &[&Edge]) {
        static N: AtomicU64 = AtomicU64::new(0);
        let messages = |edge: &Edge| edge.status()["inval"]["messages"].as_i64().unwrap();
        let before: Vec<i64> = edges.iter().map(|e| messages(e)).collect();
        let publish = |port: u16| {
            let code = format!("barrier{:05}", N.fetch_add(1, Ordering::Relaxed));
            redis_cli(
                port,
                &[
                    "PUBLISH",
                    shorturl_common::keys::INVAL_CHANNEL,
                    &format!("0 {code}"),
                ],
            )
            .expect("PUBLISH a barrier");
        };
        let barriers = match self {
            Store::Single(r) => {
                publish(r.port());
                1
            }
            Store::Cluster(c) => {
                let masters = c.masters();
                for &m in &masters {
                    publish(c.ports()[m]);
                }
                masters.len()
            }
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        for (edge, before) in edges.iter().zip(before) {
            let want = before + barriers as i64;
            while messages(edge) < want {
                assert!(
                    Instant::now() < deadline,
                    "{} did not receive the barrier messages ({before} -> want {want}): {}",
                    edge.name,
                    edge.status()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// The `redis:` entries of the origin's and the Pingora edge's config.
    fn yaml(&self) -> String {
        match self {
            Store::Single(r) => format!("url: \"{}\"", r.url()),
            Store::Cluster(c) => {
                format!("mode: cluster, nodes: [\"{}\"]", c.seeds().join("\", \""))
            }
        }
    }

    /// start.sh's environment and Redis argument for the OpenResty module.
    fn openresty(&self) -> (Vec<(&'static str, String)>, String) {
        match self {
            Store::Single(r) => (Vec::new(), format!("127.0.0.1:{}", r.port())),
            Store::Cluster(c) => (
                vec![("SU_REDIS_MODE", "cluster".to_owned())],
                c.seeds().join(","),
            ),
        }
    }
}

/// Everything the two stacks share, plus per-edge state.
struct World<'e> {
    redis: Store,
    redis_up: bool,
    origin: Origin,
    codes: BTreeMap<String, String>,
    /// Every edge of the run: each hears every message (see `Store::barrier`).
    edges: &'e [&'e Edge],
}

/// Per-edge placeholders.
#[derive(Default)]
struct EdgeCtx {
    run: &'static str,
    vars: BTreeMap<String, String>,
    caps: BTreeMap<String, String>,
}

const COUNTERS: [(&str, &str); 9] = [
    ("local", "hit"),
    ("local", "miss"),
    ("redis", "hit"),
    ("redis", "miss"),
    ("redis", "error"),
    ("origin", "forward"),
    ("origin", "error"),
    ("lock", "get"),
    ("lock", "error"),
];

/// Headers whose values are part of the contract.
const HEADERS: [&str; 6] = [
    "location",
    "content-length",
    "cache-control",
    "content-type",
    "retry-after",
    "allow",
];

/// JSON fields that legitimately differ between two runs of one case.
const VOLATILE: [&str; 6] = [
    "code",
    "short_url",
    "expires_at",
    "expires_at_unix",
    "created_at",
    "updated_at",
];

fn now_unix() -> u64 {
    shorturl_common::time::now_unix()
}

/// Expands `${...}` placeholders.
fn expand(s: &str, w: &World, ctx: &EdgeCtx) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .unwrap_or_else(|| panic!("unclosed placeholder in {s:?}"));
        let token = &after[..end];
        let value = if token == "run" {
            ctx.run.to_owned()
        } else if token == "now" {
            now_unix().to_string()
        } else if let Some(n) = token.strip_prefix("now+") {
            (now_unix() + n.parse::<u64>().unwrap()).to_string()
        } else if let Some(n) = token.strip_prefix("now-") {
            (now_unix() - n.parse::<u64>().unwrap()).to_string()
        } else if let Some(v) = token.strip_prefix("var:") {
            ctx.vars
                .get(v)
                .unwrap_or_else(|| panic!("no var {v}"))
                .clone()
        } else if let Some(c) = token.strip_prefix("cap:") {
            ctx.caps
                .get(c)
                .unwrap_or_else(|| panic!("nothing captured as {c}"))
                .clone()
        } else if let Some(name) = token.strip_prefix("swapcase:") {
            w.codes[name]
                .chars()
                .map(|c| {
                    if c.is_ascii_uppercase() {
                        c.to_ascii_lowercase()
                    } else {
                        c.to_ascii_uppercase()
                    }
                })
                .collect()
        } else if let Some(spec) = token.strip_prefix("repeat:") {
            let (n, what) = spec.split_once(':').unwrap();
            what.repeat(n.parse().unwrap())
        } else {
            w.codes
                .get(token)
                .unwrap_or_else(|| panic!("unknown placeholder ${{{token}}}"))
                .clone()
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn counters(edge: &Edge) -> BTreeMap<String, i64> {
    let s = edge.status();
    COUNTERS
        .iter()
        .map(|(d, k)| {
            let v = s[d][k]
                .as_i64()
                .unwrap_or_else(|| panic!("{}: no {d}.{k} in {s}", edge.name));
            (format!("{d}.{k}"), v)
        })
        .collect()
}

/// What a case produced on one edge, normalised for comparison.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
    origin: bool,
    counters: BTreeMap<String, i64>,
}

/// Blanks what legitimately differs between runs (ids, times, counters)
/// and the per-edge run tag.
fn normalise_json(v: &mut Value, in_status: bool) {
    match v {
        Value::Object(m) => {
            let status = in_status || m.get("service").and_then(Value::as_str) == Some("edge");
            if status && !in_status {
                // The click section's figures follow each edge's flushes;
                // the click tests compare the edges' counts
                // (clicks_two_edges.rs, openresty_clicks.rs).
                m.remove("clicks");
                // The Pingora edge's redirect fast path has no OpenResty
                // counterpart (lua-compat/README.md); its own tests are
                // edge/tests/fast_path.rs.
                m.remove("fast_path");
            }
            for (k, x) in m.iter_mut() {
                if VOLATILE.contains(&k.as_str()) {
                    *x = Value::String("*".into());
                } else if k == "protocol" {
                    // The one number of the status document that is not a counter.
                } else {
                    normalise_json(x, status);
                }
            }
        }
        Value::Number(_) if in_status => *v = Value::from(0),
        Value::Array(a) => a.iter_mut().for_each(|x| normalise_json(x, in_status)),
        Value::String(s) => *s = untag(s),
        _ => {}
    }
}

const RUN_TAGS: [&str; 2] = ["runP1", "runL2"];

fn untag(s: &str) -> String {
    RUN_TAGS
        .iter()
        .fold(s.to_owned(), |acc, t| acc.replace(t, "${run}"))
}

fn normalise(
    resp: &Response,
    status_route: bool,
    origin: bool,
    counters: BTreeMap<String, i64>,
) -> Outcome {
    let mut headers = BTreeMap::new();
    for h in HEADERS {
        if let Some(v) = resp.header(h) {
            headers.insert(h.to_owned(), untag(v));
        }
    }
    if status_route {
        // The status document's length (a HEAD's too) follows its figures.
        headers.remove("content-length");
    }
    let body = match serde_json::from_slice::<Value>(&resp.body) {
        Ok(mut v) => {
            if v.get("service").and_then(Value::as_str) == Some("edge") {
                // Counter digits change the length.
                headers.remove("content-length");
            }
            normalise_json(&mut v, false);
            v.to_string()
        }
        Err(_) => untag(&resp.text()),
    };
    Outcome {
        status: resp.status,
        headers,
        body,
        origin,
        counters,
    }
}

/// The domains the cases' links live on.
const CASE_DOMAINS: [&str; 2] = ["localhost", "s.shop55.com"];

fn link_key(domain: &str, code: &str) -> String {
    shorturl_common::keys::link_key(domain, code)
}

/// The domain a stored value is for: a record's own (its fourth field,
/// the third in a protocol 1 record), else `localhost`, the cases' host.
fn record_domain(value: &str) -> &str {
    let fields: Vec<&str> = value.split(' ').collect();
    let at = if fields.first() == Some(&"1") { 2 } else { 3 };
    fields
        .get(at)
        .copied()
        .filter(|d| !d.bytes().all(|b| b.is_ascii_digit()))
        .filter(|d| shorturl_common::host::normalize_host(d).as_deref() == Some(*d))
        .unwrap_or("localhost")
}

fn apply(action: &Action, w: &mut World, edge: &Edge, ctx: &mut EdgeCtx) {
    match action {
        Action::Set(code, value) => {
            let value = expand(value, w, ctx);
            let code = expand(code, w, ctx);
            let key = match code.split_once('/') {
                Some((domain, code)) => link_key(domain, code),
                None => link_key(record_domain(&value), &code),
            };
            w.redis.cmd(&["SET", &key, &value]);
        }
        Action::Del(code) => {
            let code = expand(code, w, ctx);
            if let Some((domain, code)) = code.split_once('/') {
                w.redis.cmd(&["DEL", &link_key(domain, code)]);
            } else {
                for domain in CASE_DOMAINS {
                    w.redis.cmd(&["DEL", &link_key(domain, &code)]);
                }
            }
        }
        Action::Publish(msg) => {
            let msg = expand(msg, w, ctx);
            w.redis
                .cmd(&["PUBLISH", shorturl_common::keys::INVAL_CHANNEL, &msg]);
            w.redis.barrier(w.edges);
        }
        Action::Let(name, value) => {
            let v = expand(value, w, ctx);
            ctx.vars.insert(name.clone(), v);
        }
        Action::WaitUntil(t) => {
            let t: u64 = expand(t, w, ctx).parse().unwrap();
            testkit::wait_for(&format!("unix time {t}"), support::TIMEOUT, || {
                now_unix() >= t
            });
        }
        Action::Stop(what) | Action::Start(what) => {
            let start = matches!(action, Action::Start(_));
            match (what.as_str(), start) {
                // Both edges run the same setup: start/stop only once.
                ("redis", false) => {
                    if w.redis_up {
                        w.redis.stop();
                        w.redis_up = false;
                    }
                }
                ("redis", true) => {
                    if !w.redis_up {
                        w.redis.restart();
                        w.redis_up = true;
                    }
                }
                ("origin", false) => w.origin.stop(),
                ("origin", true) => {
                    if !w.origin.is_running() {
                        w.origin.restart()
                    }
                }
                (other, _) => panic!("cannot start/stop {other}"),
            }
        }
        Action::AwaitRedis => {
            let t0 = Instant::now();
            let mut tries = 0u32;
            testkit::wait_for(
                &format!("{} to read Redis again", edge.name),
                Duration::from_secs(15),
                || {
                    tries += 1;
                    let before = counters(edge);
                    let code = format!("probe{tries:04}{}", &ctx.run[3..]);
                    http::get(edge.port, &format!("/{code}"), "localhost");
                    let after = counters(edge);
                    after["redis.error"] == before["redis.error"]
                },
            );
            eprintln!(
                "  {} read Redis again after {tries} lookup(s), {:?}",
                edge.name,
                t0.elapsed()
            );
        }
        Action::AwaitField { path, field, value } => {
            let path = expand(path, w, ctx);
            testkit::wait_for(
                &format!("{} to answer {field} = {value} on {path}", edge.name),
                Duration::from_secs(15),
                || {
                    let r = http::get(edge.port, &path, "localhost");
                    let pointer = format!("/{}", field.replace('.', "/"));
                    serde_json::from_slice::<Value>(&r.body)
                        .is_ok_and(|v| v.pointer(&pointer) == Some(value))
                },
            );
        }
        Action::Await { path, status } => {
            let path = expand(path, w, ctx);
            testkit::wait_for(
                &format!("{} to answer {status} on {path}", edge.name),
                Duration::from_secs(15),
                || http::get(edge.port, &path, "localhost").status == *status,
            );
        }
    }
}

fn run_case(case: &Case, w: &mut World, edge: &Edge, ctx: &mut EdgeCtx) -> (Outcome, Response) {
    for a in &case.setup {
        apply(a, w, edge, ctx);
    }
    let r = &case.request;
    let mut headers: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), expand(v, w, ctx)))
        .collect();
    if r.auth {
        headers.push((
            "Authorization".into(),
            format!("Bearer {}", support::API_KEY),
        ));
    }
    if r.body.is_some() {
        headers.push(("Content-Type".into(), "application/json".into()));
    }
    let req = Request {
        method: r.method.clone(),
        path: expand(&r.path, w, ctx),
        host: r.host.as_ref().map(|h| expand(h, w, ctx)),
        version: r.version.clone().unwrap_or_default(),
        headers,
        body: r
            .body
            .as_ref()
            .map(|b| expand(b, w, ctx).into_bytes())
            .unwrap_or_default(),
    };
    let origin_up = w.origin.is_running();
    let before_origin = if origin_up { w.origin.handled() } else { 0 };
    let before = counters(edge);
    let resp = http::send(edge.port, &req).unwrap_or_else(|e| {
        panic!(
            "case {:?} on {}: {e}\n{}",
            case.name,
            edge.name,
            edge.logs()
        )
    });
    let after = counters(edge);
    // A change through the API publishes its message: let it arrive before
    // the next request (see Store::barrier).
    if !matches!(req.method.as_str(), "GET" | "HEAD") && w.redis_up && resp.status < 300 {
        w.redis.barrier(w.edges);
    }
    let reached = origin_up && w.origin.handled() > before_origin;
    let diff = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .collect();
    if let Some(name) = &case.capture {
        let v: Value = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
        if let Some(code) = v["code"].as_str() {
            ctx.caps.insert(name.clone(), code.to_owned());
        }
    }
    let status_route = req.path.split('?').next() == Some("/shorturl_status");
    (normalise(&resp, status_route, reached, diff), resp)
}

/// Differences between the case's expectation and what one edge answered.
fn check_expectation(case: &Case, o: &Outcome, resp: &Response) -> Vec<String> {
    let e = &case.expect;
    let mut bad = Vec::new();
    if o.status != e.status {
        bad.push(format!("status {} (expected {})", o.status, e.status));
    }
    if e.location.as_deref().map(untag) != o.headers.get("location").cloned() {
        bad.push(format!(
            "Location {:?} (expected {:?})",
            o.headers.get("location"),
            e.location
        ));
    }
    for (k, v) in &e.headers {
        if o.headers.get(k) != Some(&untag(v)) {
            bad.push(format!(
                "{k}: {:?} (expected {v:?})",
                resp.header(k).unwrap_or("<absent>")
            ));
        }
    }
    if o.origin != e.origin {
        bad.push(format!(
            "origin reached: {} (expected {})",
            o.origin, e.origin
        ));
    }
    if let Some(want) = &e.body {
        match serde_json::from_slice::<Value>(&resp.body) {
            Ok(got) => {
                let mut got = got;
                normalise_json(&mut got, false);
                for (k, v) in want.as_object().into_iter().flatten() {
                    let g = got.get(k).cloned().unwrap_or(Value::Null);
                    let mut v = v.clone();
                    normalise_json(&mut v, false);
                    if g != v {
                        bad.push(format!("body.{k} = {g} (expected {v})"));
                    }
                }
            }
            Err(_) => bad.push(format!("body is not JSON: {:?}", resp.text())),
        }
    }
    if resp.header("content-length").is_none() {
        bad.push("no Content-Length".into());
    }
    for (k, v) in &e.counters {
        let got = o.counters.get(k).copied().unwrap_or(i64::MIN);
        if got != *v {
            bad.push(format!("counter {k} +{got} (expected +{v})"));
        }
    }
    bad
}

/// The raw bytes of a malformed case: one byte per character.
fn raw_bytes(s: &str) -> Vec<u8> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or_else(|_| panic!("{c:?} is not a byte")))
        .collect()
}

/// What one edge did with a malformed case, normalised for comparison.
#[derive(Debug, Clone, PartialEq)]
struct RawOutcome {
    answer: Option<Outcome>,
    closed: bool,
}

fn run_raw_case(case: &RawCase, w: &World, edge: &Edge, ctx: &EdgeCtx) -> RawOutcome {
    let bytes = raw_bytes(&expand(&case.raw, w, ctx));
    let before_origin = w.origin.handled();
    let before = counters(edge);
    let x = http::exchange_raw(edge.port, &bytes)
        .unwrap_or_else(|e| panic!("case {:?} on {}: {e}", case.name, edge.name));
    let after = counters(edge);
    let reached = w.origin.handled() > before_origin;
    let diff: BTreeMap<String, i64> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .collect();
    RawOutcome {
        answer: x.response.map(|r| normalise(&r, false, reached, diff)),
        closed: x.closed,
    }
}

fn check_raw_expectation(case: &RawCase, o: &RawOutcome) -> Vec<String> {
    let e = &case.expect;
    let mut bad = Vec::new();
    if o.closed != e.closed {
        bad.push(format!("closed: {} (expected {})", o.closed, e.closed));
    }
    let Some(a) = &o.answer else {
        if e.status.is_some() {
            bad.push(format!("no answer (expected {:?})", e.status));
        }
        return bad;
    };
    if Some(a.status) != e.status {
        bad.push(format!("status {} (expected {:?})", a.status, e.status));
    }
    if e.location.as_deref().map(untag) != a.headers.get("location").cloned() {
        bad.push(format!(
            "Location {:?} (expected {:?})",
            a.headers.get("location"),
            e.location
        ));
    }
    if a.origin != e.origin {
        bad.push(format!(
            "origin reached: {} (expected {})",
            a.origin, e.origin
        ));
    }
    if e.bare
        && (!a.body.is_empty() || a.headers.get("content-length").map(String::as_str) != Some("0"))
    {
        bad.push(format!("body {:?} (expected an empty one)", a.body));
    }
    if let Some(want) = &e.body {
        let got: Value = serde_json::from_str(&a.body).unwrap_or(Value::Null);
        for (k, v) in want.as_object().into_iter().flatten() {
            if got.get(k) != Some(v) {
                bad.push(format!("body.{k} = {:?} (expected {v})", got.get(k)));
            }
        }
    }
    if !a.headers.contains_key("content-length") {
        bad.push("no Content-Length".into());
    }
    // A refused request moves no counter.
    if matches!(a.status, 400 | 405 | 431) {
        for (k, v) in &a.counters {
            if *v != 0 {
                bad.push(format!("counter {k} +{v} (expected +0)"));
            }
        }
    }
    bad
}

#[test]
fn both_edges_answer_every_case_identically() {
    run_suite(Store::Single(Redis::start()), &Table::MAIN);
}

/// The same table with Redis as a cluster (3 masters + 3 replicas): the
/// origin, the Pingora edge and the OpenResty module all in cluster mode.
#[test]
fn both_edges_answer_every_case_identically_on_a_redis_cluster() {
    run_suite(Store::Cluster(RedisCluster::start()), &Table::MAIN);
}

/// The link rules' table (protocol 3.1.1): both edges behind a trusted
/// proxy (loopback, so a case's `X-Forwarded-For` is its client) with the
/// country database `scripts/deps.sh` installs and a country header.
#[test]
fn both_edges_evaluate_link_rules_identically() {
    let mmdb = testkit::country_mmdb();
    let lua_env = [
        ("SU_TRUSTED_PROXIES", "127.0.0.1/32".to_string()),
        ("SU_GEO_COUNTRY_HEADER", "CF-IPCountry".to_string()),
        ("SU_GEO_MMDB_PATH", mmdb.display().to_string()),
    ];
    let pingora = format!(
        "  trusted_proxies: [\"127.0.0.1/32\"]\n  geo: {{ country_header: CF-IPCountry, mmdb_path: \"{}\" }}\n",
        mmdb.display()
    );
    let table = Table {
        file: "link_rules.yaml",
        min_cases: 30,
        pingora_extra: &pingora,
        lua_env: &lua_env,
    };
    run_suite(Store::Single(Redis::start()), &table);
}

/// A case table and the edges' settings it runs with.
struct Table<'a> {
    file: &'a str,
    min_cases: usize,
    /// More lines of the Pingora edge's `edge:` section.
    pingora_extra: &'a str,
    /// More `SU_*` settings of the OpenResty module.
    lua_env: &'a [(&'static str, String)],
}

impl Table<'static> {
    const MAIN: Table<'static> = Table {
        file: "cases.yaml",
        min_cases: 40,
        pingora_extra: "",
        lua_env: &[],
    };
}

fn run_suite(redis: Store, table: &Table<'_>) {
    // One run at a time: the table's timing (a message applied before the
    // next request) is what it was with one run on the machine.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let t0 = Instant::now();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(table.file);
    let suite: Suite = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        suite.cases.len() >= table.min_cases,
        "the table must hold at least {} cases",
        table.min_cases
    );

    let origin = Origin::start_on(&redis.yaml(), 500, &[]);
    let pingora = Edge::pingora_on(&redis.yaml(), &origin.addr(), table.pingora_extra);
    let (mut env, addr) = redis.openresty();
    env.extend(table.lua_env.iter().cloned());
    let lua = Edge::openresty_with(&addr, &origin.addr(), &env);
    eprintln!("stack up in {:?}", t0.elapsed());

    let edges = [&pingora, &lua];
    let mut w = World {
        redis,
        redis_up: true,
        origin,
        codes: BTreeMap::new(),
        edges: &edges,
    };
    for (name, f) in &suite.links {
        let mut body = serde_json::json!({ "url": f.url });
        if let Some(d) = &f.domain {
            body["domain"] = Value::from(d.as_str());
        }
        for (k, v) in f.with.iter().flatten() {
            body[k] = v.clone();
        }
        let resp = http::send(
            w.origin.port,
            &Request {
                method: "POST".into(),
                path: "/api/v1/links".into(),
                host: Some("localhost".into()),
                headers: vec![
                    (
                        "Authorization".into(),
                        format!("Bearer {}", support::API_KEY),
                    ),
                    ("Content-Type".into(), "application/json".into()),
                ],
                body: body.to_string().into_bytes(),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(resp.status, 201, "fixture {name}: {}", resp.text());
        let v: Value = serde_json::from_slice(&resp.body).unwrap();
        let code = v["code"].as_str().unwrap().to_owned();
        if !f.keep_in_redis {
            let domain = v["domain"].as_str().unwrap_or("localhost");
            w.redis.cmd(&["DEL", &link_key(domain, &code)]);
            w.redis
                .cmd(&["DEL", &shorturl_common::keys::legacy_link_key(&code)]);
        }
        w.codes.insert(name.clone(), code);
    }

    // The fixtures' creations published messages too.
    w.redis.barrier(&edges);
    let mut ctxs = [
        EdgeCtx {
            run: RUN_TAGS[0],
            ..Default::default()
        },
        EdgeCtx {
            run: RUN_TAGS[1],
            ..Default::default()
        },
    ];
    let mut failures = Vec::new();
    // Malformed requests first: the stack is whole (the table ends with faults).
    for case in &suite.malformed {
        let mut outs = Vec::new();
        for (edge, ctx) in edges.iter().zip(ctxs.iter()) {
            let o = run_raw_case(case, &w, edge, ctx);
            for b in check_raw_expectation(case, &o) {
                failures.push(format!("[{}] malformed: {}: {b}", edge.name, case.name));
            }
            outs.push(o);
        }
        let (p, l) = (&outs[0], &outs[1]);
        if p != l {
            failures.push(format!(
                "[differ] malformed: {}:\n    pingora:   {p:?}\n    openresty: {l:?}",
                case.name
            ));
        }
        let show = |o: &RawOutcome| {
            let st = o
                .answer
                .as_ref()
                .map_or("-".to_owned(), |a| a.status.to_string());
            format!("{st}{}", if o.closed { " closed" } else { "" })
        };
        eprintln!(
            "{:<52} pingora {} openresty {}{}",
            format!("malformed: {}", case.name),
            show(p),
            show(l),
            if p == l { "" } else { "  DIFFERENT" }
        );
    }
    for case in &suite.cases {
        let mut outs = Vec::new();
        for (edge, ctx) in edges.iter().zip(ctxs.iter_mut()) {
            let (o, resp) = run_case(case, &mut w, edge, ctx);
            for b in check_expectation(case, &o, &resp) {
                failures.push(format!("[{}] {}: {b}", edge.name, case.name));
            }
            outs.push(o);
        }
        let (p, l) = (&outs[0], &outs[1]);
        if p != l {
            failures.push(format!(
                "[differ] {}:\n    pingora:   {p:?}\n    openresty: {l:?}",
                case.name
            ));
        }
        eprintln!(
            "{:<52} pingora {} openresty {}{}",
            case.name,
            p.status,
            l.status,
            if p == l { "" } else { "  DIFFERENT" }
        );
    }
    eprintln!(
        "{} cases and {} malformed requests on both edges in {:?}",
        suite.cases.len(),
        suite.malformed.len(),
        t0.elapsed()
    );
    if !failures.is_empty() {
        panic!(
            "{} failure(s):\n{}\n\n--- origin log tail\n{}\n--- pingora logs\n{}\n--- openresty logs\n{}",
            failures.len(),
            failures.join("\n"),
            tail(&w.origin.log(), 40),
            tail(&pingora.logs(), 40),
            tail(&lua.logs(), 40),
        );
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
