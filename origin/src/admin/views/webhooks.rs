//! Webhooks: every app's endpoints with their delivery counts, a form to
//! add one (its secret shown once), enable/disable/delete (admins), and
//! one endpoint's delivery log with a resend button per delivery.
//! Everything goes through `webhooks::Webhooks`, as the API does.

use super::super::api_error;
use super::super::html::{self, csrf_field, esc, num, Nav};
use super::super::session::Session;
use crate::config::Role;
use crate::error::ApiError;
use crate::form::Form;
use crate::links::Links;
use crate::store::webhooks::EventType;
use crate::tenancy::{Caller, Scope};
use crate::webhooks::endpoints::EndpointInput;
use crate::webhooks::{EndpointError, Webhooks};
use axum::response::Response;
use http::StatusCode;
use std::fmt::Write;

/// Deliveries the log page shows.
const LOG_ROWS: u32 = 100;

/// The console acts on every app's endpoints.
fn console_caller(s: &Session) -> Caller {
    Caller::new(s.user.actor(), [Scope::Admin], [])
}

fn failed(s: &Session, e: EndpointError) -> Response {
    api_error(Some(s), ApiError::from(e))
}

/// `GET /admin/webhooks` (and the answer of its forms, with `message`).
pub async fn page(links: &Links, hooks: &Webhooks, s: &Session, message: Option<&str>) -> Response {
    let caller = console_caller(s);
    let endpoints = match hooks.list(&caller, None).await {
        Ok(e) => e,
        Err(e) => return failed(s, e),
    };
    let admin = s.user.role == Role::Admin;
    let csrf = csrf_field(s);
    let mut main = String::new();
    if let Some(m) = message {
        let _ = write!(main, "<p class=\"msg\" id=\"message\">{}</p>", esc(m));
    }
    let mut rows = String::new();
    for e in &endpoints {
        let counts = match hooks.read(&caller, &e.id).await {
            Ok(v) => v.deliveries,
            Err(err) => return failed(s, err),
        };
        let (pending, delivered, dead) =
            counts.map_or((0, 0, 0), |c| (c.pending, c.delivered, c.dead));
        let actions = if admin {
            let toggle = if e.enabled { "disable" } else { "enable" };
            format!(
                "<form method=\"post\" action=\"/admin/webhooks\">{csrf}\
                 <input type=\"hidden\" name=\"id\" value=\"{id}\">\
                 <button type=\"submit\" name=\"op\" value=\"{toggle}\">{toggle}</button> \
                 <button type=\"submit\" name=\"op\" value=\"delete\">delete</button></form>",
                id = esc(&e.id)
            )
        } else {
            String::new()
        };
        let _ = write!(
            rows,
            "<tr><td>{app}</td><td><a href=\"/admin/webhooks/{id}\"><code>{url}</code></a><br>{desc}</td>\
             <td>{events}</td><td>{enabled}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{actions}</td></tr>",
            num(pending),
            num(delivered),
            num(dead),
            app = esc(&e.app),
            id = esc(&e.id),
            url = esc(&e.url),
            desc = esc(&e.description),
            events = esc(&e.events.join(", ")),
            enabled = if e.enabled { "yes" } else { "no" },
        );
    }
    let _ = write!(
        main,
        "<p>Signed POSTs of each app's link changes (docs/integrations.md: verification, \
         guarantees).</p><table id=\"endpoints\"><thead><tr><th>App</th><th>Endpoint</th><th>Events</th>\
         <th>Enabled</th><th class=\"n\">Pending</th><th class=\"n\">Delivered</th><th class=\"n\">Dead</th>\
         <th></th></tr></thead><tbody>{rows}</tbody></table>"
    );
    if admin {
        let apps: String = links
            .cfg
            .apps
            .iter()
            .map(|a| format!("<option>{}</option>", esc(&a.name)))
            .collect();
        let events: String = EventType::ALL
            .iter()
            .map(|t| {
                format!(
                    "<label><input type=\"checkbox\" name=\"events\" value=\"{0}\" checked> {0}</label> ",
                    t.as_str()
                )
            })
            .collect();
        let _ = write!(
            main,
            "<h2>Add an endpoint</h2><form method=\"post\" action=\"/admin/webhooks\" id=\"add-form\">{csrf}\
             <input type=\"hidden\" name=\"op\" value=\"add\">\
             <label>App <select name=\"app\">{apps}</select></label> \
             <label>URL <input name=\"url\" type=\"url\" required maxlength=\"2048\" placeholder=\"https://\"></label> \
             <label>Description <input name=\"description\" maxlength=\"200\"></label><br>{events}\
             <button type=\"submit\">Add</button></form>"
        );
    }
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Webhooks, "Webhooks", &main),
    )
}

/// `POST /admin/webhooks`: `op=add` (app, url, events, description),
/// `enable`, `disable`, `delete` (id); admins only.
pub async fn post(links: &Links, hooks: &Webhooks, s: &Session, form: &Form) -> Response {
    if s.user.role != Role::Admin {
        return html::error(
            Some(s),
            StatusCode::FORBIDDEN,
            "only admins change webhooks",
        );
    }
    let caller = console_caller(s);
    let id = form.get("id").unwrap_or_default();
    let done = match form.get("op") {
        Some("add") => {
            let app = form.get("app").unwrap_or_default();
            if !links.cfg.apps.iter().any(|a| a.name == app) {
                return html::error(Some(s), StatusCode::BAD_REQUEST, "no such app");
            }
            let input = EndpointInput {
                url: form.get("url").map(str::to_owned),
                events: Some(form.all("events").map(str::to_owned).collect()),
                description: form.get("description").map(str::to_owned),
                ..EndpointInput::default()
            };
            let owner = Caller::new(app, [Scope::LinksManage], []);
            hooks.create(&owner, input).await.map(|v| {
                format!(
                    "Endpoint {} added for {}. Its signing secret, shown this once: {}",
                    v.id,
                    v.app,
                    v.secret.unwrap_or_default()
                )
            })
        }
        Some(op @ ("enable" | "disable")) => {
            let input = EndpointInput {
                enabled: Some(op == "enable"),
                ..EndpointInput::default()
            };
            hooks
                .update(&caller, id, input)
                .await
                .map(|v| format!("{} {op}d", v.url))
        }
        Some("delete") => hooks
            .delete(&caller, id)
            .await
            .map(|()| "endpoint deleted".to_owned()),
        _ => return html::error(Some(s), StatusCode::BAD_REQUEST, "unknown operation"),
    };
    match done {
        Ok(m) => page(links, hooks, s, Some(&m)).await,
        Err(e) => failed(s, e),
    }
}

/// `GET /admin/webhooks/{id}`: the endpoint and its latest deliveries.
pub async fn log(hooks: &Webhooks, s: &Session, id: &str, message: Option<&str>) -> Response {
    let caller = console_caller(s);
    let e = match hooks.read(&caller, id).await {
        Ok(e) => e,
        Err(err) => return failed(s, err),
    };
    let page = match hooks.deliveries(&caller, id, None, None, LOG_ROWS).await {
        Ok(p) => p,
        Err(err) => return failed(s, err),
    };
    let may_resend = s.user.role == Role::Admin;
    let csrf = csrf_field(s);
    let mut main = String::new();
    if let Some(m) = message {
        let _ = write!(main, "<p class=\"msg\" id=\"message\">{}</p>", esc(m));
    }
    let _ = write!(
        main,
        "<p><a href=\"/admin/webhooks\">All endpoints</a> · {} · <code>{}</code> · {}</p>",
        esc(&e.app),
        esc(&e.url),
        esc(&e.events.join(", "))
    );
    let mut rows = String::new();
    for d in &page.deliveries {
        let resend = if may_resend {
            format!(
                "<form method=\"post\" action=\"/admin/webhooks/{id}\">{csrf}\
                 <input type=\"hidden\" name=\"delivery\" value=\"{d}\">\
                 <button type=\"submit\" name=\"op\" value=\"resend\">resend</button></form>",
                id = esc(&e.id),
                d = esc(&d.id)
            )
        } else {
            String::new()
        };
        let _ = write!(
            rows,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td><a href=\"/admin/links/{link}\">{link}</a></td>\
             <td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{resend}</td></tr>",
            esc(&d.created_at),
            esc(&d.event_id),
            esc(&d.ty),
            d.state,
            d.attempts,
            esc(&match (&d.last_status, &d.last_error) {
                (Some(st), None) => st.to_string(),
                (_, Some(err)) => err.clone(),
                (None, None) => "—".into(),
            }),
            d.last_latency_ms.map_or("—".into(), |ms| format!("{ms} ms")),
            link = esc(&d.link),
        );
    }
    let _ = write!(
        main,
        "<table id=\"deliveries\"><thead><tr><th>Created (UTC)</th><th>Event</th><th>Type</th><th>Link</th>\
         <th>State</th><th class=\"n\">Attempts</th><th>Last answer</th><th class=\"n\">Latency</th><th></th>\
         </tr></thead><tbody>{rows}</tbody></table>"
    );
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Webhooks, "Webhook deliveries", &main),
    )
}

/// `POST /admin/webhooks/{id}`: `op=resend` (delivery); admins only.
pub async fn resend(hooks: &Webhooks, s: &Session, id: &str, form: &Form) -> Response {
    if s.user.role != Role::Admin {
        return html::error(
            Some(s),
            StatusCode::FORBIDDEN,
            "only admins resend deliveries",
        );
    }
    if form.get("op") != Some("resend") {
        return html::error(Some(s), StatusCode::BAD_REQUEST, "unknown operation");
    }
    let delivery = form.get("delivery").unwrap_or_default();
    match hooks.resend(&console_caller(s), id, delivery).await {
        Ok(d) => {
            log(
                hooks,
                s,
                id,
                Some(&format!("delivery {} is pending again", d.id)),
            )
            .await
        }
        Err(e) => failed(s, e),
    }
}
