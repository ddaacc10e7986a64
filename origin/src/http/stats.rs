//! The stats API (`GET /api/v1/links/{code}/stats`, `GET /api/v1/stats`):
//! authentication, query parsing and answers. The queries live in
//! `crate::clicks::stats`; this file only translates.

use super::extract::{Authorized, LinkCode, LinkStatsQuery, Stats, TenantStats};
use super::{ok, AppState};
use crate::error::ApiError;
use axum::extract::State;
use axum::response::Response;
use http::StatusCode;

/// `GET /api/v1/links/{code}/stats`.
pub async fn link(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Stats>,
    LinkCode(code): LinkCode,
    LinkStatsQuery(range): LinkStatsQuery,
) -> Result<Response, ApiError> {
    let stats = s.links.link_stats(&caller, &code, &range).await?;
    Ok(ok(StatusCode::OK, &stats))
}

/// `GET /api/v1/stats`.
pub async fn tenant(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Stats>,
    q: TenantStats,
) -> Result<Response, ApiError> {
    let stats = s.links.tenant_stats(&caller, &q.0).await?;
    Ok(ok(StatusCode::OK, &stats))
}
