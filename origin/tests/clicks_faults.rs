//! MySQL down while click batches arrive: nothing is acknowledged, so
//! nothing is lost; every batch counts once MySQL is back. A private
//! MariaDB (this test stops it).

use crate::support;

use serde_json::json;
use support::clicks::{
    batches, hours_batch, pending, wait_totals, xadd, ADMIN, DAY, FAST_CLAIM, WAIT,
};
use support::{eventually, sha256_hex, Origin, OriginOpts, Setup};
use testkit::{MariaDb, Redis};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_arriving_while_mysql_is_down_count_once_it_is_back() {
    let mut m = MariaDb::start();
    let url = m.create_database("clicks_faults");
    let redis = Redis::start();
    let mut opts = OriginOpts::new(url, redis.url());
    opts.extra_yaml.push_str(FAST_CLAIM);
    opts.apps_yaml.push_str(&format!(
        "  - {{name: ops, key_sha256: {}, scopes: [admin]}}\n",
        sha256_hex(ADMIN)
    ));
    let origin = Origin::start(opts);
    let code = origin.create_ok(json!({"url": "https://a.example/"})).await;
    let s = Setup {
        redis,
        db: "clicks_faults".into(),
        origin,
    };
    m.stop();
    for i in 0..3 {
        let b = hours_batch(&format!("e:down:{i}"), &[(&code, DAY + i * 3600, 7, 2)]);
        xadd(&s, &b).await;
    }
    // Read, refused by MySQL, left pending (not acknowledged).
    eventually("a failed application", WAIT, || async {
        batches(&s.origin, "failed").await >= 1
    })
    .await;
    eventually("3 pending", WAIT, || async { pending(&s).await == 3 }).await;
    assert_eq!(batches(&s.origin, "applied").await, 0);
    m.restart();
    // Claimed again after the idle time and applied, each once.
    wait_totals(&s.origin, &code, (21, 6)).await;
    eventually("nothing pending", WAIT, || async { pending(&s).await == 0 }).await;
    assert_eq!(batches(&s.origin, "applied").await, 3);
    assert_eq!(batches(&s.origin, "duplicate").await, 0);
}
