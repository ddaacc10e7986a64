//! `POST /api/v1/links/batch`: up to 1000 creations, each answered on its
//! own, in request order.

use super::extract::{Authorized, Batch, Body, Create};
use super::{ok, AppState};
use crate::error::ApiError;
use crate::links::{CreatedView, Creation, MAX_BATCH_ITEMS};
use crate::validate::parse_batch;
use axum::extract::State;
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde::Serialize;
use shorturl_common::error::ErrorBody;

/// One item's answer: the status a single creation would have had, and
/// its link or its error.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ItemResult {
    Created { status: u16, link: Box<CreatedView> },
    Failed { status: u16, error: ErrorBody },
}

impl From<ApiError> for ItemResult {
    fn from(e: ApiError) -> Self {
        ItemResult::Failed {
            status: e.status.as_u16(),
            error: ErrorBody::new(e.kind, e.message),
        }
    }
}

#[derive(Debug, Serialize)]
struct BatchView {
    results: Vec<ItemResult>,
}

/// `POST /api/v1/links/batch`.
pub async fn batch(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Create>,
    headers: HeaderMap,
    Body(body, ..): Body<Batch>,
) -> Result<Response, ApiError> {
    let items = parse_batch(&body, &s.links.cfg.links, MAX_BATCH_ITEMS)?;
    // One token per item; the items past what the bucket holds are 429.
    let granted = s.auth.admit_batch(&headers, items.len() as u32)? as usize;
    let mut results: Vec<Option<ItemResult>> = Vec::with_capacity(items.len());
    let mut valid = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        match item {
            _ if i >= granted => results.push(Some(
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!(
                        "over the creation rate limit: only the first {granted} items were taken"
                    ),
                )
                .into(),
            )),
            Ok(req) => {
                results.push(None);
                valid.push(req);
            }
            Err(e) => results.push(Some(e.into())),
        }
    }
    let mut created = s.links.create_batch(&caller, valid).await.into_iter();
    let mut first_unavailable = None;
    let results: Vec<ItemResult> = results
        .into_iter()
        .map(|r| match r {
            Some(r) => r,
            None => match created.next() {
                Some(Ok(Creation::New(link))) => ItemResult::Created {
                    status: 201,
                    link: Box::new(CreatedView {
                        link,
                        deduplicated: false,
                    }),
                },
                Some(Ok(Creation::Deduplicated(link))) => ItemResult::Created {
                    status: 200,
                    link: Box::new(CreatedView {
                        link,
                        deduplicated: true,
                    }),
                },
                Some(Err(e)) => {
                    let e = ApiError::from(e);
                    if e.status == StatusCode::SERVICE_UNAVAILABLE && first_unavailable.is_none() {
                        first_unavailable = Some(e.clone());
                    }
                    e.into()
                }
                None => ApiError::unavailable("this item was not processed; retry it").into(),
            },
        })
        .collect();
    // When every item failed for want of a dependency (MySQL down), the
    // batch as a whole is unavailable: one 503 with `Retry-After`.
    let all_unavailable = results
        .iter()
        .all(|r| matches!(r, ItemResult::Failed { status: 503, .. }));
    if let (true, Some(e)) = (all_unavailable, first_unavailable) {
        return Err(e);
    }
    Ok(ok(StatusCode::OK, &BatchView { results }))
}
