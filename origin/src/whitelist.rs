//! Which domains links may be created on: the default domain, the static list
//! from the config, and the dynamic merchant list (kdt_id → domain) from
//! Apollo. Creations read it lock-free through `arc-swap`; a new dynamic list
//! is built and validated completely before it is swapped in.

use arc_swap::ArcSwap;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where the dynamic list currently comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// No dynamic list: only the default domain and the static list.
    StaticOnly,
    /// Read from Apollo.
    Apollo,
    /// Loaded from the last-good file (Apollo unreachable at start).
    File,
}

/// The merchant list as published in Apollo, already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicList {
    /// domain (normalised) → merchants (kdt_id) it is mapped to.
    pub by_domain: HashMap<String, BTreeSet<u64>>,
    pub source: Source,
    pub release_key: Option<String>,
    pub refreshed_at_unix: Option<u64>,
}

impl DynamicList {
    /// The empty list (static-only).
    pub fn empty() -> Self {
        DynamicList {
            by_domain: HashMap::new(),
            source: Source::StaticOnly,
            release_key: None,
            refreshed_at_unix: None,
        }
    }
}

/// Why a creation's domain was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// The domain is on no list.
    NotAllowed(String),
    /// The domain belongs to another merchant than the `kdt_id` given.
    MerchantMismatch { domain: String, kdt_id: u64 },
}

/// Status view of the whitelist.
#[derive(Debug, Clone, Serialize)]
pub struct WhitelistStatus {
    pub source: Source,
    pub size: usize,
    pub static_size: usize,
    pub dynamic_size: usize,
    pub release_key: Option<String>,
    pub last_refresh_unix: Option<u64>,
    /// Apollo values refused by validation (each counted as an empty list).
    pub invalid_values: u64,
    /// Failed Apollo requests (unreachable, timeout, 5xx, unreadable answer).
    pub refresh_errors: u64,
}

/// Counters of the dynamic feed; atomics so the feed and the status readers
/// never share a lock.
#[derive(Debug, Default)]
struct FeedCounters {
    invalid_values: AtomicU64,
    refresh_errors: AtomicU64,
    /// Last successful Apollo answer (200 or 304), Unix seconds; 0 = never.
    last_refresh_unix: AtomicU64,
}

/// The effective whitelist.
pub struct Whitelist {
    default_domain: String,
    static_domains: BTreeSet<String>,
    dynamic: ArcSwap<DynamicList>,
    feed: FeedCounters,
}

impl Whitelist {
    /// Static part from the config; the dynamic part starts empty.
    pub fn new(default_domain: String, static_domains: BTreeSet<String>) -> Self {
        Whitelist {
            default_domain,
            static_domains,
            dynamic: ArcSwap::from_pointee(DynamicList::empty()),
            feed: FeedCounters::default(),
        }
    }

    /// Decides whether a link may be created on `domain` (normalised) for `kdt_id`.
    pub fn check(&self, domain: &str, kdt_id: Option<u64>) -> Result<(), Denied> {
        // The default domain belongs to no merchant, even if Apollo maps one to it.
        if domain == self.default_domain {
            return Ok(());
        }
        let dynamic = self.dynamic.load();
        if let (Some(kdt), Some(owners)) = (kdt_id, dynamic.by_domain.get(domain)) {
            // A merchant domain named together with a merchant id must be that merchant's.
            if !owners.contains(&kdt) {
                return Err(Denied::MerchantMismatch {
                    domain: domain.to_owned(),
                    kdt_id: kdt,
                });
            }
            return Ok(());
        }
        if domain == self.default_domain
            || self.static_domains.contains(domain)
            || dynamic.by_domain.contains_key(domain)
        {
            return Ok(());
        }
        Err(Denied::NotAllowed(domain.to_owned()))
    }

    /// Replaces the dynamic list (already validated by the caller).
    pub fn swap_dynamic(&self, list: DynamicList) {
        self.dynamic.store(Arc::new(list));
    }

    /// The current dynamic list.
    pub fn dynamic(&self) -> Arc<DynamicList> {
        self.dynamic.load_full()
    }

    /// Counts an Apollo value that failed validation.
    pub fn note_invalid_value(&self) {
        self.feed.invalid_values.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed Apollo request.
    pub fn note_refresh_error(&self) {
        self.feed.refresh_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a successful Apollo answer at `unix` seconds.
    pub fn note_refresh_ok(&self, unix: u64) {
        self.feed
            .last_refresh_unix
            .fetch_max(unix, Ordering::Relaxed);
    }

    /// Status for `/shorturl_status`.
    pub fn status(&self) -> WhitelistStatus {
        let d = self.dynamic.load();
        let mut all: BTreeSet<&str> = self.static_domains.iter().map(String::as_str).collect();
        all.insert(&self.default_domain);
        all.extend(d.by_domain.keys().map(String::as_str));
        WhitelistStatus {
            source: d.source,
            size: all.len(),
            static_size: self.static_domains.len() + 1,
            dynamic_size: d.by_domain.len(),
            release_key: d.release_key.clone(),
            last_refresh_unix: match self.feed.last_refresh_unix.load(Ordering::Relaxed) {
                0 => d.refreshed_at_unix,
                t => Some(t),
            },
            invalid_values: self.feed.invalid_values.load(Ordering::Relaxed),
            refresh_errors: self.feed.refresh_errors.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wl() -> Whitelist {
        Whitelist::new(
            "sho.rt".into(),
            ["static.com".to_string()].into_iter().collect(),
        )
    }

    fn dynamic(pairs: &[(u64, &str)]) -> DynamicList {
        let mut by_domain: HashMap<String, BTreeSet<u64>> = HashMap::new();
        for (k, d) in pairs {
            by_domain.entry((*d).to_string()).or_default().insert(*k);
        }
        DynamicList {
            by_domain,
            source: Source::Apollo,
            release_key: Some("r1".into()),
            refreshed_at_unix: Some(1),
        }
    }

    #[test]
    fn static_and_default_always_allowed() {
        let w = wl();
        assert_eq!(w.check("sho.rt", None), Ok(()));
        assert_eq!(w.check("static.com", Some(5)), Ok(()));
        assert_eq!(
            w.check("other.com", None),
            Err(Denied::NotAllowed("other.com".into()))
        );
    }

    #[test]
    fn dynamic_domains_and_merchant_isolation() {
        let w = wl();
        w.swap_dynamic(dynamic(&[(55, "s.shop55.com"), (91, "go.brand91.cn")]));
        assert_eq!(w.check("s.shop55.com", None), Ok(()));
        assert_eq!(w.check("s.shop55.com", Some(55)), Ok(()));
        assert_eq!(
            w.check("s.shop55.com", Some(91)),
            Err(Denied::MerchantMismatch {
                domain: "s.shop55.com".into(),
                kdt_id: 91
            })
        );
        let st = w.status();
        assert_eq!(
            (st.size, st.dynamic_size, st.source),
            (4, 2, Source::Apollo)
        );
        w.swap_dynamic(DynamicList::empty());
        assert!(w.check("s.shop55.com", None).is_err());
    }

    #[test]
    fn default_domain_is_nobodys_merchant_domain() {
        let w = wl();
        w.swap_dynamic(dynamic(&[(55, "sho.rt")]));
        assert_eq!(w.check("sho.rt", Some(91)), Ok(()));
    }

    #[test]
    fn status_counters_and_refresh_time() {
        let w = wl();
        w.note_invalid_value();
        w.note_refresh_error();
        w.note_refresh_error();
        assert_eq!(w.status().last_refresh_unix, None);
        w.swap_dynamic(dynamic(&[(55, "s.shop55.com")]));
        assert_eq!(w.status().last_refresh_unix, Some(1));
        w.note_refresh_ok(100);
        let st = w.status();
        assert_eq!(
            (st.invalid_values, st.refresh_errors, st.last_refresh_unix),
            (1, 2, Some(100))
        );
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["source"], "apollo");
    }
}
