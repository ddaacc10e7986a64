//! Free codes in their own table (`code_pool`, migration 22; issue 30,
//! item 2): a creation moves its code from the pool into `short_code`, a
//! stale pool row (its code already a link's) is skipped, never issued
//! twice, and an installation whose free codes were rows of `short_code`
//! gets them moved by the migration.

use crate::support::{count, Setup};
use serde_json::json;
use std::collections::HashSet;

/// Creates links until the pool is exhausted (503), `conc` at a time;
/// every other answer must be 201. Returns the codes.
async fn create_until_exhausted(s: &Setup, conc: usize) -> Vec<String> {
    let o = &s.origin;
    let mut codes = Vec::new();
    for round in 0.. {
        let answers = futures::future::join_all(
            (0..conc)
                .map(|i| o.create(json!({"url": format!("https://pool.example/{round}/{i}")}))),
        )
        .await;
        let mut exhausted = false;
        for (st, v) in answers {
            match st {
                201 => codes.push(v["code"].as_str().unwrap().to_owned()),
                503 if v["error"] == "codes_exhausted" => exhausted = true,
                _ => panic!("creation answered {st}: {v}"),
            }
        }
        if exhausted {
            break;
        }
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_code_already_a_links_is_skipped_and_every_other_code_issued_once() {
    let s = Setup::start_with(|o| o.pregen = 120);
    let o = &s.origin;
    assert_eq!(count(&s, "SELECT COUNT(*) FROM code_pool"), 120);
    assert_eq!(count(&s, "SELECT COUNT(*) FROM short_code"), 0);
    // A custom code that is no free code, then made one at id 60 by hand:
    // what a pre-generation run filing the same code at the same moment
    // leaves behind (its row and the link's are in different tables).
    assert_eq!(
        o.create_ok(json!({"url": "https://custom.example/", "code": "Zz9Zz9"}))
            .await,
        "Zz9Zz9"
    );
    s.sql("UPDATE code_pool SET code = 'Zz9Zz9' WHERE id = 60");
    // Eight at a time, so the stale id shares a batch with others: the
    // batch is claimed again without it, and no creation fails.
    let codes = create_until_exhausted(&s, 8).await;
    let distinct: HashSet<&String> = codes.iter().collect();
    assert_eq!(distinct.len(), codes.len(), "a code issued twice");
    assert_eq!(codes.len(), 119, "every free code but the stale one");
    assert!(!distinct.contains(&"Zz9Zz9".to_owned()));
    assert_eq!(
        o.follow("sho.rt", "Zz9Zz9").await.1.as_deref(),
        Some("https://custom.example/")
    );
    // The pool is empty, the stale row gone with its batch.
    assert_eq!(count(&s, "SELECT COUNT(*) FROM code_pool"), 0);
    assert_eq!(
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 1"),
        120
    );
    assert!(o.log().contains("issuer exhausted"));
    assert!(
        o.log().contains("claiming again without it"),
        "the stale row took the fallback"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_moves_free_rows_out_of_the_link_table() {
    let s = Setup::start_with(|o| o.pregen = 50);
    let o = &s.origin;
    let first = o.create_ok(json!({"url": "https://before.example/"})).await;
    // The layout before migration 22: free codes as rows of `short_code`
    // (state 0, no link columns), one of them recycled (version 3).
    s.sql(
        "INSERT INTO short_code (id, code, version) SELECT id, code, version FROM code_pool; \
         DELETE FROM code_pool; UPDATE short_code SET version = 3 WHERE id = 50",
    );
    assert_eq!(
        count(&s, "SELECT COUNT(*) FROM short_code WHERE state = 0"),
        49
    );
    let recycled = s.sql("SELECT code FROM short_code WHERE id = 50");
    let recycled = recycled.trim();
    s.sql(include_str!("../migrations/0022_code_pool.sql"));
    // Running it again (a crash before it was recorded) changes nothing.
    s.sql(include_str!("../migrations/0022_code_pool.sql"));
    assert_eq!(count(&s, "SELECT COUNT(*) FROM code_pool"), 49);
    assert_eq!(count(&s, "SELECT COUNT(*) FROM short_code"), 1);
    assert_eq!(
        count(
            &s,
            &format!("SELECT version FROM code_pool WHERE code = '{recycled}'")
        ),
        3
    );
    // A free code's negative carries its version; the link still resolves.
    assert_eq!(
        o.get_text(
            &format!("/internal/v1/records/{recycled}?domain=sho.rt"),
            "sho.rt"
        )
        .await,
        (404, "- 3".to_owned())
    );
    assert_eq!(
        o.follow("sho.rt", &first).await.1.as_deref(),
        Some("https://before.example/")
    );
    // Every moved code is issued once; the recycled one above its version.
    let codes = create_until_exhausted(&s, 4).await;
    assert_eq!(codes.len(), 49);
    assert_eq!(codes.iter().collect::<HashSet<_>>().len(), 49);
    assert_eq!(
        count(
            &s,
            &format!("SELECT version FROM short_code WHERE code = '{recycled}'")
        ),
        4
    );
}
