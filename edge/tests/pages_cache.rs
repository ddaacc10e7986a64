//! Pages for people through the edge's page cache (`pingora-cache`): real
//! Redis, origin and MariaDB. QR codes decode back to the short URL through
//! the edge; a second request is a hit (the origin's page counter does not
//! move); concurrent misses make one origin request; an edit purges the
//! pages on every edge; an expired page is served stale while the origin is
//! down and an uncached one gets the 503. Needs `shorturl-origin` built
//! (`cargo build --workspace --bins`).

use crate::support;

use serde_json::json;
use std::sync::{Arc, Barrier};
use support::http::{request, Response};
use support::{
    create_link, origin_route_count, patch_link, start_edge, Edge, EdgeOpts, Origin, TIMEOUT,
};
use testkit::{qr, wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";

fn code_of(r: &Response) -> String {
    assert_eq!(r.status, 201, "creation failed: {}", r.text());
    r.json()["code"].as_str().unwrap().to_owned()
}

fn get(edge: &Edge, path: &str, host: &str) -> Response {
    request(edge.port, "GET", path, host, &[], b"")
}

fn pages_metric(edge: &Edge, result: &str) -> u64 {
    edge.metric(&format!(
        "shorturl_edge_pages_cache_total{{result=\"{result}\"}}"
    )) as u64
}

/// Waits until the edge counted exactly `want` page requests as `result`
/// (requests are counted when logged, just after their answer is sent).
fn expect_pages(edge: &Edge, result: &str, want: u64) {
    let mut got = 0;
    wait_for(
        &format!("{want} page requests counted as {result}"),
        TIMEOUT,
        || {
            got = pages_metric(edge, result);
            got >= want
        },
    );
    assert_eq!(got, want, "page requests counted as {result}");
}

/// Creates a link for `url` on [`DOMAIN`] and settles it on `edges`: the
/// creation's own invalidation message is best-effort and, arriving late,
/// would purge pages a test fetched meanwhile; an edit's message always
/// follows it, so the link is edited (`?v=2` appended) and each edge's
/// record drop by that message is awaited. Returns the code.
fn settled_link(origin: &Origin, edges: &[&Edge], url: &str) -> String {
    let code = code_of(&create_link(origin.port, url, Some(DOMAIN)));
    for e in edges {
        assert_eq!(get(e, &format!("/{code}"), DOMAIN).status, 302);
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    let r = patch_link(
        origin.port,
        &code,
        json!({ "url": format!("{url}{sep}v=2") }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for e in edges {
        wait_for("the edit's message to drop the record", TIMEOUT, || {
            e.metric("shorturl_inval_dropped_total{cache=\"node\"}") >= 1.0
        });
    }
    code
}

fn origin_pages(origin: &Origin) -> u64 {
    origin_route_count(origin.port, "page")
}

fn edge_for(redis: &Redis, origin: &Origin) -> Edge {
    let edge = start_edge(EdgeOpts::new(redis.url(), vec![origin.addr()]));
    edge.wait_subscribed();
    edge
}

/// QR codes (both formats, two sizes) decode to the short URL through the
/// edge; repeats, `HEAD`, other query keys and another spelling of the
/// host are hits; a refused `size` is the origin's 400 every time; the
/// plain redirect never touches the page cache.
#[test]
fn qr_codes_through_the_edge_decode_and_are_served_from_the_cache() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 100);
    let edge = edge_for(&redis, &origin);
    let code = settled_link(&origin, &[&edge], "https://qr.example/a");
    let want = format!("http://{DOMAIN}/{code}?qr=1"); // the QR marker (protocol 3.7)

    let mut bodies = Vec::new();
    for (path, ct) in [
        (format!("/{code}.png?size=128"), "image/png"),
        (format!("/{code}.png?size=512"), "image/png"),
        (format!("/{code}.svg?size=128"), "image/svg+xml"),
        (format!("/{code}.svg"), "image/svg+xml"),
    ] {
        let r = get(&edge, &path, DOMAIN);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.header("content-type"), Some(ct), "{path}");
        assert_eq!(
            r.header("cache-control"),
            Some("public, max-age=86400"),
            "{path}"
        );
        assert!(r.header("etag").is_some(), "{path}");
        let text = if ct == "image/png" {
            qr::decode_png(&r.body)
        } else {
            qr::decode_svg(&r.body)
        };
        assert_eq!(text, want, "{path}");
        bodies.push((path, r.body));
    }
    assert_eq!(origin_pages(&origin), 4);
    expect_pages(&edge, "miss", 4);

    // The same pages again, other query keys, the host spelt differently:
    // all hits, the same bytes, the origin not asked.
    for (path, body) in &bodies {
        let r = get(&edge, path, DOMAIN);
        assert_eq!((r.status, &r.body), (200, body), "{path}");
        let sep = if path.contains('?') { '&' } else { '?' };
        let r = get(
            &edge,
            &format!("{path}{sep}utm_source=poster"),
            "S.Shop55.COM:80",
        );
        assert_eq!((r.status, &r.body), (200, body), "{path} with utm");
    }
    let r = get(&edge, &format!("/{code}.svg?size=256&margin=4"), DOMAIN);
    assert_eq!(
        (r.status, &r.body),
        (200, &bodies[3].1),
        "defaults spelt out"
    );
    let head = request(
        edge.port,
        "HEAD",
        &format!("/{code}.png?size=128"),
        DOMAIN,
        &[],
        b"",
    );
    assert_eq!((head.status, head.body.len()), (200, 0));
    assert_eq!(
        head.header("content-length"),
        Some(bodies[0].1.len().to_string().as_str())
    );
    assert_eq!(origin_pages(&origin), 4, "hits never reach the origin");
    expect_pages(&edge, "hit", 10);

    // A conditional request on a hit: 304 from the edge.
    let etag = get(&edge, &bodies[0].0, DOMAIN)
        .header("etag")
        .unwrap()
        .to_owned();
    let r = request(
        edge.port,
        "GET",
        &bodies[0].0,
        DOMAIN,
        &[("If-None-Match", &etag)],
        b"",
    );
    assert_eq!((r.status, r.body.len()), (304, 0));
    assert_eq!(origin_pages(&origin), 4);

    // Refused parameters: the origin's 400, never cached.
    for _ in 0..2 {
        let r = get(&edge, &format!("/{code}.png?size=2000"), DOMAIN);
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.json()["error"], "invalid_size");
        let r = get(&edge, &format!("/{code}.svg?margin=17"), DOMAIN);
        assert_eq!(r.json()["error"], "invalid_margin");
    }
    assert_eq!(origin_pages(&origin), 8);
    expect_pages(&edge, "bypass", 4);

    // Another host's QR code: the record lookup's 404, as for a redirect
    // on that host (protocol 4.3): the origin's page route is not asked and
    // the page cache is not involved.
    for _ in 0..2 {
        let r = get(&edge, &format!("/{code}.png"), "localhost");
        assert_eq!(r.status, 404);
        assert_eq!(r.json()["error"], "not_found");
    }
    assert_eq!(origin_pages(&origin), 8);
    assert_eq!(pages_metric(&edge, "bypass"), 4);

    // The redirect path does no page-cache work at all.
    let before: Vec<u64> = ["hit", "miss", "bypass", "error"]
        .iter()
        .map(|r| pages_metric(&edge, r))
        .collect();
    for _ in 0..3 {
        let r = get(&edge, &format!("/{code}"), DOMAIN);
        assert_eq!(r.status, 302);
    }
    let after: Vec<u64> = ["hit", "miss", "bypass", "error"]
        .iter()
        .map(|r| pages_metric(&edge, r))
        .collect();
    assert_eq!(before, after);
    assert!(edge.metric("shorturl_edge_pages_cache_entries") >= 4.0);
    assert!(edge.metric("shorturl_edge_pages_cache_bytes") > 0.0);
}

/// The preview of a hostile URL stays escaped text through the edge, from
/// the origin and from the cache alike.
#[test]
fn a_hostile_preview_stays_escaped_through_the_cache() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 100);
    let edge = edge_for(&redis, &origin);
    // The origin stores targets as browsers read them, which encodes `"`,
    // `<` and `>`; a quote in the path and `&` survive, and must be escaped.
    let hostile = "https://evil.example/x'onmouseover='alert(1)'?q=\"><script>&v=1";
    let code = settled_link(&origin, &[&edge], hostile);
    let first = get(&edge, &format!("/{code}+"), DOMAIN);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(
        first.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(first
        .header("content-security-policy")
        .is_some_and(|c| c.contains("default-src 'none'")));
    let text = first.text();
    assert!(
        !text.contains("<script>") && !text.contains("'onmouseover"),
        "{text}"
    );
    assert!(
        text.contains("x&#39;onmouseover=&#39;alert(1)&#39;?q=%22%3E%3Cscript%3E&amp;v=1"),
        "{text}"
    );
    let again = get(&edge, &format!("/{code}+"), DOMAIN);
    assert_eq!((again.status, &again.body), (200, &first.body));
    assert_eq!(
        again.header("content-security-policy"),
        first.header("content-security-policy")
    );
    assert_eq!(origin_pages(&origin), 1);
    expect_pages(&edge, "hit", 1);
    // A browser's 404 page for an unknown code is the origin's, uncached.
    let r = request(
        edge.port,
        "GET",
        "/zzzz9999+",
        DOMAIN,
        &[("Accept", "text/html,*/*;q=0.8")],
        b"",
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("vary"), Some("Accept"));
    let r = get(&edge, "/zzzz9999+", DOMAIN);
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (404, Some("not_found"))
    );

    // Plain codes: a browser's 404 is the origin's page, a live link still
    // redirects, and every other client keeps the JSON 404.
    let before = origin_route_count(origin.port, "redirect");
    let browser = [("Accept", "text/html,*/*;q=0.8")];
    // Twice: the second time the negative is in memory (which the fast
    // path answers itself for any other client).
    for _ in 0..2 {
        let r = request(edge.port, "GET", "/zzzz9999", DOMAIN, &browser, b"");
        assert_eq!(r.status, 404);
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(r.header("vary"), Some("Accept"));
        assert!(r.text().contains("<html"), "{}", r.text());
    }
    let r = request(edge.port, "GET", &format!("/{code}"), DOMAIN, &browser, b"");
    assert_eq!(r.status, 302);
    let r = get(&edge, "/zzzz9999", DOMAIN);
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (404, Some("not_found"))
    );
    assert_eq!(
        origin_route_count(origin.port, "redirect"),
        before + 2,
        "only the browser's 404s reached the origin"
    );
}

/// Sixteen concurrent requests for one uncached QR code: one origin
/// request (the cache lock), sixteen identical answers.
#[test]
fn concurrent_misses_make_one_origin_request() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 100);
    let edge = Arc::new(edge_for(&redis, &origin));
    let code = settled_link(&origin, &[&*edge], "https://qr.example/c");
    const N: usize = 16;
    let barrier = Arc::new(Barrier::new(N));
    let path = format!("/{code}.png?size=1024");
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let (edge, barrier, path) = (Arc::clone(&edge), Arc::clone(&barrier), path.clone());
            std::thread::spawn(move || {
                let mut c = support::http::Conn::open(edge.port).unwrap();
                barrier.wait();
                c.get(&path, DOMAIN).unwrap()
            })
        })
        .collect();
    let answers: Vec<Response> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for a in &answers {
        assert_eq!((a.status, &a.body), (200, &answers[0].body));
    }
    assert_eq!(origin_pages(&origin), 1);
    wait_for("every request to be counted", TIMEOUT, || {
        pages_metric(&edge, "hit") + pages_metric(&edge, "miss") >= N as u64
    });
    assert_eq!(
        pages_metric(&edge, "hit") + pages_metric(&edge, "miss"),
        N as u64
    );
}

/// An edit purges the link's pages on every edge at once (previews are
/// fresh for 60 s and QR codes for a day: only the purge explains a
/// refetch).
#[test]
fn an_edit_purges_the_pages_on_every_edge() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 100);
    let edges = [edge_for(&redis, &origin), edge_for(&redis, &origin)];
    let code = settled_link(&origin, &[&edges[0], &edges[1]], "https://before.example/x");
    let preview = format!("/{code}+");
    let png = format!("/{code}.png");
    for e in &edges {
        for _ in 0..2 {
            assert!(get(e, &preview, DOMAIN).text().contains("before.example"));
            assert_eq!(get(e, &png, DOMAIN).status, 200);
        }
        expect_pages(e, "hit", 2);
    }
    assert_eq!(origin_pages(&origin), 4);

    let r = patch_link(
        origin.port,
        &code,
        json!({ "url": "https://after.example/y" }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for e in &edges {
        wait_for("the edit to purge the edge's pages", TIMEOUT, || {
            e.metric("shorturl_edge_pages_cache_removed_total{reason=\"purge\"}") == 2.0
        });
        let text = get(e, &preview, DOMAIN).text();
        assert!(text.contains("after.example"), "{text}");
        assert!(!text.contains("before.example"), "{text}");
        assert_eq!(get(e, &png, DOMAIN).status, 200);
    }
    assert_eq!(
        origin_pages(&origin),
        8,
        "each edge fetched both pages again"
    );

    // Disabled: the pages are gone everywhere (the origin's 404).
    let r = patch_link(origin.port, &code, json!({ "state": "disabled" }));
    assert_eq!(r.status, 200, "{}", r.text());
    for e in &edges {
        wait_for("the disable to purge the edge's pages", TIMEOUT, || {
            get(e, &png, DOMAIN).status == 404
        });
        assert_eq!(get(e, &preview, DOMAIN).status, 404);
    }
}

/// The origin down: a cached QR code past its freshness is served stale
/// (the same bytes), an uncached one is the 503 of the protocol; back up,
/// pages are fetched again.
#[test]
fn origin_down_serves_cached_pages_stale_and_503_for_the_rest() {
    let redis = Redis::start();
    let mut origin = Origin::start_with(&redis, 100, "pages: { qr_max_age_secs: 1 }\n");
    let edge = edge_for(&redis, &origin);
    let code = settled_link(&origin, &[&edge], "https://qr.example/d");
    let path = format!("/{code}.svg?size=200");
    let cached = get(&edge, &path, DOMAIN);
    assert_eq!(cached.status, 200);
    assert_eq!(cached.header("cache-control"), Some("public, max-age=1"));

    // An unknown code looked up once: its negative is in Redis and memory.
    assert_eq!(get(&edge, "/zzzz9999", DOMAIN).status, 404);

    origin.stop();
    // Every answer while the origin is down is the cached page, until it
    // is past its freshness and counted as stale.
    wait_for("the cached page to be served stale", TIMEOUT, || {
        let r = get(&edge, &path, DOMAIN);
        assert_eq!((r.status, &r.body), (200, &cached.body), "{}", r.text());
        pages_metric(&edge, "stale") >= 1
    });
    let r = get(&edge, &path, DOMAIN);
    assert_eq!((r.status, &r.body), (200, &cached.body));
    let r = request(edge.port, "HEAD", &path, DOMAIN, &[], b"");
    assert_eq!((r.status, r.body.len()), (200, 0));

    let uncached = get(&edge, &format!("/{code}.png"), DOMAIN);
    assert_eq!(uncached.status, 503, "{}", uncached.text());
    assert_eq!(uncached.json()["error"], "unavailable");
    // Counted when the request is logged, just after its answer.
    expect_pages(&edge, "error", 1);

    // A browser's 404 on a plain code (known absent, so no origin lookup
    // needed): the edge's own JSON 404, as the 404 page cannot be fetched.
    let r = request(
        edge.port,
        "GET",
        "/zzzz9999",
        DOMAIN,
        &[("Accept", "text/html,*/*;q=0.8")],
        b"",
    );
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (404, Some("not_found"))
    );

    origin.restart();
    wait_for("pages to be fetched again", TIMEOUT, || {
        get(&edge, &format!("/{code}.png"), DOMAIN).status == 200
    });
    let r = get(&edge, &path, DOMAIN);
    assert_eq!((r.status, &r.body), (200, &cached.body));
}
