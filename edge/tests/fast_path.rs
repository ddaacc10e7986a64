//! The redirect fast path (issue 17) on a real edge in front of a real
//! Redis (the origin is a closed port): a hot hit is answered by the fast
//! path (`shorturl_edge_fast_path_total{result="hit"}`), a miss is looked
//! up and answered by it too (`result="resolved"`), every other kind
//! of request is handed to the proxy and still gets the proxy's answer,
//! kept-alive connections move between the two, a partial head is closed
//! at the head deadline, and the answer bytes are the proxy's own.

use crate::support;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;
use support::http::{read_response, Conn};
use support::{record_line, redis_set, start_edge, Edge, EdgeOpts, STORE_KEY, TIMEOUT};
use testkit::tls::{connect, Ca, ClientOpts};
use testkit::{free_port, wait_for, Redis, TempDir};

const DOMAIN: &str = "s.shop55.com";

fn edge(redis: &Redis, extra: &'static str) -> Edge {
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = extra;
    start_edge(opts)
}

/// `(hit, negative, resolved, handover)` of
/// `shorturl_edge_fast_path_total`, read from the metrics listener (which
/// the fast path never sees).
fn fast(e: &Edge) -> (u64, u64, u64, u64) {
    let m = |r: &str| e.metric(&format!("shorturl_edge_fast_path_total{{result=\"{r}\"}}")) as u64;
    (m("hit"), m("negative"), m("resolved"), m("handover"))
}

/// Counter movements since `base` (the readiness probes are handovers).
fn since(e: &Edge, base: (u64, u64, u64, u64)) -> (u64, u64, u64, u64) {
    let now = fast(e);
    (
        now.0 - base.0,
        now.1 - base.1,
        now.2 - base.2,
        now.3 - base.3,
    )
}

/// Sends `bytes` on a new connection and reads one answer.
fn raw(port: u16, bytes: &[u8], head: bool) -> support::http::Response {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s);
    r.get_mut().write_all(bytes).unwrap();
    read_response(&mut r, head)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(bytes)))
}

fn links(redis: &Redis) {
    redis_set(
        redis,
        &format!("su:1:link:{DOMAIN}/fast01"),
        &record_line(DOMAIN, "https://example.com/f1?x=1", 3600),
    );
    redis_set(redis, &format!("su:1:link:{DOMAIN}/gone01"), "- 1");
    redis_set(redis, &format!("su:1:link:{DOMAIN}/gone02"), "- 1");
    // Under another domain's key, a record that names DOMAIN: no link
    // there (protocol 3.5), whatever the record says.
    redis_set(
        redis,
        "su:1:link:other.example/fast01",
        &record_line(DOMAIN, "https://example.com/f1?x=1", 3600),
    );
}

#[test]
fn hot_hits_take_the_fast_path_and_every_other_kind_goes_to_the_proxy() {
    let redis = Redis::start();
    let e = edge(&redis, "");
    links(&redis);
    let base = fast(&e);
    let mut c = Conn::open(e.port).unwrap();
    let ua = [(
        "User-Agent",
        "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    )];
    // First request: a miss, looked up by the fast path; then hits.
    let r = c.send("GET", "/fast01", Some(DOMAIN), &ua, b"").unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/f1?x=1"));
    assert_eq!(since(&e, base), (0, 0, 1, 0));
    let r = c
        .send("GET", "/fast01?utm=a", Some(DOMAIN), &ua, b"")
        .unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/f1?x=1"));
    assert_eq!(r.header("content-length"), Some("0"));
    assert_eq!(r.header("cache-control"), Some("private, max-age=60"));
    assert_eq!(r.header("connection"), Some("keep-alive"));
    assert!(r.header("date").is_some_and(|d| d.ends_with(" GMT")));
    assert_eq!(since(&e, base), (1, 0, 1, 0));
    // HEAD too (a bot click), same headers, no body.
    let r = c.send("HEAD", "/fast01", Some(DOMAIN), &[], b"").unwrap();
    assert_eq!((r.status, r.header("content-length")), (302, Some("0")));
    assert_eq!(since(&e, base), (2, 0, 1, 0));
    // A known-absent code: looked up first, then from memory.
    let first = c.get("/gone01", DOMAIN).unwrap();
    let second = c.get("/gone01", DOMAIN).unwrap();
    assert_eq!((first.status, second.status), (404, 404));
    assert_eq!(first.body, second.body);
    assert_eq!(second.json()["error"], "not_found");
    assert_eq!(since(&e, base), (2, 1, 2, 0));
    // A code neither Redis nor the (closed) origin knows: the lookup
    // fails, the fast path answers the proxy's 503.
    let r = c.get("/unkn01", DOMAIN).unwrap();
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    assert_eq!(r.json()["error"], "unavailable");
    assert_eq!(r.header("connection"), Some("keep-alive"));
    assert_eq!(since(&e, base), (2, 1, 3, 0));
    // The clicks of the fast answers are counted like the proxy's: 3
    // redirects (one looked up), the HEAD one a bot.
    wait_for("3 clicks counted", TIMEOUT, || {
        e.metric("shorturl_edge_clicks_total{kind=\"human\"}") as u64 == 2
            && e.metric("shorturl_edge_clicks_total{kind=\"bot\"}") as u64 == 1
    });
    assert_eq!(
        e.counter("local", "hit"),
        3,
        "fast answers from memory are local hits in the status"
    );
    assert_eq!(e.counter("local", "miss"), 3, "looked-up ones local misses");
    let st = e.typed_status().fast_path.unwrap();
    assert_eq!(
        (st.enabled, st.hit, st.negative, st.resolved),
        (true, 2, 1, 3)
    );

    // Every other kind is the proxy's, with the proxy's answer.
    let pipelined = [
        &b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n"[..],
        &b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n"[..],
    ]
    .concat();
    let cases: Vec<(&str, Vec<u8>, bool, u16)> = vec![
        ("a browser's 404 (looked up, then the proxy's)", b"GET /gone02 HTTP/1.1\r\nHost: s.shop55.com\r\nAccept: text/html\r\n\r\n".to_vec(), false, 404),
        ("API", b"GET /api/v1/links/fast01 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n".to_vec(), false, 503),
        ("page path", b"GET /fast01/x HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n".to_vec(), false, 404),
        ("status", b"GET /shorturl_status HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n".to_vec(), false, 200),
        ("health", b"GET /healthz HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n".to_vec(), false, 200),
        ("POST", b"POST /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\nContent-Length: 0\r\n\r\n".to_vec(), false, 405),
        ("body", b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\nContent-Length: 5\r\n\r\nhello".to_vec(), false, 302),
        ("chunked body", b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), false, 302),
        ("invalid Host", b"GET /fast01 HTTP/1.1\r\nHost: a_b.com\r\n\r\n".to_vec(), false, 400),
        ("no Host", b"GET /fast01 HTTP/1.1\r\n\r\n".to_vec(), false, 400),
        ("malformed head", b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\nno colon here\r\n\r\n".to_vec(), false, 400),
        ("upgrade", b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n".to_vec(), false, 302),
        ("odd target", b"GET /fast01?q=a{b} HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n".to_vec(), false, 302),
        ("pipelined", pipelined, false, 302),
    ];
    for (what, bytes, head, want) in cases {
        let (hit, neg, resolved, handover) = fast(&e);
        let r = raw(e.port, &bytes, head);
        assert_eq!(r.status, want, "{what}: {}", r.text());
        assert_eq!(fast(&e), (hit, neg, resolved, handover + 1), "{what}");
    }
    // The code on another domain is another key: looked up on the fast
    // path (no link there), then a negative from memory.
    let other = b"GET /fast01 HTTP/1.1\r\nHost: other.example\r\n\r\n";
    let (hit, neg, resolved, handover) = fast(&e);
    assert_eq!(raw(e.port, other, false).status, 404);
    assert_eq!(fast(&e), (hit, neg, resolved + 1, handover));
    assert_eq!(raw(e.port, other, false).status, 404);
    assert_eq!(fast(&e), (hit, neg + 1, resolved + 1, handover));
}

#[test]
fn one_connection_goes_fast_slow_fast() {
    let redis = Redis::start();
    let e = edge(&redis, "");
    links(&redis);
    // Warm both entries.
    assert_eq!(support::http::get(e.port, "/fast01", DOMAIN).status, 302);
    assert_eq!(support::http::get(e.port, "/gone01", DOMAIN).status, 404);
    let before = fast(&e);
    let mut c = Conn::open(e.port).unwrap();
    let statuses: Vec<u16> = [
        ("GET", "/fast01"),
        ("GET", "/healthz"),
        ("GET", "/fast01"),
        ("GET", "/nothing/here"),
        ("GET", "/gone01"),
        ("POST", "/fast01"),
        ("HEAD", "/fast01"),
    ]
    .iter()
    .map(|(m, p)| {
        let r = c.send(m, p, Some(DOMAIN), &[], b"").unwrap();
        assert_eq!(r.header("connection"), Some("keep-alive"), "{m} {p}");
        r.status
    })
    .collect();
    assert_eq!(statuses, [302, 200, 302, 404, 404, 405, 302]);
    assert_eq!(
        since(&e, before),
        (3, 1, 0, 3),
        "three fast hits, one fast 404, three requests for the proxy, one connection"
    );
    let after = fast(&e);
    // HTTP/1.0 and `Connection: close`: answered, then closed.
    for (version, headers) in [("1.0", &[][..]), ("1.1", &[("Connection", "close")][..])] {
        let mut c = Conn::open(e.port).unwrap();
        let r = c
            .send_version(version, "GET", "/fast01", Some(DOMAIN), headers, b"")
            .unwrap();
        assert_eq!((r.status, r.header("connection")), (302, Some("close")));
        let mut rest = Vec::new();
        let n = c.into_stream().read_to_end(&mut rest).unwrap_or(0);
        assert_eq!(n, 0, "closed after the answer");
    }
    // HTTP/1.0 asking for keep-alive keeps it.
    let mut c = Conn::open(e.port).unwrap();
    for _ in 0..2 {
        let r = c
            .send_version(
                "1.0",
                "GET",
                "/fast01",
                Some(DOMAIN),
                &[("Connection", "keep-alive")],
                b"",
            )
            .unwrap();
        assert_eq!(
            (r.status, r.header("connection")),
            (302, Some("keep-alive"))
        );
    }
    let last = fast(&e);
    assert_eq!(last.0 - after.0, 4);
}

/// The bytes until the end of the head, and the body by `Content-Length`.
fn read_answer(s: &mut TcpStream, head: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&out)
        );
        out.push(b[0]);
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let len = text
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if !head {
        let mut body = vec![0; len];
        s.read_exact(&mut body).unwrap();
        out.extend_from_slice(&body);
    }
    out
}

fn without_date(a: &[u8]) -> String {
    String::from_utf8_lossy(a)
        .split("\r\n")
        .filter(|l| !l.starts_with("Date: "))
        .collect::<Vec<_>>()
        .join("\r\n")
}

#[test]
fn answers_are_byte_for_byte_the_proxys() {
    let redis = Redis::start();
    let conf = "  redirect: { status: 307, cache_control: \"no-cache\" }\n  limits: { unknown_per_ip_per_sec: 0 }\n";
    let fast_edge = edge(&redis, conf);
    let slow_edge = edge(
        &redis,
        "  redirect: { status: 307, cache_control: \"no-cache\" }\n  limits: { unknown_per_ip_per_sec: 0 }\n  fast_path: { enabled: false }\n",
    );
    links(&redis);
    let requests: [(&[u8], bool); 7] = [
        (b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", false),
        (b"HEAD /fast01 HTTP/1.1\r\nHost: S.Shop55.COM:80\r\nUser-Agent: x\r\n\r\n", true),
        (b"GET /fast01?a=1&b=%2F HTTP/1.1\r\nHost: s.shop55.com\r\nReferer: https://r.example/\r\n\r\n", false),
        (b"GET /gone01 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", false),
        (b"HEAD /gone01 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", true),
        (b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\nConnection: close\r\n\r\n", false),
        (b"GET /fast01 HTTP/1.0\r\nHost: s.shop55.com\r\n\r\n", false),
    ];
    let mut answers = Vec::new();
    for e in [&fast_edge, &slow_edge] {
        // Warm: one request of each code first (each a lookup).
        assert_eq!(support::http::get(e.port, "/fast01", DOMAIN).status, 307);
        assert_eq!(support::http::get(e.port, "/gone01", DOMAIN).status, 404);
        let before = fast(e);
        let mut got = Vec::new();
        for (req, head) in requests {
            let mut s = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            // Twice on one connection where it stays open.
            s.write_all(req).unwrap();
            let a = read_answer(&mut s, head);
            if String::from_utf8_lossy(&a).contains("keep-alive") {
                s.write_all(req).unwrap();
                assert_eq!(without_date(&read_answer(&mut s, head)), without_date(&a));
            }
            got.push(without_date(&a));
        }
        let after = fast(e);
        answers.push((got, (after.0 - before.0, after.1 - before.1)));
    }
    let (fast_answers, fast_counts) = &answers[0];
    let (slow_answers, slow_counts) = &answers[1];
    for (i, (f, s)) in fast_answers.iter().zip(slow_answers).enumerate() {
        assert_eq!(
            f,
            s,
            "request {i}: {:?}",
            String::from_utf8_lossy(requests[i].0)
        );
    }
    assert!(
        fast_answers[0].starts_with(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: https://example.com/f1?x=1\r\n"
        ),
        "{}",
        fast_answers[0]
    );
    // Twice each where the connection stays open (all but the last two).
    assert_eq!(
        *fast_counts,
        (8, 4),
        "the fast edge answered them all itself"
    );
    assert_eq!(*slow_counts, (0, 0), "the slow edge never did");

    // Misses: each code new to both edges' memory, looked up once by each
    // (the fast edge's fast path, the slow edge's proxy), same bytes.
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/fresh1"),
        &record_line(DOMAIN, "https://example.com/fresh?1", 3600),
    );
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/fresh2"),
        &record_line("other.example", "https://example.com/other", 3600),
    );
    redis_set(&redis, &format!("su:1:link:{DOMAIN}/gone03"), "- 4");
    let misses: [(&[u8], bool); 5] = [
        (b"GET /fresh1 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", false),
        (b"GET /fresh2 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", false),
        (b"HEAD /gone03 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", true),
        (b"GET /unkn02 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", false),
        (b"HEAD /unkn03 HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n", true),
    ];
    let mut got = Vec::new();
    for e in [&fast_edge, &slow_edge] {
        let before = fast(e);
        let answers: Vec<String> = misses
            .iter()
            .map(|(req, head)| {
                let mut s = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.write_all(req).unwrap();
                without_date(&read_answer(&mut s, *head))
            })
            .collect();
        got.push((answers, since(e, before)));
    }
    for (i, (f, s)) in got[0].0.iter().zip(&got[1].0).enumerate() {
        assert_eq!(f, s, "miss {i}: {:?}", String::from_utf8_lossy(misses[i].0));
    }
    let statuses: Vec<&str> = got[0].0.iter().map(|a| &a[9..12]).collect();
    assert_eq!(statuses, ["307", "404", "404", "503", "503"]);
    assert_eq!(got[0].1, (0, 0, 5, 0), "the fast edge looked them all up");
    assert_eq!(got[1].1, (0, 0, 0, 0));
    let st = slow_edge.typed_status().fast_path.unwrap();
    assert_eq!((st.enabled, st.hit, st.handover), (false, 0, 0));
}

#[test]
fn a_partial_head_is_closed_at_the_head_deadline() {
    let redis = Redis::start();
    let e = edge(&redis, "  limits: { header_timeout_secs: 1 }\n");
    links(&redis);
    assert_eq!(support::http::get(e.port, "/fast01", DOMAIN).status, 302);
    let timeouts = || e.metric("shorturl_connections_header_timeouts_total") as u64;
    let closed_without_answer = |mut s: TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    };
    // On a new connection.
    let mut s = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    s.write_all(b"GET /fast01 HTTP/1.1\r\nHost: s.sh").unwrap();
    closed_without_answer(s);
    assert_eq!(timeouts(), 1);
    // After a fast answer on a kept-alive connection.
    let mut c = Conn::open(e.port).unwrap();
    assert_eq!(c.get("/fast01", DOMAIN).unwrap().status, 302);
    let mut s = c.into_stream();
    s.write_all(b"GET /fast01 HTTP/1.1\r\n").unwrap();
    closed_without_answer(s);
    assert_eq!(timeouts(), 2);
    assert_eq!(fast(&e).0, 1);
}

#[test]
fn negative_answers_count_against_the_unknown_code_limit() {
    let redis = Redis::start();
    let e = edge(
        &redis,
        "  limits: { unknown_per_ip_per_sec: 3 }\n  cache: { negative_ttl_secs: 600 }\n",
    );
    links(&redis);
    let mut c = Conn::open(e.port).unwrap();
    // The link first: a miss is refused too once the client is over the
    // unknown-code limit; a cached record never is.
    assert_eq!(c.get("/fast01", DOMAIN).unwrap().status, 302);
    let statuses: Vec<u16> = (0..12)
        .map(|_| c.get("/gone01", DOMAIN).unwrap().status)
        .collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| matches!(s, 404 | 429)),
        "{statuses:?}"
    );
    let (_, negative, _, _) = fast(&e);
    let n404 = statuses.iter().filter(|s| **s == 404).count() as u64;
    assert!(
        negative >= 1 && negative < n404,
        "{negative} fast of {n404} 404s"
    );
    assert!(e.metric("shorturl_limits_refused_total{limit=\"unknown\"}") >= 1.0);
    // The access log has the fast path's lines with the proxy's fields.
    let line = e.log_line("GET /gone01 404 NEG");
    assert!(line.contains(" 127.0.0.1 "), "{line}");
    assert_eq!(c.get("/fast01", DOMAIN).unwrap().status, 302);
    assert_eq!(c.get("/fast01", DOMAIN).unwrap().status, 302);
    let line = e.log_line("GET /fast01 302 HIT");
    assert!(line.ends_with("us"), "{line}");
}

#[test]
fn http11_over_tls_takes_the_fast_path_and_http2_does_not() {
    let redis = Redis::start();
    let ca = Ca::new("fast path test ca");
    let certs = TempDir::new("certs");
    ca.issue(&["localhost"], &[], 30)
        .write(certs.path(), "localhost");
    ca.issue(&[DOMAIN], &[], 30).write(certs.path(), DOMAIN);
    let tls_port = free_port();
    let extra: &'static str = Box::leak(
        format!(
            "  tls_listen: [\"127.0.0.1:{tls_port}\"]\n  tls: {{ cert_dir: \"{}\", default_cert: localhost, store_key: \"{STORE_KEY}\" }}\n  https: {{ hsts: \"max-age=300\" }}\n",
            certs.path().display()
        )
        .into_boxed_str(),
    );
    let e = edge(&redis, extra);
    wait_for("the TLS listener", TIMEOUT, || {
        connect(tls_port, &ClientOpts::default()).is_ok()
    });
    links(&redis);
    let base = fast(&e);
    // HTTP/1.1 over TLS: the miss, then hits from the fast path, with HSTS.
    let pem = ca.pem();
    let mut c = connect(
        tls_port,
        &ClientOpts {
            sni: Some(DOMAIN),
            roots: Some(&pem),
            alpn: Some(b"\x08http/1.1"),
            ..Default::default()
        },
    )
    .unwrap();
    for _ in 0..3 {
        let r = c.get("/fast01", DOMAIN).unwrap();
        assert_eq!(r.status, 302);
        assert_eq!(r.header("strict-transport-security"), Some("max-age=300"));
    }
    let r = c.get("/gone01", DOMAIN).unwrap();
    let r2 = c.get("/gone01", DOMAIN).unwrap();
    assert_eq!((r.status, r2.status), (404, 404));
    assert_eq!(r2.header("strict-transport-security"), Some("max-age=300"));
    assert_eq!(since(&e, base), (2, 1, 2, 0));
    // Plain HTTP: the fast path, no HSTS.
    let r = support::http::get(e.port, "/fast01", DOMAIN);
    assert_eq!(
        (r.status, r.header("strict-transport-security")),
        (302, None)
    );
    assert_eq!(since(&e, base), (3, 1, 2, 0));
    // HTTP/2 (ALPN h2): the whole connection is the proxy's.
    let ca_file = certs.path().join("ca.pem");
    std::fs::write(&ca_file, &pem).unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2", "--cacert"])
        .arg(&ca_file)
        .args(["--resolve", &format!("{DOMAIN}:{tls_port}:127.0.0.1")])
        .args(["-o", "/dev/null", "-w", "%{http_version} %{http_code}\n"])
        .arg(format!("https://{DOMAIN}:{tls_port}/fast01"))
        .args(["-o", "/dev/null", "-w", "%{http_version} %{http_code}\n"])
        .arg(format!("https://{DOMAIN}:{tls_port}/gone01"))
        .output()
        .expect("run curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 302\n2 404\n");
    assert_eq!(
        since(&e, base),
        (3, 1, 2, 0),
        "h2 requests never touch the fast path"
    );
}
