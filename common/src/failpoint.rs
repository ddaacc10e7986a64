//! Fault injection for the integration tests, inert in production.
//!
//! A test starts a service with `SHORTURL_FAILPOINTS=name=value;name2=value2`
//! and the code asks [`hit`] at the named place, with the value at hand (a
//! code, a URL). Without the variable the check is one `OnceLock` read and an
//! empty-map test; failpoints sit only on miss and write paths, never on the
//! cached-redirect path.
//!
//! Names in use (each documented where it is checked):
//! * `edge.lookup.panic=<code>`: the edge's first lookup task for `<code>`
//!   panics (checked with [`hit_once`], so the next lookup shows whether the
//!   panic left anything behind).
//! * `origin.lookup.panic=<code>`: the origin's MySQL lookup task for
//!   `<code>` panics, once per process ([`hit_once`]).
//! * `origin.claim.poison=<substring>`: a claim batch containing a URL with
//!   `<substring>` fails as a whole, as a bad row would (and so does the
//!   single retry of that item).
//! * `origin.writeback.hold=<code>@<path>`: the origin's resolution of
//!   `<code>` pauses after reading MySQL and before writing Redis while the
//!   file `<path>` exists (it creates `<path>.held` when it starts waiting):
//!   a test interleaves a change with that write-back.
//! * `origin.outbox.hold=<path>`: the origin's background outbox drainer
//!   applies nothing while the file `<path>` exists.
//! * `edge.lookup.hold=<code>@<path>`: the edge's first lookup of `<code>`
//!   pauses after its Redis (or origin) read, before its answer is stored,
//!   while the file `<path>` exists ([`hold`]): a test interleaves a change
//!   and its invalidation message with a lookup in flight.
//! * `origin.clicks.read.hold=<batch-id>@<path>`: the origin's click
//!   consumer pauses after reading batch `<batch-id>` and before applying it,
//!   while `<path>` exists ([`hold`]): a test kills it there.
//! * `origin.clicks.ack.hold=<batch-id>@<path>`: the same, after the batch's
//!   transaction committed and before its `XACK`.
//! * `origin.admin.check.hold=<user>@<path>`: a console sign-in's password
//!   check for user name `<user>` pauses, holding its permit of
//!   `admin.max_concurrent_signins`, while `<path>` exists ([`hold`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

/// Environment variable read once at first use.
pub const ENV: &str = "SHORTURL_FAILPOINTS";

fn table() -> &'static HashMap<String, String> {
    static T: OnceLock<HashMap<String, String>> = OnceLock::new();
    T.get_or_init(|| std::env::var(ENV).map(|v| parse(&v)).unwrap_or_default())
}

fn parse(spec: &str) -> HashMap<String, String> {
    spec.split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// True when failpoint `name` is set and its value is `*` or equals `value`.
pub fn hit(name: &str, value: &str) -> bool {
    let t = table();
    !t.is_empty() && t.get(name).is_some_and(|v| v == "*" || v == value)
}

/// True when failpoint `name` is set and `value` contains its value.
pub fn hit_contains(name: &str, value: &str) -> bool {
    let t = table();
    !t.is_empty() && t.get(name).is_some_and(|v| value.contains(v.as_str()))
}

/// The value failpoint `name` is set to, if any.
pub fn value(name: &str) -> Option<&'static str> {
    let t = table();
    if t.is_empty() {
        return None;
    }
    t.get(name).map(String::as_str)
}

/// For a failpoint of the form `name=<match>@<path>`: the path, when
/// `<match>` is `*` or equals `value`.
pub fn hold_path(name: &str, value: &str) -> Option<&'static str> {
    let (m, path) = self::value(name)?.split_once('@')?;
    (m == "*" || m == value).then_some(path)
}

/// Waits while the file `path` exists (at most a minute), after creating
/// `<path>.held` so the test knows the code got there; returns at once,
/// creating nothing, when `path` does not exist. For `*.hold` failpoints
/// ([`hold_path`]).
pub async fn hold(path: &str) {
    if !std::path::Path::new(path).exists() {
        return;
    }
    let _ = std::fs::write(format!("{path}.held"), b"");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::path::Path::new(path).exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Like [`hit`], but true only the first time in this process: a fault that
/// must happen once and then let the system show it recovered.
pub fn hit_once(name: &str, value: &str) -> bool {
    static FIRED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    if !hit(name, value) {
        return false;
    }
    let mut fired = FIRED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    fired.insert(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_pairs() {
        let t = parse("a.b=x; c = y ;junk;d=");
        assert_eq!(t.get("a.b").map(String::as_str), Some("x"));
        assert_eq!(t.get("c").map(String::as_str), Some("y"));
        assert_eq!(t.get("d").map(String::as_str), Some(""));
        assert_eq!(t.len(), 3);
    }
}
