//! The whole system on a Redis Cluster (3 masters, 3 replicas, started by
//! testkit): the link life cycle and exact click counts, then a master
//! killed under load. Run with `--nocapture` for the failover figures.
//! Needs `shorturl-origin` built (`cargo build --workspace`).

use crate::support;

use serde_json::json;
use std::time::Instant;
use support::failover::{self, DOMAIN, EDGE_EXTRA};
use support::http::get;
use support::{
    cluster_fields, create_link, delete_link, patch_link, start_edge, stats_app, EdgeOpts, Origin,
};
use testkit::{wait_for, RedisCluster};

fn cluster_get(cluster: &RedisCluster, key: &str) -> Option<String> {
    let v = cluster.cli(&["GET", key]);
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

#[test]
fn creation_redirect_edit_delete_and_exact_clicks_on_a_cluster() {
    let cluster = RedisCluster::start();
    let fields = cluster_fields(&cluster.seeds());
    // The Redis issuer backend too: its counter script on the cluster.
    let extra = format!("{}\nissuer: {{ backend: redis }}", stats_app());
    let origin = Origin::start_on(&fields, 500, &extra);
    let extra = format!("{EDGE_EXTRA}\n  clicks: {{ flush_interval_ms: 200 }}");
    let mut opts = EdgeOpts::new(fields.clone(), vec![origin.addr()]);
    opts.extra = &extra;
    let edge = start_edge(opts);
    edge.wait_subscribed();

    // Creation through the edge; the record is in the cluster.
    let created = create_link(edge.port, "https://example.com/v1", Some(DOMAIN));
    assert_eq!(created.status, 201, "{}", created.text());
    let code = created.json()["code"].as_str().unwrap().to_owned();
    let key = format!("su:1:link:{DOMAIN}/{code}");
    let stored = cluster_get(&cluster, &key).expect("record written to the cluster");
    assert!(stored.contains("https://example.com/v1"), "{stored}");
    // The id came from the Redis counter (one block taken so far).
    let counter = cluster_get(&cluster, "su:1:issuer:default").expect("issuer counter");
    assert_eq!(counter, "100", "one block of 100 ids");

    let path = format!("/{code}");
    // Every 302 for the code is a click, the polling ones included.
    let clicks = std::cell::Cell::new(0u64);
    let hit = || {
        let r = get(edge.port, &path, DOMAIN);
        if r.status == 302 {
            clicks.set(clicks.get() + 1);
        }
        r
    };
    for _ in 0..5 {
        let r = hit();
        assert_eq!(r.status, 302, "{}", r.text());
        assert_eq!(r.header("location"), Some("https://example.com/v1"));
    }
    // Served from the edge's memory from the second request on.
    assert!(edge.counter("local", "hit") >= 4);

    // Edit: the answer is cached for 5 minutes, so only the invalidation
    // message (published by the CAS script on the key's master, broadcast
    // by the cluster to the node the edge listens on) can change it.
    let r = patch_link(edge.port, &code, json!({"url": "https://example.com/v2"}));
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for("the edge to follow the edit", support::TIMEOUT, || {
        hit().header("location") == Some("https://example.com/v2")
    });
    for _ in 0..3 {
        assert_eq!(hit().header("location"), Some("https://example.com/v2"));
    }
    assert!(edge.inval().messages >= 2, "{:?}", edge.inval());

    // Delete: the edge answers 404 without waiting for any TTL.
    let r = delete_link(edge.port, &code);
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        "the edge to drop the deleted link",
        support::TIMEOUT,
        || hit().status == 404,
    );
    let clicks = clicks.get();

    // Clicks: the stream (one key, one master) → the origin's consumer →
    // MariaDB, exactly once each.
    let stats = || {
        let v = origin.stats(&code);
        v["totals"]["human"].as_u64().unwrap_or(0) + v["totals"]["bot"].as_u64().unwrap_or(0)
    };
    wait_for(
        &format!("{clicks} clicks in the stats"),
        support::TIMEOUT,
        || stats() >= clicks,
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(stats(), clicks, "every click counted once");
}

#[test]
fn a_cluster_master_killed_under_load() {
    let mut cluster = RedisCluster::start();
    let fields = cluster_fields(&cluster.seeds());
    let origin = Origin::start_on(&fields, 3000, "");
    let mut opts = EdgeOpts::new(fields, vec![origin.addr()]);
    opts.extra = EDGE_EXTRA;
    let edge = start_edge(opts);
    edge.wait_subscribed();

    let mut links = failover::warm_links(&edge, 13, "cluster");
    let (probe, _) = links.remove(0);
    let victim = cluster.master_for_key(&format!("su:1:link:{DOMAIN}/{probe}"));
    let load = failover::start_load(edge.port, links);
    std::thread::sleep(std::time::Duration::from_millis(300));

    let killed_at = Instant::now();
    cluster.kill(victim);
    let (writes, reads) =
        failover::recovery(&edge, &probe, |k| cluster_get(&cluster, k), killed_at);
    cluster.wait_healthy();
    let promoted = killed_at.elapsed();
    failover::wait_edge_follows(&edge, &probe);
    failover::wait_outbox_drained(origin.port);
    // A little more traffic on the recovered cluster.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t = load.stop();
    println!(
        "FIGURE redis cluster failover: writes to the killed master's slots back after {:.2} s, \
         edge reads without Redis errors after {:.2} s (cluster healthy by {:.2} s); \
         traffic: hot {:?}, creations {:?}, misses {:?}",
        writes.as_secs_f64(),
        reads.as_secs_f64(),
        promoted.as_secs_f64(),
        t.hot,
        t.creations,
        t.misses
    );
    t.assert_no_errors();
}
