//! A password link in a real browser (protocol 4.5): headless Chromium
//! (WebDriver, `testkit::browser`) against a real origin (MariaDB, Redis)
//! and a real Pingora edge. The form refuses a wrong password, lets the
//! right one through to the destination, the cookie it leaves makes the
//! next visit a direct redirect that costs the origin nothing, and a new
//! password voids it (the form again).

use crate::support;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use support::{patch_link, start_edge, EdgeOpts, Origin, API_KEY, TIMEOUT};
use testkit::browser::ChromeDriver;
use testkit::peer::Peer;
use testkit::{wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
/// Bytes 0..31: the protocol's test key (`common/src/unlock.rs`).
const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// Requests the origin served for links: records, redirects, pages and
/// password entries.
fn link_requests(origin: &Origin) -> u64 {
    ["record", "redirect", "page", "unlock"]
        .iter()
        .map(|r| origin.route_count(r))
        .sum()
}

fn create(port: u16, body: &serde_json::Value) -> support::http::Response {
    support::http::api(port, API_KEY, "POST", "/api/v1/links", body)
}

/// Types `password` into the form on the page and sends it.
async fn enter(c: &Client, password: &str) {
    let field = c.wait().for_element(Locator::Id("password")).await.unwrap();
    field.send_keys(password).await.unwrap();
    c.find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// The page's text once a page holding `want` is shown (a submitted form
/// navigates: the old page's nodes go stale meanwhile).
async fn wait_text(c: &Client, want: &str) -> String {
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut last = String::new();
    loop {
        if let Ok(body) = c.find(Locator::Css("body")).await {
            if let Ok(t) = body.text().await {
                if t.contains(want) {
                    return t;
                }
                last = t;
            }
        }
        let at = c
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_default();
        assert!(
            std::time::Instant::now() < deadline,
            "{want:?} not shown: at {at} {last:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Waits until the browser is at a URL for which `want` holds.
async fn wait_url(c: &Client, what: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let u = c.current_url().await.unwrap().to_string();
        if want(&u) {
            return u;
        }
        if std::time::Instant::now() >= deadline {
            let text = match c.find(Locator::Css("body")).await {
                Ok(b) => b.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            panic!("{what}: still at {u}: {text:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[test]
fn a_password_link_in_a_browser() {
    let redis = Redis::start();
    let origin = Origin::start_with(
        &redis,
        200,
        &format!("unlock:\n  key: '{KEY}'\n  token_ttl_secs: 600\n"),
    );
    let mut opts = EdgeOpts::new(redis.url(), vec![origin.addr()]);
    opts.extra = "  heartbeat_interval_ms: 0";
    opts.env.push(("SHORTURL_EDGE_UNLOCK_KEYS", KEY.to_owned()));
    let edge = start_edge(opts);
    wait_for("the edge to subscribe", TIMEOUT, || {
        edge.status()["inval"]["subscribed"] == json!(true)
    });
    // The destination: a stand-in site that records each visit.
    let site = Peer::start();
    let landed = |s: &Peer| s.count(|r| r.path == "/landed");
    let dest = format!("http://127.0.0.1:{}/landed", site.port());
    let r = create(
        origin.port,
        &json!({"url": dest, "domain": DOMAIN, "password": "open sesame"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let code = r.json()["code"].as_str().unwrap().to_owned();
    let link = format!("http://{DOMAIN}:{}/{code}", edge.port);

    let driver = ChromeDriver::start();
    let mut caps = driver.capabilities();
    // The link's domain is the edge on loopback.
    if let Some(args) = caps["goog:chromeOptions"]["args"].as_array_mut() {
        args.push(json!(format!(
            "--host-resolver-rules=MAP {DOMAIN} 127.0.0.1"
        )));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = ClientBuilder::native()
            .capabilities(caps)
            .connect(&driver.url())
            .await
            .expect("a WebDriver session on headless Chromium");

        // The form; a wrong password gets it again, saying so.
        c.goto(&link).await.unwrap();
        wait_text(&c, "This link is protected.").await;
        enter(&c, "sesame").await;
        wait_text(&c, "Wrong password.").await;
        assert_eq!(landed(&site), 0);

        // The right one: on to the destination.
        enter(&c, "open sesame").await;
        wait_url(&c, "the destination after the password", |u| u == dest).await;
        assert_eq!(landed(&site), 1);

        // The cookie makes the next visit a direct redirect, answered by
        // the edge alone.
        let before = link_requests(&origin);
        c.goto(&link).await.unwrap();
        wait_url(&c, "the destination on the next visit", |u| u == dest).await;
        assert_eq!(landed(&site), 2);
        assert_eq!(
            link_requests(&origin),
            before,
            "the visit reached the origin"
        );

        // A new password voids the cookie: the form again.
        let messages = edge.status()["inval"]["messages"].as_u64().unwrap_or(0);
        let r = patch_link(
            origin.port,
            &format!("{code}?domain={DOMAIN}"),
            json!({"password": "new secret"}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        wait_for("the edge to hear the edit", TIMEOUT, || {
            edge.status()["inval"]["messages"].as_u64().unwrap_or(0) > messages
        });
        c.goto(&link).await.unwrap();
        wait_text(&c, "This link is protected.").await;
        assert_eq!(landed(&site), 2);
        c.close().await.unwrap();
    });
}
