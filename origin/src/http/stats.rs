//! The stats API (`GET /api/v1/links/{code}/stats`, `GET /api/v1/stats`):
//! authentication, query parsing and answers. The queries live in
//! `crate::clicks::stats`; this file only translates.

use super::api::{check_code, require};
use super::{ok, AppState};
use crate::error::ApiError;
use crate::tenancy::Scope;
use crate::validate::{parse_link_stats, parse_tenant_stats};
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use shorturl_common::time::now_unix;

/// `GET /api/v1/links/{code}/stats`.
pub async fn link(
    s: &AppState,
    headers: &HeaderMap,
    code: &str,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let caller = s.auth.authenticate(headers)?;
    require(&caller, Scope::StatsRead)?;
    check_code(code)?;
    let range = parse_link_stats(query, &s.links.cfg.clicks, now_unix())?;
    let stats = s.links.link_stats(&caller, code, &range).await?;
    Ok(ok(StatusCode::OK, &stats))
}

/// `GET /api/v1/stats`.
pub async fn tenant(
    s: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let caller = s.auth.authenticate(headers)?;
    require(&caller, Scope::StatsRead)?;
    let (filter, range, limit) = parse_tenant_stats(query, &s.links.cfg.clicks, now_unix())?;
    let stats = s
        .links
        .tenant_stats(&caller, &filter, &range, limit)
        .await?;
    Ok(ok(StatusCode::OK, &stats))
}
