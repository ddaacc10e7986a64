//! Creation: the tenancy rules, deduplication, custom codes and issued codes.

use super::{LinkError, LinkView, Links};
use crate::bucket::Reservation;
use crate::store::{CustomClaim, DbError, LinkData, LinkKey, LinkRow, RowState};
use crate::tenancy::{Caller, Scope};
use crate::validate::CreateRequest;
use crate::whitelist::Denied;
use shorturl_common::code::is_fleet_code;
use shorturl_common::keys;
use shorturl_common::time::now_unix;
use std::sync::Arc;

/// Most consecutive non-free rows skipped before a creation gives up.
const MAX_SKIPS: usize = 1000;

/// A creation that succeeded.
#[derive(Debug, Clone)]
pub enum Creation {
    /// A new link.
    New(LinkView),
    /// The same caller created the same link recently: that link.
    Deduplicated(LinkView),
}

impl Links {
    /// The merchant a creation is for, after the caller's binding: a
    /// merchant-bound key may only name its own merchants (one of them by
    /// default when it has exactly one) and only their domains; a key bound
    /// to none may name a merchant only on a shared domain (internal apps
    /// create links for merchants there), never on a merchant's own domain;
    /// an admin key may name any.
    fn creation_merchant(
        &self,
        caller: &Caller,
        domain: &str,
        kdt_id: Option<u64>,
    ) -> Result<Option<u64>, LinkError> {
        if caller.is_unbound() {
            return match kdt_id {
                Some(k) if self.whitelist.is_merchant_domain(domain) => {
                    Err(LinkError::ForbiddenMerchant(k))
                }
                k => Ok(k),
            };
        }
        let Some(bound) = caller.merchant_binding() else {
            return Ok(kdt_id);
        };
        let kdt = match (kdt_id, bound.first()) {
            (Some(k), _) => k,
            (None, Some(&only)) if bound.len() == 1 => only,
            (None, _) => return Err(LinkError::KdtIdRequired(domain.to_owned())),
        };
        if !bound.contains(&kdt) {
            return Err(LinkError::ForbiddenMerchant(kdt));
        }
        if !self.whitelist.owns(kdt, domain) {
            return Err(LinkError::DomainNotAllowed(domain.to_owned()));
        }
        Ok(Some(kdt))
    }

    /// Creates a link (or returns the caller's recent identical one).
    pub async fn create(
        self: &Arc<Self>,
        caller: &Caller,
        req: CreateRequest,
    ) -> Result<Creation, LinkError> {
        caller.require(Scope::LinksCreate)?;
        self.check_target(caller, &req.url)?;
        for d in req.settings.destinations() {
            self.check_target(caller, d)?;
        }
        let domain = req
            .domain
            .clone()
            .unwrap_or_else(|| self.cfg.default_domain.clone());
        let kdt_id = self.creation_merchant(caller, &domain, req.kdt_id)?;
        self.whitelist.check(&domain, kdt_id).map_err(|d| match d {
            Denied::NotAllowed(d) => LinkError::DomainNotAllowed(d),
            Denied::MerchantMismatch { domain, kdt_id } => {
                LinkError::MerchantMismatch { domain, kdt_id }
            }
            Denied::KdtIdRequired(d) => LinkError::KdtIdRequired(d),
        })?;
        let mut settings = req.settings;
        if let Some(p) = req.password {
            settings.password = Some(self.unlock.hash(p).await?);
        }
        super::guide::apply(&self.cfg.guide, &domain, &req.url, &mut settings);
        // Clean (checked above) unless the policy changed since: then the
        // link is written screened, as the pass would.
        self.screening.policy().apply(&req.url, &mut settings);
        let now = now_unix();
        let ttl_days = req.ttl_days.unwrap_or(self.cfg.links.default_ttl_days);
        let data = Arc::new(LinkData {
            url: req.url,
            domain,
            app: caller.app.clone(),
            client_app: req.client_app,
            client_version: req.client_version,
            kdt_id,
            created_at: req.created_at.unwrap_or(now),
            expires_at: req.expires_at.unwrap_or(now + u64::from(ttl_days) * 86_400),
            redirect_status: self.cfg.redirect.status,
            options: settings.to_column(),
            tags: req.tags.to_column(),
        });

        if let Some(code) = req.code {
            // Reserved before the claim, so concurrent attempts cannot
            // overspend the budget; spent only when the code was refused.
            let attempt = self.reserve_custom_attempt(&caller.app).await?;
            // Edges of protocol 3.4 and older key by code alone: while
            // they may run, a per-domain code stays unique in the fleet.
            let held_elsewhere = self.cfg.redis.legacy_keys
                && !is_fleet_code(&code)
                && self.store.code_in_use(&code).await?;
            let claim = if held_elsewhere {
                Ok(CustomClaim::Taken)
            } else {
                self.store.claim_custom(&code, &data).await
            };
            if matches!(claim, Ok(CustomClaim::Taken)) {
                if let Some(a) = attempt {
                    a.spend();
                }
            }
            return match claim? {
                CustomClaim::Created { version } => {
                    self.metrics.creations.with_label_values(&["custom"]).inc();
                    self.cache
                        .put_created(&code, &data.record(version), None)
                        .await;
                    Ok(Creation::New(self.view(&data.row(&code, version), now)))
                }
                CustomClaim::Taken => {
                    self.metrics
                        .creations
                        .with_label_values(&["conflict"])
                        .inc();
                    Err(LinkError::CodeUnavailable(code))
                }
            };
        }

        let dedup_key = keys::dedup_key(&data.domain, &data.app, data.kdt_id, ttl_days, &data.url);
        // A link with options is never another creation's duplicate: the
        // dedup window compares URLs, not rules.
        if data.options.is_none() {
            if let Some(existing) = self.recent_duplicate(&dedup_key, &data).await {
                self.metrics.creations.with_label_values(&["dedup"]).inc();
                return Ok(Creation::Deduplicated(self.view(&existing, now)));
            }
        }

        let mut skips = 0;
        let claimed = loop {
            let id = self.issuer.next_id().await.map_err(|e| {
                let e = LinkError::from(e);
                if matches!(e, LinkError::CodesExhausted { .. }) {
                    self.metrics
                        .creations
                        .with_label_values(&["exhausted"])
                        .inc();
                }
                e
            })?;
            // The row's code is P(id) for a pre-generated id, or the code
            // recycling appended at this id: the claim reads it.
            match self.claimer.claim(id, Arc::clone(&data)).await {
                Ok(Some(c)) => break c,
                Ok(None) => {}
                Err(e) => {
                    // `mysql.skip_dead_shards`: a shard that does not answer
                    // is skipped; issuing moves on to the next range.
                    let Some(end) = self.dead_shard_end(id, &e) else {
                        return Err(e.into());
                    };
                    self.issuer.skip_past(end).await?;
                }
            }
            self.metrics.issuer_skipped.inc();
            skips += 1;
            if skips >= MAX_SKIPS {
                tracing::error!(
                    skips,
                    "too many consecutive non-free rows; is the issuer counter behind the table?"
                );
                return Err(LinkError::NoFreeCode { skips });
            }
        };
        self.metrics.creations.with_label_values(&["created"]).inc();
        self.cache
            .put_created(
                &claimed.code,
                &data.record(claimed.version),
                data.options.is_none().then_some(dedup_key.as_str()),
            )
            .await;
        Ok(Creation::New(
            self.view(&data.row(&claimed.code, claimed.version), now),
        ))
    }

    /// Refuses a target on a domain this fleet serves (default, static and
    /// merchant domains, Apollo's included), unless the app may: following
    /// it would come back here, a loop at worst and a chain that counts
    /// every hop as a click at best.
    pub(super) fn check_target(&self, caller: &Caller, url: &str) -> Result<(), LinkError> {
        if let Some(hit) = self.screening.policy().check(url) {
            // Everyone's, the admin's too (protocol 4.7).
            self.metrics.screening_refused.inc();
            return Err(LinkError::DestinationBlocked(hit.host));
        }
        if caller.may_target_short_domains() {
            return Ok(());
        }
        let host = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().and_then(shorturl_common::host::normalize_host));
        match host {
            Some(h) if self.whitelist.is_listed(&h) => Err(LinkError::TargetIsShortDomain(h)),
            _ => Ok(()),
        }
    }

    /// Reserves one of the app's custom-code refusals
    /// (`links.custom_code_refusals_per_min`; `None` when off).
    async fn reserve_custom_attempt(
        &self,
        app: &str,
    ) -> Result<Option<Reservation<'_, String>>, LinkError> {
        if self.cfg.links.custom_code_refusals_per_min == 0 {
            return Ok(None);
        }
        match self.custom_refusals.reserve(&app.to_owned()).await {
            Ok(r) => Ok(Some(r)),
            Err(wait) => {
                self.metrics
                    .creations
                    .with_label_values(&["custom_limited"])
                    .inc();
                Err(LinkError::CustomCodesLimited {
                    retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
                })
            }
        }
    }

    /// The last id of `id`'s shard when `e` says that shard is down (not
    /// a refused statement), skipping is configured and a later range exists.
    fn dead_shard_end(&self, id: u64, e: &DbError) -> Option<u64> {
        let shards = &self.store.shards;
        if !shards.skip_dead || e.may_be_item_specific() {
            return None;
        }
        let i = shards.index_of_id(id)?;
        (i + 1 < shards.shards.len()).then(|| shards.shards[i].last_id)
    }

    /// The link of a recent identical creation (same app, merchant, domain,
    /// lifetime and URL: the dedup key says so), if MySQL confirms it is
    /// still that caller's live link to exactly that URL. A MySQL failure
    /// here only skips deduplication.
    async fn recent_duplicate(&self, key: &str, data: &LinkData) -> Option<LinkRow> {
        let code = self.cache.get_dedup(key).await?;
        let row = self
            .store
            .find(&LinkKey::new(&code, &data.domain))
            .await
            .ok()??;
        let same = row.state == RowState::Active
            && row.expires_at.is_some_and(|e| e > now_unix())
            && row.url.as_deref() == Some(data.url.as_str())
            && row.domain.as_deref() == Some(data.domain.as_str())
            && row.app.as_deref() == Some(data.app.as_str())
            && row.kdt_id == data.kdt_id
            && row.tags == data.tags;
        same.then_some(row)
    }

    /// The link JSON of `row` as of `now`.
    pub(super) fn view(&self, row: &LinkRow, now: u64) -> LinkView {
        LinkView::of(&self.cfg, row, now)
    }
}
