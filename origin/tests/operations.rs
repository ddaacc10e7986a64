//! Operating the origin: who may read `/shorturl_status`, and a shutdown
//! bounded by `shutdown_grace` even with a request held open.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use shorturl_common::error::NOT_FOUND_BODY;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::Setup;

const SIGTERM: i32 = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_answered_only_to_allowed_networks() {
    // Loopback is not in the list: this client gets the protocol 404.
    let s = Setup::start_with(|o| {
        o.extra_yaml = "status_allow: [10.0.0.0/8, \"::1/128\"]\n".into();
    });
    let o = &s.origin;
    for host in ["sho.rt", "localhost"] {
        let r = o
            .http
            .get(o.url("/shorturl_status"))
            .header("Host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()["cache-control"], "no-store");
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.bytes().await.unwrap().as_ref(), NOT_FOUND_BODY);
    }
    let r = o.http.head(o.url("/shorturl_status")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    // The rest of the service is unaffected.
    assert_eq!(o.get_text("/healthz", "sho.rt").await.0, 200);
    assert_eq!(o.get_text("/zzzzzz", "sho.rt").await.0, 404);

    // Listed: answered.
    let s = Setup::start_with(|o| {
        o.extra_yaml = "status_allow: [127.0.0.1/32]\n".into();
    });
    assert_eq!(s.origin.status().await.service, "origin");
}

/// Reads from `s` until `needle` has arrived (or panics after 10 s).
fn read_until(s: &mut TcpStream, needle: &str) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains(needle) {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before {needle:?}: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_within_the_grace_even_with_a_request_held_open() {
    // The test config sets shutdown_grace_secs: 2.
    let mut s = Setup::start();
    let grace = Duration::from_secs(2);
    let mut conn = TcpStream::connect(("127.0.0.1", s.origin.port)).unwrap();
    // A creation whose body never finishes: `Expect: 100-continue` makes the
    // origin say when the handler has started reading it.
    let head = format!(
        "POST /api/v1/links HTTP/1.1\r\nHost: sho.rt\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n",
        support::KEY
    );
    conn.write_all(head.as_bytes()).unwrap();
    read_until(&mut conn, "100 Continue\r\n\r\n");
    conn.write_all(b"{\"url\":").unwrap();

    let t = Instant::now();
    s.origin.proc.signal(SIGTERM);
    let margin = Duration::from_millis(1500);
    while s.origin.proc.is_running() {
        assert!(
            t.elapsed() < grace + margin,
            "still running {:?} after SIGTERM (grace {grace:?})",
            t.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        t.elapsed() >= grace,
        "exited before the grace: {:?}",
        t.elapsed()
    );
    assert!(
        s.origin.log().contains("shutdown grace elapsed"),
        "{}",
        s.origin.log()
    );
    // The held connection is closed (end of stream or a reset), not left open.
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest);
}
