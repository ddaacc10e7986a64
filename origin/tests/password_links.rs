//! Password-protected links through a real origin (MariaDB + Redis),
//! protocol 4.5: the API's write-only `password`, the record's `p`, the
//! form for browsers and the 401 for others, entries (right, wrong, from
//! another site, over the limits) and the unlock token an edit voids.

use crate::support;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use support::pages::{fetch, header};
use support::{metric_value, Setup, KEY};

const SHOP: &str = "s.shop55.com";
const FIREFOX: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
/// Bytes 0..31: the protocol's test key (`common/src/unlock.rs`).
const UNLOCK_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn setup() -> Setup {
    Setup::start_with(|o| {
        o.pregen = 200;
        o.extra_yaml = format!(
            "pages:\n  domains: {{s.shop55.com: {{title: 'Shop 55 <links>'}}}}\n\
             unlock:\n  key: '{UNLOCK_KEY}'\n  token_ttl_secs: 600\n  burst: 3\n  refill_per_min: 1\n"
        );
    })
}

/// `POST path` with a form body from client `xff`: status, headers, body.
async fn post_form(
    s: &Setup,
    path: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> (u16, HeaderMap, String) {
    let o = &s.origin;
    let mut req = o
        .http
        .post(o.url(path))
        .header("Host", SHOP)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let st = r.status().as_u16();
    let h = r.headers().clone();
    (st, h, r.text().await.unwrap())
}

/// The `su_pass=<token>` pair of a `Set-Cookie`.
fn cookie_of(h: &HeaderMap) -> String {
    let set = header(h, "set-cookie");
    set.split(';').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_link_answers_only_after_its_password() {
    let s = setup();
    let o = &s.origin;
    for bad in [
        json!("abc"),
        json!("x".repeat(129)),
        json!("a\tb c d"),
        json!(1234),
    ] {
        let (st, e) = o
            .create(json!({"url": "https://shop.example/vip", "domain": SHOP, "password": bad}))
            .await;
        assert_eq!(
            (st, e["error"].as_str()),
            (400, Some("invalid_password")),
            "{e}"
        );
    }
    let (st, v) = o
        .create(
            json!({"url": "https://shop.example/vip", "domain": SHOP, "password": "open sesame"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["password_protected"], true);
    assert!(v.get("password").is_none());
    let code = v["code"].as_str().unwrap().to_owned();
    // Only the hash is kept, and only at the origin: the record says `p`.
    let rec = s.redis_record_on(SHOP, &code).await.unwrap();
    assert!(
        rec.starts_with("3 1 ") && rec.ends_with(r#" {"p":true}"#),
        "{rec}"
    );
    let column = s.sql(&format!(
        "SELECT options FROM short_code WHERE code = '{code}'"
    ));
    assert!(
        column.contains("$argon2id$") && !column.contains("open sesame"),
        "{column}"
    );

    // Without a token: the 401 for an API client, the form for a browser.
    let (st, h, body) = fetch(&s, &format!("/{code}"), SHOP, &[]).await;
    assert_eq!(st, 401);
    assert_eq!(header(&h, "cache-control"), "no-store");
    let e: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(e["error"], "password_required");
    let (st, h, form) = fetch(&s, &format!("/{code}"), SHOP, &[("Accept", FIREFOX)]).await;
    assert_eq!(st, 200);
    assert_eq!(header(&h, "cache-control"), "no-store");
    assert!(header(&h, "content-security-policy").contains("form-action 'self'"));
    // Browsers then send the form with its real Origin (not `null`).
    assert_eq!(header(&h, "referrer-policy"), "same-origin");
    let page = String::from_utf8(form.clone()).unwrap();
    assert!(page.contains("<form method=\"post\">"), "{page}");
    assert!(
        page.contains("Shop 55 &lt;links&gt;"),
        "the domain's theme, escaped"
    );
    assert!(
        !page.contains("shop.example"),
        "the form never names the destination"
    );
    // The same bytes on its page path (cacheable there) and as its preview.
    let (st, h, direct) = fetch(&s, &format!("/{code}.password"), SHOP, &[]).await;
    assert_eq!((st, &direct), (200, &form));
    assert!(header(&h, "cache-control").starts_with("public, max-age="));
    let (st, _, preview) = fetch(&s, &format!("/{code}+"), SHOP, &[]).await;
    assert_eq!((st, &preview), (200, &form));
    let (st, _, _) = fetch(&s, &format!("/{code}.card"), SHOP, &[]).await;
    assert_eq!(st, 404);

    // A wrong password: the form again, saying so; no cookie.
    let (st, h, page) = post_form(&s, &format!("/{code}"), "password=sesame", &[]).await;
    assert_eq!(st, 403);
    assert!(page.contains("Wrong password."), "{page}");
    assert!(h.get("set-cookie").is_none());
    assert_eq!(header(&h, "cache-control"), "no-store");
    for (body, extra, want) in [
        ("", vec![], 400),
        ("other=1", vec![], 400),
        (
            "password=open+sesame",
            vec![("Origin", "https://evil.example")],
            403,
        ),
        (
            "password=open+sesame",
            vec![("Sec-Fetch-Site", "cross-site")],
            403,
        ),
    ] {
        let (st, h, page) = post_form(&s, &format!("/{code}"), body, &extra).await;
        assert_eq!(st, want, "{body} {extra:?}: {page}");
        assert!(h.get("set-cookie").is_none());
    }

    // The right one: 303 back to the link, query kept, the token in a
    // cookie scoped to the link's path.
    let (st, h, _) = post_form(
        &s,
        &format!("/{code}?utm_source=mail"),
        "password=open+sesame",
        &[("Origin", "http://s.shop55.com")],
    )
    .await;
    assert_eq!(st, 303);
    assert_eq!(header(&h, "location"), format!("/{code}?utm_source=mail"));
    let set = header(&h, "set-cookie");
    assert!(
        set.starts_with("su_pass=1.")
            && set.ends_with(&format!(
                "; Path=/{code}; Max-Age=600; HttpOnly; SameSite=Lax"
            )),
        "{set}"
    );
    let cookie = cookie_of(&h);
    let (st, h, _) = fetch(
        &s,
        &format!("/{code}"),
        SHOP,
        &[("Cookie", &format!("a=1; {cookie}"))],
    )
    .await;
    assert_eq!(
        (st, header(&h, "location")),
        (302, "https://shop.example/vip")
    );
    assert_eq!(
        header(&h, "cache-control"),
        "no-store",
        "opened by a cookie"
    );
    // A tampered token opens nothing.
    let tampered = format!("{}x", &cookie[..cookie.len() - 1]);
    let (st, _) = o
        .follow_with(SHOP, &format!("/{code}"), &[("Cookie", &tampered)])
        .await;
    assert_eq!(st, 401);

    // A new password (any edit: a new version) voids the token.
    let (st, e) = o.patch(KEY, &code, json!({"password": "new secret"})).await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["password_protected"], true);
    let (st, _) = o
        .follow_with(SHOP, &format!("/{code}"), &[("Cookie", &cookie)])
        .await;
    assert_eq!(st, 401);
    // Removing it makes a plain redirect again.
    let (st, e) = o.patch(KEY, &code, json!({"password": null})).await;
    assert_eq!((st, &e["password_protected"]), (200, &json!(false)), "{e}");
    let (st, loc) = o.follow_with(SHOP, &format!("/{code}"), &[]).await;
    assert_eq!(
        (st, loc.as_deref()),
        (302, Some("https://shop.example/vip"))
    );
    let (st, _, _) = fetch(&s, &format!("/{code}.password"), SHOP, &[]).await;
    assert_eq!(st, 404);
    let (st, h, _) = post_form(&s, &format!("/{code}"), "password=new+secret", &[]).await;
    assert_eq!(st, 405, "not a password link any more: no form");
    assert_eq!(header(&h, "allow"), "GET, HEAD, POST");
    let (st, _, _) = post_form(&s, "/nosuch1", "password=x", &[]).await;
    assert_eq!(st, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_limited_per_link_and_address_never_per_link_alone() {
    let s = setup();
    let o = &s.origin;
    let (st, v) = o
        .create(
            json!({"url": "https://shop.example/vip", "domain": SHOP, "password": "open sesame"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_owned();
    let path = format!("/{code}");
    // The origin's peer (loopback) is an edge: X-Forwarded-For names the client.
    let from = |ip: &'static str| [("X-Forwarded-For", ip)];
    for _ in 0..3 {
        let (st, _, _) = post_form(&s, &path, "password=guess", &from("203.0.113.7")).await;
        assert_eq!(st, 403);
    }
    let (st, h, page) = post_form(&s, &path, "password=open+sesame", &from("203.0.113.7")).await;
    assert_eq!(st, 429, "{page}");
    assert_eq!(header(&h, "retry-after"), "60");
    assert!(page.contains("Too many attempts."), "{page}");
    // The link's real visitors elsewhere are not locked out.
    let (st, h, _) = post_form(&s, &path, "password=open+sesame", &from("198.51.100.2")).await;
    assert_eq!(st, 303);
    assert!(header(&h, "set-cookie").starts_with("su_pass="));
    let m = |r: &str| format!("shorturl_unlock_attempts_total{{result=\"{r}\"}}");
    assert_eq!(metric_value(o, &m("wrong")).await, Some(3.0));
    assert_eq!(metric_value(o, &m("limited")).await, Some(1.0));
    assert_eq!(metric_value(o, &m("ok")).await, Some(1.0));
    assert_eq!(
        metric_value(o, "shorturl_unlock_password_checks_total").await,
        Some(4.0),
        "the limited entry checked no password"
    );
}
