//! The screening API (`/api/v1/screening...`, `admin` scope): the managed
//! entries of the destination screening policy and the links it flags
//! (protocol 4.7). The rules live in `crate::screening`; this file only
//! translates.

use super::extract::{AdminScope, Authorized, Body, One};
use super::{ok, AppState};
use crate::error::{ApiError, DATABASE_UNAVAILABLE};
use crate::screening::{Action, EntryError};
use crate::store::ScreenEntry;
use axum::extract::State;
use axum::response::Response;
use http::{StatusCode, Uri};
use serde_json::{json, Value};

/// Links listed by `GET /api/v1/screening/links`.
const MAX_LISTED: u32 = 1000;

/// The `{domain}` of the path (as is: the screening module validates it;
/// a domain has nothing to percent-decode).
fn domain_of(uri: &Uri) -> &str {
    uri.path().rsplit('/').next().unwrap_or_default()
}

fn entry_view(e: &ScreenEntry) -> Value {
    json!({
        "domain": e.domain,
        "action": e.action.as_str(),
        "note": e.note,
        "created_by": e.created_by,
        "updated_at": e.updated_at,
    })
}

impl From<EntryError> for ApiError {
    fn from(e: EntryError) -> Self {
        match e {
            EntryError::Domain => ApiError::bad_request("invalid_domain", e.to_string()),
            EntryError::Note => ApiError::bad_request("invalid_note", e.to_string()),
            EntryError::Database(_) => ApiError::unavailable(DATABASE_UNAVAILABLE),
        }
    }
}

/// `GET /api/v1/screening`: the policy in force (its managed entries, its
/// lists, how many domains in all).
pub async fn policy(
    State(s): State<AppState>,
    Authorized(..): Authorized<AdminScope>,
) -> Result<Response, ApiError> {
    let sc = &s.links.screening;
    let entries: Vec<Value> = sc.managed().iter().map(entry_view).collect();
    let lists: Vec<Value> = sc
        .lists()
        .into_iter()
        .map(|(path, action, n)| {
            json!({"path": path.display().to_string(), "action": action.as_str(), "domains": n})
        })
        .collect();
    let p = sc.policy();
    Ok(ok(
        StatusCode::OK,
        &json!({
            "entries": entries,
            "lists": lists,
            "domains": p.len(),
            "fingerprint": p.fingerprint(),
        }),
    ))
}

/// `PUT /api/v1/screening/domains/{domain}` `{"action": …, "note": …}`.
pub async fn put(
    State(s): State<AppState>,
    Authorized(caller, ..): Authorized<AdminScope>,
    uri: Uri,
    Body(body, ..): Body<One>,
) -> Result<Response, ApiError> {
    let invalid = || ApiError::bad_request("invalid_json", "the body must be a JSON object");
    let v: Value = serde_json::from_slice(&body).map_err(|_| invalid())?;
    let obj = v.as_object().ok_or_else(invalid)?;
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "action" | "note"))
    {
        return Err(ApiError::bad_request(
            "unknown_field",
            format!("unknown field {k:?} (action, note)"),
        ));
    }
    let action = obj
        .get("action")
        .and_then(Value::as_str)
        .and_then(Action::parse)
        .ok_or_else(|| {
            ApiError::bad_request("invalid_action", "action must be block, warn or allow")
        })?;
    let note = match obj.get("note") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) => Some(n.clone()),
        Some(_) => return Err(EntryError::Note.into()),
    };
    let (e, created) = s
        .links
        .screening
        .put(&s.links.store, domain_of(&uri), action, note, &caller.app)
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(ok(status, &entry_view(&e)))
}

/// `DELETE /api/v1/screening/domains/{domain}`.
pub async fn delete(
    State(s): State<AppState>,
    Authorized(..): Authorized<AdminScope>,
    uri: Uri,
) -> Result<Response, ApiError> {
    if s.links
        .screening
        .remove(&s.links.store, domain_of(&uri))
        .await?
    {
        let domain = domain_of(&uri).to_ascii_lowercase();
        Ok(ok(
            StatusCode::OK,
            &json!({"domain": domain, "removed": true}),
        ))
    } else {
        Err(ApiError::not_found())
    }
}

/// `GET /api/v1/screening/links`: the active links whose record carries
/// `w`, blocked first.
pub async fn links(
    State(s): State<AppState>,
    Authorized(..): Authorized<AdminScope>,
) -> Result<Response, ApiError> {
    let rows = s
        .links
        .store
        .screened_links(MAX_LISTED)
        .await
        .map_err(|_| ApiError::unavailable(DATABASE_UNAVAILABLE))?;
    let links: Vec<Value> = rows
        .iter()
        .map(|l| {
            json!({"code": l.code, "domain": l.domain, "url": l.url, "screened": l.screen, "app": l.app})
        })
        .collect();
    Ok(ok(StatusCode::OK, &json!({ "links": links })))
}
