//! Click counting on the OpenResty module (protocol section 3.4), against
//! a real Redis: the batches it appends to `su:1:clicks`, decoded with the
//! strict `Batch::decode`, hold exactly what `common::clicks::Accumulator`
//! counts for the same requests; a graceful quit flushes everything; while
//! Redis is down the counts wait in the bounded buffer and reach the stream
//! exactly once after it is back, and what the bound drops is counted.
//!
//! Link records are written to Redis directly (no origin needed: a redirect
//! answered from Redis or the module's caches is a click like any other).

use crate::support;

use std::time::Duration;
use support::clicks::{self, bot_list_user_agents, record, Req, BROWSERS, CHROME_WIN, REFERERS};
use support::http::{self, Conn};
use support::Edge;
use testkit::{free_port, wait_for, Redis};

/// A module (2 workers unless `extra` says otherwise) with click knobs, its
/// origin a closed port, its metrics on their own port.
struct Module {
    edge: Edge,
    metrics_port: u16,
}

impl Module {
    fn start(redis: &Redis, name: &str, flush_ms: u64, extra: &[(&str, String)]) -> Module {
        let metrics_port = free_port();
        let mut env = vec![("SU_METRICS_PORT", metrics_port.to_string())];
        env.extend(extra.iter().cloned());
        Module {
            edge: module(redis, name, flush_ms, &env),
            metrics_port,
        }
    }

    /// `shorturl_edge_click_batches_total{result}`.
    fn batches(&self, result: &str) -> u64 {
        let text = http::get(self.metrics_port, "/metrics", "localhost").text();
        let series = format!("shorturl_edge_click_batches_total{{result=\"{result}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series}in\n{text}"))
    }
}

/// A module with click knobs, its origin a closed port.
fn module(redis: &Redis, name: &str, flush_ms: u64, extra: &[(&str, String)]) -> Edge {
    let mut env = vec![
        ("SU_CLICKS_EDGE_NAME", name.to_owned()),
        ("SU_CLICKS_FLUSH_INTERVAL_MS", flush_ms.to_string()),
        // Redis stops in some tests: cached links stay trusted meanwhile.
        ("SU_UNSUBSCRIBED_GRACE_MS", "60000".to_owned()),
        ("SU_POSITIVE_TTL_SECS", "120".to_owned()),
    ];
    env.extend(extra.iter().cloned());
    let origin = format!("127.0.0.1:{}", free_port());
    let edge = Edge::openresty_with(&format!("127.0.0.1:{}", redis.port()), &origin, &env);
    // Subscribing empties a worker's cache: only what is cached after it
    // is still there when Redis stops.
    wait_for("every worker to subscribe", Duration::from_secs(15), || {
        edge.status()["inval"]["subscribed"] == true
    });
    edge
}

fn conns(edge: &Edge, n: usize) -> Vec<Conn> {
    (0..n).map(|_| Conn::open(edge.port).unwrap()).collect()
}

/// `nginx -s quit` (SIGQUIT to the master, what stop.sh sends), then waits
/// for nginx to exit.
fn quit(edge: &mut Edge) {
    edge.proc.signal(libc::SIGQUIT);
    wait_for("nginx to quit", Duration::from_secs(15), || {
        !edge.proc.is_running()
    });
}

fn clicks_status(edge: &Edge) -> serde_json::Value {
    edge.status()["clicks"].clone()
}

#[test]
fn a_mix_of_requests_counts_exactly_as_the_rust_accumulator_and_quit_flushes_it() {
    let redis = Redis::start();
    let url = redis.url();
    let (mixed, many_refs, elsewhere, unknown) =
        ("clkMixed01", "clkRefs001", "clkOther01", "clkNone001");
    // Counted under their link keys (protocol 3.6: custom codes are per domain).
    let (mixed_key, refs_key) = (
        format!("localhost/{mixed}"),
        format!("localhost/{many_refs}"),
    );
    record(&url, mixed, "localhost");
    record(&url, many_refs, "localhost");
    record(&url, elsewhere, "s.shop55.com");
    support::redis_cmd(
        &url,
        &["SET", &format!("su:1:link:localhost/{unknown}"), "- 1"],
    )
    .unwrap();
    // The other domain's link asked on localhost: a stray record under
    // localhost's key that names s.shop55.com is no link there.
    let stray = format!(
        "2 1 {} s.shop55.com https://example.com/x",
        shorturl_common::time::now_unix() + 3600
    );
    support::redis_cmd(
        &url,
        &["SET", &format!("su:1:link:localhost/{elsewhere}"), &stray],
    )
    .unwrap();

    let mut reqs = Vec::new();
    let bots = bot_list_user_agents();
    let uas = BROWSERS
        .iter()
        .map(|s| s.to_string())
        .chain(bots.iter().cloned());
    for (i, ua) in uas.enumerate() {
        let referer = (i % 15 < REFERERS.len()).then(|| REFERERS[i % 15]);
        let mut r = Req::get(mixed, Some(&ua), referer);
        // HEADs among the bot-list user agents (each browser's class counts).
        r.head = i >= BROWSERS.len() && i % 7 == 3;
        reqs.push(r);
    }
    let mut head = Req::get(mixed, Some(CHROME_WIN), Some("https://t.co/h"));
    head.head = true;
    reqs.push(head);
    reqs.push(Req::get(mixed, None, None));
    reqs.push(Req::get(mixed, Some(""), Some("https://example.com/")));
    // 404s: a link of another domain, an unknown code.
    let mut other_host = Req::get(elsewhere, Some(CHROME_WIN), None);
    other_host.host = "localhost".into();
    reqs.push(other_host);
    reqs.push(Req::get(unknown, Some(CHROME_WIN), None));
    // 25 referrer hosts on one link (5 past the top 20), on one connection
    // so one worker counts them all: h00 30 clicks ... h24 6 clicks.
    let mut refs = Vec::new();
    for i in 0..25u32 {
        for k in 0..(30 - i) {
            let ua = if k % 2 == 0 { CHROME_WIN } else { BROWSERS[4] };
            refs.push(Req::get(
                many_refs,
                Some(ua),
                Some(&format!("https://h{i:02}.example.com/p")),
            ));
        }
    }

    // The module flushes every 5 s, so all of this is normally one flush per
    // worker (the quit's). Should a timer flush fall in the middle, the
    // 25-host link's top 20 would be chosen per flush: try again.
    for attempt in 0..3 {
        clicks::away_from_hour_end(120);
        let name = format!("lua-mix{attempt}");
        let mut edge = module(&redis, &name, 5000, &[]);
        let mut cs = conns(&edge, 8);
        let answers = clicks::send(&mut cs, &reqs);
        let mut one = conns(&edge, 1);
        let ref_answers = clicks::send(&mut one, &refs);
        for ((r, (status, _)), i) in reqs.iter().zip(&answers).zip(0..) {
            let want = if r.code == mixed { 302 } else { 404 };
            assert_eq!(*status, want, "request {i}: {r:?}");
        }
        assert!(ref_answers.iter().all(|(s, _)| *s == 302));
        let counted = (answers.iter().filter(|a| a.0 == 302).count() + refs.len()) as u64;
        drop(cs);
        drop(one);

        quit(&mut edge);
        let got = clicks::stream_batches(&url, &format!("{name}:"));
        assert_eq!(clicks::clicks_in(&got), counted, "{}", edge.logs());
        let with_refs = got
            .iter()
            .filter(|b| b.referrers.iter().any(|r| r.code == refs_key))
            .count();
        if with_refs > 1 && attempt < 2 {
            eprintln!("attempt {attempt}: a timer flush split the 25-host link; again");
            continue;
        }
        let all_reqs: Vec<Req> = reqs.iter().chain(&refs).cloned().collect();
        let all_answers: Vec<(u16, u64)> = answers.iter().chain(&ref_answers).cloned().collect();
        let want = clicks::lines_of(&clicks::expected(&all_reqs, &all_answers));
        let have = clicks::lines_of(&got);
        for (k, n) in &want {
            assert_eq!(have.get(k), Some(n), "line {k:?}");
        }
        assert_eq!(have, want);
        // The 25-host link: the top 20 named, the 5 smallest summed.
        let other = have.iter().find(|((kind, code, _, host), _)| {
            *kind == 'r' && *code == refs_key && host == "~other"
        });
        assert_eq!(other.map(|(_, n)| *n), Some(10 + 9 + 8 + 7 + 6));
        // Every kind of line is there: bots from the list, each class.
        for class in ["mobile", "desktop", "tablet", "bot", "other"] {
            assert!(
                have.keys()
                    .any(|(k, c, _, key)| *k == 'd' && *c == mixed_key && key == class),
                "{class}"
            );
        }
        return;
    }
}

#[test]
fn while_redis_is_down_clicks_wait_and_arrive_exactly_once() {
    let mut redis = Redis::start();
    let url = redis.url();
    let code = "clkDown001";
    record(&url, code, "localhost");
    let m = Module::start(&redis, "lua-down", 100, &[]);
    let edge = &m.edge;
    let mut cs = conns(edge, 16);
    // Every worker caches the link (and sends those clicks).
    let warm = clicks::send(&mut cs, &vec![Req::get(code, Some(CHROME_WIN), None); 16]);
    assert!(warm.iter().all(|(s, _)| *s == 302));
    clicks::await_clicks(&url, "lua-down:", 16);

    redis.stop();
    let mut reqs = Vec::new();
    for i in 0..60 {
        let ua = if i % 3 == 0 {
            "curl/8.5.0"
        } else {
            BROWSERS[4]
        };
        reqs.push(Req::get(code, Some(ua), Some("https://t.co/x")));
    }
    let answers = clicks::send(&mut cs, &reqs);
    assert!(answers.iter().all(|(s, _)| *s == 302));
    wait_for(
        "every worker to buffer its clicks",
        Duration::from_secs(15),
        || {
            let c = clicks_status(edge);
            c["buffered"] == 60 && c["counted"] == 76
        },
    );
    assert!(m.batches("retried") > 0);
    let sent_before = m.batches("sent");

    // Redis back (empty): the buffered batches arrive, each once.
    redis.restart();
    let got = clicks::await_clicks(&url, "lua-down:", 60);
    assert!(m.batches("sent") > sent_before);
    let (human, bot) = got
        .iter()
        .fold((0, 0), |(h, b), x| (h + x.totals().0, b + x.totals().1));
    assert_eq!((human, bot), (40, 20));
    wait_for(
        "the status to show them sent",
        Duration::from_secs(10),
        || {
            let c = clicks_status(edge);
            c["buffered"] == 0 && c["sent"] == 76 && c["dropped"] == 0
        },
    );
    // Later flushes send nothing again.
    let last = clicks_status(edge)["last_flush_unix"].as_u64().unwrap();
    wait_for("two more flushes", Duration::from_secs(10), || {
        clicks_status(edge)["last_flush_unix"].as_u64().unwrap() >= last + 2
    });
    assert_eq!(
        clicks::clicks_in(&clicks::stream_batches(&url, "lua-down:")),
        60
    );
}

#[test]
fn past_the_buffer_bound_the_oldest_clicks_are_dropped_and_counted() {
    let mut redis = Redis::start();
    let url = redis.url();
    let code = "clkBound01";
    record(&url, code, "localhost");
    let edge = &module(
        &redis,
        "lua-bound",
        100,
        &[
            ("SU_WORKERS", "1".into()),
            ("SU_CLICKS_MAX_BUFFERED_CLICKS", "6".into()),
        ],
    );
    let mut cs = conns(edge, 1);
    assert_eq!(
        clicks::send(&mut cs, &[Req::get(code, Some(CHROME_WIN), None)])[0].0,
        302
    );
    clicks::await_clicks(&url, "lua-bound:", 1);
    redis.stop();

    // Six bot clicks fill the buffer; six human clicks push them out
    // (oldest first, however the flushes cut them into batches).
    let bots = clicks::send(&mut cs, &vec![Req::get(code, Some("Wget/1.21"), None); 6]);
    assert!(bots.iter().all(|(s, _)| *s == 302));
    wait_for(
        "the bot clicks to be buffered",
        Duration::from_secs(10),
        || clicks_status(edge)["buffered"] == 6,
    );
    let humans = clicks::send(&mut cs, &vec![Req::get(code, Some(CHROME_WIN), None); 6]);
    assert!(humans.iter().all(|(s, _)| *s == 302));
    wait_for(
        "the bot clicks to be dropped",
        Duration::from_secs(10),
        || {
            let c = clicks_status(edge);
            c["dropped"] == 6 && c["buffered"] == 6 && c["counted"] == 13
        },
    );

    redis.restart();
    let got = clicks::await_clicks(&url, "lua-bound:", 6);
    let (human, bot) = got
        .iter()
        .fold((0, 0), |(h, b), x| (h + x.totals().0, b + x.totals().1));
    assert_eq!((human, bot), (6, 0));
    assert!(edge.logs().contains("click buffer full"));
}

#[test]
fn disabled_counting_counts_nothing() {
    let redis = Redis::start();
    let url = redis.url();
    let code = "clkOff0001";
    record(&url, code, "localhost");
    let edge = &module(&redis, "lua-off", 50, &[("SU_CLICKS_ENABLED", "0".into())]);
    let mut cs = conns(edge, 4);
    let answers = clicks::send(&mut cs, &vec![Req::get(code, Some(CHROME_WIN), None); 20]);
    assert!(answers.iter().all(|(s, _)| *s == 302));
    // A module that counts, started after it, flushes within 50 ms: had
    // the first one counted, its batches would be there by then.
    let on = &module(&redis, "lua-on", 50, &[]);
    let mut c = conns(on, 1);
    assert_eq!(
        clicks::send(&mut c, &[Req::get(code, None, None)])[0].0,
        302
    );
    clicks::await_clicks(&url, "lua-on:", 1);
    assert!(clicks::stream_batches(&url, "lua-off:").is_empty());
    let status = clicks_status(edge);
    assert_eq!(status["enabled"], false);
    assert_eq!(status["counted"], 0);
    assert_eq!(clicks_status(on)["enabled"], true);
}

/// The nonce part of a batch id (`<edge>:<nonce>:<seq>`).
fn nonce(id: &str) -> String {
    id.split(':').nth(1).unwrap_or("").to_owned()
}

#[test]
fn a_reload_loses_no_click_and_new_workers_use_new_ids() {
    let redis = Redis::start();
    let url = redis.url();
    let code = "clkReload1";
    record(&url, code, "localhost");
    // Flushes every 5 s: the old workers' clicks leave with their exit.
    let edge = &module(&redis, "lua-hup", 5000, &[]);
    let mut cs = conns(edge, 8);
    let before = clicks::send(&mut cs, &vec![Req::get(code, Some(CHROME_WIN), None); 40]);
    assert!(before.iter().all(|(s, _)| *s == 302));
    drop(cs);

    edge.proc.signal(libc::SIGHUP);
    let old = clicks::await_clicks(&url, "lua-hup:", 40);
    let old_nonces: std::collections::HashSet<String> = old.iter().map(|b| nonce(&b.id)).collect();

    // The new workers count under nonces of their own.
    wait_for(
        "the new workers to subscribe",
        Duration::from_secs(15),
        || edge.status()["inval"]["subscribed"] == true,
    );
    let mut cs = conns(edge, 8);
    let after = clicks::send(&mut cs, &vec![Req::get(code, Some("curl/8"), None); 10]);
    assert!(after.iter().all(|(s, _)| *s == 302));
    let all = clicks::await_clicks(&url, "lua-hup:", 50);
    let new: Vec<_> = all.iter().filter(|b| !old.contains(b)).collect();
    assert_eq!(
        new.iter()
            .map(|b| b.totals())
            .fold((0, 0), |a, t| (a.0 + t.0, a.1 + t.1)),
        (0, 10)
    );
    assert!(new.iter().all(|b| !old_nonces.contains(&nonce(&b.id))));
}

#[test]
fn header_values_that_are_not_utf8_are_classified_by_their_bytes() {
    // As common::clicks classifies raw header bytes on the Pingora edge:
    // trimmed of ASCII whitespace only, then the same patterns and tokens.
    let redis = Redis::start();
    let url = redis.url();
    let code = "clkBytes01";
    record(&url, code, "localhost");
    let edge = &module(&redis, "lua-bytes", 50, &[]);
    let heads: [&[u8]; 3] = [
        b"User-Agent: Wget/1.21 \xff\r\n",
        b"User-Agent: Mozilla/5.0 (iPhone) \xff\r\nReferer: https://Shop.CN/\xff\xfe?q\r\n",
        b"User-Agent: Mozilla/5.0 (X11; Linux) \xc0\xaf\r\nReferer: https://\xffa.b/\r\n",
    ];
    clicks::away_from_hour_end(60);
    let t = shorturl_common::time::now_unix();
    for h in heads {
        let mut req = format!("GET /{code} HTTP/1.1\r\nHost: localhost\r\n").into_bytes();
        req.extend_from_slice(h);
        req.extend_from_slice(b"\r\n");
        let r = http::exchange_raw(edge.port, &req).unwrap();
        assert_eq!(r.response.map(|r| r.status), Some(302));
    }
    let got = clicks::lines_of(&clicks::await_clicks(&url, "lua-bytes:", 3));
    let (hour, day) = (t - t % 3600, t - t % 86_400);
    let want: clicks::Lines = [
        ('h', hour, "human", 2),
        ('h', hour, "bot", 1),
        ('r', day, "-", 2),
        ('r', day, "shop.cn", 1),
        ('d', day, "bot", 1),
        ('d', day, "mobile", 1),
        ('d', day, "desktop", 1),
        // The families of the two humans' user agents (protocol 3.7).
        ('x', day, "os:ios", 1),
        ('x', day, "os:linux", 1),
    ]
    .into_iter()
    .map(|(k, at, key, n)| ((k, format!("localhost/{code}"), at, key.to_owned()), n))
    .collect();
    assert_eq!(got, want);
}
