//! `GET /api/v1/links`: filters, newest-first keyset pages, signed cursors
//! and tenancy, through a real origin.

use crate::support;

use reqwest::Method;
use serde_json::{json, Value};
use shorturl_common::time::rfc3339;
use support::{sha256_hex, Setup, KEY, OTHER_KEY};

const ADMIN: &str = "key-admin";
const M55: &str = "key-merchant-55";
const MULTI: &str = "key-merchants-55-91";
const READER: &str = "key-reader";
const CREATOR: &str = "key-creator";

/// Creation times are set to T0 + 60 s × creation order.
const T0: u64 = 1_700_000_000;

fn setup() -> Setup {
    Setup::start_with(|o| {
        o.links_yaml = "  allowed_domains: [static.shop.com]\n  \
                        merchant_domains: {'55': [s.shop55.com], 91: [go.brand91.cn]}\n"
            .into();
        for (name, key, extra) in [
            ("ops", ADMIN, "scopes: [admin]"),
            ("merchant55", M55, "merchants: [55]"),
            ("multi", MULTI, "merchants: [55, 91]"),
            ("reader", READER, "scopes: [links:read]"),
            ("creator", CREATOR, "scopes: [links:create]"),
        ] {
            o.apps_yaml.push_str(&format!(
                "  - {{name: {name}, key_sha256: {}, {extra}}}\n",
                sha256_hex(key)
            ));
        }
    })
}

async fn list(s: &Setup, key: &str, query: &str) -> (u16, Value) {
    let (st, v, _) = s
        .origin
        .call(
            Method::GET,
            &format!("/api/v1/links?{query}"),
            key,
            None,
            &[],
        )
        .await;
    (st, v)
}

/// The codes of one page (asserting a 200).
async fn codes(s: &Setup, key: &str, query: &str) -> Vec<String> {
    let (st, v) = list(s, key, query).await;
    assert_eq!(st, 200, "{query}: {v}");
    v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["code"].as_str().unwrap().to_owned())
        .collect()
}

/// Every page of `query` with `limit`, following cursors: the codes, and
/// how many pages there were.
async fn all_pages(s: &Setup, key: &str, query: &str, limit: usize) -> (Vec<String>, usize) {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let q = match &cursor {
            Some(c) => format!("{query}&limit={limit}&cursor={c}"),
            None => format!("{query}&limit={limit}"),
        };
        let (st, v) = list(s, key, &q).await;
        assert_eq!(st, 200, "{q}: {v}");
        pages += 1;
        let links = v["links"].as_array().unwrap();
        out.extend(links.iter().map(|l| l["code"].as_str().unwrap().to_owned()));
        match v["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(links.len(), limit, "a page before the last is full");
                cursor = Some(c.to_owned());
            }
            None => return (out, pages),
        }
        assert!(pages < 100, "pages never end");
    }
}

/// The links of the scenario, in creation order: (code, key that created it).
struct World {
    links: Vec<(String, &'static str)>,
}

impl World {
    /// Codes created by `keys` (in creation order).
    fn by(&self, keys: &[&str]) -> Vec<String> {
        self.links
            .iter()
            .filter(|(_, k)| keys.contains(k))
            .map(|(c, _)| c.clone())
            .collect()
    }
    fn code(&self, i: usize) -> String {
        self.links[i].0.clone()
    }
}

/// Newest first.
fn rev(mut v: Vec<String>) -> Vec<String> {
    v.reverse();
    v
}

async fn populate(s: &Setup) -> World {
    let o = &s.origin;
    let mut links = Vec::new();
    let items: Vec<(&'static str, Value)> = vec![
        (KEY, json!({"url": "https://d.example/1"})),
        (KEY, json!({"url": "https://d.example/abX"})),
        (KEY, json!({"url": "https://d.example/a_b%Y"})),
        (KEY, json!({"url": "https://例え.jp/パス", "kdt_id": 7})),
        (
            M55,
            json!({"url": "https://m.example/1", "domain": "s.shop55.com"}),
        ),
        (
            M55,
            json!({"url": "https://m.example/2", "domain": "s.shop55.com"}),
        ),
        (
            ADMIN,
            json!({"url": "https://a.example/91", "domain": "go.brand91.cn", "kdt_id": 91}),
        ),
        (
            ADMIN,
            json!({"url": "https://a.example/55", "domain": "s.shop55.com", "kdt_id": 55}),
        ),
        (
            OTHER_KEY,
            json!({"url": "https://o.example/1", "domain": "static.shop.com"}),
        ),
        (
            KEY,
            json!({"url": "https://d.example/2", "domain": "static.shop.com"}),
        ),
        (
            M55,
            json!({"url": "https://m.example/3", "domain": "s.shop55.com"}),
        ),
    ];
    for (i, (key, body)) in items.into_iter().enumerate() {
        let (st, v) = o.create_with_key(key, body.clone()).await;
        assert_eq!(st, 201, "{body}: {v}");
        let code = v["code"].as_str().unwrap().to_owned();
        s.sql(&format!(
            "UPDATE short_code SET created_at = {} WHERE code = '{code}'",
            T0 + 60 * i as u64
        ));
        links.push((code, key));
    }
    World { links }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_pages_and_states() {
    let s = setup();
    let w = populate(&s).await;
    let everything = rev(w.by(&[KEY, M55, ADMIN, OTHER_KEY]));
    assert_eq!(everything.len(), 11);

    // Newest first; pages of any size cover everything exactly once, and free
    // pre-generated rows are never listed.
    assert_eq!(codes(&s, ADMIN, "").await, everything);
    for limit in [1, 3, 4, 11, 1000] {
        let (got, pages) = all_pages(&s, ADMIN, "", limit).await;
        assert_eq!(got, everything, "limit {limit}");
        // The last page has no cursor, even when it is full.
        assert_eq!(pages, everything.len().div_ceil(limit), "limit {limit}");
    }
    // The link objects are the read API's.
    let (_, page) = list(&s, ADMIN, "limit=1").await;
    let (_, read, _) = s
        .origin
        .call(
            Method::GET,
            &format!("/api/v1/links/{}", everything[0]),
            ADMIN,
            None,
            &[],
        )
        .await;
    // ... plus the link's total human clicks (none here).
    let mut listed = page["links"][0].clone();
    assert_eq!(listed["clicks"], 0);
    listed.as_object_mut().unwrap().remove("clicks");
    assert_eq!(listed, read);
    assert_eq!(read["created_at"], rfc3339(T0 + 600));

    // Each filter.
    assert_eq!(
        codes(&s, ADMIN, "domain=S.SHOP55.COM").await,
        rev(vec![w.code(4), w.code(5), w.code(7), w.code(10)])
    );
    assert_eq!(codes(&s, ADMIN, "app=demo").await, rev(w.by(&[KEY])));
    assert_eq!(codes(&s, ADMIN, "kdt_id=91").await, vec![w.code(6)]);
    assert_eq!(
        codes(&s, ADMIN, &format!("code={}", w.code(2))).await,
        vec![w.code(2)]
    );
    assert_eq!(codes(&s, ADMIN, "code=nope").await, Vec::<String>::new());
    // url: normalised as in a creation (the stored form is encoded).
    assert_eq!(
        codes(
            &s,
            ADMIN,
            "url=https%3A%2F%2F%E4%BE%8B%E3%81%88.jp%2F%E3%83%91%E3%82%B9"
        )
        .await,
        vec![w.code(3)]
    );
    assert_eq!(
        codes(&s, ADMIN, "url=https://d.example/1").await,
        vec![w.code(0)]
    );
    // url_prefix is byte for byte: `_` and `%` are not wildcards.
    assert_eq!(
        codes(&s, ADMIN, "url_prefix=https://d.example/a_").await,
        vec![w.code(2)]
    );
    assert_eq!(
        codes(&s, ADMIN, "url_prefix=https://d.example/a_b%25").await,
        vec![w.code(2)]
    );
    assert_eq!(
        codes(&s, ADMIN, "url_prefix=https://d.example/a%25").await,
        Vec::<String>::new()
    );
    assert_eq!(
        codes(&s, ADMIN, "url_prefix=https://d.example/").await,
        rev(vec![w.code(0), w.code(1), w.code(2), w.code(9)])
    );
    // created_from is inclusive, created_to exclusive.
    assert_eq!(
        codes(
            &s,
            ADMIN,
            &format!(
                "created_from={}&created_to={}",
                rfc3339(T0 + 120),
                rfc3339(T0 + 300)
            )
        )
        .await,
        rev(vec![w.code(2), w.code(3), w.code(4)])
    );
    // Any offset: 2023-11-14T22:15:20Z is T0 + 120.
    assert_eq!(
        codes(
            &s,
            ADMIN,
            "created_from=2023-11-15T06:15:20%2B08:00&created_to=2023-11-14T22:16:20Z"
        )
        .await,
        vec![w.code(2)]
    );
    // Filters combine.
    assert_eq!(
        codes(&s, ADMIN, "domain=static.shop.com&app=demo").await,
        vec![w.code(9)]
    );

    // States: disable one, delete one, expire one.
    let o = &s.origin;
    assert_eq!(
        o.patch(ADMIN, &w.code(1), json!({"state": "disabled"}))
            .await
            .0,
        200
    );
    assert_eq!(o.delete(ADMIN, &w.code(5)).await.0, 200);
    s.sql(&format!(
        "UPDATE short_code SET expires_at = 1000 WHERE code = '{}'",
        w.code(6)
    ));
    assert_eq!(codes(&s, ADMIN, "state=disabled").await, vec![w.code(1)]);
    assert_eq!(codes(&s, ADMIN, "state=deleted").await, vec![w.code(5)]);
    assert_eq!(codes(&s, ADMIN, "state=expired").await, vec![w.code(6)]);
    let (_, v) = list(&s, ADMIN, "state=expired").await;
    assert_eq!(v["links"][0]["state"], "expired");
    let active: Vec<String> = everything
        .iter()
        .filter(|c| ![w.code(1), w.code(5), w.code(6)].contains(c))
        .cloned()
        .collect();
    assert_eq!(codes(&s, ADMIN, "state=active").await, active);
    // Without a state filter every link is listed, whatever its state.
    assert_eq!(codes(&s, ADMIN, "").await, everything);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_see_only_their_links() {
    let s = setup();
    let w = populate(&s).await;
    // A merchant key: its merchant's links, whichever app created them.
    let kdt55 = rev(vec![w.code(4), w.code(5), w.code(7), w.code(10)]);
    assert_eq!(codes(&s, M55, "").await, kdt55);
    let (got, _) = all_pages(&s, M55, "", 3).await;
    assert_eq!(got, kdt55);
    assert_eq!(
        codes(&s, M55, "kdt_id=55&limit=2").await,
        kdt55[..2].to_vec()
    );
    // Filters naming what it may not see: an empty page, no error.
    assert_eq!(codes(&s, M55, "kdt_id=91").await, Vec::<String>::new());
    assert_eq!(
        codes(&s, M55, "domain=go.brand91.cn").await,
        Vec::<String>::new()
    );
    assert_eq!(
        codes(&s, M55, &format!("code={}", w.code(0))).await,
        Vec::<String>::new()
    );
    // Several merchants: one page merged from both, newest first.
    let both = rev(vec![w.code(4), w.code(5), w.code(6), w.code(7), w.code(10)]);
    assert_eq!(codes(&s, MULTI, "").await, both);
    let (got, pages) = all_pages(&s, MULTI, "", 2).await;
    assert_eq!((got, pages), (both.clone(), 3));
    // A plain key: its app's links only.
    assert_eq!(codes(&s, KEY, "").await, rev(w.by(&[KEY])));
    assert_eq!(codes(&s, KEY, "app=other").await, Vec::<String>::new());
    assert_eq!(codes(&s, KEY, "kdt_id=7").await, vec![w.code(3)]);
    assert_eq!(codes(&s, OTHER_KEY, "").await, vec![w.code(8)]);
    assert_eq!(codes(&s, READER, "").await, Vec::<String>::new());
    // Scopes and keys.
    let (st, v) = list(&s, CREATOR, "").await;
    assert_eq!((st, v["error"].as_str()), (403, Some("insufficient_scope")));
    let (st, v) = list(&s, "nope", "").await;
    assert_eq!((st, v["error"].as_str()), (401, Some("unauthorized")));
}

async fn bad(s: &Setup, q: impl AsRef<str>) {
    let q = q.as_ref();
    let (st, v) = list(s, ADMIN, q).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_cursor")),
        "{q}: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_are_signed_and_bound_to_their_query() {
    let s = setup();
    let w = populate(&s).await;
    let everything = rev(w.by(&[KEY, M55, ADMIN, OTHER_KEY]));
    let (_, v) = list(&s, ADMIN, "limit=4").await;
    let c = v["next_cursor"].as_str().unwrap().to_owned();
    // The page size may change between pages; the filters may not.
    assert_eq!(
        codes(&s, ADMIN, &format!("limit=5&cursor={c}")).await,
        everything[4..9].to_vec()
    );
    bad(&s, format!("domain=sho.rt&cursor={c}")).await;
    bad(&s, format!("limit=4&state=active&cursor={c}")).await;
    // Every changed character is refused.
    for i in 0..c.len() {
        let mut t = c.clone().into_bytes();
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        bad(&s, format!("cursor={}", String::from_utf8(t).unwrap())).await;
    }
    bad(&s, "cursor=x").await;
    bad(&s, format!("cursor={c}{c}")).await;
    // Another key's cursor, even with the same filters.
    let (_, v) = list(&s, KEY, "limit=1").await;
    let demo_cursor = v["next_cursor"].as_str().unwrap().to_owned();
    bad(&s, format!("limit=1&cursor={demo_cursor}")).await;
    let (st, v) = list(&s, KEY, &format!("limit=1&cursor={c}")).await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_cursor")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_queries_are_400_and_name_the_parameter() {
    let s = setup();
    for (q, kind) in [
        ("limit=0", "invalid_limit"),
        ("limit=1001", "invalid_limit"),
        ("limit=ten", "invalid_limit"),
        ("state=gone", "invalid_state"),
        ("kdt_id=-1", "invalid_kdt_id"),
        ("created_from=yesterday", "invalid_date"),
        ("created_to=2026-02-30T00:00:00Z", "invalid_date"),
        ("domain=a%20b", "invalid_domain"),
        ("app=", "invalid_app"),
        ("code=a", "invalid_code"),
        ("url=ftp://x.example/", "invalid_url"),
        ("url_prefix=", "invalid_url"),
        ("colour=red", "invalid_query"),
        ("state=active&state=disabled", "invalid_query"),
        ("cursor=", "invalid_cursor"),
    ] {
        let (st, v) = list(&s, ADMIN, q).await;
        assert_eq!((st, v["error"].as_str()), (400, Some(kind)), "{q}: {v}");
    }
    // Other methods on the collection.
    let (st, _, h) = s
        .origin
        .call(Method::PUT, "/api/v1/links", ADMIN, None, &[])
        .await;
    assert_eq!((st, h["allow"].to_str().unwrap()), (405, "GET, HEAD, POST"));
}

/// `GET /api/v1/export/links` as `key`: status, content type, body.
async fn export(s: &Setup, key: &str, query: &str) -> (u16, String, String) {
    let o = &s.origin;
    let r = o
        .http
        .get(o.url(&format!("/api/v1/export/links?{query}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
    if st == 200 {
        let cd = r.headers()["content-disposition"].to_str().unwrap();
        assert!(cd.starts_with("attachment; filename=\"links-"), "{cd}");
    }
    (st, ct, r.text().await.unwrap())
}

const CSV_HEADER: &str =
    "short_url,code,domain,url,state,version,app,kdt_id,created_at,updated_at,expires_at,clicks,tags";

/// The codes of a CSV export of untagged links (asserting its header and 13 columns).
fn csv_codes(body: &str) -> Vec<String> {
    let mut lines = body.split("\r\n");
    assert_eq!(lines.next(), Some(CSV_HEADER));
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            // Untagged links: no quoted field holds a comma.
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 13, "{l}");
            f[1].to_owned()
        })
        .collect()
}

/// Export (issue 28): every link the caller may see, in the search's
/// order, as CSV or NDJSON; across pages of 1,000 with creation times
/// that tie; the search's tenancy and validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_stream_every_visible_link_as_csv_or_ndjson() {
    let s = setup();
    let w = populate(&s).await;
    let both = rev(vec![w.code(4), w.code(5), w.code(6), w.code(7), w.code(10)]);
    let (st, ct, body) = export(&s, MULTI, "").await;
    assert_eq!((st, ct.as_str()), (200, "text/csv; charset=utf-8"));
    assert_eq!(csv_codes(&body), both);
    assert!(
        body.contains(",https://m.example/3,active,1,merchant55,55,"),
        "{body}"
    );
    // NDJSON: the search's link objects, one a line.
    let (st, ct, body) = export(&s, KEY, "format=ndjson&domain=static.shop.com").await;
    assert_eq!((st, ct.as_str()), (200, "application/x-ndjson"));
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{body}");
    assert_eq!(lines[0]["code"], w.code(9).as_str());
    assert_eq!(lines[0]["clicks"], 0);
    // Filters naming what the caller may not see: a header and nothing else.
    assert_eq!(
        csv_codes(&export(&s, M55, "kdt_id=91").await.2),
        Vec::<String>::new()
    );
    assert_eq!(
        export(&s, OTHER_KEY, "format=ndjson")
            .await
            .2
            .lines()
            .count(),
        1
    );
    // Past one page: 2,100 more links of one app, created in the same
    // seconds (ties on created_at broken by id), each exactly once.
    for batch in 0..3 {
        let items: Vec<Value> = (0..700)
            .map(|i| json!({"url": format!("https://bulk.example/{batch}/{i}")}))
            .collect();
        let (st, v, _) = s
            .origin
            .call(
                Method::POST,
                "/api/v1/links/batch",
                KEY,
                Some(json!({"links": items})),
                &[],
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let (_, _, body) = export(&s, KEY, "").await;
    let got = csv_codes(&body);
    let mut unique = got.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        (got.len(), unique.len()),
        (2_100 + w.by(&[KEY]).len(), got.len())
    );
    let (everything, _) = all_pages(&s, KEY, "", 1000).await;
    assert_eq!(got, everything, "the search's order");
    // Validation and scopes as the search's.
    for (q, kind) in [
        ("format=xml", "invalid_format"),
        ("limit=5", "invalid_query"),
        ("state=gone", "invalid_state"),
    ] {
        let (st, v, _) = s
            .origin
            .call(
                Method::GET,
                &format!("/api/v1/export/links?{q}"),
                ADMIN,
                None,
                &[],
            )
            .await;
        assert_eq!((st, v["error"].as_str()), (400, Some(kind)), "{q}");
    }
    let (st, v, _) = s
        .origin
        .call(Method::GET, "/api/v1/export/links", CREATOR, None, &[])
        .await;
    assert_eq!((st, v["error"].as_str()), (403, Some("insufficient_scope")));
}

/// Tags (issue 28 item 4): set at creation (trimmed, repeats folded, in
/// their order), replaced or cleared by an edit, in the history, a search and export filter that is exact and keeps to
/// the caller's tenancy, part of what makes a creation a duplicate; bad
/// lists are 400 `invalid_tags`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_are_set_edited_filtered_and_exported() {
    let s = setup();
    let o = &s.origin;
    let sr = &s;
    let create = |key: &'static str, body: Value| async move {
        let (st, v) = sr.origin.create_with_key(key, body).await;
        assert_eq!(st, 201, "{v}");
        v
    };
    let a = create(
        KEY,
        json!({"url": "https://t.example/a", "tags": [" spring ", "Sale", "spring"]}),
    )
    .await;
    assert_eq!(a["tags"], json!(["spring", "Sale"]));
    let b = create(
        KEY,
        json!({"url": "https://t.example/b", "tags": ["spring"]}),
    )
    .await;
    let c = create(KEY, json!({"url": "https://t.example/c"})).await;
    assert_eq!(c["tags"], json!([]));
    let d = create(
        M55,
        json!({"url": "https://t.example/d", "domain": "s.shop55.com", "tags": ["spring"]}),
    )
    .await;
    let code = |v: &Value| v["code"].as_str().unwrap().to_owned();
    let (a, b, c, d) = (code(&a), code(&b), code(&c), code(&d));
    // Exact, newest first, only what the caller may see.
    assert_eq!(codes(&s, KEY, "tag=spring").await, [b.clone(), a.clone()]);
    assert_eq!(codes(&s, KEY, "tag=Sale").await, [a.as_str()]);
    assert_eq!(codes(&s, KEY, "tag=sale").await, Vec::<String>::new());
    assert_eq!(codes(&s, M55, "tag=spring").await, [d.as_str()]);
    assert_eq!(
        codes(&s, ADMIN, "tag=spring&state=active").await,
        [d.clone(), b.clone(), a.clone()]
    );
    // Pages of one keep the filter (the cursor is bound to it).
    assert_eq!(
        all_pages(&s, ADMIN, "tag=spring", 1).await,
        (vec![d.clone(), b.clone(), a.clone()], 3)
    );
    // An identical creation is a duplicate only with the same tags.
    let (st, again) = o
        .create_with_key(KEY, json!({"url": "https://t.example/c"}))
        .await;
    assert_eq!(
        (st, code(&again), &again["deduplicated"]),
        (200, c.clone(), &json!(true))
    );
    let tagged = create(KEY, json!({"url": "https://t.example/c", "tags": ["x"]})).await;
    assert_eq!(tagged["deduplicated"], json!(false));
    assert_ne!(code(&tagged), c);
    // An edit replaces them (a new version, in the history), `[]` clears.
    let patch = |key: &'static str, code: String, body: Value| async move {
        sr.origin.patch(key, &code, body).await
    };
    let (st, v) = patch(KEY, a.clone(), json!({"tags": ["autumn", "Sale"]})).await;
    assert_eq!(
        (st, &v["tags"], &v["version"]),
        (200, &json!(["autumn", "Sale"]), &json!(2)),
        "{v}"
    );
    assert_eq!(codes(&s, KEY, "tag=spring").await, [b.as_str()]);
    assert_eq!(codes(&s, KEY, "tag=autumn").await, [a.as_str()]);
    let (st, h, _) = o
        .call(
            Method::GET,
            &format!("/api/v1/links/{a}/history"),
            KEY,
            None,
            &[],
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(
        h["history"][0]["before"]["tags"],
        json!(["spring", "Sale"]),
        "{h}"
    );
    assert_eq!(h["history"][0]["after"]["tags"], json!(["autumn", "Sale"]));
    let (st, v) = patch(KEY, b.clone(), json!({"tags": []})).await;
    assert_eq!((st, &v["tags"]), (200, &json!([])), "{v}");
    // The same tags again change nothing (no new version).
    let (st, v) = patch(KEY, a.clone(), json!({"tags": ["autumn", "Sale"]})).await;
    assert_eq!((st, &v["version"]), (200, &json!(2)), "{v}");
    // Another tenant's link stays out of reach: the unknown-code 404.
    let (st, _) = patch(KEY, d.clone(), json!({"tags": ["mine"]})).await;
    assert_eq!(st, 404);
    // Bad lists and filters.
    let many: Vec<String> = (0..21).map(|i| format!("t{i}")).collect();
    for body in [
        json!({"url": "https://t.example/e", "tags": "spring"}),
        json!({"url": "https://t.example/e", "tags": [1]}),
        json!({"url": "https://t.example/e", "tags": ["a,b"]}),
        json!({"url": "https://t.example/e", "tags": [""]}),
        json!({"url": "https://t.example/e", "tags": ["x".repeat(51)]}),
        json!({"url": "https://t.example/e", "tags": many}),
    ] {
        let (st, v) = o.create_with_key(KEY, body.clone()).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (400, Some("invalid_tags")),
            "{body}"
        );
    }
    let (st, v) = patch(KEY, a.clone(), json!({"tags": ["\u{1}"]})).await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid_tags")));
    for q in ["tag=", "tag=a%2Cb"] {
        let (st, v) = list(&s, KEY, q).await;
        assert_eq!(
            (st, v["error"].as_str()),
            (400, Some("invalid_tags")),
            "{q}"
        );
    }
    // The export filters the same and carries them, one quoted field.
    let (st, _, body) = export(&s, KEY, "tag=Sale").await;
    assert_eq!(st, 200);
    let lines: Vec<&str> = body.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 2, "{body}");
    assert_eq!(lines[0], CSV_HEADER);
    assert!(lines[1].contains(&format!(",{a},")), "{body}");
    assert!(lines[1].ends_with(",0,\"autumn,Sale\""), "{body}");
    let (_, _, body) = export(&s, ADMIN, "tag=spring&format=ndjson").await;
    let got: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 1, "{body}");
    assert_eq!((code(&got[0]), &got[0]["tags"]), (d, &json!(["spring"])));
}
