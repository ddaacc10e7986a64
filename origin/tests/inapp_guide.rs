//! In-app browser guidance through a real origin (protocol 4.6): which
//! links carry `b` (an app download, a listed host; the link's, its
//! domain's and the default setting), the page in Chinese or English for
//! the listed in-app browsers, and the redirect for everyone else.

use crate::support;

use serde_json::json;
use support::pages::{fetch, header};
use support::{Setup, KEY};

const SHOP: &str = "s.shop55.com";
const WECHAT: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) \
                      AppleWebKit/605.1.15 Mobile/15E148 MicroMessenger/8.0.47";
const SAFARI: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) \
                      AppleWebKit/605.1.15 Version/17.0 Mobile/15E148 Safari/604.1";
const APK: &str = "https://dl.shop.example/app/shop.apk";

fn setup() -> Setup {
    Setup::start_with(|o| {
        o.pregen = 200;
        o.extra_yaml =
            "guide:\n  hosts: [apps.apple.com]\n  domains: {go.brand91.cn: false}\n".into();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_app_browsers_that_cannot_open_a_link_get_the_guide() {
    let s = setup();
    let o = &s.origin;
    let (st, e) = o
        .create(json!({"url": APK, "domain": SHOP, "inapp_guide": "yes"}))
        .await;
    assert_eq!(
        (st, e["error"].as_str()),
        (400, Some("invalid_inapp_guide")),
        "{e}"
    );
    let (st, v) = o.create(json!({"url": APK, "domain": SHOP})).await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        (&v["inapp_guide"], &v["inapp_guided"]),
        (&json!(null), &json!(true))
    );
    let code = v["code"].as_str().unwrap().to_owned();
    let rec = s.redis_record_on(SHOP, &code).await.unwrap();
    assert!(
        rec.ends_with(r#" {"b":["wechat","qq","alipay","weibo","dingtalk"]}"#),
        "{rec}"
    );

    // WeChat gets the guide, in Chinese for a Chinese visitor.
    let path = format!("/{code}");
    let (st, h, zh) = fetch(
        &s,
        &path,
        SHOP,
        &[
            ("User-Agent", WECHAT),
            ("Accept-Language", "zh-CN,zh;q=0.9"),
        ],
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(header(&h, "content-type"), "text/html; charset=utf-8");
    let page = String::from_utf8(zh.clone()).unwrap();
    assert!(
        page.contains("<html lang=\"zh\">") && page.contains("在浏览器中打开"),
        "{page}"
    );
    assert!(
        page.contains(v["short_url"].as_str().unwrap()),
        "the short URL to copy"
    );
    assert!(!page.contains("shop.apk"), "never the destination");
    let (st, _, direct) = fetch(&s, &format!("/{code}.guide?lang=zh"), SHOP, &[]).await;
    assert_eq!((st, &direct), (200, &zh));
    let (st, _, en) = fetch(&s, &path, SHOP, &[("User-Agent", WECHAT)]).await;
    assert_eq!(st, 200);
    assert!(String::from_utf8(en.clone())
        .unwrap()
        .contains("Open in browser"));
    let (st, _, other) = fetch(&s, &format!("/{code}.guide?lang=fr"), SHOP, &[]).await;
    assert_eq!((st, &other), (200, &en), "any other language is English");
    // A browser gets the redirect.
    let (st, loc) = o.follow_with(SHOP, &path, &[("User-Agent", SAFARI)]).await;
    assert_eq!((st, loc.as_deref()), (302, Some(APK)));

    // Which links carry it: a listed host (also through a rule), not a
    // plain page; off on a domain that says so, unless the link says on;
    // a link that says off.
    for (body, guided) in [
        (
            json!({"url": "https://apps.apple.com/app/id1", "domain": SHOP}),
            true,
        ),
        (
            json!({"url": "https://shop.example/", "domain": SHOP}),
            false,
        ),
        (
            json!({"url": "https://shop.example/", "domain": SHOP,
                   "rules": [{"when": {"device": ["android"]}, "url": APK}]}),
            true,
        ),
        (json!({"url": APK, "domain": "go.brand91.cn"}), false),
        (
            json!({"url": APK, "domain": "go.brand91.cn", "inapp_guide": true}),
            true,
        ),
        (
            json!({"url": APK, "domain": SHOP, "inapp_guide": false}),
            false,
        ),
    ] {
        let (st, v) = o.create(body.clone()).await;
        assert!(st == 201 || st == 200, "{body}: {v}");
        assert_eq!(v["inapp_guided"], json!(guided), "{body}");
    }
    // An edit that removes the download removes the guide; a plain link
    // has no guide page.
    let (st, e) = o
        .patch(KEY, &code, json!({"url": "https://shop.example/"}))
        .await;
    assert_eq!((st, &e["inapp_guided"]), (200, &json!(false)), "{e}");
    let (st, loc) = o.follow_with(SHOP, &path, &[("User-Agent", WECHAT)]).await;
    assert_eq!((st, loc.as_deref()), (302, Some("https://shop.example/")));
    let (st, _, _) = fetch(&s, &format!("/{code}.guide"), SHOP, &[]).await;
    assert_eq!(st, 404);
}
