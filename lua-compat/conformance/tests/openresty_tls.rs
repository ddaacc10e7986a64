//! The OpenResty module over TLS (issue 15, item 9): certificates by SNI
//! from the same store as the Pingora edges (Redis bundles, then the
//! certificate directory; wildcard one label up; nginx's default
//! certificate otherwise), HTTP/2 by ALPN, and ACME HTTP-01 answers from
//! the shared store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;
use support::http;
use support::{redis_cmd, Edge};
use testkit::tls::{connect, Ca, ClientOpts, Issued};
use testkit::{free_port, wait_for, Redis, TempDir};

fn put_shared(redis: &Redis, name: &str, cert: &Issued) {
    let bundle = shorturl_common::tls::CertBundle {
        cert: String::from_utf8(cert.cert_pem.clone()).unwrap(),
        key: String::from_utf8(cert.key_pem.clone()).unwrap(),
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
            "su:1:link:aB3xYz",
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
