//! A measurement for issue 13, not a check: the admin console's pages with
//! 1,000,000 links in `short_code` (created over the last 60 days, 100 000
//! of them with a day of clicks), each page fetched once cold and 5 more
//! times, the first time, the median (request to last byte, over loopback: the server's
//! time plus a negligible client) and size printed. The overview's first
//! load reads the past 30 days (then kept in memory, `admin/days.rs`). Ignored by default
//! (minutes of MariaDB work); run it with
//!
//! ```sh
//! cargo build --release -p shorturl-origin
//! cargo test -p shorturl-origin --release --test it -- admin_scale:: --ignored --nocapture
//! ```

use crate::support;

use std::time::{Duration, Instant};
use support::{shared_mariadb, Setup};

const LINKS: u64 = 1_000_000;
const CLICKED: u64 = 100_000;
/// Far above pre-generated and custom ids.
const ID_BASE: u64 = 1 << 42;

/// `name=value` of the `Set-Cookie` named `name`.
fn set_cookie(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_owned()
}

fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").unwrap() + 19;
    let len = html[at..].find('"').unwrap();
    html[at..at + len].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: minutes of MariaDB work"]
async fn console_pages_with_a_million_links() {
    let extra = format!(
        "admin:\n  users:\n    - {{name: admin, password_hash: '{}', role: admin}}\nlifecycle: {{enabled: false}}\n",
        testkit::origin::hash_password("scale-password")
    );
    let s = Setup::start_with(|o| {
        o.pregen = 1000;
        o.extra_yaml = extra;
    });
    shared_mariadb().sql("SET GLOBAL innodb_buffer_pool_size = 1073741824");
    let t = Instant::now();
    s.sql(&format!(
        "INSERT INTO short_code (id, code, state, long_url, domain, app, kdt_id, created_at, updated_at, \
         expires_at, version) \
         SELECT {ID_BASE} + seq, CONCAT('s', seq), IF(seq % 50 = 0, 3, 1), \
                CONCAT('https://shop', seq % 997, '.example.com/item/', seq), \
                IF(seq % 4 = 0, 's.shop55.com', 'sho.rt'), CONCAT('app', seq % 7), \
                IF(seq % 4 = 0, 55, NULL), \
                UNIX_TIMESTAMP() - 60 * 86400 + seq * 5, UNIX_TIMESTAMP() - 60 * 86400 + seq * 5, \
                UNIX_TIMESTAMP() + 300 * 86400, 1 \
         FROM seq_1_to_{LINKS}; \
         INSERT INTO click_day_device (code, day, class, n) \
         SELECT CONCAT('s', seq * 10), UNIX_TIMESTAMP() - MOD(UNIX_TIMESTAMP(), 86400) - (seq % 30) * 86400, \
                IF(seq % 3 = 0, 'bot', 'mobile'), 1 + seq % 5 FROM seq_1_to_{CLICKED}; \
         ANALYZE TABLE short_code, click_day_device"
    ));
    eprintln!(
        "bulk insert of {LINKS} links and {CLICKED} click rows: {:?}",
        t.elapsed()
    );

    let o = &s.origin;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http.get(o.url("/admin/login")).send().await.unwrap();
    let login_cookie = set_cookie(&r, "shorturl_admin_login");
    let token = csrf_of(&r.text().await.unwrap());
    let r = http
        .post(o.url("/admin/login"))
        .header("Cookie", &login_cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("csrf={token}&user=admin&password=scale-password"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let session = set_cookie(&r, "shorturl_admin");
    let code = format!("s{}", CLICKED * 10 / 2);
    let pages = [
        "/admin/".to_owned(),
        "/admin/links".to_owned(),
        "/admin/links?url_match=prefix&url=https%3A%2F%2Fshop5.example.com%2F".to_owned(),
        "/admin/links?domain=s.shop55.com&state=active&created_from=2020-01-01".to_owned(),
        "/admin/links?kdt_id=55".to_owned(),
        "/admin/links?app=app3".to_owned(),
        format!("/admin/links?code={code}"),
        format!("/admin/links/{code}"),
        "/admin/merchants".to_owned(),
        "/admin/apps".to_owned(),
    ];
    println!("| page | first ms (cold) | median ms (5 more) | max ms | bytes |");
    println!("|---|---|---|---|---|");
    for p in &pages {
        let mut times = Vec::new();
        let mut first = Duration::ZERO;
        let mut bytes = 0;
        for i in 0..6 {
            let t = Instant::now();
            let r = http
                .get(o.url(p))
                .header("Cookie", &session)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200, "{p}");
            bytes = r.bytes().await.unwrap().len();
            if i > 0 {
                times.push(t.elapsed());
            } else {
                first = t.elapsed();
            }
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "| `{p}` | {:.1} | {:.1} | {:.1} | {bytes} |",
            ms(first),
            ms(times[2]),
            ms(times[4])
        );
    }
}
