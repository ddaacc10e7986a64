//! The pages for people (QR codes, previews; protocol section 4.1) served
//! by the edge: proxied to the origin pool with `pingora-cache` enabled.
//!
//! * **Which requests.** `GET|HEAD /{code}.svg`, `/{code}.png`, `/{code}+`
//!   (`route.rs`). Plain `/{code}` never comes here: the redirect path does
//!   no cache lookup and no work of this module.
//! * **Key.** The normalised Host (lowercase, no port, no trailing dot),
//!   the kind, the code and, for QR codes, the `size` and `margin` as the
//!   origin reads them ([`QrParams`]): `?size=256`, no `size` and
//!   `?size=256&utm=x` are one entry, and other query keys cannot split the
//!   cache. A query the origin refuses (`400`) is not cached at all.
//!   The code is the key's `user_tag`, so purges find every variant.
//! * **What is kept.** Only `200`s with an explicit `max-age` (or
//!   `s-maxage`) and no `no-store`, `no-cache`, `private`, `Vary` or
//!   `Set-Cookie`; fresh for that long. 404s are not cached (the origin's
//!   HTML 404 varies with `Accept`, and a 404 costs the origin one record
//!   lookup, like a redirect miss).
//! * **Stale on error.** An expired page is served up to
//!   `pages_cache.stale_if_error_secs` past its freshness when the origin is
//!   down, times out or answers 5xx; a page never cached gets the 503.
//! * **Coalescing.** `pingora-cache`'s `CacheLock`: concurrent misses of one
//!   key make one origin request, the others wait up to
//!   `pages_cache.lock_timeout_ms` and are served from the cache.
//! * **Purge.** The invalidation subscriber purges a changed code's pages
//!   and drops them all when its subscription is lost or re-established
//!   (`inval/`), like the record cache.

pub mod metrics;
pub mod store;

use crate::config::PagesCacheConfig;
use metrics::PagesMetrics;
use pingora::http::ResponseHeader;
use pingora_cache::cache_control::CacheControl;
use pingora_cache::lock::{CacheKeyLockImpl, CacheLock};
use pingora_cache::{CacheKey, CacheMeta, CacheOptionOverrides, NoCacheReason, RespCacheable};
use pingora_prometheus::prometheus;
use shorturl_common::host::normalize_host;
use shorturl_common::pages::{PageKind, QrParams};
use std::time::{Duration, SystemTime};
use store::PageStore;

/// The page cache: storage, lock and policy, alive for the whole process
/// (`pingora-cache` wants `'static` references).
pub struct PageCache {
    pub store: &'static PageStore,
    lock: &'static CacheKeyLockImpl,
    stale_if_error_secs: u32,
    lock_timeout: Duration,
    pub metrics: PagesMetrics,
}

impl PageCache {
    /// Builds the cache once per process and leaks it.
    pub fn leak(cfg: &PagesCacheConfig) -> Result<&'static PageCache, prometheus::Error> {
        let metrics = PagesMetrics::new()?;
        let store: &'static PageStore = Box::leak(Box::new(PageStore::new(
            cfg.max_bytes,
            cfg.max_entry_bytes,
            metrics.clone(),
        )));
        let lock: &'static CacheKeyLockImpl = Box::leak(CacheLock::new_boxed(cfg.lock_timeout));
        Ok(Box::leak(Box::new(PageCache {
            store,
            lock,
            stale_if_error_secs: u32::try_from(cfg.stale_if_error.as_secs()).unwrap_or(u32::MAX),
            lock_timeout: cfg.lock_timeout,
            metrics,
        })))
    }

    /// Turns the cache on for this request (`request_cache_filter`).
    pub fn enable(&'static self, cache: &mut pingora_cache::HttpCache) {
        let mut overrides = CacheOptionOverrides::default();
        overrides.wait_timeout = Some(self.lock_timeout);
        overrides.max_lock_retries = Some(2);
        cache.enable(self.store, None, None, Some(self.lock), Some(overrides));
    }

    /// Whether and how long to keep an origin answer (see the module
    /// documentation).
    pub fn cacheable(&self, resp: &ResponseHeader) -> RespCacheable {
        let no = |why| RespCacheable::Uncacheable(NoCacheReason::Custom(why));
        if resp.status.as_u16() != 200 {
            return no("status");
        }
        if resp.headers.contains_key(http::header::VARY)
            || resp.headers.contains_key(http::header::SET_COOKIE)
        {
            return no("vary or cookie");
        }
        let Some(cc) = CacheControl::from_resp_headers(resp) else {
            return RespCacheable::Uncacheable(NoCacheReason::OriginNotCache);
        };
        if cc.no_store()
            || cc.no_cache()
            || cc.no_cache_field_names().is_some()
            || cc.private()
            || cc.private_field_names().is_some()
        {
            return RespCacheable::Uncacheable(NoCacheReason::OriginNotCache);
        }
        let ttl = match (cc.s_maxage(), cc.max_age()) {
            (Ok(Some(s)), _) => s,
            (_, Ok(Some(m))) => m,
            _ => 0,
        };
        if ttl == 0 {
            return RespCacheable::Uncacheable(NoCacheReason::OriginNotCache);
        }
        let now = SystemTime::now();
        RespCacheable::Cacheable(CacheMeta::new(
            now + Duration::from_secs(u64::from(ttl)),
            now,
            0,
            self.stale_if_error_secs,
            resp.clone(),
        ))
    }
}

/// The cache key of a page request, or `None` when it must not be cached
/// (no valid host, or QR parameters the origin refuses).
pub fn key(host: &str, kind: PageKind, code: &str, query: Option<&str>) -> Option<CacheKey> {
    let host = normalize_host(host)?;
    let params = match kind {
        PageKind::Preview | PageKind::Card | PageKind::Password | PageKind::Warning => {
            String::new()
        }
        PageKind::Guide => shorturl_common::pages::guide_lang_of_query(query).to_owned(),
        PageKind::Svg | PageKind::Png => {
            let p = QrParams::from_query(query).ok()?;
            format!("{}x{}", p.size, p.margin)
        }
    };
    // Host and code cannot hold '\n': the fields are unambiguous.
    let primary = format!("{host}\n{}\n{code}\n{params}", kind.label());
    Some(CacheKey::new(primary, code))
}

#[cfg(test)]
mod tests;
