//! Abuse at the connection and client level: a spray of source addresses,
//! connection floods, slowloris. Each test loads the machine (thousands of
//! connections, tens of thousands of requests), so they run one at a time
//! (`serial()`), in their own test binary, apart from timing-sensitive tests.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use support::http::{get, Conn};
use support::{record_line, redis_set, start_edge, EdgeOpts, TIMEOUT};
use testkit::{free_port, wait_for, Redis};

const DOMAIN: &str = "s.shop55.com";

fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

fn edge_without_origin(redis: &Redis, extra: &'static str) -> support::Edge {
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = extra;
    start_edge(opts)
}

/// Thousands of distinct source addresses scanning unknown codes (the count-min
/// sketch used before filled up under this, after which every client got 429
/// on any uncached link) must not lock out an unrelated client.
#[test]
fn a_spray_of_source_addresses_does_not_lock_out_other_clients() {
    const SPRAYERS: usize = 6000;
    const THREADS: usize = 4;
    const ROUNDS: usize = 2;
    const PROBES: usize = 20;
    let _one = serial();
    let redis = Redis::start();
    let edge = edge_without_origin(
        &redis,
        "  limits: { unknown_per_ip_per_sec: 1, clients_tracked: 1000, header_timeout_secs: 60 }\n  cache: { negative_ttl_secs: 600 }\n",
    );
    redis_set(&redis, &format!("su:1:link:{DOMAIN}/spray0"), "-");
    for i in 0..PROBES {
        redis_set(
            &redis,
            &format!("su:1:link:{DOMAIN}/probe{i:02}"),
            &record_line(DOMAIN, "https://example.com/p", 3600),
        );
    }
    // The scanned code is known not to exist, from memory (one lookup;
    // asked from an address of its own, which the limit then counts).
    wait_for("the negative answer to be cached", TIMEOUT, || {
        Conn::open_from([127, 0, 9, 9].into(), edge.port)
            .and_then(|mut c| c.get("/spray0", DOMAIN))
            .is_ok_and(|r| r.status == 404)
    });
    // One keep-alive connection per sprayer address (127.1.x.y), opened first.
    let conns: Vec<Conn> = (0..SPRAYERS)
        .map(|i| {
            let ip = std::net::Ipv4Addr::new(127, 1, (i / 250) as u8, (1 + i % 250) as u8);
            Conn::open_from(ip.into(), edge.port).unwrap_or_else(|e| panic!("{ip}: {e}"))
        })
        .collect();
    let done = Arc::new(AtomicUsize::new(0));
    let mut chunks: Vec<Vec<Conn>> = (0..THREADS).map(|_| Vec::new()).collect();
    for (i, c) in conns.into_iter().enumerate() {
        chunks[i % THREADS].push(c);
    }
    let sprayers: Vec<_> = chunks
        .into_iter()
        .map(|mut mine| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
                for _ in 0..ROUNDS {
                    for c in &mut mine {
                        let s = c.get("/spray0", DOMAIN).map(|r| r.status).unwrap_or(0);
                        *statuses.entry(s).or_default() += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                statuses
            })
        })
        .collect();
    // Probes from an unrelated client, spread over the spray: each is an
    // uncached link, so each passes the unknown-code check.
    let total = SPRAYERS * ROUNDS;
    let mut probes = Vec::new();
    for i in 0..PROBES {
        let due = total * i / PROBES;
        wait_for("the spray to progress", Duration::from_secs(120), || {
            done.load(Ordering::Relaxed) >= due
        });
        probes.push(get(edge.port, &format!("/probe{i:02}"), DOMAIN).status);
    }
    let mut sprayed = std::collections::BTreeMap::<u16, usize>::new();
    for t in sprayers {
        for (s, n) in t.join().unwrap() {
            *sprayed.entry(s).or_default() += n;
        }
    }
    assert_eq!(
        probes,
        vec![302; PROBES],
        "the unrelated client was locked out"
    );
    // Each thread cycles through 1500 addresses, more than the table holds,
    // so every sprayer is evicted before it comes back: each of its
    // requests is its first in its window, a 404, and evicts one client.
    // (A wide spray is only counted per address; each address here stays
    // under its own limit of one per second anyway.)
    assert_eq!(sprayed.get(&404), Some(&total), "{sprayed:?}");
    // (Plus the warm-up client: one more key into a table of 1000.)
    assert_eq!(
        edge.metric("shorturl_limits_evictions_total"),
        (total + 1 - 1000) as f64
    );
    assert_eq!(
        edge.metric("shorturl_limits_refused_total{limit=\"unknown\"}"),
        0.0
    );
}

/// Over a connection cap, new connections are closed before anything is
/// read: the 65th from one address (default `max_connections_per_ip`),
/// and any past `max_connections`; others keep connecting, and a closed
/// connection frees its place.
#[test]
fn connection_caps_close_new_connections_early() {
    let _one = serial();
    let redis = Redis::start();
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/capd01"),
        &record_line(DOMAIN, "https://example.com/c", 3600),
    );
    let edge = edge_without_origin(
        &redis,
        "  limits: { max_connections: 100, header_timeout_secs: 60 }\n",
    );
    let (a, b, c): (std::net::IpAddr, std::net::IpAddr, std::net::IpAddr) = (
        [127, 0, 3, 1].into(),
        [127, 0, 3, 2].into(),
        [127, 0, 3, 3].into(),
    );
    let open_ok = |from: std::net::IpAddr| {
        let mut conn = Conn::open_from(from, edge.port).unwrap();
        let r = conn.get("/capd01", DOMAIN).unwrap();
        assert_eq!(r.status, 302);
        conn
    };
    let refused = |from: std::net::IpAddr| {
        Conn::open_from(from, edge.port)
            .and_then(|mut conn| conn.get("/capd01", DOMAIN))
            .is_err()
    };
    let open_now = || edge.metric("shorturl_connections_open");
    wait_for("health-check connections to close", TIMEOUT, || {
        open_now() == 0.0
    });

    let mut from_a: Vec<Conn> = (0..64).map(|_| open_ok(a)).collect();
    assert!(
        refused(a),
        "the 65th connection from one address was served"
    );
    let from_b: Vec<Conn> = (0..36).map(|_| open_ok(b)).collect();
    assert_eq!(open_now(), 100.0);
    assert!(refused(c), "the 101st connection was served");
    let per_ip = "shorturl_connections_refused_total{reason=\"max_connections_per_ip\"}";
    let total = "shorturl_connections_refused_total{reason=\"max_connections\"}";
    assert_eq!((edge.metric(per_ip), edge.metric(total)), (1.0, 1.0));

    drop(from_a.pop());
    wait_for("the closed connection to be released", TIMEOUT, || {
        open_now() == 99.0
    });
    let again = open_ok(a);
    assert_eq!(open_now(), 100.0);
    drop((from_a, from_b, again));
    wait_for("every connection to be released", TIMEOUT, || {
        open_now() == 0.0
    });
    drop(open_ok(c));
}

/// Slowloris: hundreds of connections from several addresses, each sending
/// one byte of a request head every second, are closed once
/// `header_timeout_secs` has passed since they connected (Pingora alone
/// bounds each read, not the head, so they lived as long as they kept
/// trickling), while an ordinary client keeps getting its redirects.
#[test]
fn slow_clients_are_closed_at_the_header_timeout_while_others_are_served() {
    let _one = serial();
    use std::io::{ErrorKind, Read, Write};
    const ADDRS: u8 = 6;
    const PER_ADDR: usize = 50;
    const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
    let redis = Redis::start();
    redis_set(
        &redis,
        &format!("su:1:link:{DOMAIN}/fast01"),
        &record_line(DOMAIN, "https://example.com/f", 3600),
    );
    let edge = edge_without_origin(&redis, "  limits: { header_timeout_secs: 3 }\n");
    let port = edge.port;
    wait_for("the link to be cached", TIMEOUT, || {
        get(port, "/fast01", DOMAIN).status == 302
    });

    let slow_done = Arc::new(AtomicBool::new(false));
    let slow = {
        let slow_done = Arc::clone(&slow_done);
        std::thread::spawn(move || {
            let head = b"GET /fast01 HTTP/1.1\r\nHost: s.shop55.com\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            let mut conns: Vec<(std::net::TcpStream, Instant, Option<Duration>)> = Vec::new();
            for a in 0..ADDRS {
                for _ in 0..PER_ADDR {
                    let from: std::net::IpAddr = [127, 0, 4, 10 + a].into();
                    let s = testkit::http::connect_from(from, port).unwrap();
                    s.set_nonblocking(true).unwrap();
                    conns.push((s, Instant::now(), None));
                }
            }
            let started = Instant::now();
            let mut sent = 0;
            // The slow clients' own pace: one more byte every second, and
            // a look every 100 ms at whether the edge has closed them.
            while conns.iter().any(|c| c.2.is_none()) && started.elapsed() < Duration::from_secs(30)
            {
                let due = (started.elapsed().as_secs() as usize + 1).min(head.len());
                for (s, opened, closed) in conns.iter_mut().filter(|c| c.2.is_none()) {
                    let mut buf = [0u8; 64];
                    let gone = match s.read(&mut buf) {
                        Ok(0) => true,
                        Ok(_) => panic!("the edge answered an incomplete head"),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                        Err(_) => true,
                    };
                    if gone {
                        *closed = Some(opened.elapsed());
                    } else if sent < due {
                        let _ = s.write(&head[sent..due]);
                    }
                }
                sent = due;
                std::thread::sleep(Duration::from_millis(100));
            }
            slow_done.store(true, Ordering::Relaxed);
            conns.into_iter().map(|c| c.2).collect::<Vec<_>>()
        })
    };

    // The ordinary client: keep-alive redirects, a new connection every
    // tenth request, until every slow client is gone. It paces itself (a
    // client, not a load generator) so the machine stays usable for others.
    let mut latencies = Vec::new();
    let mut conn = Conn::open(port).unwrap();
    while !slow_done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(2));
        if latencies.len() % 10 == 0 {
            conn = Conn::open(port).unwrap_or_else(|e| panic!("ordinary client refused: {e}"));
        }
        let t = Instant::now();
        let r = conn
            .get("/fast01", DOMAIN)
            .unwrap_or_else(|e| panic!("ordinary client failed: {e}"));
        latencies.push(t.elapsed());
        assert_eq!(r.status, 302);
    }
    let closed = slow.join().unwrap();
    let lived: Vec<Duration> = closed
        .iter()
        .map(|c| c.unwrap_or_else(|| panic!("a slow client was never closed")))
        .collect();
    let (min, max) = (lived.iter().min().unwrap(), lived.iter().max().unwrap());
    eprintln!(
        "slow clients closed after {min:?}..{max:?}; ordinary requests: {}",
        latencies.len()
    );
    assert!(
        *min >= HEADER_TIMEOUT - Duration::from_millis(100),
        "closed early: {min:?}"
    );
    assert!(
        *max < HEADER_TIMEOUT + Duration::from_secs(5),
        "closed late: {max:?}"
    );
    assert_eq!(
        edge.metric("shorturl_connections_header_timeouts_total"),
        (ADDRS as usize * PER_ADDR) as f64
    );
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    eprintln!(
        "ordinary client p99 {p99:?} over {} requests",
        latencies.len()
    );
    assert!(
        latencies.len() >= 100,
        "too few ordinary requests: {}",
        latencies.len()
    );
    assert!(p99 < Duration::from_millis(100), "p99 {p99:?}");
}
