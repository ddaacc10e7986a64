//! Pages for people through both edges (protocol 4.3): the Pingora edge's
//! page cache and the OpenResty module's `proxy_cache` give the same status,
//! content type and bytes for QR codes, previews, 404 pages and refused
//! parameters; repeats are served from each edge's cache (the origin's page
//! counter does not move); an edit purges the preview on both. A link with
//! a social card (protocol 4.4) answers a link-preview crawler with the
//! same card page on both.

use crate::support;

use serde_json::json;
use support::http::{self, Response};
use support::{origin_pages, subscribed_edges, Edge, Origin, API_KEY, KNOBS, TIMEOUT};
use testkit::{qr, wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
const BROWSER: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

fn api(origin: &Origin, method: &str, path: &str, body: serde_json::Value) -> Response {
    http::api(origin.port, API_KEY, method, path, &body)
}

fn fetch(edge: &Edge, method: &str, path: &str, accept: Option<&str>) -> Response {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    http::request(edge.port, method, path, DOMAIN, &headers, b"")
}

/// Where a page request's answer comes from, each time it is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    /// The origin, then the edge's page cache.
    Cache,
    /// The origin every time (not cacheable).
    Origin,
    /// The edge itself (the record lookup's 404), never the origin's page.
    Edge,
}

fn inval_dropped(edge: &Edge) -> u64 {
    edge.status()["inval"]["dropped"].as_u64().unwrap_or(0)
}

#[test]
fn both_edges_serve_the_same_pages_from_their_caches_and_purge_them() {
    let redis = Redis::start();
    let origin = Origin::start(&redis, 50);
    let edges = subscribed_edges(&redis, &origin);
    // Stored as browsers read it (`"`, `<`, `>` encoded); the quote in the
    // path and `&` survive and must come out escaped.
    let hostile = "https://evil.example/x'onmouseover='alert(1)'?q=\"><script>alert(1)</script>";
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

    // (method, path, Accept, where the answer comes from each time)
    let cases: Vec<(&str, String, Option<&str>, From)> = vec![
        ("GET", format!("/{code}.svg"), None, From::Cache),
        (
            "GET",
            format!("/{code}.svg?size=128&margin=2"),
            None,
            From::Cache,
        ),
        ("GET", format!("/{code}.png"), None, From::Cache),
        (
            "GET",
            format!("/{code}.png?size=512&utm_source=x"),
            None,
            From::Cache,
        ),
        ("GET", format!("/{code}+"), Some(BROWSER), From::Cache),
        ("HEAD", format!("/{code}.png?size=64"), None, From::Cache),
        // An unknown code's page is the edge's own 404 (protocol 4.3)...
        ("GET", "/zzzz9999.svg".to_owned(), None, From::Edge),
        // ...and a browser's is the origin's 404 page, as for a redirect.
        ("GET", "/zzzz9999+".to_owned(), Some(BROWSER), From::Origin),
        ("GET", format!("/{code}.png?size=2000"), None, From::Origin),
        ("GET", format!("/{code}.svg?margin=17"), None, From::Origin),
        ("GET", format!("/{code}.svg?size="), None, From::Origin),
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
        format!("http://{DOMAIN}/{code}?qr=1")
    );
    assert_eq!(
        qr::decode_png(&first[2].1.body),
        format!("http://{DOMAIN}/{code}?qr=1")
    );
    let preview = first[4].1.text();
    assert!(
        !preview.contains("<script>")
            && !preview.contains("'onmouseover")
            && preview.contains("x&#39;onmouseover=&#39;alert(1)&#39;?q=%22%3E%3Cscript%3E"),
        "{preview}"
    );
    assert_eq!(
        first[7].1.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let reaching = cases.iter().filter(|c| c.3 != From::Edge).count() as u64;
    assert_eq!(origin_pages(&origin), 2 * reaching);

    // Again: what was cacheable comes from each edge's cache.
    let uncacheable = cases.iter().filter(|c| c.3 == From::Origin).count() as u64;
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
        2 * reaching + 2 * uncacheable,
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
    // A browser's 404 on a plain code: the origin's 404 page on both.
    let a = fetch(&edges[0], "GET", "/zzzz9998", Some(BROWSER));
    let b = fetch(&edges[1], "GET", "/zzzz9998", Some(BROWSER));
    assert_eq!(
        (a.status, a.header("content-type")),
        (404, Some("text/html; charset=utf-8"))
    );
    assert_eq!((b.status, &b.body), (404, &a.body));
    // The QR code (the same short URL) is fetched again and still equal.
    let a = fetch(&edges[0], "GET", &format!("/{code}.svg"), None);
    let b = fetch(&edges[1], "GET", &format!("/{code}.svg"), None);
    assert_eq!((a.status, &a.body), (200, &first[0].1.body));
    assert_eq!((b.status, &b.body), (200, &first[0].1.body));
}

/// The scan of issue 23, item 1: 600 requests for the pages of absent codes
/// (`+` and `.png` appended) on one connection spend the client's
/// unknown-code budget exactly like redirects, on both edges: 50 × 404 (the
/// default limit), then 429s, and not one reaches the origin's page route.
/// Each 404 is cached like a redirect's negative, and a live link's page is
/// still served, then from the page cache.
#[test]
fn page_scans_spend_the_unknown_code_budget_on_both_edges() {
    const LIMIT: usize = 50;
    let redis = Redis::start();
    let origin = Origin::start(&redis, 50);
    let knobs = support::EdgeKnobs {
        unknown_limit: LIMIT as u32,
        ..KNOBS
    };
    let edges = [
        Edge::pingora_knobs(
            &format!("url: \"{}\"", redis.url()),
            &origin.addr(),
            "",
            &knobs,
        ),
        Edge::openresty_with(
            &format!("127.0.0.1:{}", redis.port()),
            &origin.addr(),
            &[("SU_UNKNOWN_LIMIT", LIMIT.to_string())],
        ),
    ];
    let r = api(
        &origin,
        "POST",
        "/api/v1/links",
        json!({ "url": "https://example.com/live-page", "domain": DOMAIN }),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let live = r.json()["code"].as_str().unwrap().to_owned();
    for (n, e) in edges.iter().enumerate() {
        let pages_before = origin_pages(&origin);
        let scan = |i: usize| match i % 2 {
            0 => format!("/zq{i:04}x{n}+"),
            _ => format!("/zq{i:04}x{n}.png"),
        };
        let mut c = http::Conn::open(e.port).unwrap();
        let t0 = std::time::Instant::now();
        let statuses: Vec<u16> = (0..600)
            .map(|i| c.get(&scan(i), DOMAIN).unwrap().status)
            .collect();
        let took = t0.elapsed();
        eprintln!("{}: the scan took {took:?}", e.name);
        // The window is one second from the first 404: the scan fits in it.
        assert!(
            took < std::time::Duration::from_millis(900),
            "{}: {took:?}",
            e.name
        );
        assert_eq!(statuses[..LIMIT], [404; LIMIT], "{}: {statuses:?}", e.name);
        assert!(
            statuses[LIMIT..].iter().all(|s| *s == 429),
            "{}: {statuses:?}",
            e.name
        );
        let r = c.get(&scan(600), DOMAIN).unwrap();
        assert_eq!(r.json()["error"], "rate_limited", "{}", e.name);
        assert_eq!(r.header("retry-after"), Some("1"), "{}", e.name);
        assert_eq!(
            origin_pages(&origin),
            pages_before,
            "{}: a page of an absent code reached the origin",
            e.name
        );
        // From another client (under its budget): a scanned code's 404 is
        // the cached negative, no lookup at all.
        let other = |path: &str| {
            http::Conn::open_from([127, 0, 0, 2].into(), e.port)
                .unwrap()
                .get(path, DOMAIN)
                .unwrap()
        };
        let before = e.status();
        let r = other(&scan(1));
        assert_eq!(r.status, 404, "{}", e.name);
        assert_eq!(r.json()["error"], "not_found", "{}", e.name);
        let after = e.status();
        let moved =
            |d: &str, k: &str| after[d][k].as_i64().unwrap() - before[d][k].as_i64().unwrap();
        assert_eq!(
            (
                moved("local", "hit"),
                moved("redis", "miss"),
                moved("origin", "forward")
            ),
            (1, 0, 0),
            "{}: {after}",
            e.name
        );
        // A live link's page is served, then from the page cache.
        let first = other(&format!("/{live}.svg"));
        assert_eq!(first.status, 200, "{}: {}", e.name, first.text());
        let served = origin_pages(&origin);
        let again = other(&format!("/{live}.svg"));
        assert_eq!(
            (again.status, &again.body),
            (200, &first.body),
            "{}",
            e.name
        );
        assert_eq!(origin_pages(&origin), served, "{}: not cached", e.name);
    }
}

/// Social cards (protocol 4.4): a link created with Open Graph fields has a
/// card (`g` in its record); a link-preview crawler on `/{code}` gets the
/// card page through each edge's page cache, the same bytes on both as the
/// origin's `/{code}.card`, its title escaped; a browser gets the redirect,
/// and so does a crawler on a link without a card.
#[test]
fn a_crawler_gets_the_same_social_card_from_both_edges() {
    const CRAWLER: &str = "facebookexternalhit/1.1";
    const PERSON: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                          (KHTML, like Gecko) Chrome/126.0 Safari/537.36";
    let visit = |port: u16, path: &str, ua: &str| {
        http::request(port, "GET", path, DOMAIN, &[("User-Agent", ua)], b"")
    };
    let redis = Redis::start();
    let origin = Origin::start(&redis, 50);
    let edges = subscribed_edges(&redis, &origin);
    let sale = "https://shop.example/sale?id=7";
    let r = api(
        &origin,
        "POST",
        "/api/v1/links",
        json!({
            "url": sale,
            "domain": DOMAIN,
            "og_title": "Sale <b>today</b>",
            "og_description": "d",
            "og_image": "https://img.example/a.png",
        }),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let code = r.json()["code"].as_str().unwrap().to_owned();
    let plain_url = "https://shop.example/plain";
    let r = api(
        &origin,
        "POST",
        "/api/v1/links",
        json!({ "url": plain_url, "domain": DOMAIN }),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let plain = r.json()["code"].as_str().unwrap().to_owned();
    // The creations' messages (best-effort, after the answer) would purge
    // a card cached before they arrive: wait until each edge heard both.
    for e in &edges {
        wait_for(
            &format!("{} to hear the creations", e.name),
            TIMEOUT,
            || e.status()["inval"]["messages"].as_u64().unwrap_or(0) >= 2,
        );
    }

    // What both edges must serve: the origin's own card page.
    let want = visit(origin.port, &format!("/{code}.card"), CRAWLER);
    assert_eq!(want.status, 200, "{}", want.text());
    let page = want.text();
    assert!(
        page.contains("<meta property=\"og:title\" content=\"Sale &lt;b&gt;today&lt;/b&gt;\">")
            && !page.contains("<b>today"),
        "{page}"
    );

    let cards: Vec<Response> = edges
        .iter()
        .map(|e| visit(e.port, &format!("/{code}"), CRAWLER))
        .collect();
    for (e, r) in edges.iter().zip(&cards) {
        assert_eq!(r.status, 200, "{}: {}\n{}", e.name, r.text(), e.logs());
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{}",
            e.name
        );
        assert_eq!(r.body, want.body, "{}: not the origin's card", e.name);
        assert_eq!(r.header("location"), None, "{}", e.name);
    }
    assert_eq!(cards[0].body, cards[1].body);

    // Again: from each edge's page cache (the origin serves no page).
    let served = origin_pages(&origin);
    for e in &edges {
        let r = visit(e.port, &format!("/{code}"), CRAWLER);
        assert_eq!((r.status, &r.body), (200, &want.body), "{}", e.name);
    }
    assert_eq!(origin_pages(&origin), served, "the card was not cached");

    for e in &edges {
        // A person gets the redirect...
        let r = visit(e.port, &format!("/{code}"), PERSON);
        assert_eq!(
            (r.status, r.header("location")),
            (302, Some(sale)),
            "{}: a browser",
            e.name
        );
        // ...and so does a crawler on a link without a card.
        let r = visit(e.port, &format!("/{plain}"), CRAWLER);
        assert_eq!(
            (r.status, r.header("location")),
            (302, Some(plain_url)),
            "{}: a crawler on a link without a card",
            e.name
        );
    }
}

/// In-app browser guidance (protocol 4.6): a link to an app download
/// carries `b`; WeChat gets the origin's guidance page through each
/// edge's page cache, in Chinese for a Chinese visitor and in English
/// otherwise, the same bytes on both; a browser gets the redirect.
#[test]
fn an_in_app_browser_gets_the_same_guide_from_both_edges() {
    const WECHAT: &str =
        "Mozilla/5.0 (Linux; Android 14) Mobile Safari/537.36 MicroMessenger/8.0.47";
    const PERSON: &str = "Mozilla/5.0 (Linux; Android 14) Chrome/126.0 Mobile Safari/537.36";
    let apk = "https://dl.shop.example/shop.apk";
    let visit = |port: u16, path: &str, ua: &str, lang: Option<&str>| {
        let mut h = vec![("User-Agent", ua)];
        if let Some(l) = lang {
            h.push(("Accept-Language", l));
        }
        http::request(port, "GET", path, DOMAIN, &h, b"")
    };
    let redis = Redis::start();
    let origin = Origin::start(&redis, 50);
    let edges = subscribed_edges(&redis, &origin);
    let r = api(
        &origin,
        "POST",
        "/api/v1/links",
        json!({ "url": apk, "domain": DOMAIN }),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["inapp_guided"], json!(true));
    let code = r.json()["code"].as_str().unwrap().to_owned();
    for e in &edges {
        wait_for(&format!("{} to hear the creation", e.name), TIMEOUT, || {
            e.status()["inval"]["messages"].as_u64().unwrap_or(0) >= 1
        });
    }
    for (lang, accept) in [("zh", Some("zh-CN,zh;q=0.9")), ("en", None)] {
        let want = visit(
            origin.port,
            &format!("/{code}.guide?lang={lang}"),
            PERSON,
            None,
        );
        assert_eq!(want.status, 200, "{}", want.text());
        for e in &edges {
            let r = visit(e.port, &format!("/{code}"), WECHAT, accept);
            assert_eq!(r.status, 200, "{}: {}\n{}", e.name, r.text(), e.logs());
            assert_eq!(
                r.body, want.body,
                "{}: not the origin's {lang} guide",
                e.name
            );
            assert_eq!(r.header("location"), None, "{}", e.name);
        }
        // Again: from each edge's page cache.
        let served = origin_pages(&origin);
        for e in &edges {
            let r = visit(e.port, &format!("/{code}"), WECHAT, accept);
            assert_eq!((r.status, &r.body), (200, &want.body), "{}", e.name);
        }
        assert_eq!(
            origin_pages(&origin),
            served,
            "the {lang} guide was not cached"
        );
    }
    for e in &edges {
        let r = visit(e.port, &format!("/{code}"), PERSON, Some("zh-CN"));
        assert_eq!(
            (r.status, r.header("location")),
            (302, Some(apk)),
            "{}: a browser",
            e.name
        );
        // A conditional request for the guide: the 304, kept by no cache.
        let r = visit(e.port, &format!("/{code}"), WECHAT, None);
        let tag = r.header("etag").unwrap_or_default().to_owned();
        assert!(tag.starts_with('"'), "{}: ETag {tag:?}", e.name);
        assert_eq!(r.header("cache-control"), Some("no-store"), "{}", e.name);
        let h = [("User-Agent", WECHAT), ("If-None-Match", tag.as_str())];
        let r = http::request(e.port, "GET", &format!("/{code}"), DOMAIN, &h, b"");
        assert_eq!((r.status, r.body.len()), (304, 0), "{}", e.name);
        assert_eq!(
            r.header("cache-control"),
            Some("no-store"),
            "{}: 304",
            e.name
        );
    }
}
