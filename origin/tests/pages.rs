//! Pages for people through a real origin (MariaDB + Redis): QR codes that
//! decode back to the short URL, the preview page, HTML 404 pages for
//! browsers, and the protocol's JSON 404 kept for every other client.

use crate::support;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::time::Duration;
use support::pages::{decode_both, fetch, get, header};
use support::{write_config, OriginOpts, Setup, KEY};
use testkit::{wait_for, TempDir};

const SHOP: &str = "s.shop55.com";
const FIREFOX: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

fn setup() -> Setup {
    Setup::start_with(|o| {
        o.pregen = 200;
        o.extra_yaml = "pages:\n  default: {title: 'Test links'}\n  \
                        domains: {s.shop55.com: {title: 'Shop 55 links', accent: '#aa0055'}}\n"
            .into();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qr_codes_decode_to_the_short_url_on_the_links_domain() {
    let s = setup();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://qr.example/a"})).await;
    let shop = o
        .create_ok(json!({"url": "https://qr.example/b", "domain": SHOP}))
        .await;
    for size in [128, 512] {
        // The short URL with the QR marker (protocol 3.7).
        let want = format!("http://sho.rt/{code}?qr=1");
        assert_eq!(
            decode_both(&s, "sho.rt", &code, size).await,
            (want.clone(), want)
        );
        let want = format!("http://{SHOP}/{shop}?qr=1");
        assert_eq!(
            decode_both(&s, SHOP, &shop, size).await,
            (want.clone(), want)
        );
    }
    // Deterministic: the same request, the same bytes and tag.
    let a = fetch(&s, &format!("/{code}.png"), "sho.rt", &[]).await;
    let b = fetch(&s, &format!("/{code}.png"), "sho.rt", &[]).await;
    assert_eq!((a.0, &a.2), (200, &b.2));
    assert_eq!(header(&a.1, "etag"), header(&b.1, "etag"));
    // HEAD: the headers of GET, no body.
    let (st, h, body) = get(
        &s,
        reqwest::Method::HEAD,
        &format!("/{code}.png"),
        "sho.rt",
        &[],
    )
    .await;
    assert_eq!((st, body.len()), (200, 0));
    assert_eq!(header(&h, "content-length"), a.2.len().to_string());
    assert_eq!(header(&h, "etag"), header(&a.1, "etag"));
    let m = o.metrics().await;
    assert!(
        m.contains("shorturl_pages_total{kind=\"png\",result=\"ok\"} 7"),
        "{m}"
    );
    assert!(
        m.contains("shorturl_pages_total{kind=\"svg\",result=\"ok\"} 4"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qr_codes_only_for_links_that_resolve_on_the_host() {
    let s = setup();
    let o = &s.origin;
    let code = o.create_ok(json!({"url": "https://qr.example/c"})).await;
    for q in ["size=63", "size=1025", "size=abc", "size="] {
        let (st, h, body) = fetch(&s, &format!("/{code}.svg?{q}"), "sho.rt", &[]).await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (st, v["error"].as_str()),
            (400, Some("invalid_size")),
            "{q}"
        );
        assert_eq!(header(&h, "content-type"), "application/json");
    }
    let (st, _, body) = fetch(&s, &format!("/{code}.png?margin=17"), "sho.rt", &[]).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_margin")));

    // The redirect's 404, byte for byte: another Host, unknown, disabled, expired.
    let (st, h404, json404) = fetch(&s, "/zzzzzz", "sho.rt", &[]).await;
    assert_eq!(st, 404);
    let expect_404 = |(st, h, body): (u16, HeaderMap, Vec<u8>), what: &str| {
        assert_eq!((st, &body), (404, &json404), "{what}");
        assert_eq!(
            header(&h, "content-type"),
            header(&h404, "content-type"),
            "{what}"
        );
        assert_eq!(
            header(&h, "cache-control"),
            header(&h404, "cache-control"),
            "{what}"
        );
    };
    expect_404(
        fetch(&s, &format!("/{code}.svg"), SHOP, &[]).await,
        "other host",
    );
    expect_404(fetch(&s, "/zzzzzz.png", "sho.rt", &[]).await, "unknown");
    expect_404(fetch(&s, "/a.b.svg", "sho.rt", &[]).await, "not a code");
    let disabled = o.create_ok(json!({"url": "https://qr.example/d"})).await;
    assert_eq!(
        o.patch(KEY, &disabled, json!({"state": "disabled"}))
            .await
            .0,
        200
    );
    expect_404(
        fetch(&s, &format!("/{disabled}.svg"), "sho.rt", &[]).await,
        "disabled",
    );
    expect_404(
        fetch(&s, &format!("/{disabled}+"), "sho.rt", &[]).await,
        "disabled preview",
    );
    let expired = expire(&s, "https://qr.example/e").await;
    expect_404(
        fetch(&s, &format!("/{expired}.png"), "sho.rt", &[]).await,
        "expired",
    );
    let m = o.metrics().await;
    assert!(
        m.contains("shorturl_pages_total{kind=\"svg\",result=\"bad_request\"} 4"),
        "{m}"
    );
    assert!(
        m.contains("shorturl_pages_total{kind=\"svg\",result=\"not_found\"} 3"),
        "{m}"
    );
}

/// A link whose expiry has passed (in MySQL; Redis forgets it).
async fn expire(s: &Setup, url: &str) -> String {
    let code = s.origin.create_ok(json!({ "url": url })).await;
    s.sql(&format!(
        "UPDATE short_code SET expires_at = UNIX_TIMESTAMP() - 5 WHERE code = '{code}'"
    ));
    let mut r = s.redis_conn().await;
    let _: i64 = redis::cmd("DEL")
        .arg(shorturl_common::keys::link_key("sho.rt", &code))
        .query_async(&mut r)
        .await
        .unwrap();
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_shows_a_hostile_url_as_text_and_never_redirects() {
    let s = setup();
    let o = &s.origin;
    let hostile = "https://x.example/?q=\"><script>alert(1)</script>&b='c'";
    let (st, v) = o.create(json!({ "url": hostile, "domain": SHOP })).await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let stored = v["url"].as_str().unwrap().to_owned();
    // Stored as a browser reads it (WHATWG): what survives of the markup
    // (`&`) is still the page's to escape.
    assert_eq!(
        stored, "https://x.example/?q=%22%3E%3Cscript%3Ealert(1)%3C/script%3E&b=%27c%27",
        "stored normalised"
    );
    let created = &v["created_at"].as_str().unwrap()[..10];
    let (st, h, body) = fetch(&s, &format!("/{code}+"), SHOP, &[]).await;
    assert_eq!(st, 200);
    assert!(h.get("location").is_none());
    assert_eq!(header(&h, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&h, "content-length"), body.len().to_string());
    assert_eq!(header(&h, "cache-control"), "public, max-age=60");
    assert_eq!(header(&h, "x-content-type-options"), "nosniff");
    let csp = header(&h, "content-security-policy");
    assert!(
        csp.starts_with("default-src 'none'; style-src 'sha256-"),
        "{csp}"
    );
    assert!(!csp.contains("script"), "{csp}");
    let page = String::from_utf8(body).unwrap();
    assert!(!page.to_ascii_lowercase().contains("<script"), "{page}");
    let escaped = stored
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    assert!(page.contains(&format!("<code>{escaped}</code>")), "{page}");
    assert!(page.contains(&format!("href=\"{escaped}\"")), "{page}");
    assert!(page.contains(SHOP) && page.contains(created), "{page}");
    assert!(page.contains("Shop 55 links"), "the domain's theme: {page}");
    // Only on the link's domain.
    assert_eq!(fetch(&s, &format!("/{code}+"), "sho.rt", &[]).await.0, 404);
    // ETag and If-None-Match.
    let tag = header(&h, "etag").to_owned();
    let (st, h, body) = fetch(&s, &format!("/{code}+"), SHOP, &[("if-none-match", &tag)]).await;
    assert_eq!((st, body.len(), header(&h, "etag")), (304, 0, tag.as_str()));
    let (st, _, _) = fetch(
        &s,
        &format!("/{code}+"),
        SHOP,
        &[("if-none-match", "\"x\"")],
    )
    .await;
    assert_eq!(st, 200);
    let (_, h, _) = fetch(&s, &format!("/{code}.svg"), SHOP, &[]).await;
    let tag = header(&h, "etag").to_owned();
    let (st, h, body) = fetch(
        &s,
        &format!("/{code}.svg"),
        SHOP,
        &[("if-none-match", &tag)],
    )
    .await;
    assert_eq!((st, body.len()), (304, 0));
    assert_eq!(header(&h, "cache-control"), "public, max-age=86400");
    let m = o.metrics().await;
    assert!(
        m.contains("shorturl_pages_total{kind=\"preview\",result=\"ok\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("shorturl_pages_total{kind=\"preview\",result=\"not_modified\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("shorturl_pages_total{kind=\"svg\",result=\"not_modified\"} 1"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_get_a_404_page_and_other_clients_the_json() {
    let s = setup();
    let o = &s.origin;
    let (st, _, json404) = fetch(&s, "/zzzzzz", "sho.rt", &[]).await;
    assert_eq!(st, 404);
    let v: Value = serde_json::from_slice(&json404).unwrap();
    assert_eq!(v["error"], "not_found");
    for accept in [
        "application/json",
        "*/*",
        "text/html;q=0.1, application/json",
    ] {
        let (st, h, body) = fetch(&s, "/zzzzzz", "sho.rt", &[("accept", accept)]).await;
        assert_eq!((st, &body), (404, &json404), "{accept}");
        assert_eq!(header(&h, "content-type"), "application/json", "{accept}");
    }
    let html = |(st, h, body): (u16, HeaderMap, Vec<u8>)| {
        assert_eq!(st, 404);
        assert_eq!(header(&h, "content-type"), "text/html; charset=utf-8");
        assert_eq!(header(&h, "content-length"), body.len().to_string());
        assert_eq!(header(&h, "vary"), "Accept");
        assert_eq!(header(&h, "x-content-type-options"), "nosniff");
        assert!(header(&h, "content-security-policy").starts_with("default-src 'none'"));
        String::from_utf8(body).unwrap()
    };
    let page = html(fetch(&s, "/zzzzzz", "sho.rt", &[("accept", FIREFOX)]).await);
    assert!(
        page.contains("Link not found") && page.contains("Test links"),
        "{page}"
    );
    let page = html(fetch(&s, "/zzzzzz", SHOP, &[("accept", "text/html")]).await);
    assert!(
        page.contains("Shop 55 links") && page.contains("#aa0055"),
        "{page}"
    );

    // Disabled and expired say so, without the target.
    let disabled = o
        .create_ok(json!({"url": "https://secret.example/d"}))
        .await;
    assert_eq!(
        o.patch(KEY, &disabled, json!({"state": "disabled"}))
            .await
            .0,
        200
    );
    let page = html(
        fetch(
            &s,
            &format!("/{disabled}"),
            "sho.rt",
            &[("accept", FIREFOX)],
        )
        .await,
    );
    assert!(
        page.contains("Link disabled") && !page.contains("secret"),
        "{page}"
    );
    let page = html(
        fetch(
            &s,
            &format!("/{disabled}+"),
            "sho.rt",
            &[("accept", FIREFOX)],
        )
        .await,
    );
    assert!(
        page.contains("Link disabled") && !page.contains("secret"),
        "{page}"
    );
    // On another domain it is just unknown.
    let page = html(fetch(&s, &format!("/{disabled}"), SHOP, &[("accept", FIREFOX)]).await);
    assert!(page.contains("Link not found"), "{page}");
    let expired = expire(&s, "https://secret.example/e").await;
    let page = html(fetch(&s, &format!("/{expired}"), "sho.rt", &[("accept", FIREFOX)]).await);
    assert!(
        page.contains("Link expired") && !page.contains("secret"),
        "{page}"
    );
    let (st, _, body) = fetch(&s, &format!("/{expired}"), "sho.rt", &[("accept", "*/*")]).await;
    assert_eq!((st, &body), (404, &json404));
    // A live link still redirects, whatever the Accept.
    let live = o.create_ok(json!({"url": "https://live.example/"})).await;
    let (st, h, _) = fetch(&s, &format!("/{live}"), "sho.rt", &[("accept", FIREFOX)]).await;
    assert_eq!((st, header(&h, "location")), (302, "https://live.example/"));

    let m = o.metrics().await;
    for (result, n) in [("unknown", 3), ("disabled", 2), ("expired", 1)] {
        let line = format!("shorturl_pages_total{{kind=\"html404\",result=\"{result}\"}} {n}");
        assert!(m.contains(&line), "{line}: {m}");
    }
}

#[test]
fn a_bad_colour_is_refused_at_start_naming_the_field() {
    let dir = TempDir::new("pages-config");
    let mut opts = OriginOpts::new(
        "mysql://root@127.0.0.1:1/x".into(),
        "redis://127.0.0.1:1/".into(),
    );
    opts.extra_yaml = "pages:\n  domains: {s.shop55.com: {accent: 'red'}}\n".into();
    let conf = write_config(&dir, &opts);
    let log = dir.path().join("serve.log");
    let mut child = std::process::Command::new(support::origin_bin())
        .arg("-c")
        .arg(&conf)
        .arg("serve")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("serve.err")).unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_for(
        "the origin to refuse its config",
        Duration::from_secs(30),
        || {
            status = child.try_wait().unwrap();
            status.is_some()
        },
    );
    assert!(!status.unwrap().success());
    let err = std::fs::read_to_string(dir.path().join("serve.err")).unwrap();
    assert!(err.contains("pages.domains.s.shop55.com.accent"), "{err}");
}

const CRAWLER: &str = "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawlers_get_the_social_card_and_people_the_redirect() {
    let s = setup();
    let o = &s.origin;
    // Bad card fields are refused, naming the field, and nothing is made.
    for bad in [
        json!({"og_title": ""}),
        json!({"og_title": "a\u{7}b"}),
        json!({"og_title": "x".repeat(201)}),
        json!({"og_description": 7}),
        json!({"og_image": "http://img.example/a.png"}),
        json!({"og_image": "https://img.example/a b.png"}),
    ] {
        let mut body = json!({"url": "https://shop.example/sale", "domain": SHOP});
        for (k, v) in bad.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (st, e) = o.create(body.clone()).await;
        assert_eq!(
            (st, e["error"].as_str()),
            (400, Some("invalid_og")),
            "{body}: {e}"
        );
    }
    let (st, v) = o
        .create(json!({
            "url": "https://shop.example/sale",
            "domain": SHOP,
            "og_title": "Sale \"today\" <b>only</b>",
            "og_description": "Half off & more",
            "og_image": "https://img.example/sale.png?w=1200&h=630",
        }))
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["og_title"], "Sale \"today\" <b>only</b>");
    assert_eq!(v["og_image"], "https://img.example/sale.png?w=1200&h=630");
    let code = v["code"].as_str().unwrap().to_owned();
    // The record says only that there is a card.
    let rec = s.redis_record_on(SHOP, &code).await.unwrap();
    assert!(
        rec.starts_with("3 1 ") && rec.ends_with(r#" {"g":true}"#),
        "{rec}"
    );

    let (st, h, body) = fetch(&s, &format!("/{code}"), SHOP, &[("User-Agent", CRAWLER)]).await;
    assert_eq!(st, 200);
    assert!(h.get("location").is_none());
    assert_eq!(header(&h, "content-type"), "text/html; charset=utf-8");
    assert!(header(&h, "content-security-policy").starts_with("default-src 'none'; "));
    let page = String::from_utf8(body.clone()).unwrap();
    for want in [
        "<meta property=\"og:title\" content=\"Sale &quot;today&quot; &lt;b&gt;only&lt;/b&gt;\">",
        "<meta property=\"og:description\" content=\"Half off &amp; more\">",
        "<meta property=\"og:image\" content=\"https://img.example/sale.png?w=1200&amp;h=630\">",
        "<meta name=\"twitter:card\" content=\"summary_large_image\">",
    ] {
        assert!(page.contains(want), "{want} in {page}");
    }
    let short = v["short_url"].as_str().unwrap();
    assert!(
        page.contains(&format!("<meta property=\"og:url\" content=\"{short}\">")),
        "{page}"
    );
    // The same bytes on its own path; people get the redirect.
    let (st, _, direct) = fetch(&s, &format!("/{code}.card"), SHOP, &[]).await;
    assert_eq!((st, &direct), (200, &body));
    let (st, loc) = o
        .follow_with(
            SHOP,
            &format!("/{code}"),
            &[(
                "User-Agent",
                "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
            )],
        )
        .await;
    assert_eq!(
        (st, loc.as_deref()),
        (302, Some("https://shop.example/sale"))
    );
    // Another domain's host gets the 404, card or not.
    let (st, _, _) = fetch(
        &s,
        &format!("/{code}"),
        "go.brand91.cn",
        &[("User-Agent", CRAWLER)],
    )
    .await;
    assert_eq!(st, 404);

    // Clearing the card: crawlers are redirected, the card path is a 404.
    let (st, e) = o
        .patch(
            KEY,
            &code,
            json!({"og_title": null, "og_description": null, "og_image": null}),
        )
        .await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["og_title"], Value::Null);
    let rec = s.redis_record_on(SHOP, &code).await.unwrap();
    assert!(rec.starts_with("2 2 "), "{rec}");
    let (st, loc) = o
        .follow_with(SHOP, &format!("/{code}"), &[("User-Agent", CRAWLER)])
        .await;
    assert_eq!(
        (st, loc.as_deref()),
        (302, Some("https://shop.example/sale"))
    );
    let (st, _, _) = fetch(&s, &format!("/{code}.card"), SHOP, &[]).await;
    assert_eq!(st, 404);
}
