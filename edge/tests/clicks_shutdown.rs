//! Clicks across a graceful shutdown (`SIGTERM`) and a graceful upgrade
//! (`-u` + `SIGQUIT`): every redirect a client received reaches the stream.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::clicks::{links, wait_stream_total, DOMAIN};
use support::http::{get, Conn};
use support::{start_edge, upgrade, EdgeOpts, TIMEOUT};
use testkit::{free_port, wait_for, Redis};

fn edge_with(redis: &Redis, extra: &'static str) -> support::Edge {
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.extra = extra;
    start_edge(opts)
}

/// Load, then `SIGTERM`: every redirect a client received is in the
/// stream, though the flush interval (5 s) never came.
#[test]
fn graceful_shutdown_delivers_every_click() {
    let redis = Redis::start();
    links(&redis, &["term01"]);
    let mut edge = edge_with(
        &redis,
        "  clicks: { flush_interval_ms: 5000, edge_name: term }",
    );
    let port = edge.port;
    let loaders = load(port, "term01", 3);
    wait_for("load to start", TIMEOUT, || {
        get(port, "/term01", DOMAIN).status == 302
    });
    std::thread::sleep(Duration::from_millis(300));
    edge.proc.signal(libc::SIGTERM);
    wait_for("edge to exit", TIMEOUT, || !edge.proc.is_running());
    let served = loaders.finish() + 1;
    let s = wait_stream_total(&redis, served);
    assert_eq!(s.bot, served);
    assert!(s.ids.iter().all(|id| id.starts_with("term:")));
}

/// Graceful upgrade under load: the old process's clicks (flushed at its
/// end) and the new one's add up to every redirect served.
#[test]
fn graceful_upgrade_delivers_every_click_of_both_processes() {
    let redis = Redis::start();
    links(&redis, &["upgr01"]);
    let mut opts = EdgeOpts::new(redis.url(), vec![format!("127.0.0.1:{}", free_port())]);
    opts.threads = 1;
    opts.extra = "  clicks: { flush_interval_ms: 5000, edge_name: upg }";
    let mut old = start_edge(opts);
    let port = old.port;
    let loaders = load(port, "upgr01", 3);
    wait_for("load to start", TIMEOUT, || {
        get(port, "/upgr01", DOMAIN).status == 302
    });
    let mut new = upgrade(&mut old);
    for _ in 0..20 {
        assert_eq!(get(port, "/upgr01", DOMAIN).status, 302);
    }
    let served = loaders.finish() + 1 + 20;
    new.signal(libc::SIGTERM);
    wait_for("new edge to exit", TIMEOUT, || !new.is_running());
    let s = wait_stream_total(&redis, served);
    let nonces: BTreeSet<&str> = s.ids.iter().filter_map(|id| id.split(':').nth(1)).collect();
    assert_eq!(nonces.len(), 2, "one nonce per process: {:?}", s.ids);
}

/// Clients on fresh connections until told to stop; counts the 302s.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Load {
    /// Stops the clients (once the server is gone, they stop by themselves)
    /// and returns the redirects they received.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

fn load(port: u16, code: &'static str, n: usize) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..n)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut ok = 0u64;
                let mut refused = 0;
                while !stop.load(Ordering::Relaxed) && refused < 50 {
                    match Conn::open(port).and_then(|mut c| c.get(&format!("/{code}"), DOMAIN)) {
                        Ok(r) if r.status == 302 => ok += 1,
                        Ok(r) => panic!("status {}", r.status),
                        // The listener is gone (shutdown): keep trying a
                        // little in case it comes back (upgrade).
                        Err(_) => {
                            refused += 1;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
                ok
            })
        })
        .collect();
    Load { stop, threads }
}
