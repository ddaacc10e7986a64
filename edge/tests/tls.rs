//! HTTPS on a real edge (real Redis; the origin is a closed port): SNI
//! selection from the certificate directory and the shared store, HTTP/2
//! and HTTP/1.1 by ALPN, session resumption, the plain-HTTP upgrade and
//! HSTS, ACME challenge answers, and hostile handshakes.

use crate::support;

use std::io::Write;
use std::process::Command;
use std::time::Duration;
use support::http::{get, Conn};
use support::{
    record_line, redis_get, redis_set, start_edge, store_key_id, store_keys, EdgeOpts, STORE_KEY,
    STORE_KEY_2, STORE_KEY_UNKNOWN,
};
use testkit::tls::{connect, Ca, ClientOpts, Issued};
use testkit::{free_port, wait_for, Redis, TempDir};

const WAIT: Duration = Duration::from_secs(20);

struct Setup {
    redis: Redis,
    edge: support::Edge,
    tls_port: u16,
    ca: Ca,
    certs: TempDir,
    _extra: Box<str>,
}

/// An edge with a TLS listener over a certificate directory holding
/// `names` (each its own certificate, `*.x` as `_wildcard.x`) and
/// `extra` YAML inside `edge:` (`{TLS_PORT}` stands for the TLS port).
/// Its store key is [`STORE_KEY`].
fn setup(names: &[&str], extra: &str) -> (Setup, Vec<Issued>) {
    setup_with_env(names, extra, Vec::new())
}

/// [`setup`] with more environment for the edge.
fn setup_with_env(
    names: &[&str],
    extra: &str,
    env: Vec<(&'static str, String)>,
) -> (Setup, Vec<Issued>) {
    setup_full(names, "", extra, env)
}

/// [`setup_with_env`] with `tls_extra` added to the `tls:` settings.
fn setup_full(
    names: &[&str],
    tls_extra: &str,
    extra: &str,
    env: Vec<(&'static str, String)>,
) -> (Setup, Vec<Issued>) {
    let redis = Redis::start();
    let ca = Ca::new("edge test ca");
    let certs = TempDir::new("certs");
    let issued: Vec<Issued> = names
        .iter()
        .map(|n| {
            let i = ca.issue(&[n], &[], 30);
            i.write(certs.path(), &n.replace("*.", "_wildcard."));
            i
        })
        .collect();
    let tls_port = free_port();
    let text: Box<str> = format!(
        "  tls_listen: [\"127.0.0.1:{tls_port}\"]\n  tls: {{ cert_dir: \"{}\", default_cert: localhost, reload_interval_ms: 200, handshake_timeout_secs: 2, store_key: \"{STORE_KEY}\"{}{tls_extra} }}\n{}",
        certs.path().display(),
        if tls_extra.is_empty() { "" } else { ", " },
        extra.replace("{TLS_PORT}", &tls_port.to_string())
    )
    .into();
    // The config text must outlive the edge's options.
    let leaked: &'static str = Box::leak(text.clone());
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = leaked;
    opts.env = env;
    let edge = start_edge(opts);
    // A full handshake, not a bare TCP probe (that would count as a failed one).
    wait_for("the TLS listener", WAIT, || {
        connect(tls_port, &ClientOpts::default()).is_ok()
    });
    (
        Setup {
            redis,
            edge,
            tls_port,
            ca,
            certs,
            _extra: text,
        },
        issued,
    )
}

/// The serial of the certificate served for `sni` (no verification).
fn served(port: u16, sni: Option<&str>) -> String {
    connect(
        port,
        &ClientOpts {
            sni,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("handshake for {sni:?}: {e}"))
    .peer_serial()
}

#[test]
fn sni_selects_exact_wildcard_then_default_from_directory_and_shared_store() {
    let names = [
        "localhost",
        "a.shop55.com",
        "b.shop55.com",
        "c.example.org",
        "*.shop55.com",
    ];
    let (s, issued) = setup(&names, "");
    let serial = |n: &str| {
        issued[names.iter().position(|x| *x == n).unwrap()]
            .serial
            .clone()
    };
    let ca = s.ca.pem();
    // Exact names and the wildcard verify against the CA, name included.
    for (sni, cert) in [
        ("a.shop55.com", "a.shop55.com"),
        ("b.shop55.com", "b.shop55.com"),
        ("c.example.org", "c.example.org"),
        ("zz.shop55.com", "*.shop55.com"),
        ("localhost", "localhost"),
    ] {
        let c = connect(
            s.tls_port,
            &ClientOpts {
                sni: Some(sni),
                roots: Some(&ca),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert_eq!(c.peer_serial(), serial(cert), "{sni}");
    }
    // Case and a trailing dot do not matter.
    assert_eq!(
        served(s.tls_port, Some("A.Shop55.COM")),
        serial("a.shop55.com")
    );
    // Anything else gets the default certificate, never a failed handshake.
    for sni in [
        Some("unknown.net"),
        Some("x.y.shop55.com"),
        Some("shop55.com"),
        None,
    ] {
        assert_eq!(served(s.tls_port, sni), serial("localhost"), "{sni:?}");
    }

    // Hot reload: a replaced file and a new one are served within the poll.
    let renewed = s.ca.issue(&["a.shop55.com"], &[], 60);
    renewed.write(s.certs.path(), "a.shop55.com");
    let fresh = s.ca.issue(&["d.shop55.com"], &[], 30);
    fresh.write(s.certs.path(), "d.shop55.com");
    wait_for("the directory to be reloaded", WAIT, || {
        served(s.tls_port, Some("a.shop55.com")) == renewed.serial
            && served(s.tls_port, Some("d.shop55.com")) == fresh.serial
    });

    // The shared store: a certificate written to Redis (its key sealed)
    // reaches the edge.
    let shared = s.ca.issue(&["e.other.net"], &[], 30);
    let bundle = shorturl_common::tls::CertBundle {
        cert: String::from_utf8(shared.cert_pem.clone()).unwrap(),
        key: store_keys(STORE_KEY, &[])
            .seal("su:1:tls:cert:e.other.net", &shared.key_pem)
            .unwrap(),
        not_after: 0,
    };
    redis_set(
        &s.redis,
        "su:1:tls:cert:e.other.net",
        &serde_json::to_string(&bundle).unwrap(),
    );
    let client = redis::Client::open(s.redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("SADD")
        .arg("su:1:tls:names")
        .arg("e.other.net")
        .query::<()>(&mut con)
        .unwrap();
    redis::cmd("INCR")
        .arg("su:1:tls:gen")
        .query::<()>(&mut con)
        .unwrap();
    wait_for("the shared certificate", WAIT, || {
        served(s.tls_port, Some("e.other.net")) == shared.serial
    });

    // Status and metrics describe every certificate.
    let st = s.edge.typed_status();
    let tls = st.tls.expect("tls section");
    assert_eq!(tls.default_cert.as_deref(), Some("localhost"));
    let mut domains: Vec<(String, String)> = tls
        .certificates
        .iter()
        .map(|c| (c.domain.clone(), c.source.clone()))
        .collect();
    domains.sort();
    assert_eq!(
        domains,
        [
            ("*.shop55.com", "dir"),
            ("a.shop55.com", "dir"),
            ("b.shop55.com", "dir"),
            ("c.example.org", "dir"),
            ("d.shop55.com", "dir"),
            ("e.other.net", "shared"),
            ("localhost", "dir"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    let a = tls
        .certificates
        .iter()
        .find(|c| c.domain == "a.shop55.com")
        .unwrap();
    assert!(a.issuer.contains("CN=edge test ca"), "{}", a.issuer);
    let expiry = s
        .edge
        .metric("shorturl_tls_certificate_expiry_timestamp_seconds{domain=\"a.shop55.com\"}");
    assert_eq!(expiry as i64, a.expires_at_unix);
    let now = shorturl_common::time::now_unix() as i64;
    assert!((59 * 86_400..61 * 86_400).contains(&(a.expires_at_unix - now)));
    assert_eq!(tls.handshake_errors, 0);
    assert!(tls.handshakes >= 12, "{tls:?}");
    assert_eq!(
        s.edge
            .metric("shorturl_tls_handshakes_total{result=\"ok\"}") as u64,
        s.edge.typed_status().tls.unwrap().handshakes
    );
}

/// Private keys in the shared store are sealed (protocol 3.3) and opened
/// by key id: under the current or an old store key they are served, and
/// a plaintext one from before sealing is served and counted; a tampered
/// value, a value copied from another name and one under an unknown key
/// are refused (counted by reason, logged with the key id, never a key)
/// and the default certificate is served instead.
#[test]
fn sealed_private_keys_open_by_key_id_and_tampered_ones_are_refused() {
    // The fleet rotated: STORE_KEY_2 seals now, STORE_KEY still opens.
    let (s, issued) = setup_with_env(
        &["localhost"],
        "",
        vec![
            ("SHORTURL_EDGE_TLS_STORE_KEY", STORE_KEY_2.to_owned()),
            ("SHORTURL_EDGE_TLS_STORE_OLD_KEYS", STORE_KEY.to_owned()),
        ],
    );
    let default = issued[0].serial.clone();
    let names = [
        "old.example.net",
        "new.example.net",
        "plain.example.net",
        "tampered.example.net",
        "moved.example.net",
        "stranger.example.net",
    ];
    let certs: Vec<Issued> = names.iter().map(|n| s.ca.issue(&[n], &[], 30)).collect();
    let seal = |keys: &str, name: &str, i: usize| {
        store_keys(keys, &[])
            .seal(&format!("su:1:tls:cert:{name}"), &certs[i].key_pem)
            .unwrap()
    };
    let mut tampered = seal(STORE_KEY_2, names[3], 3);
    // A character inside the tag: still base64, no longer authentic.
    let at = tampered.len() - 5;
    let flipped = if &tampered[at..=at] == "A" { "B" } else { "A" };
    tampered.replace_range(at..=at, flipped);
    let keys = [
        seal(STORE_KEY, names[0], 0),
        seal(STORE_KEY_2, names[1], 1),
        String::from_utf8(certs[2].key_pem.clone()).unwrap(),
        tampered,
        // moved.example.net's key sealed for new.example.net's Redis key.
        seal(STORE_KEY_2, names[1], 4),
        seal(STORE_KEY_UNKNOWN, names[5], 5),
    ];
    for (i, key) in keys.into_iter().enumerate() {
        let bundle = shorturl_common::tls::CertBundle {
            cert: String::from_utf8(certs[i].cert_pem.clone()).unwrap(),
            key,
            not_after: 0,
        };
        redis_set(
            &s.redis,
            &format!("su:1:tls:cert:{}", names[i]),
            &serde_json::to_string(&bundle).unwrap(),
        );
    }
    let client = redis::Client::open(s.redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("SADD")
        .arg("su:1:tls:names")
        .arg(&names[..])
        .query::<()>(&mut con)
        .unwrap();
    redis::cmd("INCR")
        .arg("su:1:tls:gen")
        .query::<()>(&mut con)
        .unwrap();
    wait_for("the sealed and the plaintext certificates", WAIT, || {
        (0..3).all(|i| served(s.tls_port, Some(names[i])) == certs[i].serial)
    });
    for name in &names[3..] {
        assert_eq!(served(s.tls_port, Some(name)), default, "{name}");
    }
    // One reload of the store (one generation): each value counted once.
    let m = |series: &str| s.edge.metric(series);
    assert_eq!(m("shorturl_tls_store_plaintext_total"), 1.0);
    assert_eq!(
        m("shorturl_tls_store_refused_total{reason=\"undecryptable\"}"),
        2.0
    );
    assert_eq!(
        m("shorturl_tls_store_refused_total{reason=\"unknown_key\"}"),
        1.0
    );
    assert_eq!(
        m("shorturl_tls_store_refused_total{reason=\"malformed\"}"),
        0.0
    );
    let log = s.edge.log();
    for (name, id) in [
        ("tampered.example.net", store_key_id(STORE_KEY_2)),
        ("stranger.example.net", store_key_id(STORE_KEY_UNKNOWN)),
    ] {
        let needle = format!("su:1:tls:cert:{name}");
        let line = log.lines().find(|l| l.contains(&needle)).unwrap_or("");
        assert!(line.contains(&id) && line.contains("refused"), "{log}");
    }
    for key in [STORE_KEY, STORE_KEY_2, STORE_KEY_UNKNOWN] {
        assert!(!log.contains(key), "a store key in the log");
    }
    // Without an issuer nothing is rewritten: the plaintext value stays.
    let plain = redis_get(&s.redis, "su:1:tls:cert:plain.example.net").unwrap();
    assert!(plain.contains("BEGIN"));
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("run curl (apt-get install curl)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn http2_and_http1_over_tls_with_resumption_and_hsts() {
    let (s, _) = setup(
        &["localhost", "s.shop55.com"],
        "  https: { hsts: \"max-age=300\" }\n",
    );
    redis_set(
        &s.redis,
        "su:1:link:s.shop55.com/aB3xYz",
        &record_line("s.shop55.com", "https://example.com/a", 3600),
    );
    redis_set(&s.redis, "su:1:link:s.shop55.com/zzzzzz", "- 1");
    let ca_file = s.certs.path().join("ca.pem");
    std::fs::write(&ca_file, s.ca.pem()).unwrap();
    let resolve = format!("s.shop55.com:{}:127.0.0.1", s.tls_port);
    let base = format!("https://s.shop55.com:{}", s.tls_port);
    let fmt = "%{http_version} %{http_code} %{redirect_url}\n";
    // HTTP/2 (ALPN h2): the redirect, the 404 and the edge's own routes.
    let out = curl(&[
        "--http2",
        "--cacert",
        ca_file.to_str().unwrap(),
        "--resolve",
        &resolve,
        "-o",
        "/dev/null",
        "-w",
        fmt,
        &format!("{base}/aB3xYz"),
        "-o",
        "/dev/null",
        "-w",
        fmt,
        &format!("{base}/zzzzzz"),
        "-o",
        "/dev/null",
        "-w",
        fmt,
        &format!("{base}/healthz"),
    ]);
    assert_eq!(
        out, "2 302 https://example.com/a\n2 404 \n2 200 \n",
        "one h2 connection, three requests"
    );
    let head = curl(&[
        "--http2",
        "--cacert",
        ca_file.to_str().unwrap(),
        "--resolve",
        &resolve,
        "-D",
        "-",
        "-o",
        "/dev/null",
        &format!("{base}/aB3xYz"),
    ]);
    assert!(head.starts_with("HTTP/2 302"), "{head}");
    assert!(
        head.contains("strict-transport-security: max-age=300"),
        "{head}"
    );
    assert!(head.contains("location: https://example.com/a"), "{head}");
    // HTTP/1.1 when the client offers only that, or no ALPN at all.
    for alpn in [Some(&b"\x08http/1.1"[..]), None] {
        let ca = s.ca.pem();
        let mut c = connect(
            s.tls_port,
            &ClientOpts {
                sni: Some("s.shop55.com"),
                roots: Some(&ca),
                alpn,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.alpn().as_deref(), alpn.map(|_| "http/1.1"));
        for _ in 0..3 {
            let r = c.get("/aB3xYz", "s.shop55.com").unwrap();
            assert_eq!(r.status, 302);
            assert_eq!(r.header("strict-transport-security"), Some("max-age=300"));
        }
    }
    // Plain HTTP never carries HSTS.
    let r = get(s.edge.port, "/aB3xYz", "s.shop55.com");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("strict-transport-security"), None);

    // Resumption, TLS 1.3 (tickets) and TLS 1.2.
    for max_tls12 in [false, true] {
        let opts = ClientOpts {
            sni: Some("s.shop55.com"),
            max_tls12,
            ..Default::default()
        };
        let mut first = connect(s.tls_port, &opts).unwrap();
        assert_eq!(
            first.version(),
            if max_tls12 { "TLSv1.2" } else { "TLSv1.3" }
        );
        assert!(!first.reused());
        assert_eq!(first.get("/aB3xYz", "s.shop55.com").unwrap().status, 302);
        let session = first.session().expect("a session to resume");
        let mut again = connect(
            s.tls_port,
            &ClientOpts {
                session: Some(&session),
                ..opts.clone()
            },
        )
        .unwrap();
        assert!(again.reused(), "session resumed (max TLS 1.2: {max_tls12})");
        assert_eq!(again.get("/aB3xYz", "s.shop55.com").unwrap().status, 302);
    }
}

#[test]
fn plain_http_upgrade_per_domain_and_acme_challenges() {
    let (s, _) = setup(
        &["localhost"],
        "  https: { redirect: [S.Shop55.com], port: {TLS_PORT}, hsts: \"max-age=60\" }\n",
    );
    let (edge, tls_port) = (&s.edge, s.tls_port);
    for (host, code) in [("s.shop55.com", "aB3xYz"), ("other.com", "bB3xYz")] {
        redis_set(
            &s.redis,
            &format!("su:1:link:{host}/{code}"),
            &record_line(host, "https://example.com/a", 3600),
        );
    }
    // A listed domain's plain-HTTP redirect goes to HTTPS first (308, same URL).
    let r = get(edge.port, "/aB3xYz?utm=1", "S.shop55.com:80");
    assert_eq!(r.status, 308, "{}", r.text());
    assert_eq!(
        r.header("location").map(str::to_owned),
        Some(format!("https://S.shop55.com:{tls_port}/aB3xYz?utm=1"))
    );
    assert_eq!(r.header("strict-transport-security"), None);
    // Other domains keep plain HTTP.
    let r = get(edge.port, "/bB3xYz", "other.com");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/a"));

    // ACME challenges are answered on plain HTTP, even for upgraded domains.
    redis_set(
        &s.redis,
        "su:1:acme:challenge:tok-EN_1",
        "tok-EN_1.thumbprint",
    );
    let mut c = Conn::open(edge.port).unwrap();
    let r = c
        .get("/.well-known/acme-challenge/tok-EN_1", "s.shop55.com")
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "tok-EN_1.thumbprint");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = c
        .get("/.well-known/acme-challenge/unknown", "s.shop55.com")
        .unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"], "not_found");
    let r = c
        .send(
            "POST",
            "/.well-known/acme-challenge/tok-EN_1",
            Some("s.shop55.com"),
            &[],
            b"",
        )
        .unwrap();
    assert_eq!(r.status, 404);
    // Redis down: 503, never a wrong answer.
    drop(c);
    let mut s = s;
    s.redis.stop();
    let edge = &s.edge;
    let r = get(
        edge.port,
        "/.well-known/acme-challenge/tok-EN_1",
        "s.shop55.com",
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"], "unavailable");
}

#[test]
fn handshake_turns_bound_what_stalled_clients_can_delay() {
    // Two worker threads, one turn each: two stalled handshakes hold both.
    let (s, issued) = setup_full(
        &["localhost"],
        "handshakes_per_thread: 1, handshake_turn_wait_ms: 100",
        "",
        Vec::new(),
    );
    let turns = |how: &str| {
        s.edge.metric(&format!(
            "shorturl_tls_handshake_turns_total{{how=\"{how}\"}}"
        ))
    };
    let handshakes = || {
        ["ok", "error", "timeout"]
            .iter()
            .map(|r| {
                s.edge
                    .metric(&format!("shorturl_tls_handshakes_total{{result=\"{r}\"}}"))
            })
            .sum::<f64>()
    };
    let ca = s.ca.pem();
    let opts = ClientOpts {
        sni: Some("localhost"),
        roots: Some(&ca),
        ..Default::default()
    };
    let immediate = turns("immediate");
    assert!(immediate >= 1.0, "the setup's handshakes had free turns");
    let stall = || {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", s.tls_port)).unwrap();
        c.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            .unwrap();
        c
    };
    let stalled = [stall(), stall()];
    wait_for("both stalled handshakes to hold a turn", WAIT, || {
        turns("immediate") == immediate + 2.0
    });
    // A client behind them waits at most the turn wait, then is served.
    let started = std::time::Instant::now();
    let c = connect(s.tls_port, &opts).unwrap();
    assert_eq!(c.peer_serial(), issued[0].serial);
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(turns("overdue"), 1.0);
    // Once the stalled handshakes time out (2 s), turns are free again.
    wait_for("the stalled handshakes to time out", WAIT, || {
        s.edge
            .metric("shorturl_tls_handshakes_total{result=\"timeout\"}")
            == 2.0
    });
    drop(stalled);
    connect(s.tls_port, &opts).unwrap();
    wait_for("every handshake to be counted", WAIT, || {
        turns("immediate") + turns("waited") + turns("overdue") == handshakes()
    });
    assert_eq!(turns("immediate"), immediate + 3.0);
}

/// Raw bytes on a fresh TCP connection to the TLS port; true when the
/// edge closed it (with or without a TLS alert).
fn garbage(port: u16, bytes: &[u8]) -> bool {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = Vec::new();
    match s.read_to_end(&mut buf) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn malformed_client_hellos_do_not_disturb_other_connections() {
    let (s, issued) = setup(&["localhost", "s.shop55.com"], "");
    redis_set(
        &s.redis,
        "su:1:link:s.shop55.com/aB3xYz",
        &record_line("s.shop55.com", "https://example.com/a", 3600),
    );
    let ca = s.ca.pem();
    let opts = ClientOpts {
        sni: Some("s.shop55.com"),
        roots: Some(&ca),
        ..Default::default()
    };
    let mut kept = connect(s.tls_port, &opts).unwrap();
    assert_eq!(kept.get("/aB3xYz", "s.shop55.com").unwrap().status, 302);

    // A client that starts a hello and stalls holds only its own connection
    // until the handshake deadline (2 s here).
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", s.tls_port)).unwrap();
    stalled
        .write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        .unwrap();

    let bad: [&[u8]; 4] = [
        b"GET /aB3xYz HTTP/1.1\r\nHost: s.shop55.com\r\n\r\n",
        b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\xff",
        b"\x16\x03\x03\x00\x30\x01\x00\x00\x2c\x03\x03garbagegarbagegarbagegarbagegarbagegarbage",
        &[0xff; 600],
    ];
    for b in bad {
        assert!(garbage(s.tls_port, b), "the edge closes a bad hello");
        // Meanwhile the established connection and new ones keep working.
        assert_eq!(kept.get("/aB3xYz", "s.shop55.com").unwrap().status, 302);
        let mut fresh = connect(s.tls_port, &opts).unwrap();
        assert_eq!(fresh.peer_serial(), issued[1].serial);
        assert_eq!(fresh.get("/aB3xYz", "s.shop55.com").unwrap().status, 302);
    }
    wait_for("the stalled handshake to time out", WAIT, || {
        s.edge
            .metric("shorturl_tls_handshakes_total{result=\"timeout\"}")
            == 1.0
    });
    // Its connection is closed now.
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    match std::io::Read::read_to_end(&mut stalled, &mut rest) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert_eq!(
        s.edge
            .metric("shorturl_tls_handshakes_total{result=\"error\"}"),
        bad.len() as f64,
        "each bad hello is one failed handshake"
    );
    assert_eq!(
        s.edge.typed_status().tls.unwrap().handshake_errors,
        bad.len() as u64 + 1
    );
    assert_eq!(kept.get("/aB3xYz", "s.shop55.com").unwrap().status, 302);
    let mut s = s;
    assert!(s.edge.proc.is_running());
}
