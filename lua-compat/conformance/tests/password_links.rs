//! Password links through both edges (protocol 4.5): the same 401 for API
//! clients, the same form for browsers (the origin's, through each page
//! cache, never kept by the browser), entries passed to the origin and
//! its answers passed back, and a token that opens the link in process:
//! after the first entry, visits cost the origin nothing.

use crate::support;

use serde_json::json;
use support::http::{self, Response};
use support::{Edge, Origin, API_KEY, TIMEOUT};
use testkit::{wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
const BROWSER: &str = "text/html,application/xhtml+xml,*/*;q=0.8";
/// Bytes 0..31: the protocol's test key (`common/src/unlock.rs`).
const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const URL: &str = "https://shop.example/vip";
/// Visits after the entry whose origin requests are counted.
const VISITS: usize = 1000;

/// Requests the origin served for links: records, redirects, pages and
/// entries (not health checks, heartbeats or these metrics reads).
fn origin_link_requests(origin: &Origin) -> u64 {
    let text = http::get(origin.port, "/metrics", "localhost").text();
    text.lines()
        .filter(|l| l.starts_with("shorturl_request_duration_seconds_count{"))
        .filter(|l| {
            ["record", "redirect", "page", "unlock"]
                .iter()
                .any(|r| l.contains(&format!("route=\"{r}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn api(origin: &Origin, method: &str, path: &str, body: serde_json::Value) -> Response {
    http::api(origin.port, API_KEY, method, path, &body)
}

/// Creates the tests' password link (password "open sesame") on `origin`:
/// its code.
fn create_password_link(origin: &Origin) -> String {
    let r = api(
        origin,
        "POST",
        "/api/v1/links",
        json!({"url": URL, "domain": DOMAIN, "password": "open sesame"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["code"].as_str().unwrap().to_owned()
}

fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Response {
    http::request(port, "GET", path, DOMAIN, headers, b"")
}

fn post(port: u16, path: &str, body: &str) -> Response {
    http::request(
        port,
        "POST",
        path,
        DOMAIN,
        &[("Content-Type", "application/x-www-form-urlencoded")],
        body.as_bytes(),
    )
}

/// `POST path` with `body` in 1,000-byte chunks (no `Content-Length`).
fn post_chunked(port: u16, path: &str, body: &[u8]) -> Response {
    use std::io::Write;
    let mut raw = format!(
        "POST {path} HTTP/1.1\r\nHost: {DOMAIN}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for chunk in body.chunks(1000) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    // The edge may answer and close before reading it all.
    let _ = s.write_all(&raw);
    http::read_response(&mut std::io::BufReader::new(s), false).unwrap()
}

/// Waits until every edge heard `n` invalidation messages.
fn heard(edges: &[Edge], n: u64) {
    for e in edges {
        wait_for(&format!("{} to hear {n} messages", e.name), TIMEOUT, || {
            e.status()["inval"]["messages"].as_u64().unwrap_or(0) >= n
        });
    }
}

#[test]
fn both_edges_guard_a_password_link_alike_and_open_it_from_memory() {
    let redis = Redis::start();
    let origin = Origin::start_with(&redis, 50, &[("SHORTURL_UNLOCK_KEY", KEY.to_owned())]);
    let edges = [
        Edge::pingora_with(
            &redis.url(),
            &origin.addr(),
            &format!("  unlock: {{ keys: [\"{KEY}\"] }}\n"),
        ),
        Edge::openresty_with(
            &format!("127.0.0.1:{}", redis.port()),
            &origin.addr(),
            &[("SU_UNLOCK_KEYS", KEY.to_owned())],
        ),
    ];
    for e in &edges {
        wait_for(&format!("{} to subscribe", e.name), TIMEOUT, || {
            e.status()["inval"]["subscribed"] == json!(true)
        });
    }
    let code = create_password_link(&origin);
    let link = format!("/{code}");
    heard(&edges, 1);

    // What both edges must answer: the origin's own 401 and form.
    let want_401 = get(origin.port, &link, &[]);
    assert_eq!(want_401.status, 401, "{}", want_401.text());
    let want_form = get(origin.port, &format!("{link}.password"), &[]);
    assert_eq!(want_form.status, 200, "{}", want_form.text());

    let mut cookies = Vec::new();
    for e in &edges {
        let r = get(e.port, &link, &[]);
        assert_eq!(r.status, 401, "{}: {}\n{}", e.name, r.text(), e.logs());
        assert_eq!(r.body, want_401.body, "{}", e.name);
        assert_eq!(
            r.header("content-type"),
            Some("application/json"),
            "{}",
            e.name
        );
        assert_eq!(r.header("cache-control"), Some("no-store"), "{}", e.name);
        for _ in 0..2 {
            // Twice: the second from the edge's page cache.
            let r = get(e.port, &link, &[("Accept", BROWSER)]);
            assert_eq!(r.status, 200, "{}: {}", e.name, r.text());
            assert_eq!(r.body, want_form.body, "{}: not the origin's form", e.name);
            assert_eq!(r.header("cache-control"), Some("no-store"), "{}", e.name);
            assert_eq!(
                r.header("content-type"),
                Some("text/html; charset=utf-8"),
                "{}",
                e.name
            );
        }
        let wrong = post(e.port, &link, "password=sesame");
        assert_eq!(wrong.status, 403, "{}: {}", e.name, wrong.text());
        assert!(wrong.text().contains("Wrong password."), "{}", e.name);
        assert_eq!(wrong.header("set-cookie"), None, "{}", e.name);
        let right = post(
            e.port,
            &format!("{link}?utm_source=mail"),
            "password=open+sesame",
        );
        assert_eq!(
            right.status,
            303,
            "{}: {}\n{}",
            e.name,
            right.text(),
            e.logs()
        );
        assert_eq!(
            right.header("location"),
            Some(format!("{link}?utm_source=mail").as_str()),
            "{}",
            e.name
        );
        let set = right.header("set-cookie").unwrap_or_default().to_owned();
        assert!(
            set.starts_with("su_pass=1.") && set.contains(&format!("; Path={link};")),
            "{set}"
        );
        cookies.push(set.split(';').next().unwrap().to_owned());
    }

    // After the entry: redirects from memory, not one origin request in
    // VISITS visits on each edge.
    let before = origin_link_requests(&origin);
    for (e, cookie) in edges.iter().zip(&cookies) {
        for _ in 0..VISITS {
            let r = get(e.port, &link, &[("Cookie", cookie)]);
            assert_eq!(
                (r.status, r.header("location")),
                (302, Some(URL)),
                "{}",
                e.name
            );
            assert_eq!(r.header("cache-control"), Some("no-store"), "{}", e.name);
        }
    }
    assert_eq!(
        origin_link_requests(&origin),
        before,
        "{VISITS} visits with the token reached the origin"
    );
    // Either edge opens the other's token (one key, one contract).
    let r = get(edges[0].port, &link, &[("Cookie", &cookies[1])]);
    assert_eq!(r.status, 302);
    let r = get(edges[1].port, &link, &[("Cookie", &cookies[0])]);
    assert_eq!(r.status, 302);
    // A form over 4,096 bytes: the same 413 from both, by Content-Length
    // or chunked.
    let big = format!("password={}", "a".repeat(5000));
    let mut too_large = Vec::new();
    for e in &edges {
        let r = post(e.port, &link, &big);
        assert_eq!(r.status, 413, "{}: {}", e.name, r.text());
        let r = post_chunked(e.port, &link, big.as_bytes());
        assert_eq!(r.status, 413, "{}: chunked: {}", e.name, r.text());
        too_large.push(r.body);
    }
    assert_eq!(too_large[0], too_large[1]);
    // A POST to a link without a password is refused as before.
    let r = api(
        &origin,
        "POST",
        "/api/v1/links",
        json!({"url": URL, "domain": DOMAIN}),
    );
    let plain = r.json()["code"].as_str().unwrap().to_owned();
    heard(&edges, 2);
    for e in &edges {
        let r = post(e.port, &format!("/{plain}"), "password=x");
        assert_eq!(r.status, 405, "{}: {}", e.name, r.text());
    }

    // A new password voids every token, on both edges.
    let r = api(
        &origin,
        "PATCH",
        &format!("/api/v1/links/{code}?domain={DOMAIN}"),
        json!({"password": "new secret"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    heard(&edges, 3);
    for (e, cookie) in edges.iter().zip(&cookies) {
        let r = get(e.port, &link, &[("Cookie", cookie)]);
        assert_eq!(
            r.status, 401,
            "{}: an old token after a new password",
            e.name
        );
    }
}

/// Behind a proxy that ends TLS (a peer in `trusted_proxies`), its
/// `X-Forwarded-Proto: https` makes the unlock cookie `Secure` on both
/// edges; the same header from an untrusted client does not.
#[test]
fn a_trusted_proxys_https_makes_the_cookie_secure() {
    let redis = Redis::start();
    let origin = Origin::start_with(&redis, 50, &[("SHORTURL_UNLOCK_KEY", KEY.to_owned())]);
    let pingora = |trusted: &str| {
        Edge::pingora_with(
            &redis.url(),
            &origin.addr(),
            &format!("  unlock: {{ keys: [\"{KEY}\"] }}\n  trusted_proxies: [{trusted}]\n"),
        )
    };
    let openresty = |trusted: &str| {
        Edge::openresty_with(
            &format!("127.0.0.1:{}", redis.port()),
            &origin.addr(),
            &[
                ("SU_UNLOCK_KEYS", KEY.to_owned()),
                ("SU_TRUSTED_PROXIES", trusted.to_owned()),
            ],
        )
    };
    let link = format!("/{}", create_password_link(&origin));
    let enter = |port: u16, proto: Option<&str>| {
        let mut h = vec![("Content-Type", "application/x-www-form-urlencoded")];
        if let Some(p) = proto {
            h.push(("X-Forwarded-Proto", p));
        }
        let r = http::request(port, "POST", &link, DOMAIN, &h, b"password=open+sesame");
        assert_eq!(r.status, 303, "{}", r.text());
        r.header("set-cookie").unwrap_or_default().to_owned()
    };
    for (trusted, edges) in [
        (
            true,
            [pingora("\"127.0.0.1/32\""), openresty("127.0.0.1/32")],
        ),
        (false, [pingora(""), openresty("")]),
    ] {
        for e in &edges {
            let secure = enter(e.port, Some("https")).ends_with("; Secure");
            assert_eq!(secure, trusted, "{}: trusted {trusted}", e.name);
            assert!(!enter(e.port, None).ends_with("; Secure"), "{}", e.name);
        }
    }
}
