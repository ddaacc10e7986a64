//! The live view's answers (`GET /api/v1/links/{code}/live`, `GET
//! /api/v1/live`): [`super::live::Live`]'s counts under the stats API's
//! tenancy rules.

use super::live::{LiveLink, LiveSeries};
use super::TenantFilter;
use crate::links::{tenant, LinkError, LinkRef, Links};
use crate::store::search::Tenant;
use crate::tenancy::{Caller, Scope};
use serde::Serialize;

/// A link's last hour.
#[derive(Debug, Clone, Serialize)]
pub struct LinkLiveView {
    pub code: String,
    pub domain: String,
    #[serde(flatten)]
    pub series: LiveSeries,
}

/// A tenant's last hour and its busiest links in it.
#[derive(Debug, Clone, Serialize)]
pub struct TenantLiveView {
    #[serde(flatten)]
    pub series: LiveSeries,
    pub links: Vec<LiveLink>,
}

/// `GET /api/v1/live`: whose links, how many top links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveQuery {
    pub filter: TenantFilter,
    pub limit: u32,
}

impl Links {
    /// One link's clicks per minute over the last hour (`stats:read`,
    /// visible link).
    pub async fn live_link(
        &self,
        caller: &Caller,
        r: &LinkRef,
        now: u64,
    ) -> Result<LinkLiveView, LinkError> {
        caller.require(Scope::StatsRead)?;
        let (key, row) = self.find_visible(caller, r).await?;
        Ok(LinkLiveView {
            code: key.code().to_owned(),
            domain: row.domain.unwrap_or_default(),
            series: self.live.link(&key.name(), now),
        })
    }

    /// A tenant's clicks per minute over the last hour and its `limit`
    /// links with the most human clicks in it (`stats:read`; narrowed to
    /// what the caller may see, as `GET /api/v1/stats`).
    pub fn live_tenant(
        &self,
        caller: &Caller,
        q: &LiveQuery,
        now: u64,
    ) -> Result<TenantLiveView, LinkError> {
        caller.require(Scope::StatsRead)?;
        let (kdt, app) = match &q.filter {
            TenantFilter::KdtId(k) => (Some(*k), None),
            TenantFilter::App(a) => (None, Some(a.as_str())),
            TenantFilter::Domain(_) => (None, None),
        };
        // A tenant the caller can never see answers zeros, as for stats.
        let seen = tenant(caller, kdt, app);
        let (series, links) = self.live.tenant(
            |o| {
                let wanted = match &q.filter {
                    TenantFilter::App(a) => &o.app == a,
                    TenantFilter::KdtId(k) => o.kdt_id == Some(*k),
                    TenantFilter::Domain(d) => &o.domain == d,
                };
                wanted
                    && match &seen {
                        None => false,
                        Some(Tenant::All) => true,
                        Some(Tenant::App(a)) => &o.app == a,
                        Some(Tenant::Merchants(m)) => o.kdt_id.is_some_and(|k| m.contains(&k)),
                    }
            },
            now,
            q.limit as usize,
        );
        Ok(TenantLiveView { series, links })
    }
}
