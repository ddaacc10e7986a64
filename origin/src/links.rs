//! Link operations: create, read, disable, resolve. The HTTP layer only
//! translates to and from these.

use crate::cache::{Cache, CacheAnswer};
use crate::claim::Claimer;
use crate::config::Config;
use crate::error::ApiError;
use crate::issuer::{IssueError, Issuer};
use crate::metrics::Metrics;
use crate::permutation::Permutation;
use crate::store::{CustomClaim, Disable, LinkData, LinkRow, Store};
use crate::validate::CreateRequest;
use crate::whitelist::{Denied, Whitelist};
use futures::future::{BoxFuture, FutureExt, Shared};
use http::StatusCode;
use serde::Serialize;
use shorturl_common::record::Lookup;
use shorturl_common::time::{now_unix, rfc3339};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Most consecutive non-free rows skipped before a creation gives up.
const MAX_SKIPS: usize = 1000;

type SharedLookup = Shared<BoxFuture<'static, Result<Lookup, String>>>;

/// Everything a link operation needs.
pub struct Links {
    pub cfg: Arc<Config>,
    pub store: Store,
    pub cache: Cache,
    pub issuer: Arc<Issuer>,
    pub claimer: Claimer,
    pub perm: Permutation,
    pub whitelist: Arc<Whitelist>,
    pub metrics: Arc<Metrics>,
    inflight: Mutex<HashMap<String, SharedLookup>>,
}

/// Body of a creation answer.
#[derive(Debug, Serialize)]
pub struct Created {
    pub code: String,
    pub short_url: String,
    pub url: String,
    pub domain: String,
    pub expires_at: String,
    pub expires_at_unix: u64,
    pub deduplicated: bool,
}

/// Body of `GET /api/v1/links/{code}`.
#[derive(Debug, Serialize)]
pub struct LinkInfo {
    pub code: String,
    pub url: Option<String>,
    pub domain: Option<String>,
    pub app: Option<String>,
    pub client_app: Option<String>,
    pub version: Option<String>,
    pub kdt_id: Option<u64>,
    pub state: &'static str,
    pub created_at: Option<String>,
    pub expires_at: Option<String>,
    pub expires_at_unix: Option<u64>,
}

fn db_unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::unavailable(format!(
        "the link database is unavailable ({e}); retry shortly"
    ))
}

impl Links {
    /// Assembles the service.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: Arc<Config>,
        store: Store,
        cache: Cache,
        issuer: Arc<Issuer>,
        claimer: Claimer,
        perm: Permutation,
        whitelist: Arc<Whitelist>,
        metrics: Arc<Metrics>,
    ) -> Arc<Links> {
        Arc::new(Links {
            cfg,
            store,
            cache,
            issuer,
            claimer,
            perm,
            whitelist,
            metrics,
            inflight: Mutex::new(HashMap::new()),
        })
    }

    fn created(&self, code: String, data: &LinkData, deduplicated: bool) -> Created {
        Created {
            short_url: self.cfg.short_url(&data.domain, &code),
            code,
            url: data.url.clone(),
            domain: data.domain.clone(),
            expires_at: rfc3339(data.expires_at),
            expires_at_unix: data.expires_at,
            deduplicated,
        }
    }

    /// Creates a link (or returns the recent one for the same domain and URL).
    pub async fn create(
        self: &Arc<Self>,
        app: String,
        req: CreateRequest,
    ) -> Result<(StatusCode, Created), ApiError> {
        let domain = req
            .domain
            .clone()
            .unwrap_or_else(|| self.cfg.default_domain.clone());
        match self.whitelist.check(&domain, req.kdt_id) {
            Ok(()) => {}
            Err(Denied::NotAllowed(d)) => {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "domain_not_allowed",
                    format!("domain {d} is not allowed for short links"),
                ))
            }
            Err(Denied::MerchantMismatch { domain, kdt_id }) => {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "merchant_domain_mismatch",
                    format!("domain {domain} does not belong to merchant {kdt_id}"),
                ))
            }
        }
        let now = now_unix();
        let ttl_days = req.ttl_days.unwrap_or(self.cfg.links.default_ttl_days);
        let data = Arc::new(LinkData {
            url: req.url,
            domain,
            app,
            client_app: req.client_app,
            client_version: req.client_version,
            kdt_id: req.kdt_id,
            created_at: now,
            expires_at: now + u64::from(ttl_days) * 86_400,
        });

        if let Some(code) = req.code {
            return match self
                .store
                .claim_custom(&code, &data)
                .await
                .map_err(db_unavailable)?
            {
                CustomClaim::Created => {
                    self.metrics.creations.with_label_values(&["custom"]).inc();
                    self.cache
                        .put_record(&code, &Lookup::Found(data.record()))
                        .await;
                    Ok((StatusCode::CREATED, self.created(code, &data, false)))
                }
                CustomClaim::Taken => {
                    self.metrics
                        .creations
                        .with_label_values(&["conflict"])
                        .inc();
                    Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "code_taken",
                        format!("code {code} is already taken"),
                    ))
                }
            };
        }

        if let Some(existing) = self.recent_duplicate(&data).await {
            self.metrics.creations.with_label_values(&["dedup"]).inc();
            return Ok((StatusCode::OK, existing));
        }

        let mut skips = 0;
        let code = loop {
            let id = self.issuer.next_id().await.map_err(|e| match e {
                IssueError::Exhausted { .. } => {
                    self.metrics
                        .creations
                        .with_label_values(&["exhausted"])
                        .inc();
                    ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "codes_exhausted",
                        e.to_string(),
                    )
                    .retry_after(60)
                }
                IssueError::Counter(m) => db_unavailable(m),
            })?;
            let Some(code) = self.perm.code_for_id(id) else {
                return Err(ApiError::unavailable("issued id outside the code space"));
            };
            if self
                .claimer
                .claim(id, code.clone(), Arc::clone(&data))
                .await
                .map_err(db_unavailable)?
            {
                break code;
            }
            self.metrics.issuer_skipped.inc();
            skips += 1;
            if skips >= MAX_SKIPS {
                tracing::error!(
                    skips,
                    "too many consecutive non-free rows; is the issuer counter behind the table?"
                );
                return Err(ApiError::unavailable(
                    "no free code found; the issuer counter may be behind",
                ));
            }
        };
        self.metrics.creations.with_label_values(&["created"]).inc();
        self.cache
            .put_created(&code, &data.record(), &data.url)
            .await;
        Ok((StatusCode::CREATED, self.created(code, &data, false)))
    }

    /// The link made for the same domain and URL within the dedup window,
    /// if it still resolves to exactly that.
    async fn recent_duplicate(self: &Arc<Self>, data: &LinkData) -> Option<Created> {
        let code = self.cache.get_dedup(&data.domain, &data.url).await?;
        match self.resolve(&code).await {
            Ok(Lookup::Found(r))
                if r.url == data.url && r.binds(&data.domain) && !r.is_expired() =>
            {
                let mut d = data.clone();
                d.expires_at = r.expires_at;
                Some(self.created(code, &d, true))
            }
            _ => None,
        }
    }

    /// What `code` resolves to: Redis, then MySQL (written back to Redis).
    /// Concurrent misses for one code share one MySQL lookup.
    pub async fn resolve(self: &Arc<Self>, code: &str) -> Result<Lookup, ApiError> {
        if let CacheAnswer::Hit(l) = self.cache.get_record(code).await {
            return Ok(l);
        }
        let (fut, joined) = {
            let mut map = self
                .inflight
                .lock()
                .map_err(|_| ApiError::unavailable("lookup table poisoned"))?;
            match map.get(code) {
                Some(f) => (f.clone(), true),
                None => {
                    let me = Arc::clone(self);
                    let key = code.to_owned();
                    let task = tokio::spawn(async move {
                        let r = me.store.lookup(&key, now_unix()).await;
                        if let Ok(l) = &r {
                            me.cache.put_record(&key, l).await;
                        }
                        if let Ok(mut m) = me.inflight.lock() {
                            m.remove(&key);
                        }
                        r.map_err(|e| e.to_string())
                    });
                    let fut: SharedLookup = async move {
                        task.await
                            .unwrap_or_else(|e| Err(format!("lookup task: {e}")))
                    }
                    .boxed()
                    .shared();
                    map.insert(code.to_owned(), fut.clone());
                    (fut, false)
                }
            }
        };
        if joined {
            self.metrics.lock_get.inc();
        }
        let r = fut.await;
        if joined && r.is_err() {
            self.metrics.lock_error.inc();
        }
        r.map_err(db_unavailable)
    }

    /// Reads a link for its owner or any authenticated caller.
    pub async fn info(&self, code: &str) -> Result<LinkInfo, ApiError> {
        let row: LinkRow = self
            .store
            .find(code)
            .await
            .map_err(db_unavailable)?
            .ok_or_else(ApiError::not_found)?;
        let now = now_unix();
        let state = match row.state {
            crate::store::state::ACTIVE if row.expires_at.is_some_and(|e| e <= now) => "expired",
            crate::store::state::ACTIVE => "active",
            crate::store::state::DISABLED => "disabled",
            _ => return Err(ApiError::not_found()),
        };
        Ok(LinkInfo {
            code: row.code,
            url: row.url,
            domain: row.domain,
            app: row.app,
            client_app: row.client_app,
            version: row.client_version,
            kdt_id: row.kdt_id,
            state,
            created_at: row.created_at.map(rfc3339),
            expires_at: row.expires_at.map(rfc3339),
            expires_at_unix: row.expires_at,
        })
    }

    /// Disables a link owned by `app` and replaces its Redis record with a negative.
    pub async fn disable(&self, code: &str, app: &str) -> Result<(), ApiError> {
        match self
            .store
            .disable(code, app)
            .await
            .map_err(db_unavailable)?
        {
            Disable::Done { url, domain } => {
                self.cache.put_record(code, &Lookup::Negative).await;
                self.cache.del_dedup(&domain, &url).await;
                Ok(())
            }
            Disable::NotFound => Err(ApiError::not_found()),
            Disable::Forbidden => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "only the app that created a link may disable it",
            )),
        }
    }
}
