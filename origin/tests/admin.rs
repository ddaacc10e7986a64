//! The admin console over plain HTTP (the browser test, in
//! `edge/tests/admin_browser.rs`, covers the pages in Chromium): cookies and
//! their attributes, sessions stored as hashes and ended by sign-out, idle
//! and absolute timeouts, CSRF on sign-in and sign-out, the sign-in rate
//! limit, security headers, assets, CSV, merchant-bound users, bad input
//! answered with 4xx pages, and the edges' heartbeat endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use reqwest::{Client, Response};
use sha2::{Digest, Sha256};
use support::{count, Setup};

/// The full `Set-Cookie` value named `name`.
fn set_cookie(r: &Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

fn pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_owned()
}

fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").unwrap() + 19;
    html[at..at + 64].to_owned()
}

struct Console {
    s: Setup,
    http: Client,
}

impl Console {
    fn url(&self, p: &str) -> String {
        self.s.origin.url(p)
    }

    async fn get(&self, p: &str, cookie: &str) -> Response {
        self.http
            .get(self.url(p))
            .header("Cookie", cookie)
            .send()
            .await
            .unwrap()
    }

    async fn post(&self, p: &str, cookie: &str, body: &str) -> Response {
        self.http
            .post(self.url(p))
            .header("Cookie", cookie)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
    }

    /// Signs in; returns the response of the form's POST.
    async fn sign_in(&self, user: &str, password: &str, headers: &[(&str, &str)]) -> Response {
        let mut req = self.http.get(self.url("/admin/login"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let login = pair(&set_cookie(&r, "shorturl_admin_login").unwrap());
        let token = csrf_of(&r.text().await.unwrap());
        let mut req = self
            .http
            .post(self.url("/admin/login"))
            .header("Cookie", &login)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("csrf={token}&user={user}&password={password}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    /// A session cookie (`shorturl_admin=...`) for `user`.
    async fn session(&self, user: &str, password: &str) -> String {
        let r = self.sign_in(user, password, &[]).await;
        assert_eq!(r.status().as_u16(), 303);
        pair(&set_cookie(&r, "shorturl_admin").unwrap())
    }
}

fn start() -> Console {
    let yaml = format!(
        "admin:\n  users:\n    - {{name: root, password_hash: '{}', role: admin}}\n    - {{name: m55, password_hash: '{}', role: viewer, merchants: [55]}}\n    - {{name: locked, password_hash: '{}', role: viewer}}\n  signin_burst: 3\n  signin_refill_per_min: 1\n  trusted_proxies: [127.0.0.1/32]\n",
        testkit::origin::hash_password("root-pw"),
        testkit::origin::hash_password("m55-pw"),
        testkit::origin::hash_password("locked-pw"),
    );
    let s = Setup::start_with(|o| o.extra_yaml = yaml);
    Console {
        s,
        http: Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
    }
}

#[tokio::test]
async fn sessions_cookies_csrf_and_timeouts() {
    let c = start();
    // Not signed in: pages lead to the sign-in form, a POST is refused.
    let r = c.get("/admin/", "").await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/admin/login");
    assert_eq!(
        c.post("/admin/links/abcdef", "", "action=disable")
            .await
            .status()
            .as_u16(),
        403
    );

    // The sign-in form: headers, and its double-submit cookie.
    let r = c.get("/admin/login", "").await;
    assert_eq!(r.status().as_u16(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert_eq!(r.headers()["cache-control"], "no-store");
    let login = set_cookie(&r, "shorturl_admin_login").unwrap();
    assert!(
        login.contains("HttpOnly")
            && login.contains("SameSite=Strict")
            && login.contains("Path=/admin")
    );
    let html = r.text().await.unwrap();
    assert!(!html.contains("<script>"), "no inline script");
    // Without its cookie the sign-in form is refused (login CSRF).
    let token = csrf_of(&html);
    let r = c
        .post(
            "/admin/login",
            "",
            &format!("csrf={token}&user=root&password=root-pw"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 403);
    assert!(set_cookie(&r, "shorturl_admin").is_none());

    // Signed in: the session cookie, and only its hash in MySQL.
    let r = c.sign_in("root", "root-pw", &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/admin/");
    let full = set_cookie(&r, "shorturl_admin").unwrap();
    assert!(
        full.contains("HttpOnly")
            && full.contains("SameSite=Strict")
            && full.contains("Path=/admin")
    );
    assert!(!full.contains("Secure"), "plain HTTP from a client: {full}");
    let cookie = pair(&full);
    let id = cookie.trim_start_matches("shorturl_admin=").to_owned();
    assert_eq!(id.len(), 64);
    let hash = hex::encode(Sha256::digest(id.as_bytes()));
    assert_eq!(
        count(&c.s, &format!("SELECT COUNT(*) FROM admin_session WHERE HEX(id_sha256) = UPPER('{hash}') AND user_name = 'root'")),
        1
    );
    assert_eq!(
        count(&c.s, &format!("SELECT COUNT(*) FROM admin_session WHERE HEX(id_sha256) = UPPER('{id}') OR csrf = '{id}'")),
        0
    );
    let r = c.get("/admin/", &cookie).await;
    assert_eq!(r.status().as_u16(), 200);
    let page = r.text().await.unwrap();
    assert!(page.contains("root · admin"), "{page}");

    // Through a trusted proxy saying https, the cookie is Secure.
    let r = c
        .sign_in("root", "root-pw", &[("X-Forwarded-Proto", "https")])
        .await;
    assert!(set_cookie(&r, "shorturl_admin")
        .unwrap()
        .contains("; Secure"));

    // Sign-out needs the token; then the session is gone everywhere.
    let token = csrf_of(&page);
    assert_eq!(
        c.post("/admin/logout", &cookie, "").await.status().as_u16(),
        403
    );
    assert_eq!(
        c.post("/admin/logout", &cookie, "csrf=")
            .await
            .status()
            .as_u16(),
        403
    );
    let r = c
        .post("/admin/logout", &cookie, &format!("csrf={token}"))
        .await;
    assert_eq!(r.status().as_u16(), 303);
    assert!(set_cookie(&r, "shorturl_admin")
        .unwrap()
        .contains("Max-Age=0"));
    assert_eq!(c.get("/admin/", &cookie).await.status().as_u16(), 303);
    assert_eq!(
        count(
            &c.s,
            &format!("SELECT COUNT(*) FROM admin_session WHERE HEX(id_sha256) = UPPER('{hash}')")
        ),
        0
    );

    // Idle past the timeout (30 min), or older than 12 h: over, and deleted.
    for col in ["last_seen_at", "created_at"] {
        let cookie = c.session("root", "root-pw").await;
        assert_eq!(c.get("/admin/apps", &cookie).await.status().as_u16(), 200);
        let back = if col == "last_seen_at" {
            1801
        } else {
            12 * 3600 + 1
        };
        c.s.sql(&format!("UPDATE admin_session SET {col} = {col} - {back}"));
        let r = c.get("/admin/apps", &cookie).await;
        assert_eq!(
            (
                r.status().as_u16(),
                r.headers()["location"].to_str().unwrap()
            ),
            (303, "/admin/login"),
            "{col}"
        );
        assert_eq!(
            count(&c.s, "SELECT COUNT(*) FROM admin_session"),
            0,
            "{col}"
        );
    }

    // Failed sign-ins: 3 allowed, then refused even with the right password.
    for _ in 0..3 {
        assert_eq!(
            c.sign_in("locked", "wrong", &[]).await.status().as_u16(),
            401
        );
    }
    let r = c.sign_in("locked", "locked-pw", &[]).await;
    assert_eq!(r.status().as_u16(), 429);
    assert!(set_cookie(&r, "shorturl_admin").is_none());
}

#[tokio::test]
async fn pages_assets_csv_tenancy_and_bad_input() {
    let c = start();
    let (st, v) =
        c.s.origin
            .create_with_key(
                support::ADMIN_KEY,
                serde_json::json!({"url": "https://a.example/55", "kdt_id": 55}),
            )
            .await;
    assert_eq!(st, 201, "{v}");
    let code55 = v["code"].as_str().unwrap().to_owned();
    let (st, v) =
        c.s.origin
            .create(serde_json::json!({"url": "https://a.example/other"}))
            .await;
    assert_eq!(st, 201, "{v}");
    let other = v["code"].as_str().unwrap().to_owned();
    let root = c.session("root", "root-pw").await;

    // The stylesheet: hashed name, cached for good; another hash is unknown.
    let page = c.get("/admin/", &root).await.text().await.unwrap();
    let at = page.find("/admin/assets/admin.").unwrap();
    let css = &page[at..at + page[at..].find('"').unwrap()];
    assert!(css.ends_with(".css"), "{css}");
    let r = c.get(css, "").await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("prefers-color-scheme:dark"));
    assert_eq!(
        c.get("/admin/assets/admin.0000000000000000.css", "")
            .await
            .status()
            .as_u16(),
        404
    );

    // Charts as CSV: 30 days, today's row holds the two creations.
    let r = c.get("/admin/?chart=created&format=csv", &root).await;
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = r.text().await.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 31, "{csv}");
    assert_eq!(lines[0], "when,created");
    assert!(lines[30].ends_with(",2"), "{csv}");
    let csv = c
        .get(
            &format!("/admin/links/{code55}?chart=hour&format=csv"),
            &root,
        )
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(csv.lines().count(), 49, "{csv}");
    assert!(csv.starts_with("when,human,bot\n"));

    // Bad input: 4xx pages, never a 500.
    for (p, want) in [
        ("/admin/links?kdt_id=abc", 400),
        ("/admin/links?created_from=yesterday", 400),
        ("/admin/links?cursor=forged", 400),
        ("/admin/links/ab", 404),
        ("/admin/links/zzzzzzz", 404),
        ("/admin/nope", 404),
        ("/admin/?chart=x&format=csv", 400),
    ] {
        let r = c.get(p, &root).await;
        assert_eq!(r.status().as_u16(), want, "{p}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{p}"
        );
    }
    let r = c
        .http
        .put(c.url("/admin/"))
        .header("Cookie", &root)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let token = csrf_of(&page);
    let r = c
        .http
        .post(c.url(&format!("/admin/links/{other}")))
        .header("Cookie", &root)
        .header("Content-Type", "application/json")
        .body(format!("{{\"csrf\":\"{token}\"}}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    let r = c
        .post(
            &format!("/admin/links/{other}"),
            &root,
            &format!("csrf={token}&action=explode"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 400);
    let r = c
        .post(
            &format!("/admin/links/{other}"),
            &root,
            &format!("csrf={token}&action=edit&url=ftp%3A%2F%2Fx&version=1"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 400, "{}", r.text().await.unwrap());
    // A stale version (the page was loaded before another change): 412.
    let r = c
        .post(
            &format!("/admin/links/{other}"),
            &root,
            &format!("csrf={token}&action=disable&version=7"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 412);
    // The admin's delete, in the audit trail with its name.
    let r = c
        .post(
            &format!("/admin/links/{other}"),
            &root,
            &format!("csrf={token}&action=delete&version=1"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(
        count(&c.s, &format!("SELECT COUNT(*) FROM link_audit WHERE code = '{other}' AND actor = 'admin:root' AND action = 'delete'")),
        1
    );

    // A merchant-bound viewer: its merchant's links only, no global pages.
    let m55 = c.session("m55", "m55-pw").await;
    let r = c.get("/admin/links", &m55).await;
    let html = r.text().await.unwrap();
    assert!(html.contains(&code55) && !html.contains(&other), "{html}");
    assert_eq!(
        c.get(&format!("/admin/links/{other}"), &m55)
            .await
            .status()
            .as_u16(),
        404
    );
    assert_eq!(
        c.get(&format!("/admin/links/{code55}"), &m55)
            .await
            .status()
            .as_u16(),
        200
    );
    for p in ["/admin/", "/admin/merchants", "/admin/apps"] {
        assert_eq!(c.get(p, &m55).await.status().as_u16(), 403, "{p}");
    }
}

#[tokio::test]
async fn edges_report_in_by_heartbeat() {
    let c = start();
    let status = serde_json::json!({
        "protocol": 2, "service": "edge",
        "local": {"hit": 1, "miss": 2}, "redis": {"hit": 3, "miss": 4, "error": 0},
        "origin": {"forward": 5, "error": 0}, "lock": {"get": 0, "error": 0},
        "mysql": null, "issuer": null, "origin_reachable": true
    });
    let post = |body: String| {
        c.http
            .post(c.url("/internal/v1/heartbeat"))
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };
    let r = post(serde_json::json!({"node": "edge-7@10.0.0.7:8080", "status": status}).to_string())
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    for bad in [
        "{}".to_owned(),
        "not json".to_owned(),
        serde_json::json!({"node": "", "status": status}).to_string(),
        serde_json::json!({"node": "a\u{7}b", "status": status}).to_string(),
    ] {
        let r = post(bad.clone()).await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_heartbeat", "{bad}");
    }
    let r = post("x".repeat(20_000)).await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(
        c.get("/internal/v1/heartbeat", "").await.status().as_u16(),
        405
    );
    let root = c.session("root", "root-pw").await;
    let page = c.get("/admin/", &root).await.text().await.unwrap();
    assert!(page.contains("edge edge-7@10.0.0.7:8080</td><td class=\"dim-ok\">ok</td><td>hit 3 · miss 4 · error 0</td>"), "{page}");
}
