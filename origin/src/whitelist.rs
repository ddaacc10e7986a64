//! Which domains links may be created on: the default domain, the static list
//! from the config, and the dynamic merchant list (kdt_id → domain) from
//! Apollo. Creations read it lock-free through `arc-swap`; a new dynamic list
//! is built and validated completely before it is swapped in.

use arc_swap::ArcSwap;
use serde::Serialize;
use shorturl_common::status::WhitelistDim;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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

impl Source {
    /// The name used in the status JSON and the metrics' `source` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::StaticOnly => "static-only",
            Source::Apollo => "apollo",
            Source::File => "file",
        }
    }
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
    /// The domain is a merchant domain and the creation names no merchant.
    KdtIdRequired(String),
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
    /// Static merchant domains (config `links.merchant_domains`): domain → owners.
    static_owners: HashMap<String, BTreeSet<u64>>,
    dynamic: ArcSwap<DynamicList>,
    feed: FeedCounters,
}

impl Whitelist {
    /// Static part from the config; the dynamic part starts empty.
    pub fn new(default_domain: String, static_domains: BTreeSet<String>) -> Self {
        Whitelist {
            default_domain,
            static_domains,
            static_owners: HashMap::new(),
            dynamic: ArcSwap::from_pointee(DynamicList::empty()),
            feed: FeedCounters::default(),
        }
    }

    /// Adds the static merchant domains (kdt_id → domains, normalised).
    pub fn with_merchant_domains(mut self, map: &BTreeMap<u64, BTreeSet<String>>) -> Self {
        for (kdt, domains) in map {
            for d in domains {
                self.static_owners
                    .entry(d.clone())
                    .or_default()
                    .insert(*kdt);
            }
        }
        self
    }

    /// Whether `kdt_id` owns `domain`, by the static map or Apollo's. The
    /// default domain belongs to no merchant, even if Apollo maps one to it.
    pub fn owns(&self, kdt_id: u64, domain: &str) -> bool {
        domain != self.default_domain
            && (self
                .static_owners
                .get(domain)
                .is_some_and(|o| o.contains(&kdt_id))
                || self
                    .dynamic
                    .load()
                    .by_domain
                    .get(domain)
                    .is_some_and(|o| o.contains(&kdt_id)))
    }

    /// Whether `domain` has owners (a merchant domain, static or Apollo's).
    pub fn is_merchant_domain(&self, domain: &str) -> bool {
        self.static_owners.contains_key(domain)
            || self.dynamic.load().by_domain.contains_key(domain)
    }

    /// Whether `domain` is on any list (default, static, merchant domains),
    /// whoever would use it.
    pub fn is_listed(&self, domain: &str) -> bool {
        domain == self.default_domain
            || self.static_domains.contains(domain)
            || self.static_owners.contains_key(domain)
            || self.dynamic.load().by_domain.contains_key(domain)
    }

    /// Decides whether a link may be created on `domain` (normalised) for
    /// `kdt_id`, whoever the caller: a merchant domain (one with owners in
    /// the static map or Apollo's) needs one of its owners' `kdt_id`.
    pub fn check(&self, domain: &str, kdt_id: Option<u64>) -> Result<(), Denied> {
        if domain == self.default_domain {
            return Ok(());
        }
        let dynamic = self.dynamic.load();
        let static_owners = self.static_owners.get(domain);
        let dynamic_owners = dynamic.by_domain.get(domain);
        if static_owners.is_some() || dynamic_owners.is_some() {
            let Some(kdt) = kdt_id else {
                return Err(Denied::KdtIdRequired(domain.to_owned()));
            };
            let owned = static_owners.is_some_and(|o| o.contains(&kdt))
                || dynamic_owners.is_some_and(|o| o.contains(&kdt));
            if !owned {
                return Err(Denied::MerchantMismatch {
                    domain: domain.to_owned(),
                    kdt_id: kdt,
                });
            }
            return Ok(());
        }
        if self.static_domains.contains(domain) {
            return Ok(());
        }
        Err(Denied::NotAllowed(domain.to_owned()))
    }

    /// Every listed domain (default, static, merchant domains static and
    /// dynamic), sorted: the names an edge may order certificates for.
    pub fn domains(&self) -> Vec<String> {
        let d = self.dynamic.load();
        let mut all: BTreeSet<&str> = self.static_domains.iter().map(String::as_str).collect();
        all.insert(&self.default_domain);
        all.extend(self.static_owners.keys().map(String::as_str));
        all.extend(d.by_domain.keys().map(String::as_str));
        all.into_iter().map(str::to_owned).collect()
    }

    /// The default domain.
    pub fn default_domain(&self) -> &str {
        &self.default_domain
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

    /// Where the dynamic list comes from now.
    pub fn source(&self) -> Source {
        self.dynamic.load().source
    }

    /// The `whitelist` dimension of `/shorturl_status`.
    pub fn status(&self) -> WhitelistDim {
        let d = self.dynamic.load();
        let mut all: BTreeSet<&str> = self.static_domains.iter().map(String::as_str).collect();
        all.insert(&self.default_domain);
        all.extend(self.static_owners.keys().map(String::as_str));
        let static_size = all.len();
        all.extend(d.by_domain.keys().map(String::as_str));
        WhitelistDim {
            source: d.source.as_str().to_owned(),
            size: all.len(),
            static_size,
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
    fn domains_lists_every_source_once() {
        let w = wl();
        w.swap_dynamic(dynamic(&[(1, "m.com"), (2, "m.com"), (3, "static.com")]));
        assert_eq!(w.domains(), ["m.com", "sho.rt", "static.com"]);
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
        assert_eq!(
            w.check("s.shop55.com", None),
            Err(Denied::KdtIdRequired("s.shop55.com".into()))
        );
        assert!(w.is_listed("s.shop55.com"));
        assert!(w.owns(55, "s.shop55.com") && !w.owns(91, "s.shop55.com"));
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
            (st.size, st.dynamic_size, st.source.as_str()),
            (4, 2, "apollo")
        );
        assert_eq!(w.source(), Source::Apollo);
        w.swap_dynamic(DynamicList::empty());
        assert_eq!(
            w.check("s.shop55.com", Some(55)),
            Err(Denied::NotAllowed("s.shop55.com".into()))
        );
    }

    #[test]
    fn static_merchant_domains_merge_with_apollo() {
        let map: BTreeMap<u64, BTreeSet<String>> =
            [(55, ["s.shop55.com".to_string()].into_iter().collect())]
                .into_iter()
                .collect();
        let w = wl().with_merchant_domains(&map);
        assert_eq!(w.check("s.shop55.com", Some(55)), Ok(()));
        assert_eq!(
            w.check("s.shop55.com", None),
            Err(Denied::KdtIdRequired("s.shop55.com".into()))
        );
        // Apollo adds a second owner; the static one stays.
        w.swap_dynamic(dynamic(&[(60, "s.shop55.com")]));
        assert_eq!(w.check("s.shop55.com", Some(55)), Ok(()));
        assert_eq!(w.check("s.shop55.com", Some(60)), Ok(()));
        assert_eq!(
            w.check("s.shop55.com", Some(91)),
            Err(Denied::MerchantMismatch {
                domain: "s.shop55.com".into(),
                kdt_id: 91
            })
        );
        let st = w.status();
        assert_eq!((st.size, st.static_size, st.dynamic_size), (3, 3, 1));
    }

    #[test]
    fn default_domain_is_nobodys_merchant_domain() {
        let w = wl();
        w.swap_dynamic(dynamic(&[(55, "sho.rt")]));
        assert_eq!(w.check("sho.rt", Some(91)), Ok(()));
        assert_eq!(w.check("sho.rt", None), Ok(()));
        assert!(!w.owns(55, "sho.rt"));
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
