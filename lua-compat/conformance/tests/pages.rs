//! Pages for people through both edges (protocol 4.3): the Pingora edge's
//! page cache and the OpenResty module's `proxy_cache` give the same status,
//! content type and bytes for QR codes, previews, 404 pages and refused
//! parameters; repeats are served from each edge's cache (the origin's page
//! counter does not move); an edit purges the preview on both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::http::{self, Response};
use support::{Edge, Origin, API_KEY, TIMEOUT};
use testkit::{qr, wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
const BROWSER: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

/// Page requests the origin served (its request histogram, route `page`).
fn origin_pages(origin: &Origin) -> u64 {
    let text = http::get(origin.port, "/metrics", "localhost").text();
    text.lines()
        .filter(|l| l.starts_with("shorturl_request_duration_seconds_count{"))
        .filter(|l| l.contains("route=\"page\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn api(origin: &Origin, method: &str, path: &str, body: serde_json::Value) -> Response {
    let auth = format!("Bearer {API_KEY}");
    http::request(
        origin.port,
        method,
        path,
        "localhost",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn fetch(edge: &Edge, method: &str, path: &str, accept: Option<&str>) -> Response {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    http::request(edge.port, method, path, DOMAIN, &headers, b"")
}

fn inval_dropped(edge: &Edge) -> u64 {
    edge.status()["inval"]["dropped"].as_u64().unwrap_or(0)
}

#[test]
fn both_edges_serve_the_same_pages_from_their_caches_and_purge_them() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 50);
    let edges = [
        Edge::pingora(&redis.url(), &origin.addr()),
        Edge::openresty(&format!("127.0.0.1:{}", redis.port()), &origin.addr()),
    ];
    for e in &edges {
        wait_for(&format!("{} to subscribe", e.name), TIMEOUT, || {
            e.status()["inval"]["subscribed"] == json!(true)
        });
    }
    let hostile = "https://evil.example/?q=\"><script>alert(1)</script>";
    let r = api(
        &origin,
        "POST",
        "/api/v1/links",
        json!({ "url": hostile, "domain": DOMAIN }),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let code = r.json()["code"].as_str().unwrap().to_owned();
    // The creation's own message (best-effort) would purge what is fetched
    // now if it came late: make an edit whose message follows it, and wait
    // for that one (it drops the record each edge cached).
    for e in &edges {
        let r = http::request(e.port, "GET", &format!("/{code}"), DOMAIN, &[], b"");
        assert_eq!(r.status, 302, "{}", e.name);
    }
    let r = api(
        &origin,
        "PATCH",
        &format!("/api/v1/links/{code}"),
        json!({ "url": format!("{hostile}&v=2") }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for e in &edges {
        wait_for("the edit's message", TIMEOUT, || inval_dropped(e) >= 1);
    }

    // (method, path, Accept, served from the cache the second time)
    let cases: Vec<(&str, String, Option<&str>, bool)> = vec![
        ("GET", format!("/{code}.svg"), None, true),
        ("GET", format!("/{code}.svg?size=128&margin=2"), None, true),
        ("GET", format!("/{code}.png"), None, true),
        (
            "GET",
            format!("/{code}.png?size=512&utm_source=x"),
            None,
            true,
        ),
        ("GET", format!("/{code}+"), Some(BROWSER), true),
        ("HEAD", format!("/{code}.png?size=64"), None, true),
        ("GET", "/zzzz9999.svg".to_owned(), None, false),
        ("GET", "/zzzz9999+".to_owned(), Some(BROWSER), false),
        ("GET", format!("/{code}.png?size=2000"), None, false),
        ("GET", format!("/{code}.svg?margin=17"), None, false),
        ("GET", format!("/{code}.svg?size="), None, false),
    ];
    let mut first = Vec::new();
    for (method, path, accept, _) in &cases {
        let a = fetch(&edges[0], method, path, *accept);
        let b = fetch(&edges[1], method, path, *accept);
        let what = format!("{method} {path}");
        assert_eq!(a.status, b.status, "{what}: {} / {}", a.text(), b.text());
        assert_eq!(a.header("content-type"), b.header("content-type"), "{what}");
        assert_eq!(a.body, b.body, "{what}");
        first.push((what, a));
    }
    let statuses: Vec<u16> = first.iter().map(|(_, r)| r.status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 200, 404, 404, 400, 400, 400]
    );
    assert_eq!(
        qr::decode_svg(&first[0].1.body),
        format!("http://{DOMAIN}/{code}")
    );
    assert_eq!(
        qr::decode_png(&first[2].1.body),
        format!("http://{DOMAIN}/{code}")
    );
    let preview = first[4].1.text();
    assert!(
        !preview.contains("<script>") && preview.contains("&lt;script&gt;"),
        "{preview}"
    );
    assert_eq!(
        first[7].1.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(origin_pages(&origin), 2 * cases.len() as u64);

    // Again: what was cacheable comes from each edge's cache.
    let uncacheable = cases.iter().filter(|c| !c.3).count() as u64;
    for (i, (method, path, accept, _)) in cases.iter().enumerate() {
        for e in &edges {
            let r = fetch(e, method, path, *accept);
            assert_eq!(
                (r.status, &r.body),
                (first[i].1.status, &first[i].1.body),
                "{} {path}",
                e.name
            );
        }
    }
    assert_eq!(
        origin_pages(&origin),
        2 * cases.len() as u64 + 2 * uncacheable,
        "only the uncacheable answers reached the origin again"
    );

    // An edit: both edges show the new destination at once.
    let r = api(
        &origin,
        "PATCH",
        &format!("/api/v1/links/{code}"),
        json!({ "url": "https://after.example/y" }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for e in &edges {
        wait_for(&format!("{} to purge the preview", e.name), TIMEOUT, || {
            fetch(e, "GET", &format!("/{code}+"), Some(BROWSER))
                .text()
                .contains("after.example")
        });
    }
    // The QR code (the same short URL) is fetched again and still equal.
    let a = fetch(&edges[0], "GET", &format!("/{code}.svg"), None);
    let b = fetch(&edges[1], "GET", &format!("/{code}.svg"), None);
    assert_eq!((a.status, &a.body), (200, &first[0].1.body));
    assert_eq!((b.status, &b.body), (200, &first[0].1.body));
}
