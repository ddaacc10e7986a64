//! Screening: the destination screening policy (protocol 4.7) — its lists
//! and managed entries, a form to add or change an entry and one to remove
//! each (admins), and the links it flags now.

use super::super::api_error;
use super::super::html::{self, csrf_field, esc, num, Nav};
use super::super::session::Session;
use crate::config::Role;
use crate::error::{ApiError, DATABASE_UNAVAILABLE};
use crate::form::Form;
use crate::links::Links;
use crate::screening::Action;
use axum::response::Response;
use http::StatusCode;
use shorturl_common::code::link_key;
use std::fmt::Write;

/// Links the page lists.
const LISTED: u32 = 200;

/// `GET /admin/screening`.
pub async fn page(links: &Links, s: &Session, message: Option<&str>) -> Response {
    let flagged = match links.store.screened_links(LISTED).await {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "screened links query failed");
            return api_error(Some(s), ApiError::unavailable(DATABASE_UNAVAILABLE));
        }
    };
    let sc = &links.screening;
    let admin = s.user.role == Role::Admin;
    let csrf = csrf_field(s);
    let mut main = String::new();
    if let Some(m) = message {
        let _ = write!(main, "<p class=\"msg\" id=\"message\">{}</p>", esc(m));
    }
    let policy = sc.policy();
    let _ = write!(
        main,
        "<p id=\"policy\">{} screened domains in force. Links to a <strong>block</strong>ed or \
         <strong>warn</strong>ed domain (or a subdomain) cannot be created; existing ones show a \
         warning page (a way on only for warn). <strong>allow</strong> opens a subdomain of a \
         listed domain.</p>",
        num(policy.len() as u64)
    );
    let mut lists = String::new();
    for (path, action, n) in sc.lists() {
        let _ = write!(
            lists,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"n\">{}</td></tr>",
            esc(&path.display().to_string()),
            action.as_str(),
            num(n as u64)
        );
    }
    if !lists.is_empty() {
        let _ = write!(
            main,
            "<h2>Lists</h2><table id=\"lists\"><thead><tr><th>File</th><th>Action</th>\
             <th class=\"n\">Domains</th></tr></thead><tbody>{lists}</tbody></table>"
        );
    }
    let mut rows = String::new();
    for e in sc.managed() {
        let remove = if admin {
            format!(
                "<form method=\"post\" action=\"/admin/screening\">{csrf}\
                 <input type=\"hidden\" name=\"op\" value=\"remove\">\
                 <input type=\"hidden\" name=\"domain\" value=\"{d}\">\
                 <button type=\"submit\">Remove</button></form>",
                d = esc(&e.domain)
            )
        } else {
            String::new()
        };
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{remove}</td></tr>",
            esc(&e.domain),
            e.action.as_str(),
            esc(e.note.as_deref().unwrap_or("")),
            esc(&e.created_by),
            super::when(e.updated_at),
        );
    }
    let _ = write!(
        main,
        "<h2>Managed entries</h2><table id=\"entries\"><thead><tr><th>Domain</th><th>Action</th>\
         <th>Note</th><th>By</th><th>Updated (UTC)</th><th></th></tr></thead><tbody>{rows}</tbody></table>"
    );
    if admin {
        let _ = write!(
            main,
            "<form method=\"post\" action=\"/admin/screening\" id=\"add-form\">{csrf}\
             <input type=\"hidden\" name=\"op\" value=\"add\">\
             <label>Domain <input name=\"domain\" required maxlength=\"253\"></label> \
             <label>Action <select name=\"action\"><option>block</option><option>warn</option>\
             <option>allow</option></select></label> \
             <label>Note <input name=\"note\" maxlength=\"200\"></label> \
             <button type=\"submit\">Add or change</button></form>"
        );
    }
    let mut links_rows = String::new();
    for l in &flagged {
        let _ = write!(
            links_rows,
            "<tr><td><a href=\"/admin/links/{path}\">{code}</a></td><td>{domain}</td>\
             <td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&l.screen),
            esc(&l.url),
            esc(&l.app),
            code = esc(&l.code),
            domain = esc(&l.domain),
            path = esc(&link_key(&l.code, &l.domain)),
        );
    }
    let _ = write!(
        main,
        "<h2>Flagged links</h2><table id=\"flagged\"><thead><tr><th>Code</th><th>Domain</th>\
         <th>Screened</th><th>Destination</th><th>App</th></tr></thead><tbody>{links_rows}</tbody></table>"
    );
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Screening, "Screening", &main),
    )
}

/// `POST /admin/screening`: `op=add` (domain, action, note) or `op=remove`
/// (domain); admins only.
pub async fn post(links: &Links, s: &Session, form: &Form) -> Response {
    if s.user.role != Role::Admin {
        return html::error(
            Some(s),
            StatusCode::FORBIDDEN,
            "only admins change the screening policy",
        );
    }
    let domain = form.get("domain").unwrap_or_default().trim();
    let actor = s.user.actor();
    let sc = &links.screening;
    let done = match form.get("op") {
        Some("add") => {
            let Some(action) = form.get("action").and_then(Action::parse) else {
                return bad(s, "action must be block, warn or allow");
            };
            let note = form
                .get("note")
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned);
            sc.put(&links.store, domain, action, note, &actor)
                .await
                .map(|(e, _)| format!("{} is now {}", e.domain, e.action.as_str()))
        }
        Some("remove") => sc.remove(&links.store, domain).await.map(|removed| {
            if removed {
                format!("{} removed", domain.to_ascii_lowercase())
            } else {
                format!("{} was not listed", domain.to_ascii_lowercase())
            }
        }),
        _ => return bad(s, "unknown operation"),
    };
    match done {
        Ok(m) => page(links, s, Some(&m)).await,
        Err(e) => api_error(Some(s), ApiError::from(e)),
    }
}

fn bad(s: &Session, m: &str) -> Response {
    html::error(Some(s), StatusCode::BAD_REQUEST, m)
}
