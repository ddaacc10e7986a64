//! The admin console over plain HTTP (the browser test, in
//! `edge/tests/admin_browser.rs`, covers the pages in Chromium): cookies and
//! their attributes, sessions stored as hashes and ended by sign-out, idle
//! and absolute timeouts, CSRF on sign-in (a server-signed token) and
//! sign-out, the sign-in limits (budget per user and address taken before
//! the check, concurrent checks bounded, the real user never locked out
//! from another address), security headers, assets, CSV, merchant-bound
//! users, the merchant and app pages, bad input answered with 4xx pages,
//! and the edges' heartbeat endpoint.

use crate::support;

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
    let len = html[at..].find('"').unwrap();
    html[at..at + len].to_owned()
}

/// A client whose connections come from `local` (any 127/8 address is
/// this host's: a second "address" for the limits).
fn client_from(local: &str) -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(local.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// `VmRSS` and `VmHWM` (peak) of process `pid`, in MiB.
fn rss_mib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };
    (kib("VmRSS:") / 1024, kib("VmHWM:") / 1024)
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
        self.sign_in_with(&self.http, user, password, headers).await
    }

    /// The sign-in form fetched: its cookie pair and hidden token.
    async fn login_form(&self) -> (String, String) {
        let r = self.get("/admin/login", "").await;
        let login = pair(&set_cookie(&r, "shorturl_admin_login").unwrap());
        (login, csrf_of(&r.text().await.unwrap()))
    }

    /// `POST /admin/login` with the form's cookie and token as given.
    async fn post_login(
        &self,
        http: &Client,
        cookie: &str,
        token: &str,
        user: &str,
        password: &str,
    ) -> Response {
        http.post(self.url("/admin/login"))
            .header("Cookie", cookie)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("csrf={token}&user={user}&password={password}"))
            .send()
            .await
            .unwrap()
    }

    /// A `shorturl_admin_*` metric of the origin (0 when absent).
    async fn metric(&self, series: &str) -> u64 {
        support::metric_value(&self.s.origin, series)
            .await
            .map_or(0, |v| v as u64)
    }

    /// [`Console::sign_in`] through `http`.
    async fn sign_in_with(
        &self,
        http: &Client,
        user: &str,
        password: &str,
        headers: &[(&str, &str)],
    ) -> Response {
        let mut req = http.get(self.url("/admin/login"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let r = req.send().await.unwrap();
        let login = pair(&set_cookie(&r, "shorturl_admin_login").unwrap());
        let token = csrf_of(&r.text().await.unwrap());
        let mut req = http
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
    start_with(|_| {})
}

fn start_with(f: impl FnOnce(&mut support::OriginOpts)) -> Console {
    let yaml = format!(
        "admin:\n  users:\n    - {{name: root, password_hash: '{}', role: admin}}\n    - {{name: m55, password_hash: '{}', role: viewer, merchants: [55]}}\n    - {{name: locked, password_hash: '{}', role: viewer}}\n  signin_burst: 3\n  signin_refill_per_min: 1\n  trusted_proxies: [127.0.0.1/32]\n",
        testkit::origin::hash_password("root-pw"),
        testkit::origin::hash_password("m55-pw"),
        testkit::origin::hash_password("locked-pw"),
    );
    let s = Setup::start_with(|o| {
        o.extra_yaml = yaml;
        f(o);
    });
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

    // Failed sign-ins: 3 allowed from this address, then refused even with
    // the right password, from this address only: the real user signs in
    // from another one.
    for _ in 0..3 {
        assert_eq!(
            c.sign_in("locked", "wrong", &[]).await.status().as_u16(),
            401
        );
    }
    let r = c.sign_in("locked", "locked-pw", &[]).await;
    assert_eq!(r.status().as_u16(), 429);
    assert!(set_cookie(&r, "shorturl_admin").is_none());
    let r = c
        .sign_in_with(&client_from("127.0.0.2"), "locked", "locked-pw", &[])
        .await;
    assert_eq!(r.status().as_u16(), 303);
    // Behind a trusted proxy, X-Forwarded-For names the address.
    let r = c
        .sign_in("locked", "locked-pw", &[("X-Forwarded-For", "192.0.2.7")])
        .await;
    assert_eq!(r.status().as_u16(), 303);
}

#[tokio::test]
async fn the_signin_token_is_signed_by_the_server() {
    let c = start();
    // The reproduction's attacker-chosen pair: refused before any check.
    let r = c
        .post_login(&c.http, "shorturl_admin_login=x", "x", "root", "root-pw")
        .await;
    assert_eq!(r.status().as_u16(), 403);
    assert!(set_cookie(&r, "shorturl_admin").is_none());
    // A well-formed token the server did not sign (64 hex digits, the old
    // format, or a served token with another tag).
    let (_, real) = c.login_form().await;
    let (body, _) = real.rsplit_once('.').unwrap();
    for forged in ["a".repeat(64), format!("{body}.{}", "0".repeat(64))] {
        let cookie = format!("shorturl_admin_login={forged}");
        let r = c
            .post_login(&c.http, &cookie, &forged, "root", "root-pw")
            .await;
        assert_eq!(r.status().as_u16(), 403, "{forged}");
    }
    // Two valid tokens that differ: not double-submitted.
    let (cookie, _) = c.login_form().await;
    let (_, token) = c.login_form().await;
    let r = c
        .post_login(&c.http, &cookie, &token, "root", "root-pw")
        .await;
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(
        c.metric("shorturl_admin_signins_total{result=\"bad_token\"}")
            .await,
        4
    );
    assert_eq!(c.metric("shorturl_admin_password_checks_total").await, 0);
    // The served pair signs in.
    let (cookie, token) = c.login_form().await;
    let r = c
        .post_login(&c.http, &cookie, &token, "root", "root-pw")
        .await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(
        c.metric("shorturl_admin_signins_total{result=\"ok\"}")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_wrong_signins_cost_at_most_the_burst() {
    let c = start();
    let pid = c.s.origin.proc.pid();
    let before = rss_mib(pid);
    // Issue 23's attack: 64 wrong passwords for the admin at once, all
    // with one (valid) form token, from one address.
    let (cookie, token) = c.login_form().await;
    let answers = futures::future::join_all((0..64).map(|i| {
        let (c, cookie, token) = (&c, &cookie, &token);
        async move {
            c.post_login(&c.http, cookie, token, "root", &format!("guess{i}"))
                .await
                .status()
                .as_u16()
        }
    }))
    .await;
    let after = rss_mib(pid);
    eprintln!("origin RSS MiB (now, peak): before {before:?}, after 64 concurrent wrong sign-ins {after:?}");
    let n = |code: u16| answers.iter().filter(|s| **s == code).count() as u64;
    assert_eq!(n(401) + n(429), 64, "{answers:?}");
    // The budget (signin_burst: 3) was taken before each check: at most 3
    // passwords were checked, every check is one 401, every other attempt
    // a 429 counted as limited or busy.
    let checks = c.metric("shorturl_admin_password_checks_total").await;
    assert!((1..=3).contains(&checks), "{checks} checks");
    assert_eq!(n(401), checks, "{answers:?}");
    assert_eq!(
        c.metric("shorturl_admin_signins_total{result=\"wrong\"}")
            .await,
        checks
    );
    assert_eq!(
        c.metric("shorturl_admin_signins_total{result=\"limited\"}")
            .await
            + c.metric("shorturl_admin_signins_total{result=\"busy\"}")
                .await,
        n(429)
    );
    // Right after, the real admin signs in from another address.
    let r = c
        .sign_in_with(&client_from("127.0.0.2"), "root", "root-pw", &[])
        .await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(
        c.metric("shorturl_admin_password_checks_total").await,
        checks + 1
    );
}

#[tokio::test]
async fn password_checks_beyond_the_bound_are_refused_at_once() {
    let hold = testkit::TempDir::new("hold");
    let path = hold.path().join("hold");
    std::fs::write(&path, b"").unwrap();
    let c = start_with(|o| {
        o.env.push((
            shorturl_common::failpoint::ENV.into(),
            format!("origin.admin.check.hold=*@{}", path.display()),
        ));
    });
    // Two checks held (the default admin.max_concurrent_signins), each from
    // its own address so no budget is in the way.
    let held: Vec<_> = ["127.0.0.3", "127.0.0.4"]
        .into_iter()
        .map(|ip| {
            let (base, http) = (c.url(""), client_from(ip));
            tokio::spawn(async move {
                let r = http
                    .get(format!("{base}/admin/login"))
                    .send()
                    .await
                    .unwrap();
                let cookie = pair(&set_cookie(&r, "shorturl_admin_login").unwrap());
                let token = csrf_of(&r.text().await.unwrap());
                http.post(format!("{base}/admin/login"))
                    .header("Cookie", cookie)
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body(format!("csrf={token}&user=root&password=root-pw"))
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    support::eventually(
        "two checks running",
        std::time::Duration::from_secs(30),
        || async { c.metric("shorturl_admin_password_checks_total").await == 2 },
    )
    .await;
    // A third is answered 429 at once, and costs its budget nothing.
    let r = c.sign_in("root", "root-pw", &[]).await;
    assert_eq!(r.status().as_u16(), 429);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("too many sign-ins at this moment"));
    assert_eq!(
        c.metric("shorturl_admin_signins_total{result=\"busy\"}")
            .await,
        1
    );
    assert_eq!(c.metric("shorturl_admin_password_checks_total").await, 2);
    std::fs::remove_file(&path).unwrap();
    for h in held {
        assert_eq!(h.await.unwrap(), 303);
    }
    // Permits back: the same address signs in.
    assert_eq!(
        c.sign_in("root", "root-pw", &[]).await.status().as_u16(),
        303
    );
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
    // Which console pages exist is told only after the session (and, for
    // a POST, its token): a stranger is sent to sign in or refused alike.
    for p in ["/admin/nope", "/admin/links", "/admin/logout"] {
        let r = c.get(p, "").await;
        assert_eq!(r.status().as_u16(), 303, "{p}");
        assert_eq!(r.headers()["location"], "/admin/login", "{p}");
        assert_eq!(c.post(p, "", "csrf=x").await.status().as_u16(), 403, "{p}");
        let r = c.post(p, &root, "csrf=forged").await;
        assert_eq!(r.status().as_u16(), 403, "{p}");
        assert!(r.text().await.unwrap().contains("CSRF token"), "{p}");
    }
    for p in ["/admin/nope", "/admin/links"] {
        let r = c.post(p, &root, &format!("csrf={token}")).await;
        assert_eq!(r.status().as_u16(), 404, "{p}");
    }
    for p in ["/admin/nope".to_owned(), format!("/admin/links/{other}")] {
        let r = c
            .http
            .delete(c.url(&p))
            .header("Cookie", &root)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 405, "{p}");
        let r = c.http.delete(c.url(&p)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 403, "{p}");
    }
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
    // Its export (the search's filters as a file): the same links only.
    let at = html.find("/admin/export?").unwrap();
    let href = html[at..at + html[at..].find('"').unwrap()].replace("&amp;", "&");
    assert_eq!(href, "/admin/export?format=csv");
    let r = c.get(&href, &m55).await;
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = r.text().await.unwrap();
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(
        csv.lines().nth(1).unwrap().contains(&format!(",{code55},")),
        "{csv}"
    );
    let r = c.get("/admin/export?format=xml", &m55).await;
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(
        c.get("/admin/export?format=csv", "")
            .await
            .status()
            .as_u16(),
        303
    );
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

/// A form body (URL-encoded pairs).
fn form(pairs: &[(&str, &str)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

#[tokio::test]
async fn link_rules_are_shown_edited_and_previewed_in_the_console() {
    let c = start();
    let (st, v) =
        c.s.origin
            .create(serde_json::json!({
                "url": "https://a.example/shop",
                "utm_source": "mail",
                "expired_url": "https://a.example/over",
                "rules": [
                    {"when": {"device": ["ios"]}, "url": "https://a.example/<ios>"},
                    {"when": {"country": ["CN"], "language": ["zh"]}, "url": "https://a.example/cn"}
                ]
            }))
            .await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let root = c.session("root", "root-pw").await;
    let path = format!("/admin/links/{code}");
    let page = c.get(&path, &root).await.text().await.unwrap();
    // Shown, escaped.
    assert!(page.contains("<table id=\"rules\">"), "{page}");
    assert!(
        page.contains("https://a.example/&lt;ios&gt;") && !page.contains("/<ios>"),
        "{page}"
    );
    assert!(page.contains("country: CN; language: zh"), "{page}");
    assert!(page.contains("utm_source=mail"));
    assert!(page.contains("id=\"expired-url\">https://a.example/over<"));

    // Clicks per destination (the A/B result), as the consumer files them.
    c.s.sql(&format!(
        "INSERT INTO click_day_destination (code, day, dest, n) VALUES \
         ('{code}', UNIX_TIMESTAMP() - MOD(UNIX_TIMESTAMP(), 86400), 'r1', 3), \
         ('{code}', UNIX_TIMESTAMP() - MOD(UNIX_TIMESTAMP(), 86400), 'link', 1)"
    ));
    let page = c.get(&path, &root).await.text().await.unwrap();
    let table = page
        .split("<table id=\"destinations\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no destinations table: {page}"));
    let rows: Vec<&str> = table
        .split("</table>")
        .next()
        .unwrap()
        .split("<tr>")
        .skip(2)
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with("<td>link</td><td>https://a.example/shop?utm_source=mail</td><td class=\"n\">1</td><td class=\"n\">25.0%</td>"), "{table}");
    assert!(rows[1].starts_with("<td>r1</td><td>https://a.example/&lt;ios&gt;</td><td class=\"n\">3</td><td class=\"n\">75.0%</td>"), "{table}");

    // The preview: which destination a visitor gets.
    let q = form(&[
        ("preview", "1"),
        (
            "ua",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)",
        ),
    ]);
    let p = c
        .get(&format!("{path}?{q}"), &root)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        p.contains("Goes to <span class=\"url\">https://a.example/&lt;ios&gt;</span> (r1)"),
        "{p}"
    );
    let q = form(&[
        ("preview", "1"),
        ("country", "cn"),
        ("language", "zh-CN,zh;q=0.9"),
    ]);
    let p = c
        .get(&format!("{path}?{q}"), &root)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        p.contains("Goes to <span class=\"url\">https://a.example/cn</span> (r2)"),
        "{p}"
    );
    let q = form(&[("preview", "1"), ("country", "US")]);
    let p = c
        .get(&format!("{path}?{q}"), &root)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        p.contains("https://a.example/shop?utm_source=mail</span> (link)"),
        "{p}"
    );

    // Edited through the form: new rules, forwarding on, fallback cleared.
    let token = csrf_of(&page);
    let rules = r#"[{"when": {"device": ["android"]}, "url": "https://a.example/droid"}]"#;
    let r = c
        .post(
            &path,
            &root,
            &form(&[
                ("csrf", &token),
                ("action", "edit"),
                ("version", "1"),
                ("url", "https://a.example/shop?utm_source=mail"),
                ("expires_at", v["expires_at"].as_str().unwrap()),
                ("options_form", "1"),
                ("forward_query", "on"),
                ("expired_url", ""),
                ("rules", rules),
                ("og_title", "Summer <sale>"),
                ("og_image", ""),
                ("tags", " summer <b>, ads,summer <b> "),
            ]),
        )
        .await;
    assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());
    let (st, after, _) =
        c.s.origin
            .call(
                reqwest::Method::GET,
                &format!("/api/v1/links/{code}"),
                support::KEY,
                None,
                &[],
            )
            .await;
    assert_eq!(st, 200);
    assert_eq!(after["version"], 2);
    assert_eq!(after["forward_query"], true);
    assert_eq!(after["expired_url"], serde_json::Value::Null);
    assert_eq!(after["rules"][0]["url"], "https://a.example/droid");
    // The social card from the form: set, and an empty input left unset.
    assert_eq!(after["og_title"], "Summer <sale>");
    assert_eq!(after["og_image"], serde_json::Value::Null);
    // Tags from the comma-separated field: trimmed, repeats folded.
    assert_eq!(after["tags"], serde_json::json!(["summer <b>", "ads"]));
    let shown = c.get(&path, &root).await.text().await.unwrap();
    assert!(
        shown.contains("<span id=\"tags\"><a class=\"tag\" href=\"/admin/links?tag=summer+%3Cb%3E\">summer &lt;b&gt;</a> \
                        <a class=\"tag\" href=\"/admin/links?tag=ads\">ads</a></span>"),
        "{shown}"
    );
    assert!(
        shown.contains("id=\"edit-tags\" size=\"48\" value=\"summer &lt;b&gt;, ads\""),
        "{shown}"
    );
    let found = c
        .get("/admin/links?tag=summer+%3Cb%3E", &root)
        .await
        .text()
        .await
        .unwrap();
    assert!(found.contains(&format!(">{code}</a>")), "{found}");
    assert!(
        c.get("/admin/links?tag=ads%2Cx", &root)
            .await
            .status()
            .as_u16()
            == 400,
        "a bad tag filter is a 400 page"
    );
    assert!(
        shown.contains("<span id=\"card\">Title: Summer &lt;sale&gt;</span>"),
        "{shown}"
    );
    assert!(
        shown.contains("<span id=\"password\">none</span>"),
        "{shown}"
    );
    assert!(shown.contains("<span id=\"guide\">not needed"), "{shown}");
    assert_eq!(
        count(&c.s, &format!("SELECT COUNT(*) FROM link_audit WHERE code = '{code}' AND actor = 'admin:root' AND action = 'edit'")),
        1
    );

    // Bad rules: a page saying why, nothing changed.
    for bad in [
        "[{\"when\": {\"os\": [\"ios\"]}, \"url\": \"https://a.example/i\"}]",
        "[{not json",
    ] {
        let r = c
            .post(
                &path,
                &root,
                &form(&[
                    ("csrf", &token),
                    ("action", "edit"),
                    ("version", "2"),
                    ("options_form", "1"),
                    ("forward_query", "on"),
                    ("rules", bad),
                ]),
            )
            .await;
        assert_eq!(r.status().as_u16(), 400, "{bad}");
        let text = r.text().await.unwrap();
        assert!(text.contains("rules"), "{text}");
    }
    let (_, still, _) =
        c.s.origin
            .call(
                reqwest::Method::GET,
                &format!("/api/v1/links/{code}"),
                support::KEY,
                None,
                &[],
            )
            .await;
    assert_eq!(still["version"], 2);
}

/// A per-domain custom code on two domains: the console names each link by
/// its key (`/admin/links/<domain>/<code>`), the code alone is ambiguous
/// for an operator who sees both, and a change reaches only its own link.
#[tokio::test]
async fn per_domain_codes_have_a_console_page_each() {
    let c = start();
    for domain in ["s.shop55.com", "go.brand91.cn"] {
        let (st, v) =
            c.s.origin
                .create(serde_json::json!({
                    "url": format!("https://{domain}.example/sale"),
                    "domain": domain,
                    "code": "sale"
                }))
                .await;
        assert_eq!(st, 201, "{v}");
    }
    let root = c.session("root", "root-pw").await;
    let r = c.get("/admin/links/sale", &root).await;
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("several domains"));
    let list = c
        .get("/admin/links?code=sale", &root)
        .await
        .text()
        .await
        .unwrap();
    for domain in ["s.shop55.com", "go.brand91.cn"] {
        assert!(
            list.contains(&format!("href=\"/admin/links/{domain}/sale\"")),
            "{list}"
        );
    }
    let path = "/admin/links/go.brand91.cn/sale";
    let page = c.get(path, &root).await.text().await.unwrap();
    assert!(
        page.contains("https://go.brand91.cn.example/sale"),
        "{page}"
    );
    assert!(
        !page.contains("https://s.shop55.com.example/sale"),
        "{page}"
    );
    let r = c
        .post(
            path,
            &root,
            &format!("csrf={}&action=disable&version=1", csrf_of(&page)),
        )
        .await;
    assert_eq!(r.status().as_u16(), 303, "{}", r.text().await.unwrap());
    assert_eq!(c.s.origin.follow("go.brand91.cn", "sale").await.0, 404);
    assert_eq!(
        c.s.origin.follow("s.shop55.com", "sale").await,
        (302, Some("https://s.shop55.com.example/sale".into()))
    );
    // A path that is neither a code nor a link key is a 404 page.
    for bad in ["/admin/links/S.shop55.com/sale", "/admin/links/x/y/sale"] {
        assert_eq!(c.get(bad, &root).await.status().as_u16(), 404, "{bad}");
    }
}

/// The Screening page (protocol 4.7): admins add and remove managed
/// entries with the session's CSRF token; the flagged links are listed;
/// viewers see it without the forms; merchant-bound users not at all.
#[tokio::test]
async fn the_screening_policy_is_managed_in_the_console() {
    let c = start_with(|o| {
        o.extra_yaml.push_str("screening:\n  refresh_secs: 1\n");
    });
    let (st, v) =
        c.s.origin
            .create(serde_json::json!({"url": "https://shady.example/<x>"}))
            .await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let root = c.session("root", "root-pw").await;
    let page = c.get("/admin/screening", &root).await.text().await.unwrap();
    assert!(page.contains("id=\"add-form\""), "{page}");
    // Every console page links the API reference (tests/openapi.rs).
    assert!(page.contains("<a href=\"/api/docs\">API</a>"), "{page}");
    let token = csrf_of(&page);
    let r = c
        .post(
            "/admin/screening",
            &root,
            "csrf=forged&op=add&domain=shady.example&action=warn",
        )
        .await;
    assert_eq!(r.status().as_u16(), 403, "without the session's token");
    let r = c
        .post(
            "/admin/screening",
            &root,
            &format!("csrf={token}&op=add&domain=Shady.Example&action=warn&note=%3Cphish%3E"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let page = r.text().await.unwrap();
    assert!(page.contains("shady.example is now warn"), "{page}");
    assert!(
        page.contains("&lt;phish&gt;") && !page.contains("<phish>"),
        "escaped"
    );
    let r = c
        .post(
            "/admin/screening",
            &root,
            &format!("csrf={token}&op=add&domain=x&action=warn"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 400, "not a domain");
    // The link is flagged once the pass ran; the page lists it.
    support::eventually(
        "the link listed as flagged",
        std::time::Duration::from_secs(20),
        || async {
            let page = c.get("/admin/screening", &root).await.text().await.unwrap();
            page.contains(&format!(">{code}</a>")) && page.contains("https://shady.example/%3Cx%3E")
        },
    )
    .await;
    // A viewer sees the page without forms; a merchant-bound user not at all.
    let locked = c.session("locked", "locked-pw").await;
    let page = c
        .get("/admin/screening", &locked)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("shady.example") && !page.contains("add-form"));
    let r = c
        .post(
            "/admin/screening",
            &locked,
            &format!("csrf={}&op=remove&domain=shady.example", csrf_of(&page)),
        )
        .await;
    assert_eq!(r.status().as_u16(), 403, "viewers cannot change it");
    let m55 = c.session("m55", "m55-pw").await;
    assert_eq!(c.get("/admin/screening", &m55).await.status().as_u16(), 403);
    let r = c
        .post(
            "/admin/screening",
            &root,
            &format!("csrf={token}&op=remove&domain=shady.example"),
        )
        .await;
    assert!(r.text().await.unwrap().contains("shady.example removed"));
}

#[tokio::test]
async fn webhooks_are_managed_and_their_deliveries_resent_in_the_console() {
    let c = start_with(|o| {
        o.extra_yaml.push_str(
            "webhooks:\n  key: 'MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY='\n  give_up_after_secs: 1\n  retry_base_ms: 50\n",
        );
    });
    let root = c.session("root", "root-pw").await;
    let page = c.get("/admin/webhooks", &root).await.text().await.unwrap();
    assert!(
        page.contains("id=\"add-form\"") && page.contains("aria-current=\"page\">Webhooks"),
        "{page}"
    );
    let token = csrf_of(&page);
    let add = "op=add&app=demo&url=https%3A%2F%2Flocalhost%3A9%2Fh%3Cx%3E&description=%3Cb%3Eorders%3C%2Fb%3E\
               &events=link.created&events=link.deleted";
    let r = c
        .post("/admin/webhooks", &root, &format!("csrf=forged&{add}"))
        .await;
    assert_eq!(r.status().as_u16(), 403, "without the session's token");
    let r = c
        .post("/admin/webhooks", &root, &format!("csrf={token}&{add}"))
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let page = r.text().await.unwrap();
    assert!(page.contains("shown this once: whsec_"), "{page}");
    assert!(
        page.contains("&lt;b&gt;orders&lt;/b&gt;") && !page.contains("<b>orders"),
        "escaped"
    );
    assert!(page.contains("link.created, link.deleted"), "{page}");
    let r = c
        .post(
            "/admin/webhooks",
            &root,
            &format!(
                "csrf={token}&op=add&app=nope&url=https%3A%2F%2Fa.example%2F&events=link.created"
            ),
        )
        .await;
    assert_eq!(r.status().as_u16(), 400, "no such app");
    let r = c
        .post(
            "/admin/webhooks",
            &root,
            &format!(
                "csrf={token}&op=add&app=demo&url=http%3A%2F%2Fa.example%2F&events=link.created"
            ),
        )
        .await;
    assert_eq!(r.status().as_u16(), 400, "https only");
    // The endpoint as the API shows it; a change of a demo link is a delivery
    // (dead: localhost is not a public address), listed with a resend button.
    let (_, list, _) =
        c.s.origin
            .call(
                reqwest::Method::GET,
                "/api/v1/webhooks",
                support::KEY,
                None,
                &[],
            )
            .await;
    let id = list["endpoints"][0]["id"].as_str().unwrap().to_owned();
    c.s.origin
        .create_ok(serde_json::json!({"url": "https://example.com/w"}))
        .await;
    let log = format!("/admin/webhooks/{id}");
    support::eventually(
        "the dead delivery listed",
        std::time::Duration::from_secs(20),
        || async {
            let page = c.get(&log, &root).await.text().await.unwrap();
            page.contains("<td>dead</td>") && page.contains("resolves to no allowed address")
        },
    )
    .await;
    let page = c.get(&log, &root).await.text().await.unwrap();
    let delivery = page
        .split("name=\"delivery\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_owned();
    let r = c
        .post(
            &log,
            &root,
            &format!("csrf={token}&op=resend&delivery={delivery}"),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains(&format!("delivery {delivery} is pending again")));
    // Viewers read without forms; merchant-bound users not at all.
    let locked = c.session("locked", "locked-pw").await;
    let page = c
        .get("/admin/webhooks", &locked)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("localhost:9")
            && !page.contains("add-form")
            && !page.contains("value=\"delete\"")
    );
    let r = c
        .post(
            &log,
            &locked,
            &format!("csrf={}&op=resend&delivery={delivery}", csrf_of(&page)),
        )
        .await;
    assert_eq!(r.status().as_u16(), 403);
    let m55 = c.session("m55", "m55-pw").await;
    assert_eq!(c.get("/admin/webhooks", &m55).await.status().as_u16(), 403);
    assert_eq!(
        c.get("/admin/webhooks/zz", &root).await.status().as_u16(),
        404
    );
    // Disable, then delete.
    let r = c
        .post(
            "/admin/webhooks",
            &root,
            &format!("csrf={token}&op=disable&id={id}"),
        )
        .await;
    assert!(r.text().await.unwrap().contains("disabled"));
    let r = c
        .post(
            "/admin/webhooks",
            &root,
            &format!("csrf={token}&op=delete&id={id}"),
        )
        .await;
    assert!(r.text().await.unwrap().contains("endpoint deleted"));
    assert_eq!(c.get(&log, &root).await.status().as_u16(), 404);
}

/// The live view's page: a link's and a tenant's last hour from the click
/// stream, reloading itself, with its CSV; merchant-bound users only see
/// theirs; a bad tenant query is a 400 page.
#[tokio::test]
async fn the_live_view_shows_the_last_hour() {
    let c = start();
    let root = c.session("root", "root-pw").await;
    let code =
        c.s.origin
            .create_ok(serde_json::json!({"url": "https://a.example/live55", "kdt_id": 55}))
            .await;
    let hour = shorturl_common::time::now_unix() / 3600 * 3600;
    let b = support::clicks::hours_batch("console-edge:n:1", &[(&code, hour, 6, 2)]);
    support::clicks::xadd(&c.s, &b).await;
    // The page reloads itself and shows the minute's clicks once the
    // stream has been read (the link's page links to it).
    let link_page = c
        .get(&format!("/admin/links/{code}"), &root)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        link_page.contains(&format!("href=\"/admin/live?link={code}\"")),
        "{link_page}"
    );
    let mut html = String::new();
    for _ in 0..300 {
        let r = c.get(&format!("/admin/live?link={code}"), &root).await;
        assert_eq!(r.status().as_u16(), 200);
        html = r.text().await.unwrap();
        if html.contains("6 human and 2 bot clicks") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(html.contains("6 human and 2 bot clicks"), "{html}");
    assert!(
        html.contains(&format!(
            "<meta http-equiv=\"refresh\" content=\"15;url=/admin/live?link={code}\">"
        )),
        "{html}"
    );
    assert!(html.contains("<svg class=\"chart\""), "{html}");
    let r = c
        .get(&format!("/admin/live?link={code}&format=csv"), &root)
        .await;
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = r.text().await.unwrap();
    assert_eq!(csv.lines().count(), 61, "a header and 60 minutes: {csv}");
    // The tenant's page, once the link's owner is read.
    let mut html = String::new();
    for _ in 0..300 {
        html = c
            .get("/admin/live?kdt_id=55", &root)
            .await
            .text()
            .await
            .unwrap();
        if html.contains("6 human and 2 bot clicks") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        html.contains(&format!("href=\"/admin/links/{code}\"")),
        "{html}"
    );
    // Merchant 55's support user sees it; merchant 77's live view is empty
    // for them; a bad query is a 400 page.
    let m55 = c.session("m55", "m55-pw").await;
    let html = c
        .get("/admin/live?kdt_id=55", &m55)
        .await
        .text()
        .await
        .unwrap();
    assert!(html.contains("6 human and 2 bot clicks"), "{html}");
    let html = c
        .get("/admin/live?kdt_id=77", &m55)
        .await
        .text()
        .await
        .unwrap();
    assert!(html.contains("0 human and 0 bot clicks"), "{html}");
    for q in ["", "?kdt_id=x", "?app=a&kdt_id=5"] {
        let r = c.get(&format!("/admin/live{q}"), &root).await;
        assert_eq!(r.status().as_u16(), 400, "{q}");
    }
    assert_eq!(
        c.get("/admin/live?link=nope!", &root)
            .await
            .status()
            .as_u16(),
        404
    );
}

/// The link page's tables per dimension (protocol 3.7): the human clicks
/// of its 90 days per value, most first, each with its share as a bar,
/// escaped, `-` and `~other` named for people, countries by name, a
/// dimension without rows saying so; each with its CSV.
#[tokio::test]
async fn link_dimensions_are_tables_with_csv_in_the_console() {
    let c = start();
    let (st, v) =
        c.s.origin
            .create(serde_json::json!({"url": "https://a.example/dims"}))
            .await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let today = "UNIX_TIMESTAMP() - MOD(UNIX_TIMESTAMP(), 86400)";
    c.s.sql(&format!(
        "INSERT INTO click_day_dim (code, day, dim, value, n) VALUES \
         ('{code}', {today}, 'country', 'DE', 3), ('{code}', {today}, 'country', 'unknown', 5), \
         ('{code}', {today} - 86400, 'country', 'DE', 4), \
         ('{code}', {today} - 200 * 86400, 'country', 'FR', 9), \
         ('{code}', {today}, 'lang', '-', 2), ('{code}', {today}, 'lang', '~other', 1), \
         ('{code}', {today}, 'utm_source', 'a<b>', 6), ('{code}', {today}, 'utm_source', '-x', 1)"
    ));
    let root = c.session("root", "root-pw").await;
    let path = format!("/admin/links/{code}");
    let page = c.get(&path, &root).await.text().await.unwrap();
    let table = |id: &str| -> String {
        page.split(&format!("<table id=\"dim-{id}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("no table {id}: {page}"))
            .split("</table>")
            .next()
            .unwrap()
            .to_owned()
    };
    // Days before the link was created (a recycled code's earlier
    // clicks) are left out, as everywhere.
    // Each value with its share of the table as a bar, a country with
    // its name (the tables of the tenant pages).
    let row = |label: &str, n: u64, total: u64, share: &str| {
        format!(
            "<tr><td>{label}</td><td class=\"n\">{n}</td><td class=\"share\">\
             <meter min=\"0\" max=\"{total}\" value=\"{n}\"></meter> {share}%</td></tr>"
        )
    };
    assert!(
        table("country").ends_with(&format!(
            "<tbody>{}{}</tbody>",
            row("unknown", 5, 8, "62.5"),
            row("<code>DE</code> Germany", 3, 8, "37.5")
        )),
        "{}",
        table("country")
    );
    assert!(table("language").ends_with(&format!(
        "<tbody>{}{}</tbody>",
        row("(none)", 2, 3, "66.7"),
        row("(others)", 1, 3, "33.3")
    )));
    assert!(table("utm_source").contains("<td>a&lt;b&gt;</td><td class=\"n\">6</td>"));
    assert!(!page.contains("a<b>"));
    for id in ["browser", "os", "source", "utm_medium", "utm_campaign"] {
        assert!(table(id).contains("No clicks counted."), "{id}");
    }
    let href = format!("/admin/links/{code}?dim=country&amp;format=csv");
    assert!(page.contains(&href), "{page}");
    // The CSV links: the same numbers, formulas defused.
    let r = c
        .get(
            &format!("/admin/links/{code}?dim=country&format=csv"),
            &root,
        )
        .await;
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    assert_eq!(
        r.text().await.unwrap(),
        "value,human\r\nunknown,5\r\nDE,3\r\n"
    );
    let r = c
        .get(
            &format!("/admin/links/{code}?dim=utm_source&format=csv"),
            &root,
        )
        .await;
    assert_eq!(
        r.text().await.unwrap(),
        "value,human\r\na<b>,6\r\n\"'-x\",1\r\n"
    );
    let r = c
        .get(&format!("/admin/links/{code}?dim=region&format=csv"), &root)
        .await;
    assert_eq!(r.status().as_u16(), 400);
}

/// A merchant's page and an app's (issue 27): the tenant's human and bot
/// clicks with a chart per day, a table per dimension (exact counts, shares
/// as bars, countries named), each with the API's CSV, and its top links,
/// linked from the lists; a merchant-bound user sees its own merchant's
/// page only and no app page; bad input is a 4xx page.
#[tokio::test]
async fn tenant_pages_show_clicks_per_dimension_with_csv() {
    let c = start_with(|o| o.links_yaml = "  merchant_domains: {'55': [s.shop55.com]}\n".into());
    let create = |kdt: u64, path: &'static str| {
        let s = &c.s;
        async move {
            s.origin
                .create_ok(
                    serde_json::json!({"url": format!("https://a.example/{path}"), "kdt_id": kdt}),
                )
                .await
        }
    };
    let (a55, b55, m77) = (
        create(55, "a").await,
        create(55, "b").await,
        create(77, "c").await,
    );
    // Merchant 55: 4 human clicks on a55 (3 from Germany, 1 from nowhere
    // known) and a bot's, 2 on b55 from France in Firefox; merchant 77: 4
    // from Germany. Every link is the app demo's.
    let chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    let firefox =
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0";
    let now = shorturl_common::time::now_unix();
    let mut acc = shorturl_common::clicks::Accumulator::with_dimensions();
    let clicks = [
        (&a55, chrome, Some(*b"DE"), 3),
        (&a55, chrome, None, 1),
        (&a55, "curl/8.5.0", None, 1),
        (&b55, firefox, Some(*b"FR"), 2),
        (&m77, chrome, Some(*b"DE"), 4),
    ];
    for (code, ua, country, n) in clicks {
        for _ in 0..n {
            assert!(acc.add(&shorturl_common::clicks::Click {
                user_agent: Some(ua),
                country,
                ..shorturl_common::clicks::Click::new(code, now)
            }));
        }
    }
    let ids = shorturl_common::clicks::BatchIds::new("console-tenants", "boot1").unwrap();
    for b in acc.take_batches(&ids, 1000) {
        support::clicks::xadd(&c.s, &b).await;
    }
    let root = c.session("root", "root-pw").await;
    let page = |path: &'static str, cookie: &str| {
        let cookie = cookie.to_owned();
        let c = &c;
        async move {
            let r = c.get(path, &cookie).await;
            assert_eq!(r.status().as_u16(), 200, "{path}");
            r.text().await.unwrap()
        }
    };
    // Once the consumer has applied the batch.
    let totals = "Human <strong>6</strong> · bot 1 clicks over the last 30 days";
    support::eventually(
        "merchant 55's clicks",
        std::time::Duration::from_secs(30),
        || async { page("/admin/merchants/55", &root).await.contains(totals) },
    )
    .await;
    let html = page("/admin/merchants/55", &root).await;
    let table = |html: &str, id: &str| -> String {
        html.split(&format!("<table id=\"{id}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("no table {id}: {html}"))
            .split("</table>")
            .next()
            .unwrap()
            .to_owned()
    };
    let row = |label: &str, n: u64, total: u64, share: &str| {
        format!(
            "<tr><td>{label}</td><td class=\"n\">{n}</td><td class=\"share\">\
             <meter min=\"0\" max=\"{total}\" value=\"{n}\"></meter> {share}%</td></tr>"
        )
    };
    assert_eq!(
        table(&html, "dim-country"),
        format!(
            "<thead><tr><th>Value</th><th class=\"n\">Clicks</th><th>Share</th></tr></thead><tbody>{}{}{}</tbody>",
            row("<code>DE</code> Germany", 3, 6, "50.0"),
            row("<code>FR</code> France", 2, 6, "33.3"),
            row("unknown", 1, 6, "16.7"),
        )
    );
    assert!(table(&html, "dim-browser").ends_with(&format!(
        "<tbody>{}{}</tbody>",
        row("chrome", 4, 6, "66.7"),
        row("firefox", 2, 6, "33.3")
    )));
    assert!(table(&html, "dim-os")
        .ends_with(&format!("<tbody>{}</tbody>", row("windows", 6, 6, "100.0"))));
    assert!(table(&html, "dim-language")
        .ends_with(&format!("<tbody>{}</tbody>", row("(none)", 6, 6, "100.0"))));
    // Its top links, busiest first; not merchant 77's.
    let top = table(&html, "top-links");
    let (at_a, at_b) = (top.find(&a55).unwrap(), top.find(&b55).unwrap());
    assert!(at_a < at_b, "{top}");
    assert!(top.contains(&format!(
        "<a href=\"/admin/links/{a55}\">{a55}</a></td><td>sho.rt</td><td class=\"n\">4</td><td class=\"n\">1</td>"
    )), "{top}");
    assert!(!html.contains(&m77), "{html}");
    assert!(html.contains("<svg class=\"chart\""), "{html}");

    // Each table's CSV is the API's, byte for byte; the chart's: 30 days.
    for dim in ["country", "browser"] {
        let href = format!("/admin/merchants/55?days=30&amp;dim={dim}&amp;format=csv");
        assert!(html.contains(&href), "{html}");
        let r = c.get(&href.replace("&amp;", "&"), &root).await;
        assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
        assert_eq!(
            r.headers()["content-disposition"],
            format!("attachment; filename=\"merchant-55-{dim}.csv\"").as_str()
        );
        let csv = r.text().await.unwrap();
        let api = c
            .http
            .get(c.url(&format!(
                "/api/v1/stats?kdt_id=55&group_by={dim}&format=csv"
            )))
            .bearer_auth(support::ADMIN_KEY)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(csv, api, "{dim}");
        let want = match dim {
            "country" => "value,human\r\nDE,3\r\nFR,2\r\nunknown,1\r\n",
            _ => "value,human\r\nchrome,4\r\nfirefox,2\r\n",
        };
        assert_eq!(csv, want);
    }
    let csv = c
        .get("/admin/merchants/55?chart=day&format=csv", &root)
        .await
        .text()
        .await
        .unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 31, "{csv}");
    assert_eq!(
        lines[30],
        format!("{},6,1", &shorturl_common::time::rfc3339(now)[..10])
    );
    // Another range: the same clicks (today's) in a 7-day chart.
    let html = page("/admin/merchants/55?days=7", &root).await;
    assert!(html.contains("Human <strong>6</strong> · bot 1 clicks over the last 7 days"));
    assert!(html.contains("href=\"/admin/merchants/55?days=7\" aria-current=\"page\""));

    // The app's page: every link of demo's, both merchants'.
    let html = page("/admin/apps/demo", &root).await;
    assert!(html.contains("Human <strong>10</strong> · bot 1"), "{html}");
    assert!(table(&html, "dim-country").contains(&row("<code>DE</code> Germany", 7, 10, "70.0")));
    assert!(html.contains(&m77));
    let r = c
        .get("/admin/apps/demo?dim=country&format=csv", &root)
        .await;
    assert_eq!(
        r.text().await.unwrap(),
        "value,human\r\nDE,7\r\nFR,2\r\nunknown,1\r\n"
    );
    // The lists link to the pages; the link page names the merchant and
    // has the same tables (shares, country names).
    assert!(page("/admin/merchants", &root)
        .await
        .contains("<a href=\"/admin/merchants/55\">55</a>"));
    assert!(page("/admin/apps", &root)
        .await
        .contains("<a href=\"/admin/apps/demo\">demo</a>"));
    let r = c.get(&format!("/admin/links/{a55}"), &root).await;
    let html = r.text().await.unwrap();
    assert!(html.contains("<a href=\"/admin/merchants/55\" id=\"merchant\">55</a>"));
    assert!(table(&html, "dim-country").ends_with(&format!(
        "<tbody>{}{}</tbody>",
        row("<code>DE</code> Germany", 3, 4, "75.0"),
        row("unknown", 1, 4, "25.0")
    )));

    // Bad input: 4xx pages, never a 500.
    for (p, want) in [
        ("/admin/merchants/abc", 400),
        ("/admin/merchants/-1", 400),
        ("/admin/merchants/55?days=0", 400),
        ("/admin/merchants/55?days=x", 400),
        ("/admin/merchants/55?days=367", 400),
        ("/admin/merchants/55?dim=region&format=csv", 400),
        ("/admin/merchants/55?dim=destination&format=csv", 400),
        ("/admin/merchants/55?format=csv", 400),
        ("/admin/apps/nope", 404),
        ("/admin/apps/demo?dim=lang&format=csv", 400),
        ("/admin/apps/%FF", 400),
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

    // Merchant 55's support user: its merchant's page, as root sees it;
    // another merchant's is "no such merchant" (page and CSV alike); no
    // app page, known or not.
    let m55 = c.session("m55", "m55-pw").await;
    let html = page("/admin/merchants/55", &m55).await;
    assert!(html.contains(totals), "{html}");
    // Its bar links only what it may open: Search and its merchant's page.
    let nav = &html[html.find("<nav>").unwrap()..html.find("</nav>").unwrap()];
    assert_eq!(
        nav,
        "<nav><a href=\"/admin/links\">Search</a>\
         <a href=\"/admin/merchants/55\" aria-current=\"page\">Merchant 55</a>\
         <a href=\"/api/docs\">API</a>"
    );
    for p in [
        "/admin/merchants/77",
        "/admin/merchants/77?dim=country&format=csv",
        "/admin/merchants/56?days=7",
    ] {
        let r = c.get(p, &m55).await;
        assert_eq!(r.status().as_u16(), 404, "{p}");
        assert!(r.text().await.unwrap().contains("no such merchant"), "{p}");
    }
    for p in [
        "/admin/apps/demo",
        "/admin/apps/demo?dim=country&format=csv",
        "/admin/apps/nope",
        "/admin/apps",
    ] {
        assert_eq!(c.get(p, &m55).await.status().as_u16(), 403, "{p}");
    }
    // Not signed in: the sign-in page, as everywhere.
    let r = c.get("/admin/merchants/55", "").await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/admin/login");
}
