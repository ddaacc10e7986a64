//! Console sign-in through a real OpenID provider in a real browser:
//! `oidc-provider` (OpenID Certified, from the npm registry, run by Node;
//! `testkit::oidc`) on 127.0.0.2, the origin on 127.0.0.1 — two sites to
//! Chromium, as in production — driven over WebDriver. Covers the whole
//! authorization code flow with PKCE; the provider's groups mapped to
//! roles (admin, operator, viewer bound to merchant 55 by a claim); the
//! audit actor `sso:<name>`; refusals (no console role, a binding that is
//! not merchant ids, the person cancelling at the provider); forged,
//! replayed and unstarted callbacks; sign-out ending the session; local
//! users beside the provider, then turned off; a provider that is down.

use crate::support;

use reqwest::Client;
use support::{count, write_config, Setup};
use testkit::browser::{text, wait_path, wait_text, ChromeDriver, Locator};
use testkit::oidc::OidcProvider;

const CLIENT_ID: &str = "shorturl-console";
const CLIENT_SECRET: &str = "test-client-secret-5f1c";

fn admin_yaml(issuer: &str, port: u16, password_signin: bool) -> String {
    format!(
        "admin:\n  password_signin: {password_signin}\n  users:\n    - {{name: root, password_hash: '{}', role: admin}}\n  oidc:\n    issuer: '{issuer}'\n    client_id: {CLIENT_ID}\n    client_secret: {CLIENT_SECRET}\n    redirect_url: 'http://127.0.0.1:{port}/admin/oidc/callback'\n    scopes: [profile, email, groups]\n    roles: {{shorturl-admins: admin, shorturl-operators: operator, shorturl-viewers: viewer}}\n    merchants_claim: shorturl_merchants\n    label: Sign in with Example SSO\n",
        testkit::origin::hash_password("root-pw"),
    )
}

/// A client that follows no redirects and keeps no idle connection: the
/// test restarts the origin, whose old connections must not be reused.
fn no_redirects() -> Client {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// Signs `login` in at the provider from the console's sign-in page (the
/// provider takes any password), consenting when asked; `cancel` clicks
/// the provider's Cancel instead.
async fn through_provider(c: &testkit::browser::Client, base: &str, login: &str, cancel: bool) {
    c.goto(&format!("{base}/admin/")).await.unwrap();
    wait_path(c, "/admin/login").await;
    assert_eq!(text(c, "sso").await, "Sign in with Example SSO");
    c.find(Locator::Id("sso"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let field = c
        .wait()
        .for_element(Locator::Css("input[name=login]"))
        .await
        .unwrap();
    let at = c.current_url().await.unwrap();
    assert_eq!(
        at.host_str(),
        Some(testkit::oidc::HOST),
        "at the provider: {at}"
    );
    if cancel {
        c.find(Locator::Css("a[href$='/abort']"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        return;
    }
    field.send_keys(login).await.unwrap();
    c.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("any password")
        .await
        .unwrap();
    c.find(Locator::Css("button.login-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The consent page (the same button), then back to the console.
    for _ in 0..300 {
        let u = c.current_url().await.unwrap();
        if u.host_str() == Some("127.0.0.1") {
            return;
        }
        if let Ok(b) = c.find(Locator::Css("button.login-submit")).await {
            if u.path().starts_with("/interaction/") {
                let _ = b.click().await;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("never came back from the provider");
}

/// Forgets both sites' cookies (the provider's session too): the next
/// person signs in from scratch.
async fn forget(c: &testkit::browser::Client, base: &str, issuer: &str) {
    for page in [
        format!("{issuer}/.well-known/openid-configuration"),
        format!("{base}/admin/login"),
    ] {
        c.goto(&page).await.unwrap();
        c.delete_all_cookies().await.unwrap();
    }
}

/// The browser's console session cookie (`shorturl_admin=...`), if any.
async fn session_cookie(c: &testkit::browser::Client) -> Option<String> {
    c.get_named_cookie("shorturl_admin")
        .await
        .ok()
        .map(|k| format!("shorturl_admin={}", k.value()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_sign_in_through_an_openid_provider() {
    let mut port = 0;
    let mut provider = None;
    let mut s = Setup::start_with(|o| {
        port = o.port;
        let p = OidcProvider::start(
            CLIENT_ID,
            CLIENT_SECRET,
            &format!("http://127.0.0.1:{}/admin/oidc/callback", o.port),
        );
        o.extra_yaml = admin_yaml(&p.issuer(), o.port, true);
        provider = Some(p);
    });
    let mut provider = provider.unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let code55 = s
        .origin
        .create_ok(serde_json::json!({"url": "https://a.example/sso/55", "kdt_id": 55}))
        .await;
    let other = s
        .origin
        .create_ok(serde_json::json!({"url": "https://a.example/sso/other", "kdt_id": 77}))
        .await;
    let http = no_redirects();
    let metric = |r: &str| format!("shorturl_admin_signins_total{{result=\"{r}\"}}");

    let driver = ChromeDriver::start();
    let c = driver.session().await;
    let issuer = provider.issuer();
    // An admin by group: the overview, named as the provider names them.
    through_provider(&c, &base, "alice", false).await;
    wait_path(&c, "/admin/").await;
    assert_eq!(text(&c, "who").await, "alice · admin");
    let alice = session_cookie(&c).await.expect("a session cookie");
    // Sign-out ends the session: the cookie the browser had opens nothing.
    c.find(Locator::Css("header form button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_path(&c, "/admin/login").await;
    let r = http
        .get(format!("{base}/admin/"))
        .header("Cookie", &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "the ended session opens nothing");
    assert_eq!(
        count(
            &s,
            "SELECT COUNT(*) FROM admin_session WHERE user_name = 'alice'"
        ),
        0
    );

    // An operator by group edits a link: the audit names them `sso:otto`.
    forget(&c, &base, &issuer).await;
    through_provider(&c, &base, "otto", false).await;
    wait_path(&c, "/admin/").await;
    assert_eq!(text(&c, "who").await, "otto · operator");
    c.goto(&format!("{base}/admin/links/{code55}"))
        .await
        .unwrap();
    let tags = c.find(Locator::Id("edit-tags")).await.unwrap();
    tags.clear().await.unwrap();
    tags.send_keys("sso-edit").await.unwrap();
    c.find(Locator::Id("save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&c, "tags", |t| t.contains("sso-edit")).await;
    assert_eq!(
        count(
            &s,
            &format!(
                "SELECT COUNT(*) FROM link_audit WHERE code = '{code55}' AND actor = 'sso:otto'"
            )
        ),
        1
    );

    // A viewer bound by the merchants claim: merchant 55's links only.
    forget(&c, &base, &issuer).await;
    through_provider(&c, &base, "vera", false).await;
    // A viewer bound to merchants lands on the overview, which is not theirs.
    wait_text(&c, "error", |t| t.contains("bound to merchants")).await;
    assert_eq!(text(&c, "who").await, "vera · viewer");
    c.goto(&format!("{base}/admin/links")).await.unwrap();
    let page = c.source().await.unwrap();
    assert!(page.contains(&code55) && !page.contains(&other), "{page}");
    c.goto(&format!("{base}/admin/links/{other}"))
        .await
        .unwrap();
    wait_text(&c, "error", |t| !t.is_empty()).await;

    // Refusals: no console role; a binding that is not merchant ids; the
    // person cancelling at the provider. None gets a session.
    for (login, cancel, want) in [
        ("nobody", false, "has no console role"),
        ("mallory", false, "merchant binding"),
        ("alice", true, "did not sign you in (access_denied)"),
    ] {
        forget(&c, &base, &issuer).await;
        through_provider(&c, &base, login, cancel).await;
        let shown = wait_text(&c, "error", |t| !t.is_empty()).await;
        assert!(shown.contains(want), "{login}: {shown}");
        assert_eq!(
            c.current_url().await.unwrap().path(),
            "/admin/oidc/callback"
        );
        assert_eq!(session_cookie(&c).await, None, "{login}");
    }
    c.close().await.unwrap();
    assert_eq!(
        count(
            &s,
            "SELECT COUNT(*) FROM admin_session WHERE user_name IN ('nobody', 'mallory')"
        ),
        0
    );
    drop(driver);

    // Callbacks that were not started in this browser: nothing is sent
    // to the provider, nothing signs in.
    let bad_state_before = support::metric_value(&s.origin, &metric("sso_bad_state"))
        .await
        .unwrap_or(0.0);
    let r = http
        .get(format!("{base}/admin/oidc/callback?code=abc&state=def"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    // Started here (the cookie), but another state: refused too.
    let start = http
        .get(format!("{base}/admin/oidc/start"))
        .send()
        .await
        .unwrap();
    assert_eq!(start.status().as_u16(), 303);
    let to = start.headers()["location"].to_str().unwrap().to_owned();
    assert!(to.starts_with(&issuer), "{to}");
    for p in [
        "code_challenge_method=S256",
        "code_challenge=",
        "nonce=",
        "state=",
        "scope=openid",
    ] {
        assert!(to.contains(p), "{p} in {to}");
    }
    let set = start.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly")
            && set.contains("SameSite=Lax")
            && set.contains("Path=/admin/oidc"),
        "{set}"
    );
    let pending = set.split(';').next().unwrap().to_owned();
    let state = url::Url::parse(&to)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "state")
        .unwrap()
        .1
        .into_owned();
    let callback = |query: String| {
        http.get(format!("{base}/admin/oidc/callback?{query}"))
            .header("Cookie", &pending)
            .send()
    };
    let r = callback(format!("code=abc&state=not-{state}"))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(
        support::metric_value(&s.origin, &metric("sso_bad_state"))
            .await
            .unwrap(),
        bad_state_before + 2.0
    );
    // The right state with a code the provider never issued: the exchange
    // fails, 502, and no session.
    let r = callback(format!("code=forged&state={state}"))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 502);
    assert!(r
        .headers()
        .get_all("set-cookie")
        .iter()
        .all(|v| !v.to_str().unwrap().starts_with("shorturl_admin=")));
    assert!(
        support::metric_value(&s.origin, &metric("sso_failed"))
            .await
            .unwrap()
            >= 1.0
    );
    assert_eq!(
        support::metric_value(&s.origin, &metric("sso_ok"))
            .await
            .unwrap(),
        3.0,
        "alice, otto, vera"
    );
    // A wrong method.
    let r = http
        .post(format!("{base}/admin/oidc/callback"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);

    // Local users sign in beside the provider.
    let login = |http: Client| {
        let base = base.clone();
        async move {
            let r = http
                .get(format!("{base}/admin/login"))
                .send()
                .await
                .unwrap();
            let cookie = r.headers()["set-cookie"]
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_owned();
            let html = r.text().await.unwrap();
            let at = html.find("name=\"csrf\" value=\"").map(|a| a + 19);
            let token = at.map(|a| html[a..a + html[a..].find('"').unwrap()].to_owned());
            let r = http
                .post(format!("{base}/admin/login"))
                .header("Cookie", cookie)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(format!(
                    "csrf={}&user=root&password=root-pw",
                    token.clone().unwrap_or_default()
                ))
                .send()
                .await
                .unwrap();
            (html, r)
        }
    };
    let (page, r) = login(http.clone()).await;
    assert!(
        page.contains("id=\"sso\"") && page.contains("id=\"password\""),
        "{page}"
    );
    assert_eq!(r.status().as_u16(), 303);
    let root = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let overview = |cookie: String| {
        let req = http.get(format!("{base}/admin/")).header("Cookie", cookie);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(overview(root.clone()).await, 200);

    // Password sign-in turned off: the page offers only the provider, a
    // posted password is refused, and the password session has ended.
    s.origin.opts.extra_yaml = admin_yaml(&issuer, port, false);
    write_config(&s.origin.dir, &s.origin.opts);
    s.origin.restart();
    let (page, r) = login(http.clone()).await;
    assert!(
        page.contains("id=\"sso\"") && !page.contains("id=\"password\""),
        "{page}"
    );
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(overview(root.clone()).await, 303);

    // The provider down: starting a sign-in says so (503), at once.
    provider.stop();
    s.origin.restart();
    let r = http
        .get(format!("{base}/admin/oidc/start"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert!(r.text().await.unwrap().contains("could not be reached"));
    let log = s.origin.log();
    assert!(
        !log.contains(CLIENT_SECRET),
        "the client secret is never logged"
    );
}
