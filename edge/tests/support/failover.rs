//! A Redis failover under load: traffic for links held in the edge's
//! memory, creations and misses, counted per kind while a test kills a
//! Redis master; then how long until Redis takes writes and serves reads
//! again (printed for the operator's notes: run with `--nocapture`).

use super::http::{get, Conn};
use super::{create_link, patch_link, Edge, TIMEOUT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use testkit::wait_for;

pub const DOMAIN: &str = "s.shop55.com";

/// `redis:` extras that keep answers in the edge's memory for the whole
/// test and let misses through unthrottled.
pub const EDGE_EXTRA: &str = "  cache: { positive_ttl_secs: 300, negative_ttl_secs: 300 }
  limits: { unknown_per_ip_per_sec: 0 }";

/// What one kind of traffic saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub ok: u64,
    pub err: u64,
}

/// The running traffic.
pub struct Load {
    stop: Arc<AtomicBool>,
    hot: JoinHandle<Tally>,
    creations: JoinHandle<Tally>,
    misses: JoinHandle<Tally>,
}

/// The tallies once stopped.
#[derive(Debug)]
pub struct Totals {
    pub hot: Tally,
    pub creations: Tally,
    pub misses: Tally,
}

/// Creates `n` links through the edge and reads each once, so the edge
/// holds them in memory. Returns (code, url).
impl Totals {
    /// What a failover must not break: no error for links in the edge's
    /// memory, for creations (MySQL is the truth) or for misses (they fall
    /// back to the origin), and each kind of traffic really ran.
    pub fn assert_no_errors(&self) {
        assert_eq!(self.hot.err, 0, "links in the edge's memory never fail");
        assert!(self.hot.ok > 100, "{:?}", self.hot);
        assert_eq!(
            self.creations.err, 0,
            "creations never fail (MySQL is the truth)"
        );
        assert!(self.creations.ok > 5, "{:?}", self.creations);
        assert_eq!(self.misses.err, 0, "misses fall back to the origin");
        assert!(self.misses.ok > 10, "{:?}", self.misses);
    }
}

pub fn warm_links(edge: &Edge, n: usize, tag: &str) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let url = format!("https://example.com/{tag}/{i}");
            let r = create_link(edge.port, &url, Some(DOMAIN));
            assert_eq!(r.status, 201, "{}", r.text());
            let code = r.json()["code"].as_str().unwrap().to_owned();
            let r = get(edge.port, &format!("/{code}"), DOMAIN);
            assert_eq!(r.status, 302, "{}", r.text());
            (code, url)
        })
        .collect()
}

fn random_code(i: u64) -> String {
    const ALPHA: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut x = i
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(std::process::id() as u64);
    (0..6)
        .map(|_| {
            x ^= x >> 29;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ALPHA[(x % 62) as usize] as char
        })
        .collect()
}

/// Starts three client threads against the edge on `port`.
pub fn start_load(port: u16, hot: Vec<(String, String)>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let hot = std::thread::spawn(move || {
        let mut t = Tally::default();
        let mut conn = Conn::open(port).ok();
        let mut i = 0;
        while !s.load(Ordering::Relaxed) {
            let (code, url) = &hot[i % hot.len()];
            i += 1;
            let r = conn
                .as_mut()
                .and_then(|c| c.get(&format!("/{code}"), DOMAIN).ok());
            match r {
                Some(r) if r.status == 302 && r.header("location") == Some(url.as_str()) => {
                    t.ok += 1
                }
                other => {
                    t.err += 1;
                    if t.err <= 3 {
                        eprintln!(
                            "hot link /{code}: {:?}",
                            other.map(|r| (r.status, r.text()))
                        );
                    }
                    conn = Conn::open(port).ok();
                }
            }
        }
        t
    });
    let s = Arc::clone(&stop);
    let creations = std::thread::spawn(move || {
        let mut t = Tally::default();
        let mut i = 0;
        while !s.load(Ordering::Relaxed) {
            i += 1;
            let r = create_link(port, &format!("https://example.com/load/{i}"), Some(DOMAIN));
            if r.status == 201 {
                t.ok += 1;
            } else {
                t.err += 1;
                if t.err <= 3 {
                    eprintln!("creation: {} {}", r.status, r.text());
                }
            }
            // Well under the edge's default 20 creations/s per client.
            std::thread::sleep(Duration::from_millis(200));
        }
        t
    });
    let s = Arc::clone(&stop);
    let misses = std::thread::spawn(move || {
        let mut t = Tally::default();
        let mut i = 0;
        while !s.load(Ordering::Relaxed) {
            i += 1;
            let r = get(port, &format!("/{}", random_code(i)), DOMAIN);
            if r.status == 404 {
                t.ok += 1;
            } else {
                t.err += 1;
                if t.err <= 3 {
                    eprintln!("miss: {} {}", r.status, r.text());
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        t
    });
    Load {
        stop,
        hot,
        creations,
        misses,
    }
}

impl Load {
    /// Stops the threads and returns what they saw.
    pub fn stop(self) -> Totals {
        self.stop.store(true, Ordering::Relaxed);
        Totals {
            hot: self.hot.join().unwrap(),
            creations: self.creations.join().unwrap(),
            misses: self.misses.join().unwrap(),
        }
    }
}

/// After a kill at `killed_at`: edits `probe` (a link whose Redis key lived
/// on the killed master) through the edge and waits until its new record
/// is in Redis (`redis_get` reads a key from the topology), then until a
/// round of misses through the edge costs no Redis error. Returns both
/// delays from the kill.
pub fn recovery(
    edge: &Edge,
    probe: &str,
    redis_get: impl Fn(&str) -> Option<String>,
    killed_at: Instant,
) -> (Duration, Duration) {
    let r = patch_link(
        edge.port,
        probe,
        serde_json::json!({"url": "https://example.com/after-kill"}),
    );
    assert_eq!(r.status, 200, "an edit is MySQL's business: {}", r.text());
    let key = format!("su:1:link:{DOMAIN}/{probe}");
    wait_for(
        "the edit's record in Redis",
        Duration::from_secs(60),
        || redis_get(&key).is_some_and(|v| v.contains("after-kill")),
    );
    let writes = killed_at.elapsed();
    let mut n = 1_000_000u64;
    wait_for(
        "edge reads without Redis errors",
        Duration::from_secs(60),
        || {
            let before = edge.counter("redis", "error");
            for _ in 0..12 {
                n += 1;
                let r = get(edge.port, &format!("/{}", random_code(n)), DOMAIN);
                assert_eq!(r.status, 404, "{}", r.text());
            }
            edge.counter("redis", "error") == before
        },
    );
    let reads = killed_at.elapsed();
    (writes, reads)
}

/// The edge follows the edit (invalidation after the failover).
pub fn wait_edge_follows(edge: &Edge, probe: &str) {
    wait_for("the edge to follow the edit", TIMEOUT, || {
        get(edge.port, &format!("/{probe}"), DOMAIN).header("location")
            == Some("https://example.com/after-kill")
    });
}

/// Waits until the origin's outbox is empty: every change, the ones made
/// while a promoted master had no replica included, reached Redis.
pub fn wait_outbox_drained(origin_port: u16) {
    wait_for("the origin's outbox to drain", TIMEOUT, || {
        let st = get(origin_port, "/shorturl_status", "localhost").json();
        st["outbox"]["pending"].as_u64() == Some(0)
    });
}
