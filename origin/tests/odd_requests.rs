//! Protocol section 2.1 at the origin: the odd requests of the conformance
//! suite's malformed section, sent as raw bytes to a real origin process.
//! The origin applies the same rule function as the edge
//! (`shorturl_common::request_rules`); what hyper's parser refuses before
//! the origin's code runs gets hyper's own answer (an empty body).

use crate::support;

use serde_json::json;
use support::Setup;
use testkit::http::exchange_raw;

/// The expected answer: a status with a JSON `error` kind, a status with an
/// empty body (the HTTP parser's own answer), or no answer at all.
#[derive(Debug, Clone, Copy)]
enum Want {
    Json(u16, &'static str),
    Bare(u16),
    Redirect,
    NoAnswer,
}

struct Case {
    name: &'static str,
    raw: String,
    want: Want,
    closed: bool,
}

fn case(name: &'static str, raw: impl Into<String>, want: Want, closed: bool) -> Case {
    Case {
        name,
        raw: raw.into(),
        want,
        closed,
    }
}

fn cases(code: &str) -> Vec<Case> {
    use Want::*;
    let bad = Json(400, "bad_request");
    let get = |target: &str, host: &str| format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let filler = |n: usize| "X-Filler: v\r\n".repeat(n);
    vec![
        // absolute-form
        case(
            "absolute-form, same Host",
            get(&format!("http://sho.rt/{code}"), "sho.rt"),
            Redirect,
            false,
        ),
        case(
            "absolute-form, HTTP/1.0 without Host",
            format!("GET http://SHO.RT:8080/{code} HTTP/1.0\r\n\r\n"),
            Redirect,
            true,
        ),
        case(
            "absolute-form, HTTP/1.1 without Host",
            format!("GET http://sho.rt/{code} HTTP/1.1\r\n\r\n"),
            bad,
            true,
        ),
        case(
            "absolute-form, conflicting Host",
            get(&format!("http://evil.example/{code}"), "sho.rt"),
            bad,
            true,
        ),
        case(
            "absolute-form, Host differs in case",
            get(&format!("http://sho.rt/{code}"), "SHO.RT"),
            bad,
            true,
        ),
        case(
            "absolute-form, userinfo",
            get(&format!("http://u:p@sho.rt/{code}"), "u:p@sho.rt"),
            bad,
            true,
        ),
        case(
            "absolute-form, ftp scheme",
            get(&format!("ftp://sho.rt/{code}"), "sho.rt"),
            bad,
            true,
        ),
        // Host
        case(
            "two Host fields",
            format!("GET /{code} HTTP/1.1\r\nHost: sho.rt\r\nHost: sho.rt\r\n\r\n"),
            bad,
            true,
        ),
        case(
            "HTTP/1.1 without Host",
            format!("GET /{code} HTTP/1.1\r\n\r\n"),
            bad,
            true,
        ),
        case(
            "HTTP/1.0 without Host",
            format!("GET /{code} HTTP/1.0\r\n\r\n"),
            Json(404, "not_found"),
            true,
        ),
        case(
            "spaces around Host",
            get(&format!("/{code}"), "   sho.rt   "),
            Redirect,
            false,
        ),
        case(
            "empty Host",
            format!("GET /{code} HTTP/1.1\r\nHost:\r\n\r\n"),
            bad,
            true,
        ),
        case(
            "underscore in Host",
            get(&format!("/{code}"), "a_b.com"),
            bad,
            true,
        ),
        case(
            "non-numeric port in Host",
            get(&format!("/{code}"), "sho.rt:abc"),
            bad,
            true,
        ),
        case(
            "slash in Host",
            get(&format!("/{code}"), "sho/rt"),
            bad,
            true,
        ),
        case(
            "tab inside Host",
            get(&format!("/{code}"), "sho\trt"),
            bad,
            true,
        ),
        case(
            "empty label in Host",
            get(&format!("/{code}"), "a..sho.rt"),
            bad,
            true,
        ),
        case(
            "userinfo in Host",
            get(&format!("/{code}"), "u@sho.rt"),
            bad,
            true,
        ),
        // the target
        case(
            "fragment",
            get(&format!("/{code}#frag"), "sho.rt"),
            Redirect,
            false,
        ),
        case(
            "%00 before a code",
            get(&format!("/%00{code}"), "sho.rt"),
            bad,
            true,
        ),
        case(
            "%00 in an API path",
            "DELETE /api/v1/links/a%00bc HTTP/1.1\r\nHost: sho.rt\r\n\r\n",
            bad,
            true,
        ),
        case(
            "%20 in the path",
            get(&format!("/{code}%20"), "sho.rt"),
            bad,
            true,
        ),
        case(
            "%00 in the query",
            get(&format!("/{code}?x=%00"), "sho.rt"),
            Redirect,
            false,
        ),
        case(
            "raw space in the path",
            get(&format!("/{code} x"), "sho.rt"),
            Bare(400),
            true,
        ),
        case(
            "raw control byte in the path",
            get(&format!("/{code}\x01"), "sho.rt"),
            Bare(400),
            true,
        ),
        case("UTF-8 in the path", get("/abcdé", "sho.rt"), bad, true),
        case(
            "malformed escape",
            get(&format!("/%zz{code}"), "sho.rt"),
            bad,
            true,
        ),
        case(
            "dot segments above the root",
            get(&format!("/../{code}"), "sho.rt"),
            bad,
            true,
        ),
        case(
            "dot segments are not resolved",
            get(&format!("/x/../{code}"), "sho.rt"),
            Json(404, "not_found"),
            false,
        ),
        case("neither a path nor a URL", get(code, "sho.rt"), bad, true),
        // methods and target forms
        case(
            "lower-case method",
            format!("get /{code} HTTP/1.1\r\nHost: sho.rt\r\n\r\n"),
            bad,
            true,
        ),
        case(
            "another method on a code path",
            format!("FOO /{code} HTTP/1.1\r\nHost: sho.rt\r\n\r\n"),
            Json(405, "method_not_allowed"),
            false,
        ),
        case(
            "OPTIONS *",
            "OPTIONS * HTTP/1.1\r\nHost: sho.rt\r\n\r\n",
            bad,
            true,
        ),
        case(
            "CONNECT",
            "CONNECT sho.rt:443 HTTP/1.1\r\nHost: sho.rt:443\r\n\r\n",
            Json(405, "method_not_allowed"),
            false,
        ),
        // not HTTP/1.x: hyper's own answers
        case("HTTP/0.9", format!("GET /{code}\r\n"), Bare(400), true),
        case(
            "HTTP/2.0 request line",
            format!("GET /{code} HTTP/2.0\r\nHost: sho.rt\r\n\r\n"),
            Bare(400),
            true,
        ),
        case(
            "HTTP/2 preface",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            NoAnswer,
            true,
        ),
        case(
            "TLS ClientHello",
            "\x16\x03\x01\x00\x7f\x01\x00\x00\x7b\x03\x03\0\0\0\0\0\0\0\0",
            Bare(400),
            true,
        ),
        // header fields: hyper allows 100, like the rule
        case(
            "100 header fields",
            format!("GET /{code} HTTP/1.1\r\nHost: sho.rt\r\n{}\r\n", filler(99)),
            Redirect,
            false,
        ),
        case(
            "101 header fields",
            format!(
                "GET /{code} HTTP/1.1\r\nHost: sho.rt\r\n{}\r\n",
                filler(100)
            ),
            Bare(431),
            true,
        ),
        case(
            "300 header fields",
            format!(
                "GET /{code} HTTP/1.1\r\nHost: sho.rt\r\n{}\r\n",
                filler(299)
            ),
            Bare(431),
            true,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_requests_get_the_protocol_answers() {
    let s = Setup::start();
    let code = s
        .origin
        .create_ok(json!({"url": "https://example.com/odd"}))
        .await;
    let port = s.origin.port;
    let mut failures = Vec::new();
    for c in cases(&code) {
        let raw = c.raw.clone();
        let x = tokio::task::spawn_blocking(move || exchange_raw(port, raw.as_bytes()))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let got = match &x.response {
            None => "no answer".to_owned(),
            Some(r) => format!(
                "{} {:?} location={:?}",
                r.status,
                r.text(),
                r.header("location")
            ),
        };
        let ok = match (c.want, &x.response) {
            (Want::NoAnswer, None) => true,
            (Want::Redirect, Some(r)) => {
                r.status == 302 && r.header("location") == Some("https://example.com/odd")
            }
            (Want::Bare(st), Some(r)) => r.status == st && r.body.is_empty(),
            (Want::Json(st, kind), Some(r)) => {
                let v: serde_json::Value =
                    serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
                r.status == st && v["error"] == kind
            }
            _ => false,
        } && x.closed == c.closed;
        if !ok {
            failures.push(format!(
                "{}: got {got}, closed={} (want {:?}, closed={})",
                c.name, x.closed, c.want, c.closed
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of the odd requests were answered wrongly:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
