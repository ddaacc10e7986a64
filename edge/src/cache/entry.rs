//! One cache entry: what a code resolved to, stored compactly, and what it
//! costs in memory.
//!
//! An entry is two allocations: the `Arc` block (counts, the fixed fields
//! below and the eviction links) and one byte buffer holding
//! `code ‖ domain ‖ url` (a negative or failure: `code ‖ domain`, the key's
//! domain). The redirect's head is not stored: when the cache has a
//! [`Frame`] (the fast path's), an entry records whether its URL fits it,
//! and the fast path writes the frame around the URL. Its weight is what
//! those two allocations really occupy under the edge's allocator (see
//! [`allocation_size`]), so the cache's byte count is its memory.

use super::Frame;
use crate::clicks::tally::Tally;
use shorturl_common::link_rules::LinkOptions;
use shorturl_common::record::Record;
use std::fmt;
use std::mem::size_of;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

/// What a lookup found, as handed to [`super::LocalCache::put`].
#[derive(Debug, Clone)]
pub enum Answer {
    /// A record (check expiry and domain binding before answering).
    Found(Arc<Record>),
    /// Known not to resolve, as of this record version (protocol 3.1).
    Negative(u64),
    /// The lookup failed (Redis and origin both unavailable); remembered
    /// briefly so a storm of requests does not hammer a failing origin.
    Unavailable,
}

/// A borrowed view of an answer, the same for a cached entry and a fresh
/// lookup, so the redirect path reads both without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerRef<'a> {
    Found(RecordRef<'a>),
    /// Known not to resolve, as of this record version.
    Negative(u64),
    Unavailable,
}

/// A borrowed link record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The link's version (protocol section 3).
    pub version: u64,
    /// Unix seconds after which the link is gone.
    pub expires_at: u64,
    /// The normalised host the link resolves on.
    pub domain: &'a str,
    /// The long URL.
    pub url: &'a str,
    /// The link's options (protocol 3.1.1); `None` for a plain link.
    pub options: Option<&'a LinkOptions>,
}

impl RecordRef<'_> {
    /// True once `now` (unix seconds) is at or past the expiry.
    pub fn is_expired_at(&self, now: u64) -> bool {
        now >= self.expires_at
    }
}

impl Answer {
    /// The borrowed view of this answer.
    pub fn view(&self) -> AnswerRef<'_> {
        match self {
            Answer::Found(r) => AnswerRef::Found(RecordRef {
                version: r.version,
                expires_at: r.expires_at,
                domain: &r.domain,
                url: &r.url,
                options: r.options.as_deref(),
            }),
            Answer::Negative(v) => AnswerRef::Negative(*v),
            Answer::Unavailable => AnswerRef::Unavailable,
        }
    }

    /// The record version this answer is as of; `None` for a failed lookup
    /// (which says nothing about the link).
    pub fn version(&self) -> Option<u64> {
        match self {
            Answer::Found(r) => Some(r.version),
            Answer::Negative(v) => Some(*v),
            Answer::Unavailable => None,
        }
    }
}

const FOUND: u8 = 0;
const NEGATIVE: u8 = 1;
const UNAVAILABLE: u8 = 2;

/// Which eviction queue an entry is in (see `policy`).
pub(super) const SMALL: u8 = 0;
pub(super) const MAIN: u8 = 1;

/// Reads past which a hit stops recording itself (S3-FIFO's 2-bit counter).
const FREQ_CAP: u8 = 3;

/// A cached answer for one code. Immutable except for the eviction state,
/// which only the cache touches.
pub struct Entry {
    pub(super) hash: u64,
    /// Deadline in the cache's clock (nanoseconds since it was created).
    pub(super) fresh_until: u64,
    expires_at: u64,
    version: u64,
    /// `code ‖ domain ‖ url` (nothing after the domain unless found).
    bytes: Box<[u8]>,
    domain_len: u16,
    /// The redirect's head is the cache's frame around the URL.
    servable: bool,
    code_len: u8,
    kind: u8,
    /// The subscription generation the entry's lookup started in (see
    /// `generation`); entries of retired generations read as absent.
    pub(super) gen: u32,
    /// Hits since insertion or the last pass of the eviction hand (capped).
    freq: AtomicU8,
    /// Bots' clicks on the link since the last harvest (`clicks::tally`).
    tally: Tally,
    /// The link's options, shared with the record it was built from
    /// (`None` for nearly every link: one word per entry).
    options: Option<Arc<LinkOptions>>,
    /// `SMALL` or `MAIN`; written under the shard lock only.
    pub(super) queue: AtomicU8,
    /// Links of the shard's eviction queue; used under the shard lock only.
    pub(super) prev: AtomicPtr<Entry>,
    pub(super) next: AtomicPtr<Entry>,
}

/// Codes, domains and URLs longer than this are not cached (they are still
/// answered; the lengths only have to fit the entry's fields).
const MAX_CODE: usize = u8::MAX as usize;
const MAX_DOMAIN: usize = u16::MAX as usize;
const MAX_BYTES: usize = 1 << 20;

impl Entry {
    /// A new entry, or `None` when a part is too long to be cached.
    #[cfg(test)]
    pub(super) fn new(
        code: &str,
        answer: &Answer,
        hash: u64,
        fresh_until: u64,
        gen: u32,
    ) -> Option<Entry> {
        let domain = match answer {
            Answer::Found(r) => r.domain.as_str(),
            _ => "s.test",
        };
        Self::build(code, domain, answer, hash, fresh_until, gen, None)
    }

    /// [`Entry::new`], servable by the fast path when the answer is a
    /// record whose URL fits `frame`. `domain` is the key's (normalised; a
    /// record's own domain is the same, see [`super::Key::own`]).
    pub(super) fn build(
        code: &str,
        domain: &str,
        answer: &Answer,
        hash: u64,
        fresh_until: u64,
        gen: u32,
        frame: Option<&Frame>,
    ) -> Option<Entry> {
        let (kind, version, expires_at, url, options) = match answer {
            Answer::Found(r) => (
                FOUND,
                r.version,
                r.expires_at,
                r.url.as_str(),
                r.options.clone(),
            ),
            Answer::Negative(v) => (NEGATIVE, *v, 0, "", None),
            Answer::Unavailable => (UNAVAILABLE, 0, 0, "", None),
        };
        let len = code.len() + domain.len() + url.len();
        if code.len() > MAX_CODE || domain.len() > MAX_DOMAIN || len > MAX_BYTES {
            return None;
        }
        let servable = kind == FOUND && frame.is_some_and(|f| f.fits(url));
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(code.as_bytes());
        bytes.extend_from_slice(domain.as_bytes());
        bytes.extend_from_slice(url.as_bytes());
        Some(Entry {
            hash,
            fresh_until,
            expires_at,
            version,
            bytes: bytes.into_boxed_slice(),
            servable,
            domain_len: domain.len() as u16,
            code_len: code.len() as u8,
            kind,
            gen,
            options,
            freq: AtomicU8::new(0),
            tally: Tally::new(),
            queue: AtomicU8::new(SMALL),
            prev: AtomicPtr::new(std::ptr::null_mut()),
            next: AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    fn str_at(&self, from: usize, to: usize) -> &str {
        let bytes = self.bytes.get(from..to).unwrap_or_default();
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: `build` copies the code, the domain and the URL whole from
        // `&str`s, and the callers cut exactly those ranges (code, domain,
        // URL), so every range is a whole `str`. Validating it again cost
        // ~180 instructions per memory hit (callgrind, fast path).
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// The code this entry answers for.
    pub fn code(&self) -> &str {
        self.str_at(0, self.code_len as usize)
    }

    /// The (normalised) domain this entry answers for.
    pub fn domain(&self) -> &str {
        let d = self.code_len as usize;
        self.str_at(d, d + self.domain_len as usize)
    }

    /// The key this entry is stored under.
    pub(super) fn key(&self) -> super::Key<'_> {
        super::Key {
            domain: self.domain(),
            code: self.code(),
        }
    }

    /// The bots' clicks counted on this entry (`clicks::tally`).
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// What the code resolved to.
    pub fn answer(&self) -> AnswerRef<'_> {
        match self.kind {
            FOUND => {
                let d = self.code_len as usize;
                let u = d + self.domain_len as usize;
                AnswerRef::Found(RecordRef {
                    version: self.version,
                    expires_at: self.expires_at,
                    domain: self.str_at(d, u),
                    url: self.str_at(u, self.bytes.len()),
                    options: self.options.as_deref(),
                })
            }
            NEGATIVE => AnswerRef::Negative(self.version),
            _ => AnswerRef::Unavailable,
        }
    }

    /// True when the fast path may answer this entry by writing the
    /// cache's [`Frame`] around its URL (a record whose URL fits it).
    pub fn servable(&self) -> bool {
        self.servable
    }

    /// The answer as an owned value (allocates: for the miss path only).
    pub fn to_answer(&self) -> Answer {
        match self.answer() {
            AnswerRef::Found(r) => Answer::Found(Arc::new(Record {
                version: r.version,
                expires_at: r.expires_at,
                domain: r.domain.to_owned(),
                url: r.url.to_owned(),
                options: self.options.clone(),
            })),
            AnswerRef::Negative(v) => Answer::Negative(v),
            AnswerRef::Unavailable => Answer::Unavailable,
        }
    }

    /// Bytes this entry is charged in the cache (computed, not stored: the
    /// four bytes a field would take hold the generation instead). Options
    /// are charged at their record form's length (their parsed form is of
    /// that order, and shared with the record).
    pub fn weight(&self) -> usize {
        entry_weight(self.bytes.len()) + self.options.as_deref().map_or(0, options_weight)
    }

    /// The record version of the answer (0 for a failed lookup).
    pub fn version(&self) -> u64 {
        self.version
    }

    pub(super) fn is_found(&self) -> bool {
        self.kind == FOUND
    }

    /// Records a hit. Stores only while under the cap, so a hot entry's
    /// cache line stops being written once it is known to be hot.
    pub(super) fn touch(&self) {
        let f = self.freq.load(Relaxed);
        if f < FREQ_CAP {
            self.freq.store(f + 1, Relaxed);
        }
    }

    pub(super) fn freq(&self) -> u8 {
        self.freq.load(Relaxed)
    }

    pub(super) fn set_freq(&self, f: u8) {
        self.freq.store(f.min(FREQ_CAP), Relaxed);
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("code", &self.code())
            .field("answer", &self.answer())
            .field("weight", &self.weight())
            .field("gen", &self.gen)
            .finish()
    }
}

/// What a link's options are charged: their blocks and strings, roughly
/// as allocated (cheap and the same on every call, as the cache needs).
fn options_weight(o: &LinkOptions) -> usize {
    use shorturl_common::link_rules::Rule;
    // An empty boxed slice allocates nothing.
    let boxed = |n: usize| if n == 0 { 0 } else { allocation_size(n) };
    let rules: usize = o
        .rules
        .iter()
        .map(|r| {
            size_of::<Rule>()
                + r.url.as_ref().map_or(0, |u| allocation_size(u.len()))
                + r.split
                    .iter()
                    .map(|(u, _)| allocation_size(u.len()) + 32)
                    .sum::<usize>()
                + boxed(size_of_val(&*r.when.cc))
                + boxed(size_of_val(&*r.when.lang))
                + r.when.q.as_deref().map_or(0, |(k, v)| {
                    allocation_size(size_of::<(String, String)>())
                        + allocation_size(k.len())
                        + allocation_size(v.len())
                })
        })
        .sum();
    allocation_size(2 * size_of::<usize>() + size_of::<LinkOptions>())
        + allocation_size(rules)
        + o.expired_url
            .as_ref()
            .map_or(0, |x| allocation_size(x.len()))
}

/// What one entry with `len` bytes of code, domain and URL occupies: the
/// `Arc` block and the byte buffer, each rounded up by the allocator.
pub(super) fn entry_weight(len: usize) -> usize {
    allocation_size(2 * size_of::<usize>() + size_of::<Entry>()) + allocation_size(len)
}

/// Bytes the allocator really sets aside for a request of `n` bytes.
///
/// With the `mimalloc` feature (the edge's global allocator): mimalloc's
/// size classes — multiples of 8 up to 64 bytes, then four classes per
/// power of two (80, 96, 112, 128, 160, 192, ...). Without it, glibc malloc:
/// an 8-byte header, 16-byte granularity, 32 bytes at least.
pub fn allocation_size(n: usize) -> usize {
    if cfg!(feature = "mimalloc") {
        let w = n.div_ceil(8).max(1);
        if w <= 8 {
            return w * 8;
        }
        let w1 = w - 1;
        let b = usize::BITS - 1 - w1.leading_zeros();
        let step = 1usize << (b - 2);
        (w1 / step + 1) * step * 8
    } else {
        (n + 8).div_ceil(16).max(2) * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mimalloc_size_classes() {
        if !cfg!(feature = "mimalloc") {
            return;
        }
        let cases = [
            (1, 8),
            (8, 8),
            (9, 16),
            (64, 64),
            (65, 80),
            (80, 80),
            (81, 96),
            (128, 128),
            (129, 160),
            (185, 192),
            (200, 224),
            (256, 256),
            (257, 320),
            (1000, 1024),
        ];
        for (n, want) in cases {
            assert_eq!(allocation_size(n), want, "{n}");
        }
    }

    #[test]
    fn views_cut_the_buffer_at_the_right_places() {
        let rec = Answer::Found(Arc::new(Record {
            version: 1,
            expires_at: 99,
            domain: "s.example.com".into(),
            url: "https://x.example/é?q=1".into(),
            options: None,
        }));
        let e = match Entry::new("abc123", &rec, 7, 0, 0) {
            Some(e) => e,
            None => panic!("not built"),
        };
        assert_eq!(e.code(), "abc123");
        assert_eq!(e.answer(), rec.view());
        assert_eq!(e.to_answer().view(), rec.view());
        assert_eq!(e.weight(), entry_weight(6 + 13 + 24));
        let n = match Entry::new("gone00", &Answer::Negative(4), 7, 0, 0) {
            Some(e) => e,
            None => panic!("not built"),
        };
        assert_eq!(n.answer(), AnswerRef::Negative(4));
        assert_eq!(n.to_answer().version(), Some(4));
        assert_eq!(n.code(), "gone00");
        assert!(Entry::new(&"x".repeat(300), &Answer::Negative(0), 7, 0, 0).is_none());
    }

    #[test]
    fn servable_when_the_url_fits_the_frame() {
        let rec = |url: &str| {
            Answer::Found(Arc::new(Record {
                version: 2,
                expires_at: 99,
                domain: "s.example.com".into(),
                url: url.into(),
                options: None,
            }))
        };
        let ser = super::super::frame::tests::location;
        let Some(frame) = Frame::new(Arc::new(ser)) else {
            panic!("no frame")
        };
        let build = |code: &str, a: &Answer| {
            Entry::build(code, "s.example.com", a, 7, 0, 0, Some(&frame))
                .unwrap_or_else(|| panic!("not built"))
        };
        let ok = rec("https://x.example/a?b=1");
        let e = build("abc123", &ok);
        assert!(e.servable());
        assert_eq!(e.answer(), ok.view());
        // Only code, domain and URL are stored: the head is the frame's.
        assert_eq!(e.weight(), entry_weight(6 + 13 + 23));
        // A URL the serialiser refuses is cached, not servable.
        let bad = rec("https://x.example/\nX: y");
        let e = build("abc124", &bad);
        assert_eq!((e.servable(), e.answer()), (false, bad.view()));
        // Nor are negatives, nor entries of a cache without a frame.
        assert!(!build("gone00", &Answer::Negative(1)).servable());
        let e = Entry::build("abc123", "s.example.com", &ok, 7, 0, 0, None);
        assert!(e.is_some_and(|e| !e.servable()));
    }
}
