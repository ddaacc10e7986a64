use super::metrics::PagesMetrics;
use super::store::PageStore;
use super::*;
use pingora_cache::storage::Storage;
use pingora_cache::trace::Span;

fn metrics() -> PagesMetrics {
    match PagesMetrics::new() {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    }
}

fn store(max: usize) -> &'static PageStore {
    Box::leak(Box::new(PageStore::new(max, max / 2, metrics())))
}

fn meta(ttl: u64) -> CacheMeta {
    let mut h = match ResponseHeader::build(200, None) {
        Ok(h) => h,
        Err(e) => panic!("{e}"),
    };
    let _ = h.insert_header("Cache-Control", format!("public, max-age={ttl}"));
    let now = SystemTime::now();
    CacheMeta::new(now + Duration::from_secs(ttl), now, 0, 60, h)
}

fn k(host: &str, kind: PageKind, code: &str, q: Option<&str>) -> CacheKey {
    match key(host, kind, code, q) {
        Some(k) => k,
        None => panic!("no key for {host} {code} {q:?}"),
    }
}

async fn fill(s: &'static PageStore, key: &CacheKey, body: &[u8]) {
    let span = Span::inactive().handle();
    let mut m = match s.get_miss_handler(key, &meta(60), &span).await {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    };
    let half = body.len() / 2;
    for (chunk, eof) in [(&body[..half], false), (&body[half..], true)] {
        if let Err(e) = m.write_body(Bytes::copy_from_slice(chunk), eof).await {
            panic!("{e}");
        }
    }
    if let Err(e) = m.finish().await {
        panic!("{e}");
    }
}

async fn body_of(s: &'static PageStore, key: &CacheKey) -> Option<Vec<u8>> {
    let span = Span::inactive().handle();
    let (_, mut hit) = match s.lookup(key, &span).await {
        Ok(found) => found?,
        Err(e) => panic!("{e}"),
    };
    let mut out = Vec::new();
    while let Ok(Some(b)) = hit.read_body().await {
        out.extend_from_slice(&b);
    }
    Some(out)
}

use bytes::Bytes;

#[test]
fn keys_normalise_host_and_parameters() {
    let a = k("S.Shop55.com:8080", PageKind::Png, "abc123", None);
    let b = k(
        "s.shop55.com.",
        PageKind::Png,
        "abc123",
        Some("size=256&utm=x"),
    );
    let c = k(
        "s.shop55.com",
        PageKind::Png,
        "abc123",
        Some("margin=4&size=256"),
    );
    assert_eq!(a.primary_key(), b.primary_key());
    assert_eq!(a.primary_key(), c.primary_key());
    assert_eq!(a.user_tag, "abc123");
    let others = [
        k("s.shop55.com", PageKind::Svg, "abc123", None),
        k("s.shop55.com", PageKind::Png, "abc123", Some("size=128")),
        k("s.shop55.com", PageKind::Png, "abc123", Some("margin=0")),
        k("other.com", PageKind::Png, "abc123", None),
        k("s.shop55.com", PageKind::Png, "abc124", None),
        k("s.shop55.com", PageKind::Preview, "abc123", None),
    ];
    for o in &others {
        assert_ne!(a.primary_key(), o.primary_key());
    }
    // Previews ignore the query, as the origin does.
    assert_eq!(
        k("s.shop55.com", PageKind::Preview, "abc123", Some("x=1")).primary_key(),
        others[5].primary_key()
    );
    // What the origin refuses is never cached.
    assert!(key("s.shop55.com", PageKind::Svg, "abc123", Some("size=9999")).is_none());
    assert!(key("s.shop55.com", PageKind::Svg, "abc123", Some("margin=x")).is_none());
    assert!(key("bad host!", PageKind::Svg, "abc123", None).is_none());
}

#[tokio::test]
async fn store_serves_what_it_filled_and_evicts_by_bytes() {
    let s = store(64 * 1024);
    let body = vec![7u8; 10_000];
    let keys: Vec<CacheKey> = (0..8)
        .map(|i| k("a.com", PageKind::Png, &format!("code{i}"), None))
        .collect();
    fill(s, &keys[0], &body).await;
    assert_eq!(body_of(s, &keys[0]).await.as_deref(), Some(&body[..]));
    for key in &keys[1..] {
        fill(s, key, &body).await;
        // Touch the first so it stays the most recently used.
        assert!(body_of(s, &keys[0]).await.is_some());
    }
    assert!(s.bytes() <= 64 * 1024, "{} bytes", s.bytes());
    // Eight 10 kB bodies do not fit in 64 kB: the oldest untouched went.
    assert_eq!(s.entries(), 6, "{} entries", s.entries());
    assert!(body_of(s, &keys[0]).await.is_some());
    assert!(body_of(s, &keys[1]).await.is_none());
    assert!(body_of(s, &keys[2]).await.is_none());
    assert!(body_of(s, &keys[7]).await.is_some());
    // Over max_entry_bytes (half the budget here): passed through, not kept.
    let big = k("a.com", PageKind::Svg, "bigone", None);
    fill(s, &big, &vec![1u8; 40_000]).await;
    assert!(body_of(s, &big).await.is_none());
}

#[tokio::test]
async fn purge_removes_every_variant_of_a_code_only() {
    let s = store(1 << 20);
    let variants = [
        k("a.com", PageKind::Png, "abc123", None),
        k("a.com", PageKind::Png, "abc123", Some("size=128")),
        k("a.com", PageKind::Svg, "abc123", None),
        k("b.com", PageKind::Preview, "abc123", None),
    ];
    let other = k("a.com", PageKind::Png, "zzz999", None);
    for v in variants.iter().chain([&other]) {
        fill(s, v, b"page").await;
    }
    assert_eq!(s.entries(), 5);
    assert_eq!(s.purge_code("abc123"), 4);
    for v in &variants {
        assert!(body_of(s, v).await.is_none());
    }
    assert!(body_of(s, &other).await.is_some());
    assert_eq!(s.purge_code("abc123"), 0);
    assert_eq!(s.clear(), 1);
    assert_eq!((s.entries(), s.bytes()), (0, 0));
}

#[tokio::test]
async fn a_fill_that_started_before_a_purge_is_not_stored() {
    let s = store(1 << 20);
    let span = Span::inactive().handle();
    let key = k("a.com", PageKind::Png, "abc123", None);
    let other = k("a.com", PageKind::Png, "zzz999", None);
    for (purge, expect_stored) in [
        (Some("abc123"), false),
        (Some("zzz999"), true),
        (None, false),
    ] {
        let mut m = match s.get_miss_handler(&key, &meta(60), &span).await {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        match purge {
            Some(code) => {
                s.purge_code(code);
            }
            None => {
                s.clear();
            }
        }
        if let Err(e) = m.write_body(Bytes::from_static(b"old"), true).await {
            panic!("{e}");
        }
        if let Err(e) = m.finish().await {
            panic!("{e}");
        }
        assert_eq!(body_of(s, &key).await.is_some(), expect_stored, "{purge:?}");
        let _ = body_of(s, &other).await;
    }
}

/// A burst of invalidations keeps the purge memory bounded, at O(1) a
/// message; a fill that started before a purge forgotten early is still
/// discarded.
#[tokio::test]
async fn a_burst_of_purges_stays_bounded_and_safe() {
    use super::store::MAX_PURGES_REMEMBERED;
    let s = store(1 << 20);
    let span = Span::inactive().handle();
    let key = k("a.com", PageKind::Png, "abc123", None);
    let mut m = match s.get_miss_handler(&key, &meta(60), &span).await {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    };
    s.purge_code("abc123");
    for i in 0..MAX_PURGES_REMEMBERED + 10 {
        s.purge_code(&format!("c{i:07}"));
    }
    assert_eq!(s.purges_remembered(), MAX_PURGES_REMEMBERED);
    if let Err(e) = m.write_body(Bytes::from_static(b"old"), true).await {
        panic!("{e}");
    }
    if let Err(e) = m.finish().await {
        panic!("{e}");
    }
    assert!(body_of(s, &key).await.is_none(), "a purged fill came back");
    // A fill that starts now is stored.
    fill(s, &key, b"new").await;
    assert!(body_of(s, &key).await.is_some());
}

#[test]
fn only_fresh_public_200s_are_kept() {
    let cfg = crate::config::PagesCacheConfig {
        max_bytes: 1 << 20,
        max_entry_bytes: 1 << 16,
        stale_if_error: Duration::from_secs(3600),
        lock_timeout: Duration::from_secs(1),
    };
    let cache = match PageCache::leak(&cfg) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let resp = |status: u16, headers: &[(&'static str, &str)]| {
        let mut h = match ResponseHeader::build(status, None) {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        };
        for (n, v) in headers {
            let _ = h.insert_header(*n, v.to_string());
        }
        h
    };
    let kept = |r: &ResponseHeader| match cache.cacheable(r) {
        RespCacheable::Cacheable(m) => Some((m.fresh_sec(), m.stale_if_error_sec())),
        RespCacheable::Uncacheable(_) => None,
    };
    assert_eq!(
        kept(&resp(200, &[("Cache-Control", "public, max-age=86400")])),
        Some((86_400, 3600))
    );
    assert_eq!(
        kept(&resp(200, &[("Cache-Control", "max-age=60, s-maxage=30")])),
        Some((30, 3600))
    );
    for refused in [
        resp(404, &[("Cache-Control", "public, max-age=60")]),
        resp(200, &[]),
        resp(200, &[("Cache-Control", "no-store, max-age=60")]),
        resp(200, &[("Cache-Control", "private, max-age=60")]),
        resp(200, &[("Cache-Control", "no-cache")]),
        resp(200, &[("Cache-Control", "max-age=0")]),
        resp(200, &[("Cache-Control", "max-age=60"), ("Vary", "Accept")]),
        resp(
            200,
            &[("Cache-Control", "max-age=60"), ("Set-Cookie", "a=b")],
        ),
    ] {
        assert_eq!(kept(&refused), None, "{refused:?}");
    }
}
