//! The Redis topologies other tests rely on start and fail over as real
//! deployments do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use testkit::redis_topology::redis_cli;
use testkit::{RedisCluster, RedisSentinel};

#[test]
fn cluster_serves_every_slot_and_promotes_a_replica() {
    let mut c = RedisCluster::start();
    assert_eq!(c.masters().len(), 3);
    assert_eq!(c.cli(&["SET", "{a}k", "1"]).trim(), "OK");
    assert_eq!(c.cli(&["GET", "{a}k"]).trim(), "1");
    let m = c.master_for_key("{a}k");
    wait_replicated(c.ports()[m]);
    c.kill(m);
    c.wait_healthy();
    let now = c.master_for_key("{a}k");
    assert_ne!(now, m, "the replica took over the slot");
    assert_eq!(c.cli(&["GET", "{a}k"]).trim(), "1");
}

#[test]
fn sentinel_promotes_the_replica() {
    let mut s = RedisSentinel::start();
    let old = s.master_port();
    assert_eq!(redis_cli(old, &["SET", "k", "v"]).unwrap().trim(), "OK");
    wait_replicated(old);
    let killed = s.kill_master();
    assert_eq!(killed, old);
    let new = s.wait_failover(old);
    assert_ne!(new, old);
    assert_eq!(redis_cli(new, &["GET", "k"]).unwrap().trim(), "v");
}

/// Waits until a replica of the master at `port` acknowledged everything
/// written to it so far. Replication is asynchronous: killing the master
/// before that may lose the write (it did once on a loaded machine).
fn wait_replicated(port: u16) {
    let offsets = |key: &str| -> Vec<u64> {
        let info = redis_cli(port, &["INFO", "replication"]).unwrap_or_default();
        info.lines()
            .filter_map(|l| {
                if key == "master" {
                    l.trim().strip_prefix("master_repl_offset:")
                } else if l.starts_with("slave") {
                    l.split(',').find_map(|kv| kv.strip_prefix("offset="))
                } else {
                    None
                }
            })
            .filter_map(|v| v.trim().parse().ok())
            .collect()
    };
    let written = *offsets("master").first().expect("master_repl_offset");
    testkit::wait_for(
        "a replica to acknowledge the writes",
        Duration::from_secs(30),
        || offsets("replica").iter().any(|&acked| acked >= written),
    );
}
