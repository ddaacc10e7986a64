//! The API's extractors: who calls (with which scope), the link code of
//! the path, the bounded body and the validated query strings. Each one
//! rejects with the protocol's JSON [`ApiError`] (axum's own rejections
//! are plain text), and a handler lists them in the order the checks run:
//! authentication, scope, code, then the body, as before the router moved
//! to axum's (`docs/openapi.yaml` fixes which error wins).

use super::AppState;
use crate::body::read_body_max;
use crate::clicks::{LinkQuery, LiveQuery, TenantQuery};
use crate::error::ApiError;
use crate::links::{LinkError, LinkRef};
use crate::tenancy::{Caller, Scope};
use crate::validate::{
    parse_export, parse_link_stats, parse_live_link, parse_live_tenant, parse_search,
    parse_tenant_stats, ExportRequest, SearchRequest,
};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use http::request::Parts;
use shorturl_common::code::is_valid_code;
use shorturl_common::time::now_unix;
use std::marker::PhantomData;
use std::sync::Arc;

/// The scope a route needs, as a type ([`Authorized`]).
pub trait Need: Send + Sync {
    const SCOPE: Scope;
}

/// `links:read`.
pub struct Read;
/// `links:manage`.
pub struct Manage;
/// `links:create` (batch creation; single creations also spend a token:
/// [`Creator`]).
pub struct Create;
/// `stats:read`.
pub struct Stats;
/// `admin` (the screening policy).
pub struct AdminScope;

impl Need for Read {
    const SCOPE: Scope = Scope::LinksRead;
}
impl Need for Manage {
    const SCOPE: Scope = Scope::LinksManage;
}
impl Need for Create {
    const SCOPE: Scope = Scope::LinksCreate;
}
impl Need for Stats {
    const SCOPE: Scope = Scope::StatsRead;
}
impl Need for AdminScope {
    const SCOPE: Scope = Scope::Admin;
}

/// The caller behind the request's key, holding scope `S`: 401 without a
/// known key, 403 `insufficient_scope` without the scope.
pub struct Authorized<S: Need>(pub Arc<Caller>, pub PhantomData<S>);

impl<S: Need> FromRequestParts<AppState> for Authorized<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        let caller = s.auth.authenticate(&parts.headers)?;
        caller
            .require(S::SCOPE)
            .map_err(|e| ApiError::from(LinkError::from(e)))?;
        Ok(Authorized(caller, PhantomData))
    }
}

/// A caller allowed to create, who has spent one creation token (401, 403
/// or 429 `rate_limited`).
pub struct Creator(pub Arc<Caller>);

impl FromRequestParts<AppState> for Creator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        s.auth.admit_creations(&parts.headers, 1).map(Creator)
    }
}

/// The route's `{code}`, a valid code (400 `invalid_code` otherwise, also
/// for an escape that does not decode to UTF-8).
/// With `?domain=` when given: the record endpoint's (protocol 3.5; absent
/// from an edge of an earlier version) and the API's (protocol 3.6: a
/// per-domain code's links are told apart by their domain).
pub struct LinkCode(pub LinkRef);

impl<St: Send + Sync> FromRequestParts<St> for LinkCode {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &St) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, s)
            .await
            .map_err(|_| ApiError::invalid_code())?;
        match params.iter().find(|(k, _)| *k == "code") {
            Some((_, code)) if is_valid_code(code) => Ok(LinkCode(LinkRef {
                code: code.to_owned(),
                domain: domain_param(parts)?,
            })),
            _ => Err(ApiError::invalid_code()),
        }
    }
}

/// The `domain` query parameter: a normalised host (400 `invalid_domain`
/// otherwise), `None` when absent.
fn domain_param(parts: &Parts) -> Result<Option<String>, ApiError> {
    let Some(q) = parts.uri.query() else {
        return Ok(None);
    };
    let given = url::form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "domain")
        .map(|(_, v)| v.into_owned());
    match given {
        None => Ok(None),
        Some(d) => match shorturl_common::host::normalize_host(&d) {
            Some(n) if n == d => Ok(Some(n)),
            _ => Err(ApiError::bad_request(
                "invalid_domain",
                "domain: not a normalised host",
            )),
        },
    }
}

/// How much body a route reads.
pub trait Limit: Send + Sync {
    fn max(s: &AppState) -> usize;
}

/// `links.max_body_bytes`: one link.
pub struct One;
/// `links.max_batch_body_bytes`: a batch.
pub struct Batch;
/// `links.max_import_body_bytes`: a file to import.
pub struct Import;

impl Limit for One {
    fn max(s: &AppState) -> usize {
        s.links.cfg.links.max_body_bytes
    }
}
impl Limit for Batch {
    fn max(s: &AppState) -> usize {
        s.links.cfg.links.max_batch_body_bytes
    }
}
impl Limit for Import {
    fn max(s: &AppState) -> usize {
        s.links.cfg.links.max_import_body_bytes
    }
}

/// A slot for an import's file (`import::job::file_slot`), taken before
/// the body is read: `503 imports_busy` (with `Retry-After`) when the
/// origin holds as many files as it may.
pub struct ImportSlot(pub tokio::sync::SemaphorePermit<'static>);

impl FromRequestParts<AppState> for ImportSlot {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, _: &AppState) -> Result<Self, ApiError> {
        crate::import::job::file_slot()
            .map(ImportSlot)
            .ok_or_else(|| {
                ApiError::new(
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    "imports_busy",
                    "this origin is importing as many files as it may; retry shortly",
                )
                .retry_after(10)
            })
    }
}

/// The whole body, at most `L::max` bytes: 413 `body_too_large` at once
/// when `Content-Length` says more (the connection then closes), or once
/// more arrived. The router's `DefaultBodyLimit` does not apply: the
/// limits are the configuration's, per route.
pub struct Body<L: Limit>(pub Bytes, pub PhantomData<L>);

impl<L: Limit> FromRequest<AppState> for Body<L> {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let bytes = read_body_max(&parts.headers, body, L::max(s)).await?;
        Ok(Body(bytes, PhantomData))
    }
}

/// The search of `GET /api/v1/links` (`validate::search`).
pub struct Search(pub SearchRequest);

impl FromRequestParts<AppState> for Search {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        parse_search(parts.uri.query(), &s.links.cfg.links).map(Search)
    }
}

/// The filters and format of `GET /api/v1/export/links` (`validate::search`).
pub struct Export(pub ExportRequest);

impl FromRequestParts<AppState> for Export {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        parse_export(parts.uri.query(), &s.links.cfg.links).map(Export)
    }
}

/// The query of `GET /api/v1/links/{code}/stats` (`validate::stats`).
pub struct LinkStatsQuery(pub LinkQuery);

impl FromRequestParts<AppState> for LinkStatsQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        parse_link_stats(parts.uri.query(), &s.links.cfg.clicks, now_unix()).map(LinkStatsQuery)
    }
}

/// The query of `GET /api/v1/links/{code}/live` (only `domain`, which
/// [`LinkCode`] reads).
pub struct LinkLiveQuery;

impl<St: Send + Sync> FromRequestParts<St> for LinkLiveQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<Self, ApiError> {
        parse_live_link(parts.uri.query()).map(|()| LinkLiveQuery)
    }
}

/// The query of `GET /api/v1/live` (`validate::stats`).
pub struct TenantLive(pub LiveQuery);

impl<St: Send + Sync> FromRequestParts<St> for TenantLive {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<Self, ApiError> {
        parse_live_tenant(parts.uri.query()).map(TenantLive)
    }
}

/// The query of `GET /api/v1/stats` (`validate::stats`).
pub struct TenantStats(pub TenantQuery);

impl FromRequestParts<AppState> for TenantStats {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        parse_tenant_stats(parts.uri.query(), &s.links.cfg.clicks, now_unix()).map(TenantStats)
    }
}
