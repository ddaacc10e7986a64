use super::*;
use crate::cache::{Invalidated, Stored};
use shorturl_common::record::Record;

/// What the shards hold, recounted from scratch (tests).
#[derive(Debug, PartialEq, Eq)]
struct Audit {
    /// Sum of the weights of the entries linked in the queues.
    weights: usize,
    /// Entries linked in the queues.
    linked: usize,
    /// Entries in the tables.
    indexed: usize,
    /// Slot arrays and ghost filters.
    overhead: usize,
}

impl LocalCache {
    fn with_fixed_hash(max_bytes: usize, hash: u64) -> Self {
        LocalCache {
            fixed_hash: Some(hash),
            ..LocalCache::new(max_bytes)
        }
    }

    fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// True when `code` is physically in its shard's table (readable or not).
    fn holds(&self, key: Key<'_>) -> bool {
        let hash = self.hash(key);
        let guard = epoch::pin();
        self.shard(hash).table.find(hash, key, &guard).is_some()
    }

    fn audit(&self) -> Audit {
        let guard = epoch::pin();
        let mut a = Audit {
            weights: 0,
            linked: 0,
            indexed: 0,
            overhead: 0,
        };
        for s in self.shards.iter() {
            let st = s.lock();
            let st = &st.policy;
            let (w, n) = st.weights(&guard);
            a.weights += w;
            a.linked += n;
            a.indexed += st.len();
            a.overhead += st.overhead();
            assert!(st.bytes() <= st.budget(), "shard over its budget");
        }
        a
    }
}

/// The test key of `code`: on `a.com`, the domain of the records here.
fn k(code: &str) -> Key<'_> {
    Key {
        domain: "a.com",
        code,
    }
}

const MIN: Duration = Duration::from_secs(60);

fn rec(url: &str) -> Answer {
    Answer::Found(Arc::new(Record {
        version: 1,
        expires_at: u64::MAX,
        domain: "a.com".into(),
        url: url.into(),
        options: None,
    }))
}

fn url_of(c: &LocalCache, code: &str) -> Option<String> {
    let e = c.get(k(code), Instant::now())?;
    match e.answer() {
        AnswerRef::Found(r) => Some(r.url.to_owned()),
        other => Some(format!("{other:?}")),
    }
}

/// The cache's own totals agree with a recount of what it links.
fn assert_consistent(c: &LocalCache, max_bytes: usize) {
    let a = c.audit();
    assert_eq!(a.linked, a.indexed, "queues and tables disagree: {a:?}");
    assert_eq!(c.len(), a.indexed, "len() vs recount: {a:?}");
    assert_eq!(
        c.bytes(),
        a.weights + a.overhead,
        "bytes() vs recount: {a:?}"
    );
    assert!(
        c.bytes() <= max_bytes,
        "{} bytes held, budget {max_bytes}",
        c.bytes()
    );
}

#[test]
fn get_put_and_ttl() {
    let c = LocalCache::new(1 << 20);
    let now = Instant::now();
    assert!(c.get(k("abcdef"), now).is_none());
    c.put(k("abcdef"), rec("https://x/1"), Duration::from_secs(30));
    c.put(k("gone00"), Answer::Negative(0), Duration::from_millis(1));
    assert_eq!(url_of(&c, "abcdef").as_deref(), Some("https://x/1"));
    assert!(
        c.get(k("gone00"), Instant::now() + Duration::from_millis(5))
            .is_none(),
        "stale entry served"
    );
    // Case matters.
    assert!(c.get(k("ABCDEF"), Instant::now()).is_none());
}

#[test]
fn ttl_is_per_entry() {
    let c = LocalCache::new(1 << 20);
    let t0 = Instant::now();
    c.put(k("short0"), rec("https://x/s"), Duration::from_secs(5));
    c.put(k("long00"), rec("https://x/l"), Duration::from_secs(50));
    c.put(k("unav00"), Answer::Unavailable, Duration::from_secs(1));
    let at = |s| t0 + Duration::from_secs(s);
    assert!(c.get(k("unav00"), at(0)).is_some());
    assert!(c.get(k("unav00"), at(2)).is_none());
    assert!(c.get(k("short0"), at(4)).is_some());
    assert!(c.get(k("short0"), at(6)).is_none());
    assert!(c.get(k("long00"), at(6)).is_some());
    assert!(c.get(k("long00"), at(51)).is_none());
    // A zero TTL caches nothing.
    c.put(k("zero00"), rec("https://x/z"), Duration::ZERO);
    assert!(c.get(k("zero00"), t0).is_none());
    assert_eq!(c.len(), 3);
}

#[test]
fn an_empty_cache_costs_little_whatever_its_budget() {
    for max in [4096, 64 << 20, 1 << 30, 16 << 30] {
        let c = LocalCache::new(max);
        assert!(c.is_empty());
        // One 128-byte slot array per shard (at most 256 shards), nothing
        // sized from the budget.
        assert_eq!(c.bytes(), c.shard_count() * 128, "max_bytes {max}");
        assert!(c.bytes() <= 32 << 10);
        assert_consistent(&c, max);
    }
}

#[test]
fn an_entry_is_charged_what_it_occupies() {
    let c = LocalCache::new(1 << 20);
    let before = c.bytes();
    let url = format!("https://shop.example.com/p/{}", "x".repeat(80));
    c.put(k("abc123"), rec(&url), MIN);
    let e = match c.get(k("abc123"), Instant::now()) {
        Some(e) => e,
        None => panic!("not cached"),
    };
    let want = allocation_size(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Entry>())
        + allocation_size(6 + "a.com".len() + url.len());
    assert_eq!(e.weight(), want);
    assert_eq!(c.bytes() - before, want);
    // The Arc block stays small: counts, fixed fields, two links, the
    // options pointer (issue 25: one word, `None` for a plain link), the
    // bots' four-byte tally (issue 27). At 96 bytes it measured 14 bytes
    // more RSS per entry (`loadtest/memory`, session 25).
    assert!(
        std::mem::size_of::<Entry>() <= 88,
        "{}",
        std::mem::size_of::<Entry>()
    );
    // A negative entry is charged for its key, code and domain.
    c.put(k("gone00"), Answer::Negative(0), MIN);
    assert_eq!(
        c.bytes() - before - want,
        allocation_size(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Entry>())
            + allocation_size(6 + "a.com".len())
    );
}

#[test]
fn weights_add_up_to_what_the_cache_reports() {
    let max = 256 << 10;
    let c = LocalCache::new(max);
    for round in 0..6u32 {
        for i in 0..3000u32 {
            let code = format!("c{:05}", (i * 7 + round * 13) % 4000);
            match i % 5 {
                0 => c.put(k(&code), Answer::Negative(0), MIN),
                1 => c.put(k(&code), Answer::Unavailable, MIN),
                2 => {
                    c.remove(k(&code));
                }
                _ => c.put(
                    k(&code),
                    rec(&format!(
                        "https://x/{code}/{}",
                        "u".repeat((i % 300) as usize)
                    )),
                    MIN,
                ),
            }
        }
        assert_consistent(&c, max);
    }
    assert!(c.evictions() > 0, "the budget was never reached");
    assert!(
        c.bytes() > max * 8 / 10,
        "a full cache uses its budget: {}",
        c.bytes()
    );
}

#[test]
fn eviction_keeps_the_bound() {
    // 64 KiB with ~2.1 KiB entries holds a few dozen, not thousands.
    let max = 64 << 10;
    let c = LocalCache::new(max);
    let url = format!("https://x/{}", "a".repeat(2000));
    for i in 0..2000 {
        c.put(k(&format!("code{i:04}")), rec(&url), MIN);
        assert!(c.bytes() <= max);
    }
    let now = Instant::now();
    let kept = (0..2000)
        .filter(|i| c.get(k(&format!("code{i:04}")), now).is_some())
        .count();
    assert_eq!(kept, c.len());
    let w = allocation_size(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Entry>())
        + allocation_size(8 + 5 + url.len());
    assert!(
        kept <= max / w && kept >= max / w - 2,
        "kept {kept} entries of {w} bytes in {max}"
    );
    assert_eq!(c.evictions(), 2000 - kept as u64);
    assert_consistent(&c, max);
}

#[test]
fn colliding_codes_never_answer_for_each_other() {
    let c = LocalCache::with_fixed_hash(1 << 20, 0xdead_beef_dead_beef);
    c.put(k("aaaaaa"), rec("https://x/a"), MIN);
    c.put(k("bbbbbb"), rec("https://x/b"), MIN);
    c.put(k("cccccc"), Answer::Negative(0), MIN);
    assert_eq!(url_of(&c, "aaaaaa").as_deref(), Some("https://x/a"));
    assert_eq!(url_of(&c, "bbbbbb").as_deref(), Some("https://x/b"));
    assert_eq!(url_of(&c, "cccccc").as_deref(), Some("Negative(0)"));
    assert!(c.get(k("dddddd"), Instant::now()).is_none());
    // Removing one leaves the probe chain intact for the others.
    assert!(c.remove(k("aaaaaa")));
    assert!(c.get(k("aaaaaa"), Instant::now()).is_none());
    assert_eq!(url_of(&c, "bbbbbb").as_deref(), Some("https://x/b"));
    assert_eq!(url_of(&c, "cccccc").as_deref(), Some("Negative(0)"));
    // Many colliding codes: all found, each with its own answer.
    for i in 0..200 {
        c.put(k(&format!("k{i:05}")), rec(&format!("https://x/{i}")), MIN);
    }
    for i in 0..200 {
        assert_eq!(
            url_of(&c, &format!("k{i:05}")),
            Some(format!("https://x/{i}"))
        );
    }
    assert_consistent(&c, 1 << 20);
}

/// 150 links read a few times each, then a long scan of unknown codes.
fn scan_after_hot_set(read_each_unknown: bool) {
    let max = 256 << 10;
    let c = LocalCache::new(max);
    assert_eq!(c.shard_count(), 1);
    let hot: Vec<String> = (0..150).map(|i| format!("hot{i:03}")).collect();
    for code in &hot {
        c.put(
            k(code),
            rec(&format!("https://x/{code}/{}", "p".repeat(100))),
            MIN,
        );
    }
    for _ in 0..3 {
        for code in &hot {
            assert!(c.get(k(code), Instant::now()).is_some());
        }
    }
    let evicted = c.evictions();
    // 40,000 unknown codes: about 20 times what the cache can hold.
    for i in 0..40_000 {
        let code = format!("n{i:05}");
        c.put(k(&code), Answer::Negative(0), Duration::from_secs(5));
        if read_each_unknown {
            for _ in 0..3 {
                let _ = c.get(k(&code), Instant::now());
            }
        }
        if i % 500 == 0 {
            for code in hot.iter().take(5) {
                let _ = c.get(k(code), Instant::now());
            }
        }
    }
    assert!(
        c.evictions() - evicted > 30_000,
        "the scan did not fill the cache"
    );
    for code in &hot {
        assert!(
            c.get(k(code), Instant::now()).is_some(),
            "{code} was flushed by a scan of unknown codes"
        );
    }
    // And a new link is admitted at once, scan or not.
    c.put(k("fresh0"), rec("https://x/fresh"), MIN);
    assert_eq!(url_of(&c, "fresh0").as_deref(), Some("https://x/fresh"));
    assert_consistent(&c, max);
}

#[test]
fn a_scan_of_unknown_codes_does_not_flush_the_hot_set() {
    scan_after_hot_set(false);
}

#[test]
fn unknown_codes_read_repeatedly_do_not_flush_it_either() {
    scan_after_hot_set(true);
}

#[test]
fn links_are_always_admitted() {
    // A tiny cache full of read links: a new link still gets in.
    let max = 16 << 10;
    let c = LocalCache::new(max);
    for i in 0..200 {
        let code = format!("l{i:05}");
        c.put(k(&code), rec(&format!("https://x/{i}")), MIN);
        for _ in 0..3 {
            let _ = c.get(k(&code), Instant::now());
        }
        assert!(url_of(&c, &code).is_some(), "{code} not admitted");
    }
    assert!(c.evictions() > 0);
    assert_consistent(&c, max);
}

#[test]
fn remove_drops_the_entry_and_its_bytes() {
    let c = LocalCache::new(1 << 20);
    let empty = c.bytes();
    c.put(k("abcdef"), rec("https://x/1"), MIN);
    c.put(k("other0"), rec("https://x/2"), MIN);
    let both = c.bytes();
    assert!(c.remove(k("abcdef")));
    assert!(c.get(k("abcdef"), Instant::now()).is_none());
    assert_eq!(url_of(&c, "other0").as_deref(), Some("https://x/2"));
    assert!(!c.remove(k("abcdef")), "removed twice");
    assert!(!c.remove(k("never0")));
    assert_eq!(c.len(), 1);
    assert!(c.remove(k("other0")));
    assert_eq!(c.bytes(), empty);
    assert!(both > empty);
    assert!(c.is_empty());
    assert_consistent(&c, 1 << 20);
}

#[test]
fn put_replaces_the_entry_for_a_code() {
    let c = LocalCache::new(1 << 20);
    let empty = c.bytes();
    c.put(k("abcdef"), rec("https://x/old"), MIN);
    c.put(k("abcdef"), rec("https://x/new/longer"), MIN);
    assert_eq!(
        url_of(&c, "abcdef").as_deref(),
        Some("https://x/new/longer")
    );
    assert_eq!(c.len(), 1);
    let w = match c.get(k("abcdef"), Instant::now()) {
        Some(e) => e.weight(),
        None => panic!("gone"),
    };
    assert_eq!(c.bytes(), empty + w);
    // A negative answer replaces a link too.
    c.put(k("abcdef"), Answer::Negative(0), MIN);
    assert_eq!(url_of(&c, "abcdef").as_deref(), Some("Negative(0)"));
    // An answer too large to cache drops the old one rather than keep it.
    c.put(k("abcdef"), rec(&"u".repeat(2 << 20)), MIN);
    assert!(c.get(k("abcdef"), Instant::now()).is_none());
    assert_consistent(&c, 1 << 20);
}

#[test]
fn a_reader_keeps_its_entry_after_it_leaves_the_cache() {
    let c = LocalCache::new(4096);
    c.put(k("keep00"), rec("https://x/keep"), MIN);
    let held = match c.get(k("keep00"), Instant::now()) {
        Some(e) => e,
        None => panic!("not cached"),
    };
    c.put(k("keep00"), rec("https://x/replaced"), MIN);
    assert!(c.remove(k("keep00")));
    for i in 0..100 {
        c.put(k(&format!("f{i:05}")), rec("https://x/filler"), MIN);
        // Let the epoch run the deferred frees.
        epoch::pin().flush();
    }
    assert!(c.get(k("keep00"), Instant::now()).is_none());
    assert_eq!(held.code(), "keep00");
    assert!(matches!(held.answer(), AnswerRef::Found(r) if r.url == "https://x/keep"));
}

#[test]
fn concurrent_readers_and_writers_stay_consistent() {
    let max = 48 << 10;
    let c = Arc::new(LocalCache::new(max));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..40_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let code = format!("k{:04}", x % 600);
                    match x % 10 {
                        0 => {
                            c.remove(k(&code));
                        }
                        1 | 2 => c.put(k(&code), rec(&format!("https://x/{code}")), MIN),
                        3 => c.put(k(&code), Answer::Negative(0), MIN),
                        _ => {
                            if let Some(e) = c.get(k(&code), Instant::now()) {
                                assert_eq!(e.code(), code);
                                if let AnswerRef::Found(r) = e.answer() {
                                    assert_eq!(r.url, format!("https://x/{code}"));
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        if t.join().is_err() {
            panic!("a thread panicked");
        }
    }
    assert_consistent(&c, max);
}

fn rec_v(url: &str, version: u64) -> Answer {
    Answer::Found(Arc::new(Record {
        version,
        expires_at: u64::MAX,
        domain: "a.com".into(),
        url: url.into(),
        options: None,
    }))
}

const KEEP: Duration = Duration::from_secs(10);

#[test]
fn an_invalidation_drops_only_older_entries() {
    let c = LocalCache::new(1 << 20);
    c.put(k("older0"), rec_v("https://x/1", 1), MIN);
    c.put(k("newer0"), rec_v("https://x/3", 3), MIN);
    c.put(k("negat0"), Answer::Negative(1), MIN);
    c.put(k("unava0"), Answer::Unavailable, MIN);
    assert_eq!(c.invalidate(k("older0"), 2, KEEP), Invalidated::Dropped);
    assert!(c.get(k("older0"), Instant::now()).is_none());
    // Already at that version or later: kept (a message can be late or
    // repeated).
    assert_eq!(c.invalidate(k("newer0"), 3, KEEP), Invalidated::Current);
    assert_eq!(c.invalidate(k("newer0"), 2, KEEP), Invalidated::Current);
    assert_eq!(url_of(&c, "newer0").as_deref(), Some("https://x/3"));
    // A negative carries its version too; a failed lookup has none.
    assert_eq!(c.invalidate(k("negat0"), 1, KEEP), Invalidated::Current);
    assert_eq!(c.invalidate(k("negat0"), 2, KEEP), Invalidated::Dropped);
    assert_eq!(c.invalidate(k("unava0"), 1, KEEP), Invalidated::Dropped);
    assert_eq!(c.invalidate(k("never0"), 1, KEEP), Invalidated::Absent);
    assert_eq!(c.len(), 1);
    assert_consistent(&c, 1 << 20);
}

#[test]
fn a_tombstone_refuses_older_answers_until_it_expires() {
    let c = LocalCache::new(1 << 20);
    let g = c.generation();
    // The message arrives while a lookup is in flight (nothing cached).
    assert_eq!(c.invalidate(k("edited"), 2, KEEP), Invalidated::Absent);
    // The lookup read version 1 before the change: refused, not cached.
    assert_eq!(
        c.store(k("edited"), rec_v("https://x/old", 1), MIN, g),
        Stored::Superseded(2)
    );
    assert_eq!(
        c.store(k("edited"), Answer::Negative(1), MIN, g),
        Stored::Superseded(2)
    );
    assert!(c.get(k("edited"), Instant::now()).is_none());
    // A failed lookup says nothing about versions: cached as usual.
    assert_eq!(
        c.store(k("edited"), Answer::Unavailable, MIN, g),
        Stored::Cached
    );
    // The new state, or a later one, is stored.
    assert_eq!(
        c.store(k("edited"), rec_v("https://x/new", 2), MIN, g),
        Stored::Cached
    );
    assert_eq!(url_of(&c, "edited").as_deref(), Some("https://x/new"));
    assert_eq!(
        c.store(k("edited"), Answer::Negative(3), MIN, g),
        Stored::Cached
    );
    // A tombstone is only kept for a while.
    c.invalidate(k("brief0"), 5, Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(
        c.store(k("brief0"), rec_v("https://x/b", 4), MIN, g),
        Stored::Cached
    );
    assert_consistent(&c, 1 << 20);
}

#[test]
fn retired_generations_read_as_absent_and_go_first() {
    let max = 16 << 10;
    let c = LocalCache::new(max);
    assert_eq!(c.shard_count(), 1);
    let before = c.generation();
    c.store(k("before"), rec_v("https://x/b", 1), MIN, before);
    for _ in 0..3 {
        assert!(c.get(k("before"), Instant::now()).is_some());
    }
    let after = c.begin_generation();
    c.store(k("during"), rec_v("https://x/d", 1), MIN, after);
    // A lookup that started before the new generation is stamped with the
    // old one, even if it stores later.
    c.store(k("strad0"), rec_v("https://x/s", 1), MIN, before);
    c.retire_before(after);
    assert!(c.get(k("before"), Instant::now()).is_none());
    assert!(c.get(k("strad0"), Instant::now()).is_none());
    assert_eq!(url_of(&c, "during").as_deref(), Some("https://x/d"));
    // Retired entries are evicted first, hits or not: the first two
    // evictions take both (the live, read entry between them is kept).
    let mut i = 0;
    while c.evictions() < 2 {
        c.store(
            k(&format!("new{i:03}")),
            rec_v("https://x/n", 1),
            MIN,
            after,
        );
        i += 1;
    }
    assert!(!c.holds(k("before")) && !c.holds(k("strad0")));
    assert_eq!(url_of(&c, "during").as_deref(), Some("https://x/d"));
    assert_consistent(&c, max);
    // Which generation is the subscribed one.
    assert!(!c.is_subscribed_in(after));
    c.set_subscribed(Some(after));
    assert!(c.is_subscribed_in(after) && !c.is_subscribed_in(before));
}

#[test]
fn peek_reads_without_counting_a_use() {
    let c = LocalCache::new(1 << 20);
    c.put(
        k("peek00"),
        rec("https://p.example/"),
        Duration::from_secs(60),
    );
    let now = Instant::now();
    let e = c.peek(k("peek00"), now).expect("stored");
    assert_eq!(e.freq(), 0);
    assert!(c.peek(k("absent"), now).is_none());
    let e = c.get(k("peek00"), now).expect("stored");
    assert_eq!(e.freq(), 1);
}

#[test]
fn store_entry_hands_back_the_cached_entry_untouched() {
    let c = LocalCache::new(1 << 20);
    let gen = c.generation();
    let (stored, e) = c.store_entry(
        k("kept00"),
        rec("https://k.example/"),
        Duration::from_secs(60),
        gen,
    );
    assert_eq!(stored, Stored::Cached);
    let e = e.expect("the cached entry");
    assert_eq!(e.freq(), 0, "storing is not a use");
    let cached = c.get(k("kept00"), Instant::now()).expect("stored");
    assert!(Arc::ptr_eq(&e, &cached), "the same entry the cache serves");
    let (stored, e) = c.store_entry(k("zero00"), rec("https://z.example/"), Duration::ZERO, gen);
    assert_eq!((stored, e.is_none()), (Stored::NotCached, true));
}

#[test]
fn an_entry_with_options_keeps_them_and_is_charged_for_them() {
    let o = shorturl_common::link_rules::LinkOptions::decode(
        r#"{"f":true,"r":[{"c":{"dev":["ios"]},"u":"https://a.example/ios"}]}"#,
    )
    .unwrap_or_else(|| panic!("options"));
    let with = Answer::Found(Arc::new(Record {
        version: 1,
        expires_at: u64::MAX,
        domain: "a.com".into(),
        url: "https://a.example/".into(),
        options: Some(Arc::new(o.clone())),
    }));
    let c = LocalCache::new(1 << 20);
    c.put(k("abc123"), with, MIN);
    c.put(k("abc124"), rec("https://a.example/"), MIN);
    let (Some(e), Some(plain)) = (
        c.get(k("abc123"), Instant::now()),
        c.get(k("abc124"), Instant::now()),
    ) else {
        panic!("not cached")
    };
    let AnswerRef::Found(r) = e.answer() else {
        panic!("not a record")
    };
    assert_eq!(r.options, Some(&o));
    assert!(
        e.weight() > plain.weight(),
        "{} {}",
        e.weight(),
        plain.weight()
    );
    assert!(matches!(e.to_answer(), Answer::Found(r) if r.options.as_deref() == Some(&o)));
}
