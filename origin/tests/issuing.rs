//! Uniqueness of issued codes across processes, crashes and the three
//! counter backends; pre-generation resumption and extension.

use crate::support;

use serde_json::json;
use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;
use support::{fresh_db, pregen, shared_mariadb, write_config, Origin, OriginOpts};
use testkit::{spawn, wait_for, Redis, TempDir, ZooKeeper, ZooKeeperEnsemble};

/// One creation of a URL not sent before (no deduplication).
async fn create_fresh(o: &Origin) -> (u16, serde_json::Value) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    o.create(json!({"url": format!("https://load.example/fresh/{n}")}))
        .await
}

/// `n` origins on one database and Redis, with `yaml` in their config; the
/// first pre-generates `pregen` codes.
fn start_origins(url: &str, redis: &Redis, n: usize, pregen: u64, yaml: &str) -> Vec<Origin> {
    (0..n)
        .map(|i| {
            let mut o = OriginOpts::new(url.to_owned(), redis.url());
            o.pregen = if i == 0 { pregen } else { 0 };
            o.extra_yaml = yaml.to_owned();
            Origin::start(o)
        })
        .collect()
}

/// The `issuer:` section of the ZooKeeper backend on `hosts` (a connect
/// string), with more `issuer` lines and `zookeeper` fields.
fn zookeeper_issuer(hosts: &str, issuer: &str, zookeeper: &str) -> String {
    let hosts: Vec<String> = hosts.split(',').map(|h| format!("'{h}'")).collect();
    format!(
        "issuer:\n  backend: zookeeper\n{issuer}  zookeeper: {{hosts: [{}], {zookeeper}}}\n",
        hosts.join(", ")
    )
}

/// Creates through `o` (the counter down) until it answers 503, at most
/// `max` issued before (its block); each code issued goes into `all`, never
/// twice. Returns how many were issued and the 503's body.
async fn issue_until_unavailable(
    o: &Origin,
    all: &mut HashSet<String>,
    max: usize,
) -> (usize, serde_json::Value) {
    let mut issued = 0;
    loop {
        let (status, v) = create_fresh(o).await;
        match status {
            201 => {
                assert!(
                    all.insert(v["code"].as_str().unwrap().to_owned()),
                    "duplicate"
                );
                issued += 1;
                assert!(issued <= max, "issued past its block");
            }
            503 => return (issued, v),
            s => panic!("{s}: {v}"),
        }
    }
}

/// Creates through `o` (the counter back) until it issues again, 503s
/// meanwhile, at most `tries` attempts 50 ms apart; the code goes into
/// `all`, never twice.
async fn issues_again(o: &Origin, all: &mut HashSet<String>, tries: usize) {
    for _ in 0..tries {
        let (status, v) = create_fresh(o).await;
        if status == 201 {
            let code = v["code"].as_str().unwrap().to_owned();
            assert!(all.insert(code), "duplicate after the outage");
            return;
        }
        assert_eq!(status, 503, "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no creation once the counter was back: {}", o.log());
}

/// Creates `n` links through `o` with `conc` concurrent clients; returns codes.
async fn create_many(o: &Origin, tag: String, n: usize, conc: usize) -> Vec<String> {
    let mut tasks = Vec::new();
    for w in 0..conc {
        let http = o.http.clone();
        let url = o.url("/api/v1/links");
        let tag = tag.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut i = w;
            while i < n {
                let r = http
                    .post(&url)
                    .bearer_auth(support::KEY)
                    .json(&json!({"url": format!("https://load.example/{tag}/{i}")}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 201 => {
                        let v: serde_json::Value = r.json().await.unwrap();
                        out.push(v["code"].as_str().unwrap().to_owned());
                    }
                    // The origin may be killed under us (crash test): stop this worker.
                    _ => break,
                }
                i += conc;
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_origins_create_20k_links_without_a_duplicate_even_across_a_crash() {
    let m = shared_mariadb();
    let db = fresh_db("conc");
    let url = m.create_database(&db);
    let redis = Redis::start();
    let mut origins = start_origins(&url, &redis, 4, 30_000, "");
    // Phase 1: 4 x 4000 concurrently.
    let mut all: Vec<String> = Vec::new();
    let results = futures::future::join_all(
        origins
            .iter()
            .enumerate()
            .map(|(i, o)| create_many(o, format!("p1-{i}"), 4000, 8)),
    )
    .await;
    for r in results {
        assert_eq!(r.len(), 4000);
        all.extend(r);
    }
    // Phase 2: origin 0 is killed mid-run while the others keep creating, then restarted.
    let (victim, rest) = origins.split_at(1);
    let victim = &victim[0];
    let killer = async {
        // Wait until the victim has issued a few hundred ids, then SIGKILL it.
        let mut seen = 0;
        while seen < 300 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            seen = victim.status().await.issuer.current % 100_000;
            if seen == 0 {
                break;
            }
        }
        victim.crash();
    };
    let others = futures::future::join_all(
        rest.iter()
            .enumerate()
            .map(|(i, o)| create_many(o, format!("p2-{i}"), 1000, 4)),
    );
    let victim_work = create_many(victim, "p2-victim".into(), 2000, 4);
    let (r_others, r_victim, ()) = tokio::join!(others, victim_work, killer);
    for r in r_others {
        all.extend(r);
    }
    all.extend(r_victim);
    let victim = &mut origins[0];
    victim.restart();
    all.extend(create_many(victim, "p3".into(), 1000, 4).await);

    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "duplicate codes issued");
    assert!(all.len() >= 20_000, "created {}", all.len());
    // MySQL agrees: every returned code is an active row. A claim committed
    // just before the SIGKILL may have lost its answer (the client saw an
    // error): at most one per in-flight request of the victim, never a duplicate.
    let active: usize = m
        .sql(&format!(
            "SELECT COUNT(*) FROM `{db}`.short_code WHERE state = 1"
        ))
        .trim()
        .parse()
        .unwrap();
    assert!(
        active >= all.len() && active <= all.len() + 4,
        "rows claimed {active} vs codes returned {}",
        all.len()
    );
    let listed = all
        .iter()
        .map(|c| format!("'{c}'"))
        .collect::<Vec<_>>()
        .join(",");
    let found: usize = m
        .sql(&format!(
            "SELECT COUNT(*) FROM `{db}`.short_code WHERE state = 1 AND code IN ({listed})"
        ))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(found, all.len(), "every returned code is an active row");
    // Every link resolves (sample across all origins, through the ones alive).
    for (i, code) in all.iter().enumerate().step_by(97) {
        let o = &origins[i % 4];
        assert_eq!(o.follow("sho.rt", code).await.0, 302, "{code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_counter_backend_issues_unique_ids_across_processes_and_a_lost_counter() {
    let m = shared_mariadb();
    let url = m.create_database(&fresh_db("rc"));
    let mut redis = Redis::start();
    let redis_url = redis.url();
    let mk = |pregen| {
        let mut o = OriginOpts::new(url.clone(), redis_url.clone());
        o.pregen = pregen;
        o.extra_yaml = "issuer:\n  backend: redis\n  block: 50\n".into();
        o
    };
    let a = Origin::start(mk(5000));
    let b = Origin::start(mk(0));
    let (ra, rb) = tokio::join!(
        create_many(&a, "a".into(), 600, 6),
        create_many(&b, "b".into(), 600, 6)
    );
    let mut all: HashSet<String> = HashSet::new();
    for c in ra.into_iter().chain(rb) {
        assert!(all.insert(c), "duplicate");
    }
    assert_eq!(all.len(), 1200);
    // Redis loses everything (restart without persistence): new origins seed
    // the counter from MySQL's highest used id, so nothing is re-issued or skipped en masse.
    drop((a, b));
    redis.restart();
    let c = Origin::start(mk(0));
    for code in create_many(&c, "c".into(), 300, 3).await {
        assert!(all.insert(code), "re-issued after counter loss");
    }
    let st = c.status().await;
    assert!(st.issuer.current > 1200, "{st:?}");
}

/// The ZooKeeper backend (issue 29): four origins take blocks from one
/// znode by compare-and-set, 20,000 creations, no code twice; with
/// ZooKeeper down an origin issues what its block still holds, then
/// answers 503 with `Retry-After`, as for the other backends (`unavailable`,
/// "the id counter is unavailable"; never a 500, never a duplicate), and
/// recovers by itself once ZooKeeper is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_counter_backend_issues_unique_ids_across_four_origins_and_an_outage() {
    let m = shared_mariadb();
    let url = m.create_database(&fresh_db("zk"));
    let redis = Redis::start();
    let mut zk = ZooKeeper::start();
    let yaml = zookeeper_issuer(
        &zk.hosts(),
        "",
        "root: /it/issuer, session_timeout_ms: 4000",
    );
    let origins = start_origins(&url, &redis, 4, 25_000, &yaml);
    let runs = origins
        .iter()
        .enumerate()
        .map(|(i, o)| create_many(o, format!("zk{i}"), 5_000, 8));
    let mut all: HashSet<String> = HashSet::new();
    for (o, codes) in origins.iter().zip(futures::future::join_all(runs).await) {
        assert_eq!(codes.len(), 5_000, "{}", o.log());
        for c in codes {
            assert!(all.insert(c), "duplicate");
        }
    }
    assert_eq!(all.len(), 20_000);
    let a = &origins[0];
    let st = a.status().await;
    assert_eq!(st.issuer.error, 0, "{st:?}");

    // ZooKeeper down: the block in hand is issued, then 503 with Retry-After.
    zk.stop();
    let (_, v) = issue_until_unavailable(a, &mut all, 100).await;
    assert_eq!(v["error"], "unavailable", "{v}");
    assert!(v["message"].as_str().unwrap().contains("id counter"), "{v}");
    let r = a
        .http
        .post(a.url("/api/v1/links"))
        .bearer_auth(support::KEY)
        .json(&json!({"url": "https://load.example/down/again"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));

    // Back: every origin issues again, nothing twice.
    zk.restart();
    for o in &origins {
        issues_again(o, &mut all, 600).await;
    }
}

/// ZooKeeper frozen past the session timeout while two origins create, a
/// compare-and-set in flight (issue 29): the sessions expire, every origin
/// answers 503 (never a 500) once its block is spent, then replaces its
/// session by itself when ZooKeeper goes on and issues again; no code is
/// issued twice, and each origin skips at most the block whose answer was
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_issuer_replaces_an_expired_session() {
    let m = shared_mariadb();
    let url = m.create_database(&fresh_db("zks"));
    let redis = Redis::start();
    let zk = ZooKeeper::start();
    let yaml = zookeeper_issuer(
        &zk.hosts(),
        "  block: 20\n  low_water: 5\n",
        "session_timeout_ms: 2000",
    );
    let origins = start_origins(&url, &redis, 2, 10_000, &yaml);
    let mut all: HashSet<String> = HashSet::new();
    for o in &origins {
        for _ in 0..50 {
            let (status, v) = create_fresh(o).await;
            assert_eq!(status, 201, "{v}");
            assert!(all.insert(v["code"].as_str().unwrap().to_owned()));
        }
    }
    zk.pause();
    // Until each origin's block is spent and its next call timed out.
    for o in &origins {
        issue_until_unavailable(o, &mut all, usize::MAX).await;
    }
    zk.resume();
    for o in &origins {
        issues_again(o, &mut all, 400).await;
    }
    // Blocks of 20: what the two origins issued spans at most the blocks
    // they used plus one lost answer each.
    let highest = futures::future::join_all(origins.iter().map(|o| o.status()))
        .await
        .iter()
        .map(|s| s.issuer.current)
        .max()
        .unwrap();
    let used = all.len() as u64;
    assert!(
        highest <= used.div_ceil(20) * 20 + 2 * 20 + 2 * 20,
        "{highest} for {used} codes"
    );
}

/// The ensemble's leader killed while two origins create (issue 29): an
/// election runs, the origins' sessions move to the other members, and
/// every creation still answers 201, no code twice. Small blocks, so many
/// compare-and-sets fall in the election.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_issuer_rides_out_the_loss_of_the_ensemble_leader() {
    let m = shared_mariadb();
    let url = m.create_database(&fresh_db("zke"));
    let redis = Redis::start();
    let mut zk = ZooKeeperEnsemble::start();
    let yaml = zookeeper_issuer(
        &zk.hosts(),
        "  block: 20\n  low_water: 5\n",
        "session_timeout_ms: 10000",
    );
    let origins = start_origins(&url, &redis, 2, 10_000, &yaml);
    let (a, b) = (&origins[0], &origins[1]);
    let runs = async {
        tokio::join!(
            create_many(a, "la".into(), 3_000, 4),
            create_many(b, "lb".into(), 3_000, 4)
        )
    };
    let kill = async {
        // Under way first, then the leader goes.
        while a.status().await.issuer.current < 300 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let leader = zk.leader().expect("a leader");
        zk.kill(leader);
        a.status().await.issuer.current
    };
    let ((ca, cb), issued_at_kill) = tokio::join!(runs, kill);
    assert!(issued_at_kill < 3_000, "the leader died after the run");
    let mut all: HashSet<String> = HashSet::new();
    for (o, codes) in [(a, ca), (b, cb)] {
        assert_eq!(codes.len(), 3_000, "{}", o.log());
        for c in codes {
            assert!(all.insert(c), "duplicate");
        }
    }
    // A compare-and-set cut by the kill counts as an issuer error and is
    // retried: the clients never saw it.
    let errors = a.status().await.issuer.error + b.status().await.issuer.error;
    eprintln!("leader killed after {issued_at_kill} issued; issuer errors retried: {errors}");
}

/// `issuer migrate` moves the counter between backends while the origins
/// are stopped (issue 29): MySQL → ZooKeeper → MySQL, creations on each,
/// no code twice; the destination is never lowered; the same backend on
/// both sides is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issuer_migrate_moves_the_counter_between_mysql_and_zookeeper() {
    let m = shared_mariadb();
    let url = m.create_database(&fresh_db("mig"));
    let redis = Redis::start();
    let zk = ZooKeeper::start();
    let opts = |backend: &str, pregen| {
        let mut o = OriginOpts::new(url.clone(), redis.url());
        o.pregen = pregen;
        o.extra_yaml = format!(
            "issuer:\n  backend: {backend}\n  block: 50\n  zookeeper: {{hosts: ['{}'], root: /mig}}\n",
            zk.hosts()
        );
        o
    };
    let dir = TempDir::new("migrate");
    let cfg = write_config(&dir, &opts("mysql", 0));
    let migrate = |from: &str, to: &str| {
        testkit::origin::run(&cfg, &["issuer", "migrate", "--from", from, "--to", to])
    };
    let mut all: HashSet<String> = HashSet::new();
    let mut take = |codes: Vec<String>, n: usize| {
        assert_eq!(codes.len(), n);
        for c in codes {
            assert!(all.insert(c), "issued twice");
        }
    };
    let o = Origin::start(opts("mysql", 3_000));
    take(create_many(&o, "m1".into(), 300, 4).await, 300);
    drop(o);
    // (source, highest used id, destination before, after); the counters
    // run a block ahead of what was issued (prefetch), so read, not known.
    let moved = |out: String| -> [u64; 4] {
        let num = |after: &str| -> u64 {
            let at = out
                .find(after)
                .unwrap_or_else(|| panic!("{after:?} in {out}"))
                + after.len();
            out[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a number after {after:?} in {out}"))
        };
        [
            num(" read "),
            num("highest used id "),
            num(" was "),
            num(", now "),
        ]
    };
    let [src, floor, before, after] = moved(migrate("mysql", "zookeeper"));
    assert!(src >= 300 && floor >= 300, "{src} {floor}");
    assert_eq!((before, after), (0, src.max(floor)));
    let o = Origin::start(opts("zookeeper", 0));
    take(create_many(&o, "z1".into(), 300, 4).await, 300);
    drop(o);
    // Back: MySQL still holds its old value and is raised to ZooKeeper's.
    let [zk_value, _, mysql_before, mysql_after] = moved(migrate("zookeeper", "mysql"));
    assert!(zk_value >= after + 300, "{zk_value}");
    assert_eq!((mysql_before, mysql_after), (src, zk_value));
    let o = Origin::start(opts("mysql", 0));
    take(create_many(&o, "m2".into(), 300, 4).await, 300);
    drop(o);
    // ZooKeeper is behind now: raised; and MySQL, ahead of nothing, stays.
    let [mysql_value, _, before, after] = moved(migrate("mysql", "zookeeper"));
    assert_eq!((before, after), (zk_value, mysql_value));
    let [_, _, before, after] = moved(migrate("zookeeper", "mysql"));
    assert_eq!((before, after), (mysql_value, mysql_value));
    // Nothing to move between a backend and itself.
    let same = std::process::Command::new(support::origin_bin())
        .arg("-c")
        .arg(&cfg)
        .args(["issuer", "migrate", "--from", "redis", "--to", "redis"])
        .output()
        .unwrap();
    assert!(!same.status.success());
    assert!(String::from_utf8_lossy(&same.stderr).contains("same backend"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pregen_is_resumable_extendable_uniform_and_extends_a_running_origin() {
    let m = shared_mariadb();
    let db = fresh_db("pg");
    let url = m.create_database(&db);
    let redis = Redis::start();
    let dir = TempDir::new("pregen");
    let opts = OriginOpts::new(url.clone(), redis.url());
    let cfg = write_config(&dir, &opts);
    // Interrupt a run with small chunks once it is well under way.
    let mut cmd = Command::new(support::origin_bin());
    cmd.arg("-c")
        .arg(&cfg)
        .args(["pregen", "--quiet", "--chunk", "500", "--count", "60000"]);
    let mut p = spawn("pregen", cmd, &dir.path().join("pregen.log"));
    let done = || {
        m.try_sql(&format!(
            "SELECT value FROM `{db}`.meta WHERE name = 'pregen_done'"
        ))
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
    };
    wait_for("pregen progress", Duration::from_secs(60), || {
        done() >= 2000
    });
    p.kill();
    let mark = done();
    assert!(mark < 60_000, "was not interrupted ({mark})");
    // Re-run: continues from the mark.
    let out = pregen(&cfg, 60_000);
    assert!(out.contains(&format!("ids {}..=60000", mark + 1)), "{out}");
    // Extend: the next block of ids.
    pregen(&cfg, 80_000);
    assert!(pregen(&cfg, 80_000).contains("nothing to do"));
    let stats = m.sql(&format!("SELECT COUNT(*), COUNT(DISTINCT code), MIN(id), MAX(id), COUNT(DISTINCT LEFT(code, 1)) FROM `{db}`.code_pool"));
    assert_eq!(
        stats.trim(),
        "80000\t80000\t1\t80000\t62",
        "rows, distinct codes, ids, first-char spread"
    );
    // Every code is 6 base62 chars.
    assert_eq!(m.sql(&format!("SELECT COUNT(*) FROM `{db}`.code_pool WHERE code NOT REGEXP BINARY '^[0-9A-Za-z]{{6}}$'")).trim(), "0");

    // A running origin sees an extension without a restart.
    let small_db = fresh_db("pgx");
    let mut o = OriginOpts::new(m.create_database(&small_db), redis.url());
    o.pregen = 10;
    let origin = Origin::start(o);
    for i in 0..10 {
        origin
            .create_ok(json!({"url": format!("https://x.example/{i}")}))
            .await;
    }
    let (st, v) = origin
        .create(json!({"url": "https://x.example/over"}))
        .await;
    assert_eq!((st, v["error"].as_str().unwrap()), (503, "codes_exhausted"));
    pregen(&origin.config, 500);
    let mut ok = false;
    for _ in 0..200 {
        if origin
            .create(json!({"url": "https://x.example/after"}))
            .await
            .0
            == 201
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ok,
        "creation did not resume after pregen extended the table"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_creations_consume_no_ids_and_creation_resumes_after_pregen() {
    let s = support::Setup::start_with(|o| o.pregen = 10);
    let o = &s.origin;
    let id_of = |code: &str| -> u64 {
        s.sql(&format!("SELECT id FROM short_code WHERE code = '{code}'"))
            .trim()
            .parse()
            .unwrap()
    };
    for i in 1..=10u64 {
        let code = o
            .create_ok(json!({"url": format!("https://x.example/{i}")}))
            .await;
        assert_eq!(id_of(&code), i);
    }
    // Exhausted: every refusal is the same answer and burns nothing.
    for i in 0..25 {
        let (st, v) = o
            .create(json!({"url": format!("https://x.example/refused/{i}")}))
            .await;
        assert_eq!((st, v["error"].as_str()), (503, Some("codes_exhausted")));
    }
    let st = o.status().await;
    assert_eq!(
        (st.issuer.current, st.issuer.capacity, st.issuer.remaining),
        (10, 10, 0)
    );
    assert!(st.issuer.exhausted);
    // Extend the table while the origin runs: it re-reads the size by itself.
    pregen(&o.config, 20);
    support::eventually(
        "the origin to see the new capacity",
        Duration::from_secs(15),
        || async { o.status().await.issuer.capacity == 20 },
    )
    .await;
    // The next codes are exactly the next ids: 11, 12, ... 20, then exhausted again.
    for want in 11..=20u64 {
        let code = o
            .create_ok(json!({"url": format!("https://x.example/after/{want}")}))
            .await;
        assert_eq!(id_of(&code), want);
    }
    let (st, v) = o.create(json!({"url": "https://x.example/over"})).await;
    assert_eq!((st, v["error"].as_str()), (503, Some("codes_exhausted")));
    let st = o.status().await;
    assert_eq!((st.issuer.current, st.issuer.remaining), (20, 0));
    assert!(st.issuer.exhausted);
}
