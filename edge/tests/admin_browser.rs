//! The admin console in a real browser: Debian's headless Chromium driven
//! over WebDriver (chromedriver from `testkit::browser`) against a real
//! origin (MariaDB, Redis) and a real Pingora edge. Covers sign-in (refused,
//! accepted), search for a link created through the API, its page, clicks
//! through the edge counted after the flush, an edit live on the edge, a
//! disable answered 404 by the edge, forms without their CSRF token
//! refused, and a viewer who sees no edit controls and whose crafted edit
//! is refused. Screenshots of every page go to `$SHORTURL_ADMIN_SCREENSHOTS`
//! (default: a temp dir); the committed ones are in `docs/admin/`.

use crate::support;

use fantoccini::{Client, Locator};
use std::path::PathBuf;
use support::http::{request, Conn};
use support::{create_link, start_edge, EdgeOpts, Origin, TIMEOUT};
use testkit::browser::{text, wait_path, wait_text, ChromeDriver};
use testkit::{wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";
const FIRST: &str = "https://example.com/console/first?utm=1";
const SECOND: &str = "https://example.org/console/second";
const OPS_PASSWORD: &str = "ops-password-1";
const VIEWER_PASSWORD: &str = "viewer-password-2";
const CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";

fn screenshots_dir() -> PathBuf {
    let d = std::env::var_os("SHORTURL_ADMIN_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("shorturl-admin-screenshots"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png).unwrap();
}

async fn sign_in(c: &Client, base: &str, user: &str, password: &str) {
    c.goto(&format!("{base}/admin/")).await.unwrap();
    assert!(c
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/admin/login"));
    c.find(Locator::Id("user"))
        .await
        .unwrap()
        .send_keys(user)
        .await
        .unwrap();
    c.find(Locator::Id("password"))
        .await
        .unwrap()
        .send_keys(password)
        .await
        .unwrap();
    c.find(Locator::Id("signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// The session cookie and the page's CSRF token, for crafted requests.
async fn credentials(c: &Client) -> (String, String) {
    let cookie = c.get_named_cookie("shorturl_admin").await.unwrap();
    let src = c.source().await.unwrap();
    let at = src.find("name=\"csrf\" value=\"").unwrap() + 19;
    (
        format!("shorturl_admin={}", cookie.value()),
        src[at..at + 64].to_owned(),
    )
}

fn post_form(port: u16, path: &str, cookie: &str, body: &str) -> support::http::Response {
    request(
        port,
        "POST",
        path,
        "127.0.0.1",
        &[
            ("Cookie", cookie),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        body.as_bytes(),
    )
}

/// The edge's answer to `GET /{code}` on the link's domain: (status, Location).
fn edge_get(port: u16, code: &str) -> (u16, Option<String>) {
    let mut c = Conn::open(port).unwrap();
    let r = c
        .send(
            "GET",
            &format!("/{code}"),
            Some(DOMAIN),
            &[("User-Agent", CHROME)],
            b"",
        )
        .unwrap();
    (r.status, r.header("location").map(str::to_owned))
}

#[test]
fn the_console_in_a_browser() {
    let redis = Redis::start();
    let extra = format!(
        "admin:\n  users:\n    - {{ name: ops, password_hash: '{}', role: operator }}\n    - {{ name: watcher, password_hash: '{}', role: viewer }}\n",
        testkit::origin::hash_password(OPS_PASSWORD),
        testkit::origin::hash_password(VIEWER_PASSWORD),
    );
    let origin = Origin::start_with(&redis, 500, &extra);
    let mut opts = EdgeOpts::new(redis.url(), vec![origin.addr()]);
    opts.extra = "  clicks: { flush_interval_ms: 200 }\n  heartbeat_interval_ms: 500";
    let edge = start_edge(opts);
    let created = create_link(edge.port, FIRST, Some(DOMAIN));
    assert_eq!(created.status, 201, "{}", created.text());
    let code = created.json()["code"].as_str().unwrap().to_owned();
    assert_eq!(edge_get(edge.port, &code), (302, Some(FIRST.to_owned())));

    let driver = ChromeDriver::start();
    let base = format!("http://127.0.0.1:{}", origin.port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = driver.session().await;

        // A wrong password is refused, on the sign-in page.
        sign_in(&c, &base, "ops", "not-the-password").await;
        wait_text(&c, "error", |t| !t.is_empty()).await;
        assert!(c
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/admin/login"));
        assert_eq!(text(&c, "error").await, "wrong user name or password");
        shot(&c, "login").await;
        // The right one opens the overview, whose status lists the edge.
        sign_in(&c, &base, "ops", OPS_PASSWORD).await;
        wait_path(&c, "/admin/").await;
        assert_eq!(c.current_url().await.unwrap().path(), "/admin/");
        assert_eq!(text(&c, "who").await, "ops · operator");
        let mut status = String::new();
        for _ in 0..20 {
            status = text(&c, "status").await;
            if status.contains("edge ") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            c.refresh().await.unwrap();
        }
        assert!(
            status.contains("origin (this one)") && status.contains("edge "),
            "{status}"
        );

        // Search by the exact long URL finds the link created through the API.
        c.goto(&format!("{base}/admin/links")).await.unwrap();
        c.find(Locator::Id("f-url"))
            .await
            .unwrap()
            .send_keys(FIRST)
            .await
            .unwrap();
        c.find(Locator::Id("search"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let results = wait_text(&c, "results", |t| t.contains(FIRST)).await;
        assert!(
            results.contains(&code) && results.contains(FIRST),
            "{results}"
        );
        shot(&c, "search").await;
        c.find(Locator::LinkText(&code))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_path(&c, &format!("/admin/links/{code}")).await;
        assert_eq!(text(&c, "long-url").await, FIRST);
        assert_eq!(text(&c, "state").await, "active");
        assert!(c.find(Locator::Css("#qr svg")).await.is_ok());

        // 50 redirects through the edge (after the one above): the count
        // rises to 51 once the flush ran.
        let mut conn = Conn::open(edge.port).unwrap();
        for _ in 0..50 {
            let r = conn
                .send(
                    "GET",
                    &format!("/{code}"),
                    Some(DOMAIN),
                    &[("User-Agent", CHROME)],
                    b"",
                )
                .unwrap();
            assert_eq!(r.status, 302);
        }
        let link_url = format!("{base}/admin/links/{code}");
        let mut seen = String::new();
        for _ in 0..60 {
            c.goto(&link_url).await.unwrap();
            seen = text(&c, "totals").await;
            if seen.starts_with("Human 51 ") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        assert!(seen.starts_with("Human 51 · bot 0"), "{seen}");
        let daily = c
            .find(Locator::Css("#daily table"))
            .await
            .unwrap()
            .html(true)
            .await
            .unwrap();
        assert!(daily.contains(">51<"), "{daily}");
        shot(&c, "link").await;

        // A new target in the form: the edge redirects to it.
        let url = c.find(Locator::Id("edit-url")).await.unwrap();
        url.clear().await.unwrap();
        url.send_keys(SECOND).await.unwrap();
        c.find(Locator::Id("save"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_text(&c, "long-url", |t| t == SECOND).await;
        assert!(text(&c, "done").await.contains("published to the edges at"));
        let port = edge.port;
        let code2 = code.clone();
        tokio::task::spawn_blocking(move || {
            wait_for("the edge to redirect to the new target", TIMEOUT, || {
                edge_get(port, &code2) == (302, Some(SECOND.to_owned()))
            })
        })
        .await
        .unwrap();

        // Disable (the script asks first): the edge answers 404.
        c.find(Locator::Id("disable"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        c.accept_alert().await.unwrap();
        wait_text(&c, "state", |t| t == "disabled").await;
        assert!(text(&c, "done").await.starts_with("Done: disable;"));
        let code2 = code.clone();
        tokio::task::spawn_blocking(move || {
            wait_for("the edge to answer 404", TIMEOUT, || {
                edge_get(port, &code2).0 == 404
            })
        })
        .await
        .unwrap();
        let hist = text(&c, "history").await;
        assert!(
            hist.contains("admin:ops disable") && hist.contains("admin:ops edit"),
            "{hist}"
        );

        // A form without its CSRF token, or with a wrong one, is refused.
        let (cookie, token) = credentials(&c).await;
        let path = format!("/admin/links/{code}");
        let r = post_form(origin.port, &path, &cookie, "action=enable");
        assert_eq!(r.status, 403, "{}", r.text());
        assert!(r.text().contains("CSRF"), "{}", r.text());
        let r = post_form(
            origin.port,
            &path,
            &cookie,
            &format!("action=enable&csrf={}", "0".repeat(64)),
        );
        assert_eq!(r.status, 403);
        assert_eq!(edge_get(edge.port, &code).0, 404, "still disabled");
        // The same form with the token does it (so the refusals were the token's).
        let r = post_form(
            origin.port,
            &path,
            &cookie,
            &format!("action=enable&csrf={token}"),
        );
        assert_eq!(r.status, 303, "{}", r.text());
        let code2 = code.clone();
        tokio::task::spawn_blocking(move || {
            wait_for("the edge to redirect again", TIMEOUT, || {
                edge_get(port, &code2).0 == 302
            })
        })
        .await
        .unwrap();

        c.goto(&format!("{base}/admin/")).await.unwrap();
        shot(&c, "overview").await;
        c.goto(&format!("{base}/admin/merchants")).await.unwrap();
        shot(&c, "merchants").await;
        c.goto(&format!("{base}/admin/apps")).await.unwrap();
        let apps = text(&c, "apps").await;
        assert!(apps.contains("demo"), "{apps}");
        shot(&c, "apps").await;

        // Sign out: the session is over, its cookie no longer works.
        c.find(Locator::Css("header form button"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_path(&c, "/admin/login").await;
        let r = request(
            origin.port,
            "GET",
            "/admin/",
            "127.0.0.1",
            &[("Cookie", &cookie)],
            b"",
        );
        assert_eq!(
            (r.status, r.header("location")),
            (303, Some("/admin/login"))
        );

        // A viewer sees no edit controls, and a crafted edit is refused.
        sign_in(&c, &base, "watcher", VIEWER_PASSWORD).await;
        wait_path(&c, "/admin/").await;
        c.goto(&link_url).await.unwrap();
        assert_eq!(text(&c, "state").await, "active");
        for id in ["edit-form", "save", "disable", "enable", "delete"] {
            assert!(
                c.find(Locator::Id(id)).await.is_err(),
                "{id} shown to a viewer"
            );
        }
        assert!(text(&c, "read-only").await.contains("viewer"));
        shot(&c, "link-viewer").await;
        let (cookie, token) = credentials(&c).await;
        let r = post_form(
            origin.port,
            &path,
            &cookie,
            &format!("action=disable&csrf={token}"),
        );
        assert_eq!(r.status, 403, "{}", r.text());
        let r = post_form(
            origin.port,
            &path,
            &cookie,
            &format!("action=edit&url=https%3A%2F%2Fevil.example%2F&csrf={token}"),
        );
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(edge_get(edge.port, &code), (302, Some(SECOND.to_owned())));
        c.close().await.unwrap();
    });
}
