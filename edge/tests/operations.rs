//! Operations: config validation, graceful upgrade under load, creation
//! limits.

use crate::support;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use support::http::{get, Conn};
use support::{
    edge_bin, record_line, redis_set, start_edge, upgrade, EdgeOpts, STORE_KEY, TIMEOUT,
};
use testkit::{free_port, wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";

#[test]
fn test_flag_validates_configs() {
    let ok = Command::new(edge_bin())
        .args(["--test", "-c"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../conf/edge.yaml"))
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "conf/edge.yaml: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // The dev config's TLS listener reads the shared store: its store key
    // comes from the environment (scripts/stack.sh: var/dev-tls-store-key).
    let dev_config = concat!(env!("CARGO_MANIFEST_DIR"), "/../conf/edge.dev.yaml");
    let dev = Command::new(edge_bin())
        .args(["--test", "-c"])
        .arg(dev_config)
        .env("SHORTURL_EDGE_TLS_STORE_KEY", STORE_KEY)
        .output()
        .unwrap();
    assert!(
        dev.status.success(),
        "conf/edge.dev.yaml: {}",
        String::from_utf8_lossy(&dev.stderr)
    );
    let keyless = Command::new(edge_bin())
        .args(["--test", "-c"])
        .arg(dev_config)
        .env_remove("SHORTURL_EDGE_TLS_STORE_KEY")
        .output()
        .unwrap();
    assert_eq!(keyless.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&keyless.stderr);
    assert!(
        stderr.contains("edge.tls.store_key: required")
            && stderr.contains("SHORTURL_EDGE_TLS_STORE_KEY"),
        "{stderr}"
    );

    for variant in ["edge.cluster.yaml", "edge.sentinel.yaml"] {
        let path = format!("{}/../conf/{variant}", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(edge_bin())
            .args(["--test", "-c", &path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "conf/{variant}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let dir = testkit::TempDir::new("edge-conf");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "server: {version: 1}\nedge: {listen: []}\n").unwrap();
    let out = Command::new(edge_bin())
        .args(["--test", "-c"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
}

#[test]
fn creations_are_rate_limited_per_ip() {
    let redis = Redis::start();
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = "  limits: { creations_per_ip_per_sec: 2 }\n";
    let edge = start_edge(opts);
    // A burst well inside one second (the window starts at the first one),
    // one connection each: a failed forward closes its connection.
    let statuses: Vec<u16> = (0..6)
        .map(|_| {
            Conn::open(edge.port)
                .and_then(|mut c| {
                    c.send(
                        "POST",
                        "/api/v1/links",
                        Some("localhost"),
                        &[],
                        br#"{"url":"https://e.com/"}"#,
                    )
                })
                .map_or(0, |r| r.status)
        })
        .collect();
    // The first two were forwarded (and failed: no origin), the rest refused.
    assert!(
        statuses[..2].iter().all(|s| *s == 502 || *s == 503),
        "{statuses:?}"
    );
    assert_eq!(statuses[2..], [429; 4], "{statuses:?}");
    assert_eq!(
        edge.metric("shorturl_limits_refused_total{limit=\"creations\"}"),
        4.0
    );
}

#[test]
fn graceful_upgrade_under_load_fails_no_request() {
    let redis = Redis::start();
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/upgr01"),
        &record_line(DOMAIN, "https://example.com/u", 3600),
    );
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.threads = 1;
    let mut old = start_edge(opts);
    let port = old.port;

    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..4)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    // A new connection per request: every connect must be accepted.
                    match Conn::open(port).and_then(|mut c| c.get("/upgr01", DOMAIN)) {
                        Ok(r) if r.status == 302 => ok += 1,
                        Ok(r) => failed.push(format!("status {}", r.status)),
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    wait_for("load to start", TIMEOUT, || {
        get(port, "/upgr01", DOMAIN).status == 302
    });

    let mut new = upgrade(&mut old);
    // Keep the load on the new process for a moment.
    let served_by_new = |n: u32| (0..n).all(|_| get(port, "/upgr01", DOMAIN).status == 302);
    assert!(served_by_new(50));
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for l in loaders {
        let (ok, failed) = l.join().unwrap();
        assert!(
            failed.is_empty(),
            "failed requests across the upgrade: {failed:?}\nold log:\n{}\nnew log:\n{}",
            old.log(),
            new.log()
        );
        total += ok;
    }
    assert!(total > 0);
    eprintln!("{total} requests served across the upgrade, 0 failed");
    assert!(new.is_running());
}

#[test]
fn size_limits_and_idle_keepalive_timeout() {
    let redis = Redis::start();
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/idle01"),
        &record_line(DOMAIN, "https://example.com/i", 3600),
    );
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra =
        "  limits: { max_uri_bytes: 128, max_header_bytes: 512, keepalive_timeout_secs: 1 }\n";
    let edge = start_edge(opts);

    let long_uri = format!("/idle01?{}", "q".repeat(200));
    let r = get(edge.port, &long_uri, DOMAIN);
    assert_eq!(r.status, 414);
    assert_eq!(r.json()["error"], "uri_too_long");
    let big = "v".repeat(600);
    let r = support::http::request(edge.port, "GET", "/idle01", DOMAIN, &[("X-Big", &big)], b"");
    assert_eq!(r.status, 431);
    assert_eq!(r.json()["error"], "headers_too_large");

    // An idle keep-alive connection is closed by the edge after its timeout.
    let mut c = Conn::open(edge.port).unwrap();
    assert_eq!(c.get("/idle01", DOMAIN).unwrap().status, 302);
    let started = std::time::Instant::now();
    let mut stream = c.into_stream();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 1];
    match std::io::Read::read(&mut stream, &mut buf) {
        Ok(0) => {}
        Ok(_) => panic!("server sent data on an idle connection"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("idle connection was not closed by the edge: {e}"),
    }
    eprintln!("idle keep-alive closed after {:?}", started.elapsed());
}

/// A loopback HTTP server recording what the edge forwards to it (stands in
/// for the origin where the test must see the raw upstream request).
fn capture_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                loop {
                    let mut head = String::new();
                    let mut line = String::new();
                    let mut len = 0usize;
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        head.push_str(&line);
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = tx.send(format!("{head}\n{}", String::from_utf8_lossy(&body)));
                    let resp = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";
                    if r.get_mut().write_all(resp.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, rx)
}

#[test]
fn api_requests_are_forwarded_unchanged_with_x_forwarded_for() {
    let redis = Redis::start();
    let (origin_port, seen) = capture_server();
    let edge = start_edge(EdgeOpts::new(
        redis.url(),
        vec![format!("127.0.0.1:{origin_port}")],
    ));
    let body = br#"{"url":"https://example.com/fwd","domain":"s.shop55.com"}"#;
    let r = support::http::request(
        edge.port,
        "POST",
        "/api/v1/links?trace=1",
        "S.Shop55.com",
        &[
            ("Authorization", "Bearer k"),
            ("X-Forwarded-For", "10.1.1.1"),
        ],
        body,
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.text(), r#"{"ok":true}"#);
    let req = std::iter::from_fn(|| seen.recv_timeout(TIMEOUT).ok())
        .find(|r| r.starts_with("POST "))
        .unwrap_or_else(|| panic!("no POST reached the origin"));
    let lower = req.to_ascii_lowercase();
    assert!(
        req.starts_with("POST /api/v1/links?trace=1 HTTP/1.1\r\n"),
        "{req}"
    );
    assert!(lower.contains("host: s.shop55.com\r\n"), "{req}");
    assert!(lower.contains("authorization: bearer k\r\n"), "{req}");
    // No trusted proxies: what the client wrote in X-Forwarded-For is not
    // passed on; the origin sees the client address the edge used.
    assert!(lower.contains("x-forwarded-for: 127.0.0.1\r\n"), "{req}");
    assert!(req.ends_with(std::str::from_utf8(body).unwrap()), "{req}");
    // Internal paths are never forwarded from clients.
    let r = get(edge.port, "/internal/v1/records/abcdef", DOMAIN);
    assert_eq!(r.status, 404);
    assert!(std::iter::from_fn(|| seen.try_recv().ok()).all(|r| !r.contains("/internal/")));
}

/// Behind trusted proxies the client is the rightmost untrusted
/// `X-Forwarded-For` hop: limits, the access log and the forwarded header
/// all use it; from any other peer the header is ignored.
#[test]
fn trusted_proxies_name_the_client_for_limits_log_and_origin() {
    let redis = Redis::start();
    let (origin_port, seen) = capture_server();
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{origin_port}")]);
    opts.extra = "  trusted_proxies: [127.0.0.2/32, 10.0.0.0/8]\n  limits: { creations_per_ip_per_sec: 1 }\n";
    let edge = start_edge(opts);
    let create = |peer: [u8; 4], xff: &str| {
        let mut c = Conn::open_from(peer.into(), edge.port).unwrap();
        c.send(
            "POST",
            "/api/v1/links",
            Some("localhost"),
            &[("X-Forwarded-For", xff)],
            br#"{"url":"https://e.com/"}"#,
        )
        .unwrap()
        .status
    };
    let forwarded = || {
        let req = std::iter::from_fn(|| seen.recv_timeout(TIMEOUT).ok())
            .find(|r| r.starts_with("POST "))
            .unwrap_or_else(|| panic!("no POST reached the origin"));
        req.to_ascii_lowercase()
            .lines()
            .find_map(|l| l.strip_prefix("x-forwarded-for: ").map(str::to_owned))
            .unwrap_or_else(|| panic!("no x-forwarded-for in {req}"))
    };

    // Through the trusted proxy 127.0.0.2 and the trusted hop 10.9.9.9:
    // the client is 1.2.3.4 (6.6.6.6 is whatever the client claimed).
    assert_eq!(create([127, 0, 0, 2], "6.6.6.6, 1.2.3.4, 10.9.9.9"), 201);
    assert_eq!(forwarded(), "1.2.3.4, 10.9.9.9, 127.0.0.2");
    edge.log_line(" 1.2.3.4 POST /api/v1/links 201 FWD ");
    // Its creation budget (1/s) is its own: spent for 1.2.3.4...
    assert_eq!(create([127, 0, 0, 2], "1.2.3.4"), 429);
    // ...but not for another client behind the same proxy.
    assert_eq!(create([127, 0, 0, 2], "5.5.5.5"), 201);
    assert_eq!(forwarded(), "5.5.5.5, 127.0.0.2");

    // An untrusted peer's header is ignored: it is the client itself.
    assert_eq!(create([127, 0, 0, 3], "1.2.3.4"), 201);
    assert_eq!(forwarded(), "127.0.0.3");
    edge.log_line(" 127.0.0.3 POST /api/v1/links 201 FWD ");
    assert_eq!(create([127, 0, 0, 3], "7.7.7.7"), 429);
}

/// With `access_log.truncate_addresses` the log names the client's
/// network only (IPv4 /24, IPv6 /48: `common/data/truncated_addresses.txt`
/// holds the cases both edges are tested against), also behind a trusted
/// proxy; limits still count the whole address.
#[test]
fn the_access_log_can_name_networks_instead_of_clients() {
    let redis = Redis::start();
    let (origin_port, _seen) = capture_server();
    let edge = start_edge(EdgeOpts {
        extra: "  trusted_proxies: [127.0.0.2/32]\n",
        truncate_log_addresses: true,
        ..EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{origin_port}")])
    });
    for xff in ["203.0.113.77", "2001:db8:abcd:12:1::9"] {
        let mut c = Conn::open_from([127, 0, 0, 2].into(), edge.port).unwrap();
        let r = c
            .send(
                "GET",
                "/favicon.ico",
                Some("localhost"),
                &[("X-Forwarded-For", xff)],
                b"",
            )
            .unwrap();
        assert_eq!(r.status, 404);
    }
    edge.log_line(" 203.0.113.0 GET /favicon.ico 404 ");
    edge.log_line(" 2001:db8:abcd:: GET /favicon.ico 404 ");
    let mut c = Conn::open_from([127, 0, 0, 3].into(), edge.port).unwrap();
    assert_eq!(
        c.send("GET", "/favicon.ico", Some("localhost"), &[], b"")
            .unwrap()
            .status,
        404
    );
    edge.log_line(" 127.0.0.0 GET /favicon.ico 404 ");
    let log = std::fs::read_to_string(edge.dir.path().join("access.log")).unwrap();
    assert!(
        !log.contains("203.0.113.77") && !log.contains("12:1::9"),
        "{log}"
    );
}

/// The edge's own requests to an origin carry `Authorization: Bearer
/// <edge.origin.internal_token>` (contract A of issue 23; here from
/// `SHORTURL_EDGE_INTERNAL_TOKEN`): the record fetch, the status merge and
/// the heartbeat. Health checks and forwarded client requests do not. A
/// 401 on them is logged at error level naming the setting; the token is
/// never logged nor shown in the status. The origin is a stand-in peer that
/// records what it gets.
#[test]
fn the_edges_own_origin_requests_carry_the_internal_token() {
    use testkit::peer::Peer;
    const TOKEN: &str = "edge-t0ken-Zq9";
    let redis = Redis::start();
    let peer = Peer::start();
    let edge = start_edge(EdgeOpts {
        extra: "  heartbeat_interval_ms: 100\n",
        env: vec![("SHORTURL_EDGE_INTERNAL_TOKEN", TOKEN.into())],
        ..EdgeOpts::new(redis.url(), vec![peer.addr()])
    });
    let bearer = format!("Bearer {TOKEN}");
    peer.require_authorization(Some(&bearer));
    assert_eq!(get(edge.port, "/tok00001", DOMAIN).status, 404);
    let status = get(edge.port, "/shorturl_status", "localhost");
    assert_eq!(status.json()["origin_reachable"], true, "{}", status.text());
    assert_eq!(get(edge.port, "/api/v1/links/tok00001", DOMAIN).status, 200);
    wait_for("a heartbeat", TIMEOUT, || {
        peer.count(|s| s.path == "/internal/v1/heartbeat") >= 1
    });
    let seen = peer.seen();
    let own = |path: &str| {
        seen.iter()
            .filter(move |s| s.path == path)
            .collect::<Vec<_>>()
    };
    for path in [
        "/internal/v1/records/tok00001?domain=s.shop55.com",
        "/shorturl_status",
        "/internal/v1/heartbeat",
    ] {
        let got = own(path);
        assert!(!got.is_empty(), "{path} never reached the origin");
        for s in got {
            assert_eq!(s.authorization.as_deref(), Some(bearer.as_str()), "{path}");
        }
    }
    for path in ["/healthz", "/api/v1/links/tok00001"] {
        for s in own(path) {
            assert_eq!(s.authorization, None, "{path} carried a token");
        }
    }

    // The origin refuses the token: the lookup fails (503), and the log
    // says which setting to fix, without the token.
    peer.require_authorization(Some("Bearer another"));
    assert_eq!(get(edge.port, "/tok00002", DOMAIN).status, 503);
    wait_for("the refused token to be logged", TIMEOUT, || {
        edge.log().contains("edge.origin.internal_token")
    });
    let log = edge.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("edge.origin.internal_token")),
        "{log}"
    );
    assert!(!log.contains(TOKEN), "the token was logged");
    assert!(!status.text().contains(TOKEN));
    assert!(!get(edge.port, "/shorturl_status", "localhost")
        .text()
        .contains(TOKEN));
}
