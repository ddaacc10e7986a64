//! The OpenResty module on a Redis Cluster (3 masters + 3 replicas) and on
//! a Sentinel-managed master (testkit::RedisCluster, RedisSentinel). The
//! modules' origin is a closed port, so every redirect they answer came
//! from Redis: records and ACME tokens on all three masters, an ASK and a MOVED during a
//! slot migration, a master killed (the module answers again after the
//! promotion, without a restart), clicks appended to the stream on its
//! master, invalidations received before and after the subscribed node
//! died. Recovery times are printed (`--nocapture`).

use crate::support;

use std::time::{Duration, Instant};
use support::clicks::await_clicks;
use support::http;
use support::Edge;
use testkit::redis_topology::redis_cli;
use testkit::{free_port, wait_for, RedisCluster, RedisSentinel};

const RECOVERY: Duration = Duration::from_secs(30);
/// 2100-01-01: records that do not expire during the test.
const FAR: u64 = 4_102_444_800;

fn record(version: u64, url: &str) -> String {
    format!("2 {version} {FAR} localhost {url}")
}

fn key(code: &str) -> String {
    format!("su:1:link:localhost/{code}")
}

/// A module with its metrics on their own port.
struct Module {
    edge: Edge,
    metrics_port: u16,
}

impl Module {
    /// `redis`: start.sh's third argument for `mode`; `full`: caches and
    /// the invalidation subscriber (one worker), else Redis on every
    /// request (two workers).
    fn start(mode: &str, redis: &str, full: bool, name: &str) -> Module {
        let metrics_port = free_port();
        // Nothing listens there: an answer that needs the origin fails.
        let origin = format!("127.0.0.1:{}", free_port());
        let mut env = vec![
            ("SU_REDIS_MODE", mode.to_owned()),
            ("SU_METRICS_PORT", metrics_port.to_string()),
            ("SU_CLICKS_FLUSH_INTERVAL_MS", "100".to_owned()),
            ("SU_CLICKS_EDGE_NAME", name.to_owned()),
            ("SU_UNAVAILABLE_TTL_MS", "1".to_owned()),
            // The subscriber's every node, subscription and loss in the
            // log a failure prints.
            ("SU_ERROR_LOG_LEVEL", "info".to_owned()),
        ];
        if full {
            // Neither TTL nor the unsubscribed grace can explain a change
            // seen within the test: only a message can.
            env.extend([
                ("SU_WORKERS", "1".to_owned()),
                ("SU_POSITIVE_TTL_SECS", "300".to_owned()),
                ("SU_UNSUBSCRIBED_GRACE_MS", "300000".to_owned()),
            ]);
        } else {
            env.push(("SU_MODE", "redis-only".to_owned()));
        }
        let edge = Edge::openresty_with(redis, &origin, &env);
        Module { edge, metrics_port }
    }

    fn metric(&self, series: &str) -> u64 {
        let text = http::get(self.metrics_port, "/metrics", "localhost").text();
        testkit::metrics::metric_in(&text, series)
            .unwrap_or_else(|| panic!("no {series} in\n{text}")) as u64
    }

    fn topology(&self, event: &str) -> u64 {
        self.metric(&format!(
            "shorturl_redis_topology_total{{event=\"{event}\"}}"
        ))
    }

    /// Where `/code` redirects to (None: not a 302).
    fn location(&self, code: &str) -> Option<String> {
        let r = http::get(self.edge.port, &format!("/{code}"), "localhost");
        (r.status == 302).then(|| r.header("location").unwrap_or("").to_owned())
    }

    fn expect(&self, code: &str, url: &str) {
        assert_eq!(
            self.location(code).as_deref(),
            Some(url),
            "/{code}\n{}",
            self.edge.logs()
        );
    }

    fn await_location(&self, what: &str, code: &str, url: &str) {
        let deadline = Instant::now() + RECOVERY;
        while self.location(code).as_deref() != Some(url) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:?}, topology moved {} ask {} slots {}\n{}",
                self.location(code),
                self.topology("moved"),
                self.topology("ask"),
                self.topology("slots"),
                self.edge.logs()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn subscribed_once_more(&self, before: u64) {
        wait_for("the subscriber to subscribe again", RECOVERY, || {
            self.metric("shorturl_inval_subscriptions_total") > before
                && self.metric("shorturl_inval_subscribed") == 1
        });
    }
}

fn cluster_port(c: &RedisCluster, i: usize) -> u16 {
    c.ports()[i]
}

fn node_id(port: u16) -> String {
    redis_cli(port, &["CLUSTER", "MYID"])
        .unwrap()
        .trim()
        .to_owned()
}

fn keyslot(port: u16, key: &str) -> String {
    redis_cli(port, &["CLUSTER", "KEYSLOT", key])
        .unwrap()
        .trim()
        .to_owned()
}

/// Local subscribers of the invalidation channel on the node at `port`.
fn subscribers(port: u16) -> u64 {
    redis_cli(port, &["PUBSUB", "NUMSUB", "su:1:inval"])
        .and_then(|t| t.lines().nth(1).and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0)
}

#[test]
fn module_on_a_redis_cluster() {
    let mut cluster = RedisCluster::start();
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    // One code per master (and a few spare), as CLUSTER KEYSLOT places them.
    let mut by_master: Vec<Vec<String>> = vec![Vec::new(); 3];
    for i in 0..60 {
        let code = format!("clu{i:03}x");
        let m = cluster.master_for_key(&key(&code));
        let slot = masters.iter().position(|&x| x == m).unwrap();
        by_master[slot].push(code);
        if by_master.iter().all(|v| v.len() >= 3) {
            break;
        }
    }
    assert!(by_master.iter().all(|v| v.len() >= 3), "{by_master:?}");
    for codes in &by_master {
        for c in codes {
            let url = format!("https://example.com/{c}");
            cluster.cli(&["SET", &key(c), &record(1, &url)]);
        }
    }

    let seeds = cluster.seeds().join(",");
    let a = Module::start("cluster", &seeds, false, "orcluster");
    // The subscriber's seeds are the masters only, so it subscribes on one.
    let master_seeds: Vec<String> = masters
        .iter()
        .map(|&i| format!("127.0.0.1:{}", cluster_port(&cluster, i)))
        .collect();
    let b = Module::start("cluster", &master_seeds.join(","), true, "orclusterb");

    // Records on every master, each from the node serving it: no redirection.
    for codes in &by_master {
        for c in codes {
            a.expect(c, &format!("https://example.com/{c}"));
        }
    }
    assert_eq!(a.topology("moved"), 0, "the module's slots are Redis's");
    assert_eq!(a.topology("ask"), 0);
    assert!(a.topology("slots") >= 1);

    // ACME answers (the TLS store's connections, their own slot map): a
    // token on each master.
    let mut tokens: Vec<Option<String>> = vec![None; 3];
    for i in 0..60 {
        let t = format!("tok{i}");
        let m = cluster.master_for_key(&format!("su:1:acme:challenge:{t}"));
        let slot = masters.iter().position(|&x| x == m).unwrap();
        tokens[slot].get_or_insert(t);
        if tokens.iter().all(Option::is_some) {
            break;
        }
    }
    for t in tokens.iter().flatten() {
        cluster.cli(&[
            "SET",
            &format!("su:1:acme:challenge:{t}"),
            &format!("{t}.keyauth"),
        ]);
        let r = http::get(
            a.edge.port,
            &format!("/.well-known/acme-challenge/{t}"),
            "localhost",
        );
        assert_eq!(
            (r.status, r.text()),
            (200, format!("{t}.keyauth")),
            "token {t}"
        );
    }
    assert_eq!(a.topology("moved"), 0);

    // Clicks: the stream's XADD goes to the master of su:1:clicks.
    let stream_master = cluster.master_for_key("su:1:clicks");
    let stream_url = format!(
        "redis://127.0.0.1:{}/",
        cluster_port(&cluster, stream_master)
    );
    for codes in &by_master {
        for c in codes {
            a.expect(c, &format!("https://example.com/{c}"));
        }
    }
    let total: u64 = by_master.iter().map(|v| v.len() as u64).sum();
    // Both rounds of redirects, each counted once.
    await_clicks(&stream_url, "orcluster:", 2 * total);

    // Invalidation: B caches v1; a new record without a message stays
    // unseen, the message brings it.
    let j = &by_master[0][0];
    let j_url = format!("https://example.com/{j}");
    wait_for("B to subscribe", RECOVERY, || {
        b.metric("shorturl_inval_subscribed") == 1
    });
    b.expect(j, &j_url);
    cluster.cli(&["SET", &key(j), &record(2, "https://example.com/v2")]);
    b.expect(j, &j_url);
    cluster.cli(&["PUBLISH", "su:1:inval", &format!("2 {j} localhost")]);
    b.await_location("B to apply the message", j, "https://example.com/v2");

    // A slot migration: ASK while the key is already on the target, MOVED
    // once the slot belongs to it.
    let mig = &by_master[1][0];
    let mig_url = format!("https://example.com/{mig}");
    let src = cluster_port(&cluster, masters[1]);
    let dst = cluster_port(&cluster, masters[2]);
    let slot = keyslot(src, &key(mig));
    let (src_id, dst_id) = (node_id(src), node_id(dst));
    for (port, args) in [
        (dst, ["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id]),
        (src, ["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id]),
    ] {
        assert_eq!(redis_cli(port, &args).unwrap().trim(), "OK");
    }
    let out = redis_cli(
        src,
        &[
            "MIGRATE",
            "127.0.0.1",
            &dst.to_string(),
            &key(mig),
            "0",
            "5000",
        ],
    )
    .unwrap();
    assert_eq!(out.trim(), "OK");
    for _ in 0..3 {
        a.expect(mig, &mig_url);
    }
    assert_eq!(a.topology("ask"), 3, "one ASK per request");
    assert_eq!(a.topology("moved"), 0);
    for &m in &masters {
        let port = cluster_port(&cluster, m);
        let out = redis_cli(port, &["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]).unwrap();
        assert_eq!(out.trim(), "OK");
    }
    for _ in 0..6 {
        a.expect(mig, &mig_url);
    }
    let moved = a.topology("moved");
    assert!(
        (1..=2).contains(&moved),
        "a MOVED per worker at most: {moved}"
    );
    assert_eq!(a.topology("ask"), 3);

    // Failover: kill the master B subscribes on; A must answer the codes
    // it served again once the replica is promoted, B must subscribe
    // elsewhere and apply messages again.
    let dead = *masters
        .iter()
        .find(|&&m| subscribers(cluster_port(&cluster, m)) > 0)
        .expect("B subscribed on a master");
    let dead_slot = masters.iter().position(|&m| m == dead).unwrap();
    let victim = by_master[dead_slot]
        .iter()
        .find(|c| *c != mig && *c != j)
        .unwrap()
        .clone();
    let victim_url = format!("https://example.com/{victim}");
    let subs = b.metric("shorturl_inval_subscriptions_total");
    let t0 = Instant::now();
    cluster.kill(dead);
    a.await_location("A to answer after the failover", &victim, &victim_url);
    let lookup_back = t0.elapsed();
    b.subscribed_once_more(subs);
    let resubscribed = t0.elapsed();
    cluster.wait_healthy();
    let promoted = t0.elapsed();
    // Every code again, from Redis. Each worker has its own slot map and
    // learns of the promotion on its own: a worker's first lookups of the
    // dead master's slots may still go to the origin (none here), so each
    // code is awaited, not expected at once.
    for codes in &by_master {
        for c in codes.iter().filter(|c| *c != j) {
            a.await_location(
                "every code from Redis after the failover",
                c,
                &format!("https://example.com/{c}"),
            );
        }
    }
    // B after the failover: a code on a live master, cached, then changed.
    let k = by_master
        .iter()
        .enumerate()
        .find(|(i, _)| *i != dead_slot)
        .map(|(_, v)| v[2].clone())
        .unwrap();
    b.expect(&k, &format!("https://example.com/{k}"));
    cluster.cli(&["SET", &key(&k), &record(2, "https://example.com/k2")]);
    b.expect(&k, &format!("https://example.com/{k}"));
    let t1 = Instant::now();
    cluster.cli(&["PUBLISH", "su:1:inval", &format!("2 {k} localhost")]);
    b.await_location(
        "B to apply a message after the failover",
        &k,
        "https://example.com/k2",
    );
    println!(
        "cluster failover: A answers again {:?} after the kill, B subscribed again after {:?}, \
         every node healthy after {:?}; message applied {:?} after PUBLISH; slot-map fetches by A: {}",
        lookup_back,
        resubscribed,
        promoted,
        t1.elapsed(),
        a.topology("slots"),
    );
}

#[test]
fn module_on_a_sentinel_master() {
    let mut s = RedisSentinel::start();
    let master = s.master_port();
    let replica = *s.server_ports().iter().find(|&&p| p != master).unwrap();
    let codes = ["senti1", "senti2"];
    for c in codes {
        let v = record(1, &format!("https://example.com/{c}"));
        assert_eq!(
            redis_cli(master, &["SET", &key(c), &v]).unwrap().trim(),
            "OK"
        );
    }
    wait_for("the replica to hold the records", RECOVERY, || {
        codes
            .iter()
            .all(|c| redis_cli(replica, &["GET", &key(c)]).is_some_and(|t| t.starts_with("2 1 ")))
    });
    let sentinels = s.sentinel_addrs().join(",");
    let a = Module::start("sentinel", &sentinels, false, "orsentinel");
    let b = Module::start("sentinel", &sentinels, true, "orsentinelb");
    wait_for("B to subscribe", RECOVERY, || {
        b.metric("shorturl_inval_subscribed") == 1
    });
    for c in codes {
        a.expect(c, &format!("https://example.com/{c}"));
        b.expect(c, &format!("https://example.com/{c}"));
    }
    assert_eq!(subscribers(master), 1, "B subscribes on the master");
    let resolved = a.topology("master");
    assert!(resolved >= 1);

    let subs = b.metric("shorturl_inval_subscriptions_total");
    let t0 = Instant::now();
    let old = s.kill_master();
    a.await_location(
        "A to answer from the new master",
        codes[0],
        "https://example.com/senti1",
    );
    let lookup_back = t0.elapsed();
    let new = s.wait_failover(old);
    assert_eq!(new, replica);
    b.subscribed_once_more(subs);
    let resubscribed = t0.elapsed();
    assert_eq!(subscribers(new), 1, "B subscribes on the new master");
    // A resolved the master again after the kill.
    assert!(a.topology("master") > resolved);
    // Awaited, not expected at once: each nginx worker resolves the master
    // on its own, at most every 100 ms, so a worker that asked a Sentinel
    // just before the promotion keeps the old master up to that long.
    a.await_location(
        "A's every worker to follow the new master",
        codes[1],
        "https://example.com/senti2",
    );

    // A write through the new master reaches B by its message.
    b.await_location(
        "B's every worker to follow the new master",
        codes[1],
        "https://example.com/senti2",
    );
    let v2 = record(2, "https://example.com/senti2-v2");
    assert_eq!(
        redis_cli(new, &["SET", &key(codes[1]), &v2])
            .unwrap()
            .trim(),
        "OK"
    );
    b.expect(codes[1], "https://example.com/senti2");
    redis_cli(
        new,
        &[
            "PUBLISH",
            "su:1:inval",
            &format!("2 {} localhost", codes[1]),
        ],
    )
    .unwrap();
    b.await_location(
        "B to apply a message from the new master",
        codes[1],
        "https://example.com/senti2-v2",
    );
    println!(
        "sentinel failover: A answers again {lookup_back:?} after the kill, B subscribed again after \
         {resubscribed:?}; master resolutions by A: {}",
        a.topology("master"),
    );
}
