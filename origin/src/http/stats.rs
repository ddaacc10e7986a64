//! The stats API (`GET /api/v1/links/{code}/stats`, `GET /api/v1/stats`)
//! and the live view (`GET /api/v1/links/{code}/live`, `GET
//! /api/v1/live`): authentication, query parsing and answers. The queries
//! live in `crate::clicks::stats` and `crate::clicks::live`; this file
//! only translates.

use super::extract::{
    Authorized, LinkCode, LinkLiveQuery, LinkStatsQuery, Stats, TenantLive, TenantStats,
};
use super::{ok, AppState};
use crate::clicks::stats::groups_csv;
use crate::clicks::GroupCount;
use crate::error::ApiError;
use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use shorturl_common::time::now_unix;

/// `GET /api/v1/links/{code}/stats`.
pub async fn link(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Stats>,
    LinkCode(code): LinkCode,
    LinkStatsQuery(q): LinkStatsQuery,
) -> Result<Response, ApiError> {
    let stats = s
        .links
        .link_stats(&caller, &code, &q.range, q.group_by)
        .await?;
    Ok(match (q.csv, &stats.groups, stats.group_by) {
        (true, Some(groups), Some(by)) => csv(&format!("{}-{by}", stats.code), groups),
        _ => ok(StatusCode::OK, &stats),
    })
}

/// `GET /api/v1/stats`.
pub async fn tenant(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Stats>,
    q: TenantStats,
) -> Result<Response, ApiError> {
    let stats = s.links.tenant_stats(&caller, &q.0).await?;
    Ok(match (q.0.csv, &stats.groups, stats.group_by) {
        (true, Some(groups), Some(by)) => csv(&format!("clicks-{by}"), groups),
        _ => ok(StatusCode::OK, &stats),
    })
}

/// The groups of a `group_by` as a CSV file (`format=csv`): `value,human`.
fn csv(name: &str, groups: &[GroupCount]) -> Response {
    crate::download::csv(name, groups_csv(groups))
}

/// `GET /api/v1/links/{code}/live`.
pub async fn link_live(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Stats>,
    LinkCode(code): LinkCode,
    _: LinkLiveQuery,
) -> Result<Response, ApiError> {
    let live = s.links.live_link(&caller, &code, now_unix()).await?;
    Ok(ok(StatusCode::OK, &live))
}

/// `GET /api/v1/live`.
pub async fn tenant_live(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Stats>,
    q: TenantLive,
) -> Result<Response, ApiError> {
    let live = s.links.live_tenant(&caller, &q.0, now_unix())?;
    Ok(ok(StatusCode::OK, &live))
}
