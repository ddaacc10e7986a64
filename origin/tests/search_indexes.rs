//! Every search shape of `GET /api/v1/links` is served by an index range,
//! on a table of 1M rows (the migrations' schema, filled in bulk): the
//! statements the origin builds are EXPLAINed and ANALYZEd, and a full
//! scan, an unexpected index or an unexpectedly large read fails the test.

use crate::support;

use mysql_async::prelude::*;
use mysql_async::{Row, Value};
use shorturl_origin::store::search::{statement, Filters, SearchQuery, StateFilter, Tenant};
use support::{fresh_db, write_config, OriginOpts};
use testkit::MariaDb;
use testkit::TempDir;

const ROWS: u64 = 1_000_000;
/// Rows 1..=LINKS are links (ids are issued in order), the rest free.
const LINKS: u64 = 300_000;
/// The links' creation times span three years up to now.
const SPAN: u64 = 3 * 365 * 86_400;
const PAGE: u32 = 101;

/// One INSERT ... SELECT over the sequence engine: links with realistic
/// spreads of domain, app, merchant, state, lifetime and creation time,
/// then free pre-generated rows.
fn fill_sql(now: u64) -> String {
    let start = now - SPAN;
    let step = SPAN / LINKS;
    format!(
        "INSERT INTO short_code (id, code, state, long_url, domain, app, kdt_id, created_at, updated_at, \
         expires_at, version) \
         SELECT seq, CONV(seq * 7919, 10, 36), state, url, domain, app, kdt, created, created, \
                IF(state = 0, NULL, created + ttl * 86400), IF(state = 0, 0, 1) \
         FROM (SELECT seq, \
           IF(seq > {LINKS}, 0, CASE WHEN seq % 100 < 2 THEN 4 WHEN seq % 100 < 5 THEN 3 ELSE 1 END) AS state, \
           IF(seq > {LINKS}, NULL, CONCAT('https://shop', seq % 997, '.example.com/item/', seq % 150000)) AS url, \
           IF(seq > {LINKS}, NULL, CASE \
             WHEN seq % 50 = 0 THEN IF(seq % 4 = 0, 's.shop55.com', 'sho.rt') \
             WHEN seq % 50 = 1 THEN 'go.brand91.cn' \
             WHEN seq % 2 = 0 THEN IF(seq % 3 = 0, CONCAT('m', 1000 + (seq * 31) % 5000, '.shop.cn'), 'sho.rt') \
             WHEN seq % 10 = 3 THEN 's.example.net' ELSE 'sho.rt' END) AS domain, \
           IF(seq > {LINKS}, NULL, CONCAT('app', (seq * 7) % 41)) AS app, \
           IF(seq > {LINKS}, NULL, CASE WHEN seq % 50 = 0 THEN 55 WHEN seq % 50 = 1 THEN 91 \
             WHEN seq % 2 = 0 THEN 1000 + (seq * 31) % 5000 ELSE NULL END) AS kdt, \
           IF(seq > {LINKS}, NULL, {start} + seq * {step} + (seq * 7919) % 600) AS created, \
           CASE WHEN seq % 20 = 0 THEN 30 WHEN seq % 20 = 1 THEN 3650 ELSE 730 END AS ttl \
           FROM seq_1_to_{ROWS}) AS g"
    )
}

/// The secondary indexes of `short_code` (name, `col[(len)]` list), sorted.
fn secondary_indexes(m: &MariaDb, db: &str) -> Vec<(String, String)> {
    let out = m.sql(&format!(
        "SELECT INDEX_NAME, GROUP_CONCAT(CONCAT(COLUMN_NAME, IFNULL(CONCAT('(', SUB_PART, ')'), '')) \
         ORDER BY SEQ_IN_INDEX) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '{db}' \
         AND TABLE_NAME = 'short_code' AND NON_UNIQUE = 1 GROUP BY INDEX_NAME ORDER BY INDEX_NAME"
    ));
    out.lines()
        .map(|l| {
            let (n, c) = l.split_once('\t').unwrap();
            (n.to_owned(), c.to_owned())
        })
        .collect()
}

/// Builds the 1M-row table: the schema of the migrations, filled with the
/// secondary indexes dropped and then re-created exactly as they were (a
/// sorted index build is several times faster than 1M rows of inserts
/// into nine indexes).
fn build_table(m: &MariaDb, db: &str) {
    let url = m.create_database(db);
    let dir = TempDir::new("search-indexes");
    let config = write_config(&dir, &OriginOpts::new(url, "redis://127.0.0.1:1/".into()));
    testkit::origin::run(&config, &["migrate"]);
    let indexes = secondary_indexes(m, db);
    for name in [
        "idx_created",
        "idx_domain_created",
        "idx_app_created",
        "idx_kdt_created",
        "idx_state_created",
        "idx_url_created",
    ] {
        assert!(
            indexes.iter().any(|(n, _)| n == name),
            "migration lacks {name}: {indexes:?}"
        );
    }
    let drops: Vec<String> = indexes
        .iter()
        .map(|(n, _)| format!("DROP INDEX {n}"))
        .collect();
    let adds: Vec<String> = indexes
        .iter()
        .map(|(n, c)| format!("ADD INDEX {n} ({c})"))
        .collect();
    let now = shorturl_common::time::now_unix();
    let t = std::time::Instant::now();
    m.sql(&format!(
        "USE `{db}`; ALTER TABLE short_code {}",
        drops.join(", ")
    ));
    eprintln!("drop {:?}", t.elapsed());
    m.sql(&format!("USE `{db}`; {}", fill_sql(now)));
    eprintln!("fill {:?}", t.elapsed());
    m.sql(&format!(
        "USE `{db}`; ALTER TABLE short_code {}",
        adds.join(", ")
    ));
    eprintln!("add {:?}", t.elapsed());
    m.sql(&format!("USE `{db}`; ANALYZE TABLE short_code"));
    eprintln!("analyze {:?}", t.elapsed());
    assert_eq!(
        secondary_indexes(m, db),
        indexes,
        "indexes re-created as migrated"
    );
    let n = m.sql(&format!(
        "SELECT COUNT(*), SUM(state <> 0) FROM `{db}`.short_code"
    ));
    assert_eq!(n.trim(), format!("{ROWS}\t{LINKS}"));
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::NULL => None,
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Double(d) => Some(d.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// One access of `short_code` in a plan.
#[derive(Debug)]
struct Access {
    kind: String,
    key: Option<String>,
    rows: f64,
    read: f64,
    filesort: bool,
}

/// The plan of `q` (EXPLAIN) with the rows each access actually read
/// (ANALYZE runs the statement).
async fn plan(conn: &mut mysql_async::Conn, q: &SearchQuery<'_>) -> Vec<Access> {
    let (sql, params) = statement(q);
    let rows: Vec<Row> = conn.exec(format!("ANALYZE {sql}"), params).await.unwrap();
    rows.into_iter()
        .filter_map(|r| {
            let col = |name: &str| {
                let i = r
                    .columns_ref()
                    .iter()
                    .position(|c| c.name_str() == name)
                    .unwrap();
                r.as_ref(i).and_then(text)
            };
            if col("table").as_deref() != Some("short_code") {
                return None; // the merge of a UNION (a derived table of at most a few pages)
            }
            let extra = col("Extra").unwrap_or_default();
            Some(Access {
                kind: col("type").unwrap_or_default(),
                key: col("key"),
                rows: col("rows").and_then(|s| s.parse().ok()).unwrap_or(0.0),
                read: col("r_rows").and_then(|s| s.parse().ok()).unwrap_or(0.0),
                filesort: extra.contains("filesort"),
            })
        })
        .collect()
}

/// A shape, the indexes that may serve it, and the most rows a page may read.
struct Shape {
    name: String,
    filters: Filters,
    tenant: Tenant,
    keys: Vec<&'static str>,
    max_read: f64,
}

fn shape(
    name: &str,
    filters: Filters,
    tenant: Tenant,
    keys: &[&'static str],
    max_read: f64,
) -> Shape {
    Shape {
        name: name.to_owned(),
        filters,
        tenant,
        keys: keys.to_vec(),
        max_read,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_search_shape_reads_an_index_range_of_a_million_rows() {
    // Its own server: a million rows on the shared one stall the other
    // tests' queries past their timeout.
    let m = MariaDb::start_scratch();
    let db = fresh_db("search");
    build_table(&m, &db);
    let pool = mysql_async::Pool::new(m.url(&db).as_str());
    let mut conn = pool.get_conn().await.unwrap();
    let now = shorturl_common::time::now_unix();
    let day = 86_400;
    // A created range of ten days, a year ago (about 2,700 links).
    let (from, to) = (now - 365 * day, now - 355 * day);
    let f = Filters::default;
    // A link in the created range, before the next-page cursor used below.
    let (code, url): (String, String) = conn
        .exec_first(
            "SELECT code, long_url FROM short_code WHERE created_at >= ? AND created_at < ? AND state = 1 LIMIT 1",
            (from, now - 361 * day),
        )
        .await
        .unwrap()
        .unwrap();
    // Single filters: (filters, indexes that may serve it, rows a page may read).
    // Ordered shapes read about a page; sorted ones (URL) read their matches.
    let page = f64::from(PAGE);
    let singles: Vec<(&str, Filters, &[&'static str], f64)> = vec![
        ("no filter", f(), &["idx_created"], page * 1.2),
        (
            "code",
            Filters {
                code: Some(code.clone()),
                ..f()
            },
            &["uk_code"],
            1.0,
        ),
        (
            "url",
            Filters {
                url: Some(url.clone()),
                ..f()
            },
            &["idx_url_created"],
            4.0,
        ),
        (
            "url_prefix",
            Filters {
                url_prefix: Some("https://shop17.example.com/".into()),
                ..f()
            },
            &["idx_url_created"],
            400.0,
        ),
        (
            "domain (merchant)",
            Filters {
                domain: Some("go.brand91.cn".into()),
                ..f()
            },
            &["idx_domain_created"],
            page * 1.2,
        ),
        (
            "domain (default)",
            Filters {
                domain: Some("sho.rt".into()),
                ..f()
            },
            &["idx_domain_created", "idx_created"],
            page * 1.2,
        ),
        (
            "domain (absent)",
            Filters {
                domain: Some("nowhere.example".into()),
                ..f()
            },
            &["idx_domain_created"],
            1.0,
        ),
        (
            "app",
            Filters {
                app: Some("app7".into()),
                ..f()
            },
            &["idx_app_created"],
            page * 1.2,
        ),
        (
            "kdt_id",
            Filters {
                kdt_id: Some(1234),
                ..f()
            },
            &["idx_kdt_created"],
            page,
        ),
        (
            "kdt_id (large)",
            Filters {
                kdt_id: Some(55),
                ..f()
            },
            &["idx_kdt_created"],
            page * 1.2,
        ),
        (
            "state active",
            Filters {
                state: Some(StateFilter::Active),
                ..f()
            },
            &["idx_state_created"],
            page * 1.2,
        ),
        (
            "state disabled",
            Filters {
                state: Some(StateFilter::Disabled),
                ..f()
            },
            &["idx_state_created"],
            page,
        ),
        (
            "state deleted",
            Filters {
                state: Some(StateFilter::Deleted),
                ..f()
            },
            &["idx_state_created"],
            page,
        ),
        (
            "created_from",
            Filters {
                created_from: Some(from),
                ..f()
            },
            &["idx_created"],
            page * 1.2,
        ),
        (
            "created_to",
            Filters {
                created_to: Some(to),
                ..f()
            },
            &["idx_created"],
            page * 1.2,
        ),
    ];
    let mut shapes: Vec<Shape> = Vec::new();
    for (name, filters, keys, max_read) in singles {
        let ranged = Filters {
            created_from: Some(from),
            created_to: Some(to),
            ..filters.clone()
        };
        // With a created range, the ranged read can only get smaller; URL
        // shapes still read their matches (then keep those in the range).
        shapes.push(shape(name, filters, Tenant::All, keys, max_read));
        let mut with_range_keys = keys.to_vec();
        with_range_keys.push("idx_created");
        shapes.push(shape(
            &format!("{name} + created range"),
            ranged,
            Tenant::All,
            &with_range_keys,
            max_read.max(page * 1.2),
        ));
    }
    // `expired` is two parts merged by UNION ALL, each a page of the state
    // index: links the reaper marked expired (state 5, none in this table),
    // and active links past their expiry, read newest first with the
    // expiry tested on each row. Alone, the second reads the
    // active links newer than the newest expired one (see
    // docs/architecture.md), so only its plan is checked; narrowed by a
    // created range (expired links are old), it reads about a page.
    shapes.push(shape(
        "state expired",
        Filters {
            state: Some(StateFilter::Expired),
            ..f()
        },
        Tenant::All,
        &["idx_state_created"],
        f64::INFINITY,
    ));
    shapes.push(shape(
        "state expired + created range",
        Filters {
            state: Some(StateFilter::Expired),
            created_from: Some(now - 1000 * day),
            created_to: Some(now - 900 * day),
            ..f()
        },
        Tenant::All,
        &["idx_state_created", "idx_created"],
        page * 1.2,
    ));
    // The tenancy condition of callers that are not admin.
    let m55 = Tenant::Merchants(vec![55]);
    let m3 = Tenant::Merchants(vec![55, 91, 1234]);
    let app = Tenant::App("app7".into());
    let ranged = Filters {
        created_from: Some(from),
        created_to: Some(to),
        ..f()
    };
    let tenants: [(&str, Tenant, &[&'static str]); 3] = [
        ("merchant-bound", m55, &["idx_kdt_created"]),
        ("merchant-bound (3 merchants)", m3, &["idx_kdt_created"]),
        ("app-bound", app, &["idx_app_created"]),
    ];
    for (name, tenant, keys) in tenants {
        // A UNION reads at most a page from each merchant.
        let max_read = page * 3.6;
        shapes.push(shape(name, f(), tenant.clone(), keys, max_read));
        shapes.push(shape(
            &format!("{name} + created range"),
            ranged.clone(),
            tenant.clone(),
            keys,
            max_read,
        ));
        shapes.push(shape(
            &format!("{name} + state disabled"),
            Filters {
                state: Some(StateFilter::Disabled),
                ..f()
            },
            tenant.clone(),
            &["idx_kdt_created", "idx_app_created", "idx_state_created"],
            // Two filters, one index: the rarer of the two ranges is read
            // until a page of links with both is found (each merchant's, in
            // a union): at most 3% disabled in a tenant of ~6,000 links.
            3.0 * 6100.0,
        ));
    }

    let mut failures = Vec::new();
    for s in &shapes {
        // The first page, and a page after a cursor inside the created range.
        for before in [None, Some((now - 360 * day, LINKS / 2))] {
            let q = SearchQuery {
                filters: &s.filters,
                tenant: s.tenant.clone(),
                before,
                limit: PAGE,
                now,
            };
            let accesses = plan(&mut conn, &q).await;
            let read: f64 = accesses.iter().map(|a| a.read).sum();
            let label = format!(
                "{}{}",
                s.name,
                if before.is_some() { " (next page)" } else { "" }
            );
            eprintln!("{label:50} {accesses:?}");
            assert!(!accesses.is_empty(), "{label}: no access of short_code");
            for a in &accesses {
                if a.kind == "ALL" || a.kind == "index" {
                    failures.push(format!("{label}: full scan ({}) {a:?}", a.kind));
                }
                match &a.key {
                    Some(k) if s.keys.contains(&k.as_str()) => {}
                    _ => failures.push(format!(
                        "{label}: key {:?}, expected one of {:?}",
                        a.key, s.keys
                    )),
                }
                // A sorted access reads its whole range: its estimate must be small.
                if a.filesort && a.rows > s.max_read * 4.0 {
                    failures.push(format!("{label}: sorts an estimated {} rows", a.rows));
                }
            }
            if read > s.max_read {
                failures.push(format!(
                    "{label}: read {read} rows, expected at most {}",
                    s.max_read
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
