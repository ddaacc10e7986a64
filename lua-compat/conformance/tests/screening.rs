//! Destination screening through both edges (protocol 4.7): when the
//! policy flags a link's destination, both edges switch from the redirect
//! to the same warning page (through their page caches) for browsers and
//! the same 403 for other clients; `block` takes the way on off the page;
//! removing the entry brings the redirect back.

use crate::support;

use serde_json::json;
use support::http::{self, Response};
use support::{origin_pages, subscribed_edges, Origin, ADMIN_KEY, API_KEY, TIMEOUT};
use testkit::{wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
const BROWSER: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

fn visit(edge_port: u16, code: &str, accept: Option<&str>) -> Response {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    http::request(edge_port, "GET", &format!("/{code}"), DOMAIN, &headers, b"")
}

fn set_entry(origin: &Origin, domain: &str, action: Option<&str>) {
    let path = format!("/api/v1/screening/domains/{domain}");
    let r = match action {
        Some(a) => http::api(origin.port, ADMIN_KEY, "PUT", &path, &json!({"action": a})),
        None => http::api(origin.port, ADMIN_KEY, "DELETE", &path, &json!(null)),
    };
    assert!(r.status == 200 || r.status == 201, "{}", r.text());
}

#[test]
fn both_edges_answer_a_screened_link_with_the_same_warning() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 50);
    let edges = subscribed_edges(&redis, &origin);
    let url = "https://news.example/today";
    let r = http::api(
        origin.port,
        API_KEY,
        "POST",
        "/api/v1/links",
        &json!({"url": url, "domain": DOMAIN}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let code = r.json()["code"].as_str().unwrap().to_owned();
    for e in &edges {
        let r = visit(e.port, &code, None);
        assert_eq!(
            (r.status, r.header("location")),
            (302, Some(url)),
            "{}",
            e.name
        );
    }

    for (action, error, way_on) in [
        ("warn", "destination_flagged", true),
        ("block", "destination_blocked", false),
    ] {
        set_entry(&origin, "news.example", Some(action));
        // Each edge hears the pass's change (its memory held the redirect).
        for e in &edges {
            wait_for(&format!("{} to answer {error}", e.name), TIMEOUT, || {
                let r = visit(e.port, &code, None);
                r.status == 403 && r.json()["error"] == json!(error)
            });
        }
        let want = http::get(origin.port, &format!("/{code}.warning"), DOMAIN);
        assert_eq!(want.status, 200, "{}", want.text());
        assert_eq!(
            want.text().contains("Continue to news.example"),
            way_on,
            "{}",
            want.text()
        );
        let mut json_bodies = Vec::new();
        for e in &edges {
            let r = visit(e.port, &code, None);
            assert_eq!(r.header("cache-control"), Some("no-store"), "{}", e.name);
            assert_eq!(
                r.header("content-type"),
                Some("application/json"),
                "{}",
                e.name
            );
            json_bodies.push(r.body.clone());
            let page = visit(e.port, &code, Some(BROWSER));
            assert_eq!(
                page.status,
                200,
                "{}: {}\n{}",
                e.name,
                page.text(),
                e.logs()
            );
            assert_eq!(page.body, want.body, "{}: not the origin's warning", e.name);
            assert_eq!(page.header("cache-control"), Some("no-store"), "{}", e.name);
            assert_eq!(page.header("location"), None, "{}", e.name);
        }
        assert_eq!(json_bodies[0], json_bodies[1], "the 403 differs");
        // Again: from each edge's page cache.
        let served = origin_pages(&origin);
        for e in &edges {
            let page = visit(e.port, &code, Some(BROWSER));
            assert_eq!((page.status, &page.body), (200, &want.body), "{}", e.name);
        }
        assert_eq!(
            origin_pages(&origin),
            served,
            "the {action} page was not cached"
        );
    }

    set_entry(&origin, "news.example", None);
    for e in &edges {
        wait_for(&format!("{} to redirect again", e.name), TIMEOUT, || {
            visit(e.port, &code, Some(BROWSER)).header("location") == Some(url)
        });
    }
}
