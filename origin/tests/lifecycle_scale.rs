//! A measurement for issue 11, not a check: `shorturl-origin reap` over
//! 1,000,000 expired links, and the creation rate of a serving origin on
//! the same MariaDB before and during the run. Ignored by default (minutes
//! of MariaDB work); run it with
//!
//! ```sh
//! cargo test -p shorturl-origin --release --test it -- lifecycle_scale:: --ignored --nocapture
//! ```
//!
//! `REAP_RATE` (default 1000000: as fast as MySQL goes) is passed as
//! `reap --rate`; at the default 1000/s a million links take 1000 s by
//! design, so `REAP_ROWS` (default 1000000) sets how many expired links
//! to write, e.g. `REAP_ROWS=120000 REAP_RATE=1000` for the creation cost
//! at the default rate.

use crate::support;

use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{origin_bin, shared_mariadb, Origin, Setup};

/// Expired links written (`REAP_ROWS` overrides).
const EXPIRED: u64 = 1_000_000;
/// Far above pre-generated and custom ids (custom ids start at 2^40).
const ID_BASE: u64 = 1 << 42;

/// Creations per second through `o` while `running` holds (16 at a time).
async fn creations_while(o: &Origin, running: Arc<AtomicBool>) -> (u64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let http = o.http.clone();
        let url = o.url("/api/v1/links");
        let running = Arc::clone(&running);
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while running.load(Ordering::Relaxed) {
                i += 1;
                let r = http
                    .post(&url)
                    .bearer_auth(support::KEY)
                    .json(&json!({"url": format!("https://new.example/{w}/{i}/{}", rand_tag())}))
                    .send()
                    .await
                    .unwrap();
                if r.status().as_u16() == 201 {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed);
    (n, n as f64 / t0.elapsed().as_secs_f64())
}

fn rand_tag() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: minutes of MariaDB work"]
async fn reap_a_million_expired_links() {
    let s = Setup::start_with(|o| {
        o.pregen = 400_000;
        o.extra_yaml = "lifecycle: {enabled: false}\n".into();
    });
    shared_mariadb().sql("SET GLOBAL innodb_buffer_pool_size = 1073741824");
    let rows: u64 = std::env::var("REAP_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(EXPIRED);
    let t = Instant::now();
    s.sql(&format!(
        "INSERT INTO short_code (id, code, state, long_url, domain, app, created_at, updated_at, \
         expires_at, version) \
         SELECT {ID_BASE} + seq, CONCAT('old_', seq), 1, \
                CONCAT('https://old.example.com/item/', seq), 'sho.rt', 'demo', \
                UNIX_TIMESTAMP() - 800 * 86400, UNIX_TIMESTAMP() - 800 * 86400, \
                UNIX_TIMESTAMP() - 86400 - seq % 100000, 1 \
         FROM seq_1_to_{rows}; ANALYZE TABLE short_code"
    ));
    eprintln!("bulk insert of {rows} expired links: {:?}", t.elapsed());
    let o = &s.origin;

    // Creations alone, 10 s.
    let running = Arc::new(AtomicBool::new(true));
    let stop = Arc::clone(&running);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(10)).await;
        stop.store(false, Ordering::Relaxed);
    });
    let (n, before) = creations_while(o, running).await;
    eprintln!("creations alone: {n} in 10 s = {before:.0}/s");

    // The reap, with the same creations beside it until it ends.
    let rate = std::env::var("REAP_RATE").unwrap_or_else(|_| "1000000".into());
    let running = Arc::new(AtomicBool::new(true));
    let stop = Arc::clone(&running);
    let config = o.config.clone();
    let t = Instant::now();
    let reap = tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(origin_bin())
            .arg("-c")
            .arg(&config)
            .args(["reap", "--quiet", "--rate", &rate])
            .output()
            .unwrap();
        stop.store(false, Ordering::Relaxed);
        out
    });
    let (n, during) = creations_while(o, running).await;
    let out = reap.await.unwrap();
    let took = t.elapsed();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    eprintln!("{}", text.trim());
    eprintln!(
        "reap run (reap + outbox apply) {took:?}; creations during it: {n} = {during:.0}/s \
         ({:.0}% of {before:.0}/s)",
        100.0 * during / before
    );
    let left =
        s.sql("SELECT COUNT(*) FROM short_code WHERE state = 1 AND expires_at <= UNIX_TIMESTAMP()");
    assert_eq!(left.trim(), "0");
    let reaped = s.sql("SELECT COUNT(*) FROM short_code WHERE state = 5");
    assert_eq!(reaped.trim(), rows.to_string());
}
