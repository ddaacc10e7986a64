//! MySQL shards by id range (issue 16): two real MariaDB servers, the
//! issuer across ranges, routing of every read and change to the link's
//! shard, the custom-code directory, one shard down, and a shard added while
//! creations run.

use crate::support;

use serde_json::json;
use shorturl_origin::permutation::Permutation;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{clicks, eventually, fresh_db, write_config, Origin, OriginOpts, KEY};
use testkit::{MariaDb, Redis, TempDir};

/// One shard of a test: its server and database.
struct Db<'a> {
    name: &'static str,
    server: &'a MariaDb,
    db: String,
}

impl Db<'_> {
    fn new<'a>(name: &'static str, server: &'a MariaDb) -> Db<'a> {
        let db = fresh_db(name);
        server.create_database(&db);
        Db { name, server, db }
    }

    fn url(&self) -> String {
        self.server.url(&self.db)
    }

    fn sql(&self, sql: &str) -> String {
        self.server.sql(&format!("USE `{}`; {sql}", self.db))
    }

    fn count(&self, sql: &str) -> u64 {
        let out = self.sql(sql);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{sql}: {out:?}"))
    }

    fn holds(&self, code: &str) -> bool {
        self.count(&format!(
            "SELECT COUNT(*) FROM short_code WHERE code = '{code}' AND state <> 0"
        )) == 1
    }

    fn active(&self) -> u64 {
        self.count("SELECT COUNT(*) FROM short_code WHERE state = 1")
    }
}

/// `mysql:` lines for `shards` (name, first, last), meta = the first one.
fn shards_yaml(shards: &[(&Db<'_>, u64, u64)], skip: bool) -> String {
    let mut y = String::from("  shards:\n");
    for (d, first, last) in shards {
        y.push_str(&format!(
            "    - {{name: {}, first_id: {first}, last_id: {last}, url: '{}'}}\n",
            d.name,
            d.url()
        ));
    }
    if skip {
        y.push_str("  skip_dead_shards: true\n");
    }
    y
}

fn opts(meta: &Db<'_>, redis: &Redis, mysql_yaml: String) -> OriginOpts {
    let mut o = OriginOpts::new(meta.url(), redis.url());
    o.pregen = 0;
    o.mysql_yaml = mysql_yaml;
    o
}

/// Runs `pregen` with `args` over the config `o` describes.
fn pregen(o: &OriginOpts, args: &[&str]) -> String {
    let dir = TempDir::new("pregen");
    let conf = write_config(&dir, o);
    let mut all = vec!["pregen", "--quiet"];
    all.extend_from_slice(args);
    testkit::origin::run(&conf, &all)
}

async fn flush(redis: &Redis) {
    let mut c = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
}

/// Creates `n` links through `o`, `conc` at a time; returns (code, url).
async fn create_many(o: &Origin, tag: &str, n: usize, conc: usize) -> Vec<(String, String)> {
    let mut tasks = Vec::new();
    for w in 0..conc {
        let http = o.http.clone();
        let url = o.url("/api/v1/links");
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in (w..n).step_by(conc) {
                let target = format!("https://shard.example/{tag}/{i}");
                let r = http
                    .post(&url)
                    .bearer_auth(KEY)
                    .json(&json!({ "url": target }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201, "creation {i}");
                let v: serde_json::Value = r.json().await.unwrap();
                out.push((v["code"].as_str().unwrap().to_owned(), target));
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

fn perm_of(meta: &Db<'_>) -> Permutation {
    let hex = meta.sql("SELECT value FROM meta WHERE name = 'perm_key'");
    Permutation::from_hex(hex.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creations_cross_the_boundary_and_every_change_goes_to_the_links_shard() {
    let (s1, s2) = (MariaDb::start(), MariaDb::start());
    let a = Db::new("a", &s1);
    let b = Db::new("b", &s2);
    let redis = Redis::start();
    let mut o = opts(
        &a,
        &redis,
        shards_yaml(&[(&a, 1, 300), (&b, 301, 2000)], false),
    );
    o.apps_yaml.push_str(&format!(
        "  - {{name: ops, key_sha256: {}, scopes: [admin]}}\n",
        support::sha256_hex(clicks::ADMIN)
    ));
    o.extra_yaml.push_str(clicks::FAST_CLAIM);
    let out = pregen(&o, &[]);
    assert!(out.contains("shard a: pregen: ids 1..=300"), "{out}");
    assert!(out.contains("shard b: pregen: ids 301..=2000"), "{out}");
    assert_eq!(a.count("SELECT COUNT(*) FROM code_pool"), 300);
    assert_eq!(b.count("SELECT COUNT(*) FROM code_pool"), 1700);
    assert_eq!(b.count("SELECT MIN(id) FROM code_pool"), 301);
    let origin = Origin::start(o);

    // 400 creations: ids 1..=400 in order, the first 300 on a, 100 on b.
    let links = create_many(&origin, "x", 400, 8).await;
    let codes: HashSet<&str> = links.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(codes.len(), 400, "duplicate codes");
    // (Not every id of a and b is used: a restarted origin leaves the rest
    // of its block unused.)
    assert_eq!(b.active(), 100);
    assert_eq!(
        b.count("SELECT COUNT(*) FROM short_code WHERE state = 1 AND id BETWEEN 301 AND 400"),
        100
    );

    // Every code resolves from MySQL (Redis emptied) on its own shard.
    flush(&redis).await;
    for (code, target) in &links {
        let (st, loc) = origin.follow("sho.rt", code).await;
        assert_eq!((st, loc.as_deref()), (302, Some(target.as_str())), "{code}");
    }

    // A custom code with no home range goes through the directory to the
    // shard now issuing (b); a six-character one whose id is in b's range
    // takes over its pre-generated row on b with no directory row.
    let perm = perm_of(&a);
    let homed = perm.code_for_id(1500).unwrap();
    for code in ["Custom77", homed.as_str()] {
        let (st, v) = origin
            .create(json!({"url": format!("https://shard.example/custom/{code}"), "code": code}))
            .await;
        assert_eq!(st, 201, "{v}");
        assert!(b.holds(code) && !a.holds(code), "{code}");
        let (st, _) = origin
            .create(json!({"url": "https://x.example/", "code": code}))
            .await;
        assert_eq!(st, 409, "{code} taken");
    }
    assert_eq!(
        // Filed under its link key (protocol 3.6: per domain).
        a.sql("SELECT shard FROM custom_code_dir WHERE code = 'sho.rt/Custom77'")
            .trim(),
        "b"
    );
    assert_eq!(
        a.count(&format!(
            "SELECT COUNT(*) FROM custom_code_dir WHERE code = '{homed}'"
        )),
        0
    );
    assert_eq!(
        b.count("SELECT id FROM short_code WHERE code = 'Custom77'") >> 40,
        1
    );
    flush(&redis).await;
    for code in ["Custom77", homed.as_str()] {
        let (st, loc) = origin.follow("sho.rt", code).await;
        assert_eq!(st, 302, "{code}");
        assert_eq!(loc.unwrap(), format!("https://shard.example/custom/{code}"));
    }

    // Search fans out and merges by (created_at, id): keyset pages over
    // both shards return every link exactly once.
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/links?limit=37&cursor={c}"),
            None => "/api/v1/links?limit=37".to_owned(),
        };
        let (st, v, _) = origin
            .call(reqwest::Method::GET, &path, KEY, None, &[])
            .await;
        assert_eq!(st, 200, "{v}");
        for l in v["links"].as_array().unwrap() {
            let code = l["code"].as_str().unwrap().to_owned();
            assert!(seen.insert(code.clone()), "{code} on two pages");
        }
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 402);

    // Click rollups: one batch with lines for a link on each shard is split
    // and each part applied on its link's shard with the batch id; the same
    // batch delivered again adds nothing. Counts are exact per link and in
    // the tenant's totals (summed over the shards).
    let on_a = &links.iter().find(|(c, _)| a.holds(c)).unwrap().0;
    let on_b = &links.iter().find(|(c, _)| b.holds(c)).unwrap().0;
    let batch = clicks::hours_batch(
        "e1:shards:1",
        &[
            (on_a, clicks::DAY + 3600, 7, 2),
            (on_b, clicks::DAY + 7200, 5, 1),
            // A per-domain code, named by its link key (protocol 3.6).
            ("sho.rt/Custom77", clicks::DAY + 3600, 3, 0),
        ],
    );
    for _ in 0..2 {
        clicks::xadd_to(&redis.url(), &batch).await;
    }
    clicks::wait_totals(&origin, on_a, (7, 2)).await;
    clicks::wait_totals(&origin, on_b, (5, 1)).await;
    clicks::wait_totals(&origin, "Custom77", (3, 0)).await;
    eventually(
        "the redelivery is seen as a duplicate",
        Duration::from_secs(30),
        || async { clicks::batches(&origin, "duplicate").await == 1 },
    )
    .await;
    for (d, code, want) in [
        (&a, on_a.as_str(), 7),
        (&b, on_b.as_str(), 5),
        (&b, "sho.rt/Custom77", 3),
    ] {
        let sql = format!("SELECT COALESCE(SUM(human), 0) FROM click_hour WHERE code = '{code}'");
        assert_eq!(d.count(&sql), want, "{code}");
    }
    assert_eq!(
        a.count("SELECT COUNT(*) FROM click_batches WHERE id = 'e1:shards:1'"),
        1
    );
    assert_eq!(
        b.count("SELECT COUNT(*) FROM click_batches WHERE id = 'e1:shards:1'"),
        1
    );
    let (st, v) = clicks::tenant_stats(
        &origin,
        clicks::ADMIN,
        &format!("app=demo&{}", clicks::range()),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(clicks::totals(&v), (15, 3), "{v}");

    // Edit and delete on both shards: each change is one transaction on the
    // link's shard (audit + outbox there), applied to Redis before 200.
    for code in [on_a, on_b, &"Custom77".to_owned()] {
        let (st, v) = origin
            .patch(
                KEY,
                code,
                json!({"url": format!("https://edited.example/{code}")}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        let (st, loc) = origin.follow("sho.rt", code).await;
        assert_eq!(
            (st, loc),
            (302, Some(format!("https://edited.example/{code}")))
        );
        let (st, h, _) = origin
            .call(
                reqwest::Method::GET,
                &format!("/api/v1/links/{code}/history"),
                KEY,
                None,
                &[],
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(h["history"].as_array().unwrap().len(), 2, "{h}");
        let (st, _) = origin.delete(KEY, code).await;
        assert_eq!(st, 200);
        let (st, _) = origin.follow("sho.rt", code).await;
        assert_eq!(st, 404, "{code} deleted");
    }
    assert_eq!(
        a.count(&format!(
            "SELECT COUNT(*) FROM link_audit WHERE code = '{on_a}'"
        )),
        3
    );
    assert_eq!(
        b.count(&format!(
            "SELECT COUNT(*) FROM link_audit WHERE code = '{on_b}'"
        )),
        3
    );
    assert_eq!(
        a.count(&format!(
            "SELECT COUNT(*) FROM link_audit WHERE code = '{on_b}'"
        )),
        0
    );
    eventually("both outboxes drained", Duration::from_secs(10), || async {
        a.count("SELECT COUNT(*) FROM outbox") == 0 && b.count("SELECT COUNT(*) FROM outbox") == 0
    })
    .await;
    flush(&redis).await;
    for code in [on_a, on_b] {
        assert_eq!(
            origin.follow("sho.rt", code).await.0,
            404,
            "{code} from MySQL"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_shard_down_fails_only_its_links_and_creation_skips_it_when_configured() {
    let (s1, mut s2) = (MariaDb::start(), MariaDb::start());
    let a = Db::new("a", &s1);
    let c = Db::new("c", &s1);
    let redis = Redis::start();
    let b = Db::new("b", &s2);
    let ranges = [(&a, 1, 300), (&b, 301, 600), (&c, 601, 5000)];
    let strict = opts(&a, &redis, shards_yaml(&ranges, false));
    let skipping = opts(&a, &redis, shards_yaml(&ranges, true));
    pregen(&strict, &[]);
    let o1 = Origin::start(strict);
    let o2 = Origin::start(skipping);
    let links = create_many(&o1, "d", 350, 4).await;
    let (on_a, on_b): (Vec<_>, Vec<_>) = links.iter().partition(|(code, _)| a.holds(code));
    assert_eq!((on_a.len(), on_b.len()), (300, 50));
    drop(b);
    s2.stop();
    flush(&redis).await;

    // Misses: a's links resolve, b's answer 503 (never a 404 or a 500).
    for (code, target) in on_a.iter().take(20) {
        assert_eq!(o1.follow("sho.rt", code).await, (302, Some(target.clone())));
    }
    for (code, _) in on_b.iter().take(5) {
        assert_eq!(o1.follow("sho.rt", code).await.0, 503, "{code}");
    }
    // Without skipping, a creation that lands on b fails with 503.
    let (st, v) = o1
        .create(json!({"url": "https://shard.example/strict"}))
        .await;
    assert_eq!(st, 503, "{v}");
    // With `skip_dead_shards`, creations move on to c's range.
    for i in 0..20 {
        let (st, v) = o2
            .create(json!({"url": format!("https://shard.example/skip/{i}")}))
            .await;
        assert_eq!(st, 201, "{v}");
        let code = v["code"].as_str().unwrap();
        assert!(c.holds(code), "{code} on c");
        assert!(c.count(&format!("SELECT id FROM short_code WHERE code = '{code}'")) > 600);
    }
    assert_eq!(c.active(), 20);

    // The shard comes back: its links resolve again.
    s2.restart();
    for (code, target) in on_b.iter().take(5) {
        let want = (302, Some(target.clone()));
        eventually(
            "b's links resolve again",
            Duration::from_secs(15),
            || async { o1.follow("sho.rt", code).await == want },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_added_with_a_rolling_restart_while_creations_run() {
    let (s1, s2) = (MariaDb::start(), MariaDb::start());
    let a = Db::new("a", &s1);
    let b = Db::new("b", &s2);
    let c = Db::new("c", &s1);
    let redis = Redis::start();
    let old = shards_yaml(&[(&a, 1, 300), (&b, 301, 2500)], false);
    let new = shards_yaml(&[(&a, 1, 300), (&b, 301, 2500), (&c, 2501, 20_000)], false);
    pregen(&opts(&a, &redis, old.clone()), &[]);
    let mut origins = vec![
        Origin::start(opts(&a, &redis, old.clone())),
        Origin::start(opts(&a, &redis, old)),
    ];

    // Clients behind the origins, like edges: a refused connection (an
    // origin restarting) is retried on the other one; any HTTP answer but
    // 201 is an error. Paced (200/s in all) so b's range lasts past the roll.
    // No connection reuse: a request is either refused or answered.
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(Mutex::new(Vec::<String>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let urls: Vec<String> = origins.iter().map(|o| o.url("/api/v1/links")).collect();
    let mut tasks = Vec::new();
    for w in 0..2usize {
        let (stop, created, errors) = (stop.clone(), created.clone(), errors.clone());
        let dropped = dropped.clone();
        let urls = urls.clone();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                n += 1;
                let body = json!({"url": format!("https://roll.example/{w}/{n}")});
                for k in 0..urls.len() * 20 {
                    let url = &urls[(w + n + k) % urls.len()];
                    match http.post(url).bearer_auth(KEY).json(&body).send().await {
                        Ok(r) if r.status() == 201 => {
                            let v: serde_json::Value = r.json().await.unwrap();
                            created
                                .lock()
                                .unwrap()
                                .push(v["code"].as_str().unwrap().into());
                            break;
                        }
                        Ok(r) => {
                            let e = format!("{}: {:?}", r.status(), r.text().await);
                            errors.lock().unwrap().push(e);
                            break;
                        }
                        // Refused, or closed before any answer: a
                        // restarting origin closes the connections it
                        // has accepted but not read from (and the kernel
                        // resets those it had queued). Sent again, as an
                        // edge would: a creation is idempotent for a
                        // while (same URL, same code), and the checks
                        // below would see a second link.
                        Err(e) if k + 1 < urls.len() * 20 => {
                            if !e.is_connect() {
                                dropped.fetch_add(1, Ordering::Relaxed);
                            }
                            continue;
                        }
                        Err(e) => {
                            errors.lock().unwrap().push(format!("{e:?}"));
                            break;
                        }
                    }
                }
            }
        }));
    }
    eventually("creations under way", Duration::from_secs(10), || async {
        created.lock().unwrap().len() >= 50
    })
    .await;
    // The new shard is pre-generated first, then each origin restarts
    // with the longer list while the other serves.
    let out = pregen(&opts(&a, &redis, new.clone()), &["--shard", "c"]);
    assert!(out.contains("shard c: pregen: ids 2501..=20000"), "{out}");
    for o in &mut origins {
        o.opts.mysql_yaml = new.clone();
        write_config(&o.dir, &o.opts);
        o.restart_graceful();
    }
    eventually(
        "ids continue into c's range",
        Duration::from_secs(30),
        || async { c.active() >= 20 },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} errors: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    let created = created.lock().unwrap().clone();
    println!(
        "{} created, {} sent again after a connection closed unanswered",
        created.len(),
        dropped.load(Ordering::Relaxed)
    );
    let unique: HashSet<&String> = created.iter().collect();
    assert_eq!(unique.len(), created.len(), "duplicate codes");
    assert_eq!(a.active() + b.active() + c.active(), created.len() as u64);
    // (Not every id of a and b is used: a restarted origin leaves the rest
    // of its block unused.)
    assert_eq!(
        c.count("SELECT COUNT(*) FROM short_code WHERE state = 1 AND id <= 2500"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resolution_reads_the_replica_and_falls_back_to_the_primary_for_a_fresh_id() {
    let primary = MariaDb::start_primary();
    let replica = MariaDb::start_replica_of(&primary);
    let s2 = MariaDb::start();
    let a = Db::new("a", &primary);
    let b = Db::new("b", &s2);
    let on_replica = Db {
        name: "a",
        server: &replica,
        db: a.db.clone(),
    };
    let redis = Redis::start();
    let mut yaml = shards_yaml(&[(&a, 1, 1000), (&b, 1001, 2000)], false);
    yaml = yaml.replacen(
        &format!("url: '{}'}}", a.url()),
        &format!("url: '{}', replicas: ['{}']}}", a.url(), replica.url(&a.db)),
        1,
    );
    let o = opts(&a, &redis, yaml);
    pregen(&o, &[]);
    let origin = Origin::start(o);
    let links = create_many(&origin, "r", 5, 1).await;
    replica.wait_caught_up(&primary);
    replica.pause_replication();

    // A miss reads the replica: a row changed there alone is what answers.
    let (code, _) = &links[0];
    on_replica.sql(&format!(
        "UPDATE short_code SET long_url = 'https://replica.example/' WHERE code = '{code}'"
    ));
    flush(&redis).await;
    assert_eq!(
        origin.follow("sho.rt", code).await,
        (302, Some("https://replica.example/".to_owned()))
    );

    // A link created while the replica lags: the replica has no active row
    // for its (issued) id, so the primary answers.
    let fresh = create_many(&origin, "fresh", 1, 1).await;
    let (fresh, target) = &fresh[0];
    assert!(!on_replica.holds(fresh), "replication is paused");
    flush(&redis).await;
    assert_eq!(
        origin.follow("sho.rt", fresh).await,
        (302, Some(target.clone()))
    );

    // An id never issued answers 404 from the replica: the primary is not
    // asked (a row made active there by hand stays unseen).
    let never = perm_of(&a).code_for_id(900).unwrap();
    a.sql(&format!(
        "INSERT INTO short_code (id, code, state, long_url, domain, created_at, expires_at, version) \
         VALUES (900, '{never}', 1, 'https://primary.example/', 'sho.rt', 1, 4102444800, 1)"
    ));
    flush(&redis).await;
    assert_eq!(origin.follow("sho.rt", &never).await.0, 404);
}

#[test]
fn the_sharded_example_config_validates_and_bad_ranges_name_the_field() {
    let out = support::check_config("../conf/origin.sharded.yaml");
    assert!(
        out.status.success(),
        "conf/origin.sharded.yaml must validate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = TempDir::new("shardconf");
    let text = std::fs::read_to_string("../conf/origin.sharded.yaml")
        .unwrap()
        .replace("first_id: 100000001", "first_id: 100000002");
    let p = dir.path().join("bad.yaml");
    std::fs::write(&p, text).unwrap();
    let out = support::check_config(&p);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mysql.shards[1].first_id"), "{err}");
}
