//! Issue 12, item 5: a mixed fleet counts exactly through faults. 100,000
//! redirects through two Pingora edges and one OpenResty module (browsers,
//! bots and HEADs), while one origin is killed with -9 and restarted and
//! Redis is killed and restarted once; the stats API then reports exactly
//! the human and bot redirects the clients received.
//!
//! Redis runs with an append-only file synced on every write (as an
//! analytics Redis should: protocol 3.4, "What can be lost"), so what it
//! acknowledged survives its restart; while it is down the edges keep
//! their batches and retry them under the same ids, and the origins'
//! `click_batches` make a retried batch count once. Only redirects (302)
//! the clients received are expected; anything else the edges answered
//! during the faults is not a click.

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::http::Conn;
use support::{Edge, Origin, API_KEY};
use testkit::{free_port, Proc, Redis};

const TOTAL: u64 = 100_000;
const LINKS: usize = 20;
const CLIENTS_PER_EDGE: u64 = 2;

const BROWSER: [&str; 3] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
];
const BOT: [&str; 2] = [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "curl/8.5.0",
];

/// Visitors' addresses (trusted `X-Forwarded-For`) and languages.
const ADDRS: [&str; 7] = [
    "8.8.8.8",
    "46.4.0.1",
    "81.2.69.160",
    "1.1.1.1",
    "2001:4860:4860::8888",
    "192.0.2.1",
    "46.4.0.2",
];
const LANGS: [Option<&str>; 4] = [Some("de-DE,de;q=0.9"), Some("zh-CN"), None, Some("en")];

/// What a human click of request `i` is counted as, per dimension:
/// (address, language header, QR).
fn visit(i: u64) -> (&'static str, Option<&'static str>, bool) {
    (
        ADDRS[(i / 10 % 7) as usize],
        LANGS[(i / 3 % 4) as usize],
        i % 7 == 3,
    )
}

/// Request `i`: its method, user agent, and whether it is a bot click.
fn kind(i: u64) -> (&'static str, &'static str, bool) {
    match i % 10 {
        0 => ("HEAD", BROWSER[(i / 10 % 3) as usize], true),
        1 | 2 => ("GET", BOT[(i % 2) as usize], true),
        _ => ("GET", BROWSER[(i % 3) as usize], false),
    }
}

/// A second `serve` of `o`'s installation (same MariaDB, Redis and keys)
/// on another port.
fn second_origin(o: &Origin) -> (Proc, u16) {
    let port = free_port();
    let text = std::fs::read_to_string(&o.conf).unwrap().replace(
        &format!("listen: 127.0.0.1:{}", o.port),
        &format!("listen: 127.0.0.1:{port}"),
    );
    let conf = o.dir.path().join("origin-b.yaml");
    std::fs::write(&conf, text).unwrap();
    let p = testkit::origin::serve(&conf, port, &o.dir.path().join("origin-b.log"));
    (p, port)
}

fn create_link(port: u16, i: usize) -> String {
    let mut c = Conn::open(port).unwrap();
    let body = format!(r#"{{"url":"https://example.com/fleet/{i}"}}"#);
    let auth = format!("Bearer {API_KEY}");
    let r = c
        .send(
            "POST",
            "/api/v1/links",
            Some("localhost"),
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["code"].as_str().unwrap().to_owned()
}

/// `(human, bot)` of the tenant stats of app `demo` over the last and next day.
fn tenant_totals(port: u16) -> Option<(u64, u64)> {
    let now = shorturl_common::time::now_unix();
    let path = format!(
        "/api/v1/stats?app=demo&from={}&to={}",
        shorturl_common::time::rfc3339(now - 86_400),
        shorturl_common::time::rfc3339(now + 86_400)
    );
    let auth = format!("Bearer {API_KEY}");
    let mut c = Conn::open(port).ok()?;
    let r = c
        .send(
            "GET",
            &path,
            Some("localhost"),
            &[("Authorization", &auth)],
            b"",
        )
        .ok()?;
    let v = (r.status == 200).then(|| r.json())?;
    Some((v["totals"]["human"].as_u64()?, v["totals"]["bot"].as_u64()?))
}

#[test]
fn a_mixed_fleet_counts_100k_redirects_exactly_through_an_origin_crash_and_a_redis_restart() {
    let mut redis = Redis::start_persistent();
    let mut a = Origin::start(&redis, 200);
    // Claim a dead origin's batches after 1 s, not 30.
    let mut conf = std::fs::read_to_string(&a.conf).unwrap();
    conf.push_str("clicks: { claim_idle_ms: 1000, block_ms: 200 }\n");
    std::fs::write(&a.conf, conf).unwrap();
    a.restart();
    let (_b, b_port) = second_origin(&a);
    let codes: Vec<String> = (0..LINKS).map(|i| create_link(a.port, i)).collect();

    let origins = format!("127.0.0.1:{}\", \"127.0.0.1:{b_port}", a.port);
    let mmdb = testkit::country_mmdb();
    let clicks = |name: &str| {
        format!(
            "  clicks: {{ enabled: true, flush_interval_ms: 200, edge_name: {name} }}\n  trusted_proxies: [\"127.0.0.1/32\"]\n  geo: {{ mmdb_path: \"{}\" }}\n",
            mmdb.display()
        )
    };
    let p1 = Edge::pingora_with(&redis.url(), &origins, &clicks("fleet-p1"));
    let p2 = Edge::pingora_with(&redis.url(), &origins, &clicks("fleet-p2"));
    let lua = Edge::openresty_with(
        &format!("127.0.0.1:{}", redis.port()),
        &format!("127.0.0.1:{},127.0.0.1:{b_port}", a.port),
        &[
            ("SU_CLICKS_EDGE_NAME", "fleet-or".into()),
            ("SU_CLICKS_FLUSH_INTERVAL_MS", "200".into()),
            ("SU_TRUSTED_PROXIES", "127.0.0.1/32".into()),
            ("SU_GEO_MMDB_PATH", mmdb.display().to_string()),
        ],
    );
    let ports = [p1.port, p2.port, lua.port];

    // Clients: each sends its share, round-robin over the links, and counts
    // the redirects it received as human or bot.
    let sent = Arc::new(AtomicU64::new(0));
    let clients = ports.len() as u64 * CLIENTS_PER_EDGE;
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let port = ports[(c % ports.len() as u64) as usize];
            let codes = codes.clone();
            let sent = Arc::clone(&sent);
            std::thread::spawn(move || {
                let mut conn = Conn::open(port).unwrap();
                let (mut human, mut bot, mut other) = (0u64, 0u64, 0u64);
                let mut seen = Vec::new();
                let mut i = c;
                while i < TOTAL {
                    let (method, ua, is_bot) = kind(i);
                    let link = (i % codes.len() as u64) as usize;
                    let code = &codes[link];
                    let (addr, lang, qr) = visit(i);
                    let mut headers = vec![("User-Agent", ua), ("X-Forwarded-For", addr)];
                    if let Some(l) = lang {
                        headers.push(("Accept-Language", l));
                    }
                    let path = if qr {
                        format!("/{code}?qr=1")
                    } else {
                        format!("/{code}")
                    };
                    let r = conn
                        .send(method, &path, Some("localhost"), &headers, b"")
                        .unwrap_or_else(|e| panic!("request {i} to port {port}: {e}"));
                    match (r.status, is_bot) {
                        (302, true) => bot += 1,
                        (302, false) => {
                            human += 1;
                            seen.push((link, i));
                        }
                        _ => other += 1,
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    i += clients;
                }
                (human, bot, other, seen)
            })
        })
        .collect();

    // The faults, at fixed points of the run.
    let wait_sent = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(600);
        while sent.load(Ordering::Relaxed) < n {
            assert!(
                Instant::now() < deadline,
                "clients stalled at {}",
                sent.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_sent(TOTAL / 4);
    a.stop(); // SIGKILL
    wait_sent(TOTAL * 2 / 5);
    a.restart();
    wait_sent(TOTAL * 3 / 5);
    redis.restart(); // SIGKILL, then the same data from its append-only file
    let (mut human, mut bot, mut other) = (0, 0, 0);
    let mut humans = Vec::new();
    for h in handles {
        let (hu, bo, ot, seen) = h.join().unwrap();
        human += hu;
        bot += bo;
        other += ot;
        humans.extend(seen);
    }
    assert_eq!(human + bot + other, TOTAL);
    assert!(
        human > TOTAL / 2 && bot > TOTAL / 5,
        "{human} {bot} {other}"
    );

    // Every redirect counted once, whichever origin applied it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = None;
    while Instant::now() < deadline {
        last = tenant_totals(b_port);
        if last == Some((human, bot)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        last,
        Some((human, bot)),
        "stats after {TOTAL} requests ({other} not redirects)\n{}\n{}",
        a.log(),
        [&p1, &p2, &lua]
            .iter()
            .map(|e| e.logs())
            .collect::<String>()
    );
    // Nothing was dropped on the way.
    for e in [&p1, &p2, &lua] {
        let s = e.status();
        assert_eq!(s["clicks"]["dropped"], 0, "{}: {s}", e.name);
    }
    check_dimensions(b_port, &codes, &humans, &mmdb);
    eprintln!("fleet: {human} human + {bot} bot redirects counted exactly; {other} other answers");
}

/// GET `path` on the origin at `port` with the admin key: its JSON.
fn api(port: u16, path: &str) -> serde_json::Value {
    let auth = format!("Bearer {API_KEY}");
    let r = Conn::open(port)
        .unwrap()
        .send(
            "GET",
            path,
            Some("localhost"),
            &[("Authorization", &auth)],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

/// The tenant's human clicks per country, language, source, browser and
/// OS are the clients' tally of the human redirects they received
/// (`humans`: (link, request)), and each link's unique visitors the
/// distinct (address, user agent) pairs among them.
fn check_dimensions(port: u16, codes: &[String], humans: &[(usize, u64)], mmdb: &std::path::Path) {
    use std::collections::{BTreeMap, BTreeSet};
    let db = maxminddb::Reader::open_readfile(mmdb).expect("the country database");
    let country = |ip: &str| -> String {
        let found = db.lookup(ip.parse().unwrap()).ok();
        let rec: Option<serde_json::Value> = found.and_then(|f| f.decode().ok().flatten());
        rec.and_then(|r| r["country_code"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned())
    };
    let mut want: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    let mut pairs: Vec<BTreeSet<(&str, &str)>> = vec![BTreeSet::new(); codes.len()];
    for &(link, i) in humans {
        let (addr, lang, qr) = visit(i);
        let (_, ua, _) = kind(i);
        let lang = lang.map_or("-", |l| &l[..2]);
        // BROWSER: Chrome on Windows, an iPhone's and an iPad's WebKit
        // without `Safari/` (browser `other`).
        let (browser, os) = if ua.contains("Chrome/") {
            ("chrome", "windows")
        } else {
            ("other", "ios")
        };
        for (dim, value) in [
            ("country", country(addr)),
            ("language", lang.to_owned()),
            ("source", if qr { "qr" } else { "link" }.to_owned()),
            ("browser", browser.to_owned()),
            ("os", os.to_owned()),
        ] {
            *want.entry(dim).or_default().entry(value).or_default() += 1;
        }
        pairs[link].insert((addr, ua));
    }
    assert!(want["country"].len() >= 4, "{want:?}");
    let now = shorturl_common::time::now_unix();
    let range = format!(
        "from={}&to={}",
        shorturl_common::time::rfc3339(now - 86_400),
        shorturl_common::time::rfc3339(now + 86_400)
    );
    for (dim, values) in &want {
        let v = api(
            port,
            &format!("/api/v1/stats?app=demo&{range}&group_by={dim}"),
        );
        let got: BTreeMap<String, u64> = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["value"].as_str().unwrap().to_owned(),
                    g["human"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(&got, values, "{dim}");
    }
    for (link, code) in codes.iter().enumerate().take(3) {
        let v = api(port, &format!("/api/v1/links/{code}/stats?{range}"));
        assert_eq!(
            v["uniques"].as_u64(),
            Some(pairs[link].len() as u64),
            "{code}"
        );
    }
}
