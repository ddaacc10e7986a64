//! The Redis topologies other tests rely on start and fail over as real
//! deployments do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use testkit::redis_topology::redis_cli;
use testkit::{RedisCluster, RedisSentinel};

#[test]
fn cluster_serves_every_slot_and_promotes_a_replica() {
    let mut c = RedisCluster::start();
    assert_eq!(c.masters().len(), 3);
    assert_eq!(c.cli(&["SET", "{a}k", "1"]).trim(), "OK");
    assert_eq!(c.cli(&["GET", "{a}k"]).trim(), "1");
    let m = c.master_for_key("{a}k");
    c.kill(m);
    c.wait_healthy();
    let now = c.master_for_key("{a}k");
    assert_ne!(now, m, "the replica took over the slot");
    // Replication is asynchronous, but this write was long since copied.
    assert_eq!(c.cli(&["GET", "{a}k"]).trim(), "1");
}

#[test]
fn sentinel_promotes_the_replica() {
    let mut s = RedisSentinel::start();
    let old = s.master_port();
    assert_eq!(redis_cli(old, &["SET", "k", "v"]).unwrap().trim(), "OK");
    let killed = s.kill_master();
    assert_eq!(killed, old);
    let new = s.wait_failover(old);
    assert_ne!(new, old);
    assert_eq!(redis_cli(new, &["GET", "k"]).unwrap().trim(), "v");
}
