//! The OpenResty module over TLS (issue 15, item 9): certificates by SNI
//! from the same store as the Pingora edges (Redis bundles, then the
//! certificate directory; wildcard one label up; nginx's default
//! certificate otherwise), HTTP/2 by ALPN, and ACME HTTP-01 answers from
//! the shared store; private keys sealed in the store (issue 23, item 11)
//! opened and refused exactly as the Pingora edge does.

use crate::support;

use shorturl_common::tls_seal::{StoreKey, StoreKeys};
use std::time::Duration;
use support::http;
use support::{redis_cmd, Edge};
use testkit::tls::{connect, Ca, ClientOpts, Issued};
use testkit::{free_port, wait_for, Redis, TempDir};

/// Store keys (base64 of 32 bytes): the current one, the one before a
/// rotation, and one no edge is given.
const STORE_KEY: &str = "04WDCq+60ZZcXhiaBEJMMovOMVXcjaUiy3iBoaBGRvA=";
const OLD_STORE_KEY: &str = "VVwpcB3qoZMxGeKJDD6/L/6j1UKlqy3tPZoQPLDkd64=";
const UNKNOWN_STORE_KEY: &str = "u6Wdr8AArHgbKY3ScVBsrrR/RvwU/qj44pQTiT73MWI=";

fn sealer(key: &str) -> StoreKeys {
    StoreKeys::new(StoreKey::from_base64(key).unwrap(), Vec::new())
}

/// Stores `cert` for `name` with `key` as the bundle's key field.
fn put_bundle(redis: &Redis, name: &str, cert: &Issued, key: String) {
    let bundle = shorturl_common::tls::CertBundle {
        cert: String::from_utf8(cert.cert_pem.clone()).unwrap(),
        key,
        not_after: 0,
    };
    let json = serde_json::to_string(&bundle).unwrap();
    redis_cmd(
        &redis.url(),
        &["SET", &format!("su:1:tls:cert:{name}"), &json],
    )
    .unwrap();
    redis_cmd(&redis.url(), &["SADD", "su:1:tls:names", name]).unwrap();
}

/// Stores `cert` for `name`, its key sealed under [`STORE_KEY`].
fn put_shared(redis: &Redis, name: &str, cert: &Issued) {
    let key = sealer(STORE_KEY)
        .seal(&format!("su:1:tls:cert:{name}"), &cert.key_pem)
        .unwrap();
    put_bundle(redis, name, cert, key);
}

#[test]
fn openresty_serves_certificates_from_the_shared_store_and_answers_challenges() {
    let redis = Redis::start();
    let ca = Ca::new("openresty test ca");
    let certs = TempDir::new("or-certs");
    let default = ca.issue(&["localhost"], &[], 30);
    default.write(certs.path(), "localhost");
    let in_dir = ca.issue(&["a.shop55.com"], &[], 30);
    in_dir.write(certs.path(), "a.shop55.com");
    let dir_c = ca.issue(&["c.shop55.com"], &[], 30);
    dir_c.write(certs.path(), "c.shop55.com");
    let (shared_b, shared_c, wildcard) = (
        ca.issue(&["b.shop55.com"], &[], 30),
        ca.issue(&["c.shop55.com"], &[], 30),
        ca.issue(&["*.shop55.com"], &[], 30),
    );
    put_shared(&redis, "b.shop55.com", &shared_b);
    put_shared(&redis, "c.shop55.com", &shared_c);
    put_shared(&redis, "*.shop55.com", &wildcard);
    redis_cmd(
        &redis.url(),
        &[
            "SET",
            "su:1:link:a.shop55.com/aB3xYz",
            &format!(
                "1 {} a.shop55.com https://example.com/tls",
                shorturl_common::time::now_unix() + 3600
            ),
        ],
    )
    .unwrap();
    let tls_port = free_port();
    let edge = Edge::openresty_with(
        &format!("127.0.0.1:{}", redis.port()),
        &format!("127.0.0.1:{}", free_port()),
        &[
            ("SU_TLS_PORT", tls_port.to_string()),
            ("SU_TLS_CERT_DIR", certs.path().display().to_string()),
            ("SU_TLS_CACHE_SECS", "1".to_string()),
            ("SU_TLS_STORE_KEY", STORE_KEY.to_string()),
        ],
    );
    let roots = ca.pem();
    let served = |sni: Option<&str>| {
        connect(
            tls_port,
            &ClientOpts {
                sni,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{sni:?}: {e}\n{}", edge.logs()))
        .peer_serial()
    };
    for (sni, want) in [
        ("a.shop55.com", &in_dir),
        ("b.shop55.com", &shared_b),
        ("c.shop55.com", &shared_c),
        ("zz.shop55.com", &wildcard),
    ] {
        let c = connect(
            tls_port,
            &ClientOpts {
                sni: Some(sni),
                roots: Some(&roots),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{sni}: {e}\n{}", edge.logs()));
        assert_eq!(c.peer_serial(), want.serial, "{sni}");
    }
    for sni in [Some("unknown.net"), Some("x.y.shop55.com"), None] {
        assert_eq!(served(sni), default.serial, "{sni:?}");
    }
    // A certificate added to Redis later is served once the cached miss expires.
    let later = ca.issue(&["d.other.net"], &[], 30);
    assert_eq!(served(Some("d.other.net")), default.serial);
    put_shared(&redis, "d.other.net", &later);
    wait_for(
        "the new shared certificate",
        Duration::from_secs(15),
        || served(Some("d.other.net")) == later.serial,
    );

    // HTTP/2 by ALPN, HTTP/1.1 otherwise; the module answers both.
    let h2 = connect(
        tls_port,
        &ClientOpts {
            sni: Some("a.shop55.com"),
            alpn: Some(b"\x02h2\x08http/1.1"),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(h2.alpn().as_deref(), Some("h2"));
    let mut h1 = connect(
        tls_port,
        &ClientOpts {
            sni: Some("a.shop55.com"),
            roots: Some(&roots),
            alpn: Some(b"\x08http/1.1"),
            ..Default::default()
        },
    )
    .unwrap();
    let r = h1.get("/aB3xYz", "a.shop55.com").unwrap();
    assert_eq!(r.status, 302, "{}", r.text());
    assert_eq!(r.header("location"), Some("https://example.com/tls"));

    // ACME answers on plain HTTP from the shared store.
    redis_cmd(
        &redis.url(),
        &["SET", "su:1:acme:challenge:tok-EN_1", "tok-EN_1.thumbprint"],
    )
    .unwrap();
    let r = http::get(
        edge.port,
        "/.well-known/acme-challenge/tok-EN_1",
        "a.shop55.com",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "tok-EN_1.thumbprint");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = http::get(
        edge.port,
        "/.well-known/acme-challenge/nope",
        "a.shop55.com",
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"], "not_found");
}

/// The value of one Prometheus series on `port`'s `/metrics` (0 when absent).
fn metric(port: u16, series: &str) -> f64 {
    testkit::metrics::metric_in(&http::get(port, "/metrics", "localhost").text(), series)
        .unwrap_or(0.0)
}

/// Both edges over one store: a private key sealed under the current or
/// an old store key is served, a plaintext one from before sealing too
/// (counted); a tampered value, a value copied from another name and one
/// under an unknown key are refused (counted by reason, logged with the
/// key id) and each edge serves its default certificate instead.
#[test]
fn both_edges_open_sealed_keys_and_refuse_tampered_ones() {
    let redis = Redis::start();
    let ca = Ca::new("sealed store test ca");
    let certs = TempDir::new("sealed-certs");
    let default = ca.issue(&["localhost"], &[], 30);
    default.write(certs.path(), "localhost");
    let names = [
        "old.example.net",
        "new.example.net",
        "plain.example.net",
        "tampered.example.net",
        "moved.example.net",
        "stranger.example.net",
    ];
    let issued: Vec<Issued> = names.iter().map(|n| ca.issue(&[n], &[], 30)).collect();
    let seal = |key: &str, name: &str, i: usize| {
        sealer(key)
            .seal(&format!("su:1:tls:cert:{name}"), &issued[i].key_pem)
            .unwrap()
    };
    let mut tampered = seal(STORE_KEY, names[3], 3);
    // A character inside the tag: still base64, no longer authentic.
    let at = tampered.len() - 5;
    let flipped = if &tampered[at..=at] == "A" { "B" } else { "A" };
    tampered.replace_range(at..=at, flipped);
    let keys = [
        seal(OLD_STORE_KEY, names[0], 0),
        seal(STORE_KEY, names[1], 1),
        String::from_utf8(issued[2].key_pem.clone()).unwrap(),
        tampered,
        // moved.example.net's key sealed for new.example.net's Redis key.
        seal(STORE_KEY, names[1], 4),
        seal(UNKNOWN_STORE_KEY, names[5], 5),
    ];
    for (i, key) in keys.into_iter().enumerate() {
        put_bundle(&redis, names[i], &issued[i], key);
    }
    redis_cmd(&redis.url(), &["INCR", "su:1:tls:gen"]).unwrap();

    let (p_tls, p_metrics, o_tls, o_metrics) = (free_port(), free_port(), free_port(), free_port());
    let origin = format!("127.0.0.1:{}", free_port());
    let pingora = Edge::pingora_with(
        &redis.url(),
        &origin,
        &format!(
            "  metrics_listen: 127.0.0.1:{p_metrics}\n  tls_listen: [\"127.0.0.1:{p_tls}\"]\n  \
             tls: {{ cert_dir: \"{}\", default_cert: localhost, store_key: \"{STORE_KEY}\", \
             store_old_keys: [\"{OLD_STORE_KEY}\"] }}\n",
            certs.path().display()
        ),
    );
    // One worker and a long certificate cache: each name is read once.
    let openresty = Edge::openresty_with(
        &format!("127.0.0.1:{}", redis.port()),
        &origin,
        &[
            ("SU_WORKERS", "1".to_string()),
            ("SU_METRICS_PORT", o_metrics.to_string()),
            ("SU_TLS_PORT", o_tls.to_string()),
            ("SU_TLS_CERT_DIR", certs.path().display().to_string()),
            ("SU_TLS_CACHE_SECS", "600".to_string()),
            ("SU_TLS_STORE_KEY", STORE_KEY.to_string()),
            ("SU_TLS_STORE_OLD_KEYS", OLD_STORE_KEY.to_string()),
        ],
    );
    let served = |edge: &Edge, port: u16, sni: &str| {
        connect(
            port,
            &ClientOpts {
                sni: Some(sni),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{} {sni}: {e}\n{}", edge.name, edge.logs()))
        .peer_serial()
    };
    wait_for(
        "the Pingora edge to load the store",
        Duration::from_secs(20),
        || served(&pingora, p_tls, names[0]) == issued[0].serial,
    );
    for (edge, port, metrics) in [(&pingora, p_tls, p_metrics), (&openresty, o_tls, o_metrics)] {
        for (i, name) in names.iter().enumerate() {
            let want = if i < 3 {
                &issued[i].serial
            } else {
                &default.serial
            };
            assert_eq!(&served(edge, port, name), want, "{} {name}", edge.name);
        }
        // Pingora binds its metrics listener on its own runtime, maybe after
        // the others.
        testkit::wait_for_tcp(metrics, Duration::from_secs(20));
        let m = |series: &str| metric(metrics, series);
        assert_eq!(
            m("shorturl_tls_store_plaintext_total"),
            1.0,
            "{}",
            edge.name
        );
        for (reason, n) in [
            ("undecryptable", 2.0),
            ("unknown_key", 1.0),
            ("malformed", 0.0),
        ] {
            assert_eq!(
                m(&format!(
                    "shorturl_tls_store_refused_total{{reason=\"{reason}\"}}"
                )),
                n,
                "{} {reason}",
                edge.name
            );
        }
        let logs = edge.logs();
        let unknown_id = StoreKey::from_base64(UNKNOWN_STORE_KEY)
            .unwrap()
            .id()
            .to_owned();
        let line = logs
            .lines()
            .find(|l| l.contains("su:1:tls:cert:stranger.example.net"))
            .unwrap_or_else(|| panic!("{}: no refusal logged\n{logs}", edge.name));
        assert!(line.contains(&unknown_id), "{}: {line}", edge.name);
        for key in [STORE_KEY, OLD_STORE_KEY, UNKNOWN_STORE_KEY] {
            assert!(!logs.contains(key), "{}: a store key in the log", edge.name);
        }
    }
}

/// start.sh with `env`, in the foreground: its exit status and stderr
/// (killed after 20 s if nginx stayed up).
fn start_script(env: &[(&str, String)]) -> (Option<i32>, String) {
    let dir = TempDir::new("or-keyless");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../openresty/start.sh");
    let mut cmd = std::process::Command::new(script);
    cmd.arg(dir.path().join("nginx"))
        .arg(free_port().to_string())
        .arg("127.0.0.1:1")
        .arg("127.0.0.1:1")
        .env("SU_DIE_WITH_MASTER", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status,
        std::fs::read_to_string(dir.path().join("stderr")).unwrap(),
    )
}

/// A TLS listener reads private keys from the shared store, so the module
/// refuses to start without a usable store key, naming the setting (as the
/// Pingora edge refuses `tls.shared_store` without `tls.store_key`).
#[test]
fn openresty_refuses_a_tls_listener_without_a_store_key() {
    let certs = TempDir::new("or-keyless-certs");
    Ca::new("keyless ca")
        .issue(&["localhost"], &[], 30)
        .write(certs.path(), "localhost");
    let tls = vec![
        ("SU_TLS_PORT", free_port().to_string()),
        ("SU_TLS_CERT_DIR", certs.path().display().to_string()),
    ];
    let (status, stderr) = start_script(&tls);
    assert!(status.is_some_and(|c| c != 0), "{status:?} {stderr}");
    assert!(
        stderr.contains("tls.store_key is required with a TLS listener")
            && stderr.contains("SU_TLS_STORE_KEY"),
        "{stderr}"
    );
    let short = "c2hvcnQ=";
    let mut with_short = tls.clone();
    with_short.push(("SU_TLS_STORE_KEY", short.to_string()));
    let (status, stderr) = start_script(&with_short);
    assert!(status.is_some_and(|c| c != 0), "{status:?} {stderr}");
    assert!(
        stderr.contains("tls.store_key: must be 32 bytes"),
        "{stderr}"
    );
    assert!(!stderr.contains(short), "the key in the message: {stderr}");
    let mut injected = tls.clone();
    injected.push(("SU_TLS_STORE_KEY", "x\", os = nil --".to_string()));
    let (status, stderr) = start_script(&injected);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("must be base64"), "{stderr}");
}
