//! `shorturl-origin import` (issue 28 item 2) over a real MariaDB and
//! Redis, from the sample files of `docs/samples/`: exact counts per
//! format, codes kept on their domain, creation times and tags kept,
//! conflicts and bad rows reported by line, a dry run that writes nothing,
//! a second run that creates nothing, a resumed run that skips what was
//! done; imported links redirect at once.

use crate::support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{origin_bin, sha256_hex, Setup, ADMIN_KEY, KEY, OTHER_KEY};

const READER: &str = "import-reader-key";
/// Apps that create one link a second: their jobs run for seconds.
const SLOW: [&str; 2] = ["import-slow-1", "import-slow-2"];

fn setup() -> Setup {
    Setup::start_with(|o| {
        o.links_yaml = "  allowed_domains: [static.shop.com, s.shop55.com]\n  \
                        max_import_body_bytes: 8192\n"
            .into();
        o.apps_yaml = format!(
            "  - {{name: reader, key_sha256: {}, scopes: [links:read]}}\n",
            sha256_hex(READER)
        );
        for (i, key) in SLOW.iter().enumerate() {
            o.apps_yaml.push_str(&format!(
                "  - {{name: slow{i}, key_sha256: {}, rate_per_sec: 1, burst: 1}}\n",
                sha256_hex(key)
            ));
        }
    })
}

/// The samples copied into a directory of the test's own (an import
/// writes its state and report beside its file).
fn samples() -> testkit::TempDir {
    let dir = testkit::TempDir::new("import");
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/samples");
    for f in [
        "links.csv",
        "bitly.csv",
        "shlink.csv",
        "kutt.csv",
        "yourls.sql",
    ] {
        std::fs::copy(from.join(f), dir.path().join(f)).unwrap();
    }
    dir
}

/// Runs the import; its JSON summary, or the error text of a failure.
fn import(s: &Setup, file: &Path, args: &[&str]) -> Result<Value, String> {
    let out = Command::new(origin_bin())
        .arg("-c")
        .arg(&s.origin.config)
        .arg("import")
        .arg(file)
        .args(["--app", "demo", "--quiet"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    Ok(v["import"].clone())
}

/// The counts of a summary, for exact comparison.
fn counts(v: &Value) -> Value {
    json!({
        "rows": v["rows"], "created": v["created"], "existing": v["existing"],
        "deduplicated": v["deduplicated"], "refused": v["refused"],
        "refused_by_kind": v["refused_by_kind"],
    })
}

async fn link(s: &Setup, code: &str, domain: &str) -> Value {
    let (st, v, _) = s
        .origin
        .call(
            reqwest::Method::GET,
            &format!("/api/v1/links/{code}?domain={domain}"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200, "{code}: {v}");
    v
}

fn links_count(s: &Setup) -> u64 {
    s.sql("SELECT COUNT(*) FROM short_code WHERE state <> 0")
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_of_every_format_import_with_exact_counts() {
    let s = setup();
    let o = &s.origin;
    let dir = samples();
    let file = |n: &str| -> PathBuf { dir.path().join(n) };
    // Another app holds one of the file's codes.
    let (st, v) = o
        .create_with_key(
            OTHER_KEY,
            json!({"url": "https://other.example/", "code": "promo-1"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let before = links_count(&s);

    // A dry run reports what would happen and writes nothing.
    let dry = import(&s, &file("links.csv"), &["--dry-run"]).unwrap();
    let want = json!({
        "rows": 6, "created": 3, "existing": 0, "deduplicated": 0, "refused": 3,
        "refused_by_kind": {"code_unavailable": 1, "expired": 1, "invalid_url": 1},
    });
    assert_eq!(counts(&dry), want, "{dry}");
    assert_eq!(links_count(&s), before);
    assert!(!file("links.csv.import-state").exists());

    let done = import(&s, &file("links.csv"), &[]).unwrap();
    assert_eq!(counts(&done), want, "{done}");
    assert_eq!(links_count(&s), before + 3);
    assert!(
        !file("links.csv.import-state").exists(),
        "removed at the end"
    );
    let report = std::fs::read_to_string(file("links.csv.import-report.csv")).unwrap();
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines[0], "line,code,kind,message");
    let refused: Vec<(String, String, String)> = lines[1..]
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, ',').collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .collect();
    assert_eq!(
        refused,
        [
            ("5".into(), "promo-1".into(), "code_unavailable".into()),
            ("6".into(), "bad-row".into(), "invalid_url".into()),
            ("7".into(), "old-camp".into(), "expired".into()),
        ]
    );
    // Codes on their domains, creation times and tags kept; they redirect.
    let spring = link(&s, "spring-24", "sho.rt").await;
    assert_eq!(
        (
            &spring["created_at"],
            &spring["expires_at"],
            &spring["tags"],
            &spring["app"]
        ),
        (
            &json!("2024-03-01T09:00:00Z"),
            &json!("2030-01-01T00:00:00Z"),
            &json!(["spring", "sale"]),
            &json!("demo")
        )
    );
    let shop = link(&s, "shop-main", "static.shop.com").await;
    assert_eq!(shop["created_at"], "2023-11-20T08:00:00Z");
    assert_eq!(
        o.follow("static.shop.com", "shop-main").await,
        (302, Some("https://example.com/shop".into()))
    );
    assert_eq!(
        o.follow("sho.rt", "spring-24").await,
        (302, Some("https://example.com/spring-sale".into()))
    );
    // The other app's link is untouched.
    assert_eq!(
        o.follow("sho.rt", "promo-1").await,
        (302, Some("https://other.example/".into()))
    );

    // Again: nothing new (codes already this app's, the rest deduplicated).
    let again = import(&s, &file("links.csv"), &[]).unwrap();
    assert_eq!(
        counts(&again),
        json!({
            "rows": 6, "created": 0, "existing": 2, "deduplicated": 1, "refused": 3,
            "refused_by_kind": {"code_unavailable": 1, "expired": 1, "invalid_url": 1},
        })
    );
    assert_eq!(links_count(&s), before + 3);

    // This service's export imports as it is: its links are there already
    // (`existing`), a deleted one is not brought back.
    let (st, _, _) = o
        .call(
            reqwest::Method::DELETE,
            "/api/v1/links/spring-24",
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200);
    let r = o
        .http
        .get(o.url("/api/v1/export/links?format=csv"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    std::fs::write(file("export.csv"), r.text().await.unwrap()).unwrap();
    let back = import(&s, &file("export.csv"), &[]).unwrap();
    assert_eq!(
        counts(&back),
        json!({
            "rows": 3, "created": 0, "existing": 2, "deduplicated": 0, "refused": 1,
            "refused_by_kind": {"not_active": 1},
        })
    );
    assert_eq!(link(&s, "spring-24", "sho.rt").await["state"], "deleted");

    // Other products' exports.
    let n = links_count(&s);
    let b = import(&s, &file("bitly.csv"), &["--format", "bitly"]).unwrap();
    assert_eq!(
        (b["rows"].as_u64(), b["created"].as_u64()),
        (Some(3), Some(3)),
        "{b}"
    );
    assert_eq!(
        link(&s, "3AbCdEf", "sho.rt").await["tags"],
        json!(["docs", "help"])
    );
    assert_eq!(
        link(&s, "pricing-q3", "sho.rt").await["created_at"],
        "2023-07-01T00:00:00Z"
    );
    let sh = import(&s, &file("shlink.csv"), &["--format", "shlink"]).unwrap();
    assert_eq!(
        counts(&sh),
        json!({
            "rows": 3, "created": 2, "existing": 0, "deduplicated": 0, "refused": 1,
            "refused_by_kind": {"invalid_code": 1},
        })
    );
    assert_eq!(
        link(&s, "abc123", "sho.rt").await["created_at"],
        "2022-01-10T09:00:00Z"
    );
    let k = import(&s, &file("kutt.csv"), &["--format", "kutt"]).unwrap();
    assert_eq!(
        (k["created"].as_u64(), k["refused"].as_u64()),
        (Some(2), Some(0)),
        "{k}"
    );
    assert_eq!(
        link(&s, "kutt-2", "sho.rt").await["expires_at"],
        "2031-06-02T00:00:00Z"
    );
    let y = import(
        &s,
        &file("yourls.sql"),
        &["--format", "yourls", "--dry-run"],
    )
    .unwrap();
    assert_eq!(
        (y["created"].as_u64(), y["refused"].as_u64()),
        (Some(2), Some(1)),
        "{y}"
    );
    let y = import(&s, &file("yourls.sql"), &["--format", "yourls"]).unwrap();
    assert_eq!(
        counts(&y),
        json!({
            "rows": 3, "created": 2, "existing": 0, "deduplicated": 0, "refused": 1,
            "refused_by_kind": {"invalid_code": 1},
        })
    );
    assert_eq!(
        o.follow("sho.rt", "yourlsorg").await,
        (302, Some("http://yourls.org/?ref=it%27s".into()))
    );
    assert_eq!(links_count(&s), n + 3 + 2 + 2 + 2);

    // A file that is not what --format says is refused whole.
    let e = import(&s, &file("kutt.csv"), &["--format", "bitly"]).unwrap_err();
    assert!(e.contains("no url column (looked for longurl)"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_import_resumes_after_its_last_chunk() {
    let s = setup();
    let dir = samples();
    let file = dir.path().join("bitly.csv");
    // A run that stopped after its first chunk of one row left this.
    let state = json!({
        "format": "bitly", "app": "demo", "domain": null, "rows_done": 1,
        "summary": {"rows": 1, "created": 1, "existing": 0, "deduplicated": 0,
                    "refused": 0, "refused_by_kind": {}},
    });
    std::fs::write(dir.path().join("bitly.csv.import-state"), state.to_string()).unwrap();
    let e = import(&s, &file, &["--format", "bitly"]).unwrap_err();
    assert!(e.contains("did not finish; give --resume"), "{e}");
    let e = import(&s, &file, &["--format", "shlink", "--resume"]).unwrap_err();
    assert!(e.contains("resume it with the same"), "{e}");
    let r = import(
        &s,
        &file,
        &["--format", "bitly", "--resume", "--chunk", "1"],
    )
    .unwrap();
    assert_eq!(
        (&r["resumed_after"], &r["rows"], &r["created"]),
        (&json!(1), &json!(3), &json!(3)),
        "{r}"
    );
    // The first row was the earlier run's: this one did not write it.
    let (st, _, _) = s
        .origin
        .call(
            reqwest::Method::GET,
            "/api/v1/links/3AbCdEf",
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 404);
    assert_eq!(
        link(&s, "pricing-q3", "sho.rt").await["url"],
        "https://example.org/pricing"
    );
    assert!(!dir.path().join("bitly.csv.import-state").exists());
    // An unknown app is refused before anything is read.
    let out = Command::new(origin_bin())
        .arg("-c")
        .arg(&s.origin.config)
        .args(["import", "--app", "nobody", "--quiet"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no app \"nobody\""));
}

/// Posts a file to `POST /api/v1/imports?{query}` with `key`.
async fn post_import(s: &Setup, key: &str, query: &str, body: Vec<u8>) -> (u16, Value) {
    let o = &s.origin;
    let r = o
        .http
        .post(o.url(&format!("/api/v1/imports?{query}")))
        .bearer_auth(key)
        .header("content-type", "text/csv")
        .body(body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    if st == 202 {
        let at = r.headers()["location"].to_str().unwrap().to_owned();
        let v: Value = r.json().await.unwrap();
        assert_eq!(at, format!("/api/v1/imports/{}", v["id"].as_str().unwrap()));
        return (st, v);
    }
    (st, r.json().await.unwrap())
}

async fn job(s: &Setup, key: &str, id: &str) -> (u16, Value) {
    let (st, v, _) = s
        .origin
        .call(
            reqwest::Method::GET,
            &format!("/api/v1/imports/{id}"),
            key,
            None,
            &[],
        )
        .await;
    (st, v)
}

/// Waits until the job has ended; its last view.
async fn ended(s: &Setup, key: &str, id: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (st, v) = job(s, key, id).await;
        assert_eq!(st, 200, "{v}");
        if v["state"] != "running" {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "import {id} did not end: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The API's import (issue 28 item 2): 202 with the job at once, the job's
/// counts and refused rows once it ended, one running job per app (MySQL
/// decides; a stale one reads interrupted and gives way), tenancy on the
/// job, bad files and parameters refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_import_through_the_api_as_jobs() {
    let s = setup();
    let sample = |n: &str| {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../docs/samples")
                .join(n),
        )
        .unwrap()
    };
    let before = links_count(&s);
    let (st, v) = post_import(&s, KEY, "format=shlink&dry_run=true", sample("shlink.csv")).await;
    assert_eq!(
        (st, &v["state"], &v["dry_run"], &v["app"]),
        (202, &json!("running"), &json!(true), &json!("demo")),
        "{v}"
    );
    let v = ended(&s, KEY, v["id"].as_str().unwrap()).await;
    assert_eq!(
        (&v["state"], &v["rows"], &v["created"], &v["refused"]),
        (&json!("done"), &json!(3), &json!(2), &json!(1)),
        "{v}"
    );
    assert_eq!(links_count(&s), before, "a dry run writes nothing");

    let (st, v) = post_import(&s, KEY, "format=shlink", sample("shlink.csv")).await;
    assert_eq!(st, 202, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let v = ended(&s, KEY, &id).await;
    assert_eq!(
        counts(&v),
        json!({
            "rows": 3, "created": 2, "existing": 0, "deduplicated": 0, "refused": 1,
            "refused_by_kind": {"invalid_code": 1},
        })
    );
    assert_eq!(v["refusals"][0]["line"], 4);
    assert_eq!(v["refusals"][0]["code"], "q");
    assert_eq!(v["refusals"][0]["kind"], "invalid_code");
    assert_eq!(links_count(&s), before + 2);
    assert_eq!(
        s.origin.follow("sho.rt", "xyz789").await,
        (302, Some("https://example.net/b".into()))
    );
    // Another app's job is no job of this key's; an admin key sees it.
    assert_eq!(job(&s, OTHER_KEY, &id).await.0, 404);
    assert_eq!(job(&s, ADMIN_KEY, &id).await.0, 200);
    for bad in ["0123", "zzzzzzzzzzzzzzzzzzzzzzzz", "../x"] {
        assert_eq!(job(&s, KEY, bad).await.0, 404, "{bad}");
    }

    // One running job per app: another app's or a stale one do not stop it.
    s.sql(&format!(
        "INSERT INTO import_jobs (public_id, app, running_app, format, dry_run, state, summary, \
         created_at_ms, updated_at_ms) VALUES ('{0}', 'demo', 'demo', 'csv', 0, 'running', '{{}}', {1}, {1})",
        "a".repeat(24),
        shorturl_common::time::now_unix_ms()
    ));
    let (st, v) = post_import(&s, KEY, "", sample("links.csv")).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("import_running")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains(&"a".repeat(24)));
    let (st, other) = post_import(
        &s,
        OTHER_KEY,
        "format=kutt&dry_run=true",
        sample("kutt.csv"),
    )
    .await;
    assert_eq!(st, 202, "{other}");
    assert_eq!(
        ended(&s, OTHER_KEY, other["id"].as_str().unwrap()).await["state"],
        "done"
    );
    s.sql("UPDATE import_jobs SET updated_at_ms = 0 WHERE public_id = REPEAT('a', 24)");
    assert_eq!(
        job(&s, KEY, &"a".repeat(24)).await.1["state"],
        "interrupted"
    );
    let (st, v) = post_import(&s, KEY, "format=kutt", sample("kutt.csv")).await;
    assert_eq!(st, 202, "{v}");
    let v = ended(&s, KEY, v["id"].as_str().unwrap()).await;
    assert_eq!(
        (&v["created"], &v["state"]),
        (&json!(2), &json!("done")),
        "{v}"
    );
    assert_eq!(
        job(&s, KEY, &"a".repeat(24)).await.1["state"],
        "interrupted"
    );

    // Refused before a job exists.
    for (q, body, st, kind) in [
        ("format=bitly", sample("kutt.csv"), 400, "invalid_file"),
        ("format=xls", sample("kutt.csv"), 400, "invalid_format"),
        ("dry_run=1", sample("kutt.csv"), 400, "invalid_dry_run"),
        (
            "format=yourls",
            b"INSERT INTO yourls_url VALUES ('a".to_vec(),
            400,
            "invalid_file",
        ),
        ("", vec![b'u'; 20_000], 413, "body_too_large"),
    ] {
        let (got, v) = post_import(&s, KEY, q, body).await;
        assert_eq!((got, v["error"].as_str()), (st, Some(kind)), "{q}: {v}");
    }
    let (st, v) = post_import(&s, READER, "", sample("links.csv")).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (403, Some("insufficient_scope")),
        "{v}"
    );

    // An origin holds two files at once: two jobs paced at one link a
    // second (20 rows each: 19 s at least) hold both, a third file waits.
    let rows: String = (0..20)
        .map(|i| format!("https://slow.example/{i}\n"))
        .collect();
    for key in SLOW {
        let (st, v) = post_import(&s, key, "", format!("url\n{rows}").into_bytes()).await;
        assert_eq!(st, 202, "{v}");
    }
    let r = s
        .origin
        .http
        .post(s.origin.url("/api/v1/imports"))
        .bearer_auth(KEY)
        .body(sample("links.csv"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "10");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "imports_busy");
}
