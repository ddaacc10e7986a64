//! Creations under concurrency: custom codes in one index gap (deadlocks are
//! retried), the same custom code raced (one winner), and a group-commit
//! batch with one bad item (only that item fails).

use crate::support;

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{Origin, Setup};
use tokio::sync::Barrier;

const UNAVAILABLE: &str =
    r#"{"error":"unavailable","message":"the link database is unavailable; retry shortly"}"#;

/// Sends every body at once (behind a barrier); returns (status, body) in order.
async fn create_all(o: &Origin, bodies: Vec<serde_json::Value>) -> Vec<(u16, serde_json::Value)> {
    let barrier = Arc::new(Barrier::new(bodies.len()));
    let mut tasks = Vec::new();
    for body in bodies {
        let http = o.http.clone();
        let url = o.url("/api/v1/links");
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = http
                .post(url)
                .bearer_auth(support::KEY)
                .json(&body)
                .send()
                .await
                .unwrap();
            let st = r.status().as_u16();
            let text = r.text().await.unwrap();
            (
                st,
                serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
            )
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_custom_codes_in_one_gap_are_all_created() {
    let s = Setup::start();
    let o = &s.origin;
    let bodies = (1..=50)
        .map(|i| json!({"url": format!("https://promo.example/{i}"), "code": format!("promo-{i:04}")}))
        .collect();
    let answers = create_all(o, bodies).await;
    for (i, (st, v)) in answers.iter().enumerate() {
        assert_eq!(*st, 201, "promo-{:04}: {v}", i + 1);
        assert_eq!(v["code"], format!("promo-{:04}", i + 1));
    }
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE code LIKE 'promo-%' AND state = 1")
            .trim(),
        "50"
    );
    assert_eq!(
        o.follow("sho.rt", "promo-0037").await,
        (302, Some("https://promo.example/37".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_creations_of_one_custom_code_have_exactly_one_winner() {
    // 49 refusals from one app: over the default refusal budget, which is
    // not what this test is about (tenancy.rs tests the budget).
    let s = Setup::start_with(|o| {
        o.links_yaml.push_str("  custom_code_refusals_per_min: 0\n");
    });
    let o = &s.origin;
    let bodies = (1..=50)
        .map(|i| json!({"url": format!("https://race.example/{i}"), "code": "race-code"}))
        .collect();
    let answers = create_all(o, bodies).await;
    let winners: Vec<usize> = answers
        .iter()
        .enumerate()
        .filter(|(_, (st, _))| *st == 201)
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    for (st, v) in &answers {
        if *st != 201 {
            assert_eq!(
                (*st, v["error"].as_str()),
                (409, Some("code_unavailable")),
                "{v}"
            );
        }
    }
    let winner = format!("https://race.example/{}", winners[0]);
    assert_eq!(
        o.follow("sho.rt", "race-code").await,
        (302, Some(winner.clone()))
    );
    assert_eq!(
        s.sql("SELECT long_url FROM short_code WHERE code = 'race-code'")
            .trim(),
        winner
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_poisoned_item_fails_alone_and_its_batch_commits() {
    // One claim worker, held until every creation is queued, so they share
    // batches whatever the machine's load (left to timing, the poisoned
    // item was once alone in its batch).
    let hold = testkit::TempDir::new("hold");
    let path = hold.path().join("hold");
    std::fs::write(&path, b"").unwrap();
    let s = Setup::start_with(|o| {
        o.mysql_yaml = "  claim_workers: 1\n".into();
        *o = o.clone().failpoints(&format!(
            "origin.claim.poison=poison-me;origin.claim.hold=*@{}",
            path.display()
        ));
    });
    let o = &s.origin;
    let release = {
        let (path, metrics) = (path.clone(), o.url("/metrics"));
        tokio::spawn(async move {
            let queued = || async {
                let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
                support::metric_in(&text, "shorturl_claim_queued")
            };
            support::eventually("64 creations queued", Duration::from_secs(30), || async {
                queued().await == Some(64.0)
            })
            .await;
            std::fs::remove_file(&path).unwrap();
        })
    };
    let bodies: Vec<serde_json::Value> = (0..64)
        .map(|i| {
            if i == 32 {
                json!({"url": "https://bad.example/poison-me"})
            } else {
                json!({"url": format!("https://good.example/{i}")})
            }
        })
        .collect();
    let answers = create_all(o, bodies).await;
    release.await.unwrap();
    let mut created = Vec::new();
    for (i, (st, v)) in answers.iter().enumerate() {
        if i == 32 {
            assert_eq!(*st, 503, "{v}");
            assert_eq!(v.to_string(), UNAVAILABLE);
        } else {
            assert_eq!(*st, 201, "item {i}: {v}");
            created.push((i, v["code"].as_str().unwrap().to_owned()));
        }
    }
    // The poisoned item shared a batch with others, which were then retried
    // one by one.
    let log = o.log();
    let split = log
        .lines()
        .filter(|l| l.contains("claim batch failed; retrying its items one by one"))
        .filter_map(|l| {
            l.split("items=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    assert!(
        split >= 2,
        "the poisoned item was alone in its batch:\n{log}"
    );
    // Nothing half-written: no row for the poisoned URL, one active row per 201.
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE long_url LIKE '%poison-me%'")
            .trim(),
        "0"
    );
    assert_eq!(
        s.sql("SELECT COUNT(*) FROM short_code WHERE state = 1")
            .trim(),
        "63"
    );
    for (i, code) in created.iter().step_by(7) {
        assert_eq!(
            o.follow("sho.rt", code).await,
            (302, Some(format!("https://good.example/{i}")))
        );
    }
}
