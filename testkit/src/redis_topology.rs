//! Redis beyond one server, from the Debian binaries: a Redis Cluster
//! (`redis-server --cluster-enabled yes` + `redis-cli --cluster create`) and
//! a Sentinel-managed master with a replica (`redis-sentinel`). Every node is
//! a private process on free loopback ports that a test can kill to force a
//! failover.

use crate::proc::{spawn, Proc};
use crate::wait::{wait_for, wait_for_tcp};
use crate::{free_port, TempDir};
use std::process::Command;
use std::time::Duration;

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `redis-cli -p <port> <args>`; stdout, or `None` when the node does
/// not answer (killed, or not up yet).
pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

/// The value of `field:` in an `INFO`/`CLUSTER INFO` answer.
fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':'))
        .map(str::to_owned)
}

/// The port in a `CLUSTER NODES` address (`ip:port@bus`).
fn node_port(addr: &str) -> Option<u16> {
    addr.split('@').next()?.rsplit(':').next()?.parse().ok()
}

/// One `redis-server` of a topology, restartable on its ports and directory.
struct Node {
    port: u16,
    dir: TempDir,
    args: Vec<String>,
    proc: Option<Proc>,
    bin: &'static str,
}

impl Node {
    fn new(bin: &'static str, tag: &str, args: Vec<String>) -> Node {
        Node {
            port: free_port(),
            dir: TempDir::new(tag),
            args,
            proc: None,
            bin,
        }
    }

    fn start(&mut self) {
        self.kill();
        let mut cmd = Command::new(self.bin);
        cmd.args(&self.args);
        let log = self.dir.path().join("redis.log");
        self.proc = Some(spawn(self.bin, cmd, &log));
        wait_for_tcp(self.port, START_TIMEOUT);
    }

    fn kill(&mut self) {
        Proc::kill_listener(&mut self.proc, self.port, "redis", START_TIMEOUT);
    }

    fn running(&self) -> bool {
        self.proc.is_some()
    }
}

fn server_args(port: u16, dir: &std::path::Path) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A Redis Cluster of `masters` masters with one replica each on loopback,
/// all 16,384 slots assigned. `cluster-node-timeout` is 1 s, so a killed
/// master's replica is promoted within a few seconds.
pub struct RedisCluster {
    nodes: Vec<Node>,
}

impl RedisCluster {
    /// Three masters and three replicas (the shape of a minimal production
    /// cluster), waiting until every node reports `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(3)
    }

    /// `masters` masters (at least 3, as `redis-cli --cluster create`
    /// requires), one replica each.
    pub fn start_with(masters: usize) -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..masters * 2 {
            let mut n = Node::new("redis-server", "redis-cluster", Vec::new());
            // The bus port is set explicitly: port + 10000 may not be free.
            let bus = free_port();
            let mut args = server_args(n.port, n.dir.path());
            args.extend(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus.to_string(),
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            n.args = args;
            n.start();
            nodes.push(n);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = RedisCluster { nodes };
        c.wait_healthy();
        wait_for("every replica attached", START_TIMEOUT, || {
            c.masters().len() == masters
                && c.nodes.iter().all(|n| {
                    redis_cli(n.port, &["INFO", "replication"])
                        .map(|t| {
                            info_field(&t, "role").as_deref() == Some("master")
                                || info_field(&t, "master_link_status").as_deref() == Some("up")
                        })
                        .unwrap_or(false)
                })
        });
        c
    }

    /// `host:port` of every node, as a client's seed list.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// `redis://127.0.0.1:<port>/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// Ports of all nodes (index = node number for [`RedisCluster::kill`]).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Node numbers of the running nodes that are masters now.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].running()
                    && redis_cli(self.nodes[i].port, &["ROLE"])
                        .map(|t| t.lines().next() == Some("master"))
                        .unwrap_or(false)
            })
            .collect()
    }

    /// The node number of the master serving `key`'s slot now.
    pub fn master_for_key(&self, key: &str) -> usize {
        let port = self.any_running_port();
        let slot: u16 = redis_cli(port, &["CLUSTER", "KEYSLOT", key])
            .and_then(|s| s.trim().parse().ok())
            .expect("CLUSTER KEYSLOT");
        // CLUSTER NODES: "<id> <ip:port@bus> <flags> <master> ... <slot ranges>"
        let nodes = redis_cli(port, &["CLUSTER", "NODES"]).expect("CLUSTER NODES");
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let owns = f[8..].iter().any(|r| {
                let mut p = r.split('-');
                let lo = p.next().and_then(|x| x.parse::<u16>().ok());
                let hi = p.next().and_then(|x| x.parse::<u16>().ok()).or(lo);
                matches!((lo, hi), (Some(lo), Some(hi)) if lo <= slot && slot <= hi)
            });
            if owns {
                let node_port = node_port(f[1]).expect("node port");
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port == node_port)
                    .expect("node of this cluster");
            }
        }
        panic!("no master owns slot {slot}: {nodes}");
    }

    fn any_running_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.running())
            .map(|n| n.port)
            .expect("a running node")
    }

    /// Kills node `i` (SIGKILL). Killing a master makes the cluster promote
    /// its replica after `cluster-node-timeout`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Restarts node `i` on its ports with its `nodes.conf`: it rejoins (a
    /// former master comes back as a replica of its promoted one).
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].start();
    }

    /// Waits until every running node reports `cluster_state:ok` and sees
    /// every slot served by a running master (after a kill: until the
    /// replica has been promoted, as every node tells it).
    pub fn wait_healthy(&self) {
        let running: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.running())
            .map(|n| n.port)
            .collect();
        wait_for("redis cluster state ok", START_TIMEOUT, || {
            running.iter().all(|&port| {
                let ok = redis_cli(port, &["CLUSTER", "INFO"])
                    .and_then(|t| info_field(&t, "cluster_state"))
                    .as_deref()
                    == Some("ok");
                ok && redis_cli(port, &["CLUSTER", "NODES"]).is_some_and(|t| {
                    t.lines().all(|line| {
                        let f: Vec<&str> = line.split_whitespace().collect();
                        let serves = f.len() > 8 && f[2].contains("master");
                        !serves || node_port(f[1]).is_some_and(|p| running.contains(&p))
                    })
                })
            })
        });
    }

    /// Runs `redis-cli -c` (following redirects) against a running node.
    pub fn cli(&self, args: &[&str]) -> String {
        let port = self.any_running_port().to_string();
        let out = Command::new("redis-cli")
            .args(["-c", "-h", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A master, one replica and three Sentinels (quorum 2) watching them under
/// [`RedisSentinel::MASTER_NAME`]; a master is judged down after 1 s.
pub struct RedisSentinel {
    servers: Vec<Node>,
    sentinels: Vec<Node>,
}

impl RedisSentinel {
    /// The name the Sentinels monitor the master under.
    pub const MASTER_NAME: &'static str = "shorturl";

    /// Starts the master, the replica and the Sentinels, waiting until the
    /// replica is in sync and every Sentinel knows the replica and the other
    /// Sentinels (so a failover can be authorised).
    pub fn start() -> RedisSentinel {
        let mut master = Node::new("redis-server", "redis-master", Vec::new());
        master.args = server_args(master.port, master.dir.path());
        master.start();
        let mut replica = Node::new("redis-server", "redis-replica", Vec::new());
        replica.args = server_args(replica.port, replica.dir.path());
        replica.args.extend([
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            master.port.to_string(),
        ]);
        replica.start();
        wait_for("replica in sync", START_TIMEOUT, || {
            redis_cli(replica.port, &["INFO", "replication"])
                .and_then(|t| info_field(&t, "master_link_status"))
                .as_deref()
                == Some("up")
        });
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let mut s = Node::new("redis-sentinel", "redis-sentinel", Vec::new());
            let conf = s.dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {mport} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n\
                 sentinel parallel-syncs {name} 1\n",
                port = s.port,
                dir = s.dir.path().display(),
                name = Self::MASTER_NAME,
                mport = master.port,
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            s.args = vec![conf.display().to_string()];
            s.start();
            sentinels.push(s);
        }
        let t = RedisSentinel {
            servers: vec![master, replica],
            sentinels,
        };
        wait_for(
            "sentinels know the replica and each other",
            START_TIMEOUT,
            || {
                t.sentinels.iter().all(|s| {
                    let m = redis_cli(s.port, &["SENTINEL", "MASTER", Self::MASTER_NAME])
                        .unwrap_or_default();
                    let mut lines = m.lines();
                    let mut replicas = 0;
                    let mut others = 0;
                    while let Some(k) = lines.next() {
                        let v = lines.next().unwrap_or("");
                        match k {
                            "num-slaves" => replicas = v.parse().unwrap_or(0),
                            "num-other-sentinels" => others = v.parse().unwrap_or(0),
                            _ => {}
                        }
                    }
                    replicas >= 1 && others >= 2
                })
            },
        );
        t
    }

    /// `host:port` of every Sentinel.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The master's port as the first answering Sentinel reports it now.
    pub fn master_port(&self) -> u16 {
        for s in &self.sentinels {
            if let Some(out) = redis_cli(
                s.port,
                &["SENTINEL", "get-master-addr-by-name", Self::MASTER_NAME],
            ) {
                if let Some(p) = out.lines().nth(1).and_then(|p| p.trim().parse().ok()) {
                    return p;
                }
            }
        }
        panic!("no sentinel reports a master");
    }

    /// Ports of the two data servers (the first started as master).
    pub fn server_ports(&self) -> Vec<u16> {
        self.servers.iter().map(|n| n.port).collect()
    }

    /// Kills the current master (SIGKILL) and returns its port. The
    /// Sentinels promote the replica after about a second.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master_port();
        if let Some(n) = self.servers.iter_mut().find(|n| n.port == port) {
            n.kill();
        }
        port
    }

    /// Waits until the Sentinels name a master other than `old_port` and
    /// that server answers as a master.
    pub fn wait_failover(&self, old_port: u16) -> u16 {
        let mut now = 0;
        wait_for("sentinel failover", START_TIMEOUT, || {
            now = self.master_port_opt().unwrap_or(old_port);
            now != old_port
                && redis_cli(now, &["ROLE"])
                    .map(|t| t.lines().next() == Some("master"))
                    .unwrap_or(false)
        });
        now
    }

    fn master_port_opt(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            redis_cli(
                s.port,
                &["SENTINEL", "get-master-addr-by-name", Self::MASTER_NAME],
            )?
            .lines()
            .nth(1)?
            .trim()
            .parse()
            .ok()
        })
    }

    /// Restarts a killed data server on its port (the Sentinels turn a
    /// former master into a replica of the new one).
    pub fn restart_server(&mut self, port: u16) {
        if let Some(n) = self.servers.iter_mut().find(|n| n.port == port) {
            n.start();
        }
    }
}
