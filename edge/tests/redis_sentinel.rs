//! The whole system on a Sentinel-managed Redis (master, replica, three
//! Sentinels, started by testkit): the master killed under load, the edge
//! and the origin following the Sentinels to the promoted replica. Run
//! with `--nocapture` for the failover figures.
//! Needs `shorturl-origin` built (`cargo build --workspace`).

use crate::support;

use std::time::Instant;
use support::failover::{self, EDGE_EXTRA};
use support::{sentinel_fields, start_edge, EdgeOpts, Origin};
use testkit::redis_topology::redis_cli;
use testkit::RedisSentinel;

#[test]
fn a_sentinel_failover_under_load() {
    let mut sentinel = RedisSentinel::start();
    let fields = sentinel_fields(&sentinel.sentinel_addrs(), RedisSentinel::MASTER_NAME);
    let origin = Origin::start_on(&fields, 3000, "");
    let mut opts = EdgeOpts::new(fields, vec![origin.addr()]);
    opts.extra = EDGE_EXTRA;
    let edge = start_edge(opts);
    edge.wait_subscribed();

    let mut links = failover::warm_links(&edge, 13, "sentinel");
    let (probe, _) = links.remove(0);
    let first = sentinel.master_port();
    let stored = redis_cli(
        first,
        &["GET", &format!("su:1:link:{}/{probe}", failover::DOMAIN)],
    )
    .unwrap_or_default();
    assert!(
        stored.contains("https://"),
        "record on the master: {stored:?}"
    );
    let load = failover::start_load(edge.port, links);
    std::thread::sleep(std::time::Duration::from_millis(300));

    let killed_at = Instant::now();
    let old = sentinel.kill_master();
    let new = sentinel.wait_failover(old);
    let promoted = killed_at.elapsed();
    assert_ne!(new, old);
    let (writes, reads) = failover::recovery(
        &edge,
        &probe,
        |k| redis_cli(new, &["GET", k]).filter(|v| !v.trim().is_empty()),
        killed_at,
    );
    // Pub/sub followed too: the edge hears the edit from the new master.
    failover::wait_edge_follows(&edge, &probe);
    failover::wait_outbox_drained(origin.port);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t = load.stop();
    println!(
        "FIGURE redis sentinel failover: Sentinels named the replica after {:.2} s; writes back \
         after {:.2} s, edge reads without Redis errors after {:.2} s; traffic: hot {:?}, \
         creations {:?}, misses {:?}",
        promoted.as_secs_f64(),
        writes.as_secs_f64(),
        reads.as_secs_f64(),
        t.hot,
        t.creations,
        t.misses
    );
    t.assert_no_errors();
}
