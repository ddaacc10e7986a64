//! `/api/v1/webhooks…`: an app's endpoints, their delivery log and resend
//! (`webhooks::endpoints`). Reads need `links:read`, changes `links:manage`.

use super::extract::{Authorized, Body, Manage, One, Read};
use super::{ok, AppState};
use crate::error::{ApiError, DATABASE_UNAVAILABLE};
use crate::validate::{parse_deliveries, parse_webhooks_list};
use crate::webhooks::endpoints::EndpointInput;
use crate::webhooks::EndpointError;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

impl From<EndpointError> for ApiError {
    fn from(e: EndpointError) -> ApiError {
        let bad = |kind, e: &EndpointError| ApiError::bad_request(kind, e.to_string());
        match &e {
            EndpointError::Url(_) => bad("invalid_webhook_url", &e),
            EndpointError::Events(_) => bad("invalid_events", &e),
            EndpointError::Description => bad("invalid_description", &e),
            EndpointError::Body(_) => bad("invalid_json", &e),
            EndpointError::NotConfigured => ApiError::new(
                StatusCode::CONFLICT,
                "webhooks_not_configured",
                e.to_string(),
            ),
            EndpointError::TooMany(_) => {
                ApiError::new(StatusCode::CONFLICT, "too_many_endpoints", e.to_string())
            }
            EndpointError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "webhook_not_found", e.to_string())
            }
            EndpointError::DeliveryNotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "delivery_not_found", e.to_string())
            }
            EndpointError::Db(_) => ApiError::unavailable(DATABASE_UNAVAILABLE),
            EndpointError::Seal(err) => {
                tracing::error!(error = %err, "webhooks: sealing a secret failed");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}

/// `GET /api/v1/webhooks[?app=]`.
pub async fn list(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Read>,
    uri: http::Uri,
) -> Result<Response, ApiError> {
    let app = parse_webhooks_list(uri.query())?;
    let endpoints = s.webhooks.list(&caller, app.as_deref()).await?;
    Ok(ok(
        StatusCode::OK,
        &serde_json::json!({ "endpoints": endpoints }),
    ))
}

/// `POST /api/v1/webhooks`: 201, the endpoint with its secret (shown once).
pub async fn create(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Manage>,
    Body(body, ..): Body<One>,
) -> Result<Response, ApiError> {
    let v = s
        .webhooks
        .create(&caller, EndpointInput::parse(&body)?)
        .await?;
    let mut r = ok(StatusCode::CREATED, &v);
    if let Ok(l) = HeaderValue::from_str(&format!("/api/v1/webhooks/{}", v.id)) {
        r.headers_mut().insert(header::LOCATION, l);
    }
    Ok(r)
}

/// `GET /api/v1/webhooks/{id}`.
pub async fn read(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(ok(StatusCode::OK, &s.webhooks.read(&caller, &id).await?))
}

/// `PATCH /api/v1/webhooks/{id}`.
pub async fn update(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Manage>,
    Path(id): Path<String>,
    Body(body, ..): Body<One>,
) -> Result<Response, ApiError> {
    let input = EndpointInput::parse(&body)?;
    Ok(ok(
        StatusCode::OK,
        &s.webhooks.update(&caller, &id, input).await?,
    ))
}

/// `DELETE /api/v1/webhooks/{id}`: 204.
pub async fn delete(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Manage>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    s.webhooks.delete(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /api/v1/webhooks/{id}/deliveries[?state=&before=&limit=]`.
pub async fn deliveries(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Read>,
    Path(id): Path<String>,
    uri: http::Uri,
) -> Result<Response, ApiError> {
    let q = parse_deliveries(uri.query())?;
    let page = s
        .webhooks
        .deliveries(&caller, &id, q.state, q.before, q.limit)
        .await?;
    Ok(ok(StatusCode::OK, &page))
}

/// `POST /api/v1/webhooks/{id}/deliveries/{delivery}/resend`: 202.
pub async fn resend(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Manage>,
    Path((id, delivery)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let d = s.webhooks.resend(&caller, &id, &delivery).await?;
    Ok(ok(StatusCode::ACCEPTED, &d))
}
