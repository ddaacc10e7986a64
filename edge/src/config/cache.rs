//! `edge.cache` (the in-process cache of answers) and `edge.pages_cache`
//! (the pages proxied through `pingora-cache`).

use super::file::{CacheFile, PagesCacheFile};
use super::{err, ms, ConfigError};
use std::time::Duration;

/// The in-process cache.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub max_bytes: usize,
    pub positive_ttl: Duration,
    pub negative_ttl: Duration,
    pub unavailable_ttl: Duration,
    /// How long an invalidation's tombstone refuses older answers.
    pub tombstone_ttl: Duration,
    /// While unsubscribed from invalidations: how long past the last sign
    /// of life entries cached before are served, and the longest TTL of
    /// entries cached meanwhile.
    pub unsubscribed_grace: Duration,
    /// Off (the default): the process opts out of transparent huge pages
    /// (`crate::start::huge_pages`). mimalloc advises its arena
    /// `MADV_HUGEPAGE`, so every 2 MiB region touched once became resident
    /// whole: 18 MiB more RSS at start, and a cache's RSS off its budget.
    pub transparent_huge_pages: bool,
}

/// The page cache (QR codes and previews proxied through `pingora-cache`).
#[derive(Debug, Clone)]
pub struct PagesCacheConfig {
    /// Byte budget of all cached pages.
    pub max_bytes: usize,
    /// Larger answers are not cached.
    pub max_entry_bytes: usize,
    /// Stale pages are served this long past their freshness when the
    /// origin is down or answers 5xx.
    pub stale_if_error: Duration,
    /// Longest wait behind another request fetching the same page (the
    /// cache lock), and longest a fetch holds the lock.
    pub lock_timeout: Duration,
}

/// `edge.cache`.
pub fn from_file(f: &CacheFile) -> Result<CacheConfig, ConfigError> {
    if f.max_bytes < 4096 {
        return err("edge.cache.max_bytes", "must be at least 4096");
    }
    if f.positive_ttl_secs == 0 || f.negative_ttl_secs == 0 {
        return err(
            "edge.cache.positive_ttl_secs",
            "must be > 0, as must edge.cache.negative_ttl_secs",
        );
    }
    Ok(CacheConfig {
        max_bytes: f.max_bytes,
        positive_ttl: Duration::from_secs(f.positive_ttl_secs),
        negative_ttl: Duration::from_secs(f.negative_ttl_secs),
        unavailable_ttl: ms(f.unavailable_ttl_ms, "edge.cache.unavailable_ttl_ms")?,
        tombstone_ttl: ms(f.tombstone_ttl_ms, "edge.cache.tombstone_ttl_ms")?,
        unsubscribed_grace: ms(f.unsubscribed_grace_ms, "edge.cache.unsubscribed_grace_ms")?,
        transparent_huge_pages: f.transparent_huge_pages,
    })
}

/// `edge.pages_cache`.
pub fn pages_from_file(f: &PagesCacheFile) -> Result<PagesCacheConfig, ConfigError> {
    if f.max_bytes < 65_536 {
        return err("edge.pages_cache.max_bytes", "must be at least 65536");
    }
    if f.max_entry_bytes == 0 || f.max_entry_bytes > f.max_bytes {
        return err(
            "edge.pages_cache.max_entry_bytes",
            "must be > 0 and <= max_bytes",
        );
    }
    if f.stale_if_error_secs > u64::from(u32::MAX) {
        return err("edge.pages_cache.stale_if_error_secs", "too large");
    }
    Ok(PagesCacheConfig {
        max_bytes: f.max_bytes,
        max_entry_bytes: f.max_entry_bytes,
        stale_if_error: Duration::from_secs(f.stale_if_error_secs),
        lock_timeout: ms(f.lock_timeout_ms, "edge.pages_cache.lock_timeout_ms")?,
    })
}
