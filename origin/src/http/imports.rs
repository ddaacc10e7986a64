//! `POST /api/v1/imports` and `GET /api/v1/imports/{id}`: imports through
//! the API (`import::job`).

use super::extract::{Authorized, Body, Create, Import, ImportSlot};
use super::{ok, AppState};
use crate::error::ApiError;
use crate::import::job::{self, JobError, NewJob};
use crate::validate::parse_import;
use axum::extract::{Path, State};
use axum::response::Response;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use std::sync::Arc;

impl From<JobError> for ApiError {
    fn from(e: JobError) -> ApiError {
        match e {
            JobError::File(e) => ApiError::bad_request("invalid_file", e.to_string()),
            JobError::Running(id) => ApiError::new(
                StatusCode::CONFLICT,
                "import_running",
                format!("an import of this app is running: /api/v1/imports/{id}"),
            ),
            JobError::Link(e) => e.into(),
        }
    }
}

/// `POST /api/v1/imports`: 202 with the job.
pub async fn create(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Create>,
    ImportSlot(slot): ImportSlot,
    uri: http::Uri,
    headers: HeaderMap,
    Body(body, ..): Body<Import>,
) -> Result<Response, ApiError> {
    let q = parse_import(uri.query())?;
    // The job's creations cost the app's creation tokens, as the batch's:
    // the key stays with the task (in memory) to take them.
    let auth = Arc::clone(&s.auth);
    let mut key = HeaderMap::new();
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        key.insert(header::AUTHORIZATION, v.clone());
    }
    let pace: job::Pace = Box::new(move |n| auth.admit_batch(&key, n));
    let view = job::start(
        Arc::clone(&s.links),
        caller,
        pace,
        NewJob {
            format: q.format,
            domain: q.domain,
            dry_run: q.dry_run,
            body,
        },
        slot,
    )
    .await?;
    let mut r = ok(StatusCode::ACCEPTED, &view);
    if let Ok(v) = HeaderValue::from_str(&format!("/api/v1/imports/{}", view.id)) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// `GET /api/v1/imports/{id}`.
pub async fn read(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<Create>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match job::view(&s.links, &caller, &id).await? {
        Some(v) => Ok(ok(StatusCode::OK, &v)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "import_not_found",
            "no such import",
        )),
    }
}
