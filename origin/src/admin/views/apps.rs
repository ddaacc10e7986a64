//! Apps: each API app (key) with its scopes, merchant binding, rate limit
//! and its creations over the last hour and day, each linked to its page
//! (`tenant`).

use super::super::api_error;
use super::super::html::{self, esc, num, Nav};
use super::super::session::Session;
use crate::error::ApiError;
use crate::links::Links;
use axum::response::Response;
use http::StatusCode;
use std::fmt::Write;

/// `GET /admin/apps`.
pub async fn page(links: &Links, s: &Session, now: u64) -> Response {
    let mut rows = String::new();
    for a in &links.cfg.apps {
        let counts = async {
            let hour = links.store.created_since(now - 3600, Some(&a.name)).await?;
            let day = links
                .store
                .created_since(now - 86_400, Some(&a.name))
                .await?;
            Ok::<_, crate::store::DbError>((hour, day))
        };
        let (hour, day) = match counts.await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "app creations query failed");
                return api_error(
                    Some(s),
                    ApiError::unavailable(crate::error::DATABASE_UNAVAILABLE),
                );
            }
        };
        let scopes: Vec<&str> = a.scopes.iter().map(|x| x.as_str()).collect();
        let merchants: Vec<String> = a.merchants.iter().map(u64::to_string).collect();
        let _ = write!(
            rows,
            "<tr><td><a href=\"{page}\">{name}</a> <small><a href=\"/admin/links?app={q}\">links</a> · \
             <a href=\"/admin/live?app={q}\">live</a></small></td><td>{}</td><td>{}</td>\
             <td class=\"n\">{}/s (burst {})</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&scopes.join(", ")),
            if merchants.is_empty() { "—".into() } else { esc(&merchants.join(", ")) },
            a.rate_per_sec,
            a.burst,
            num(hour),
            num(day),
            name = esc(&a.name),
            page = esc(&super::tenant::app_path(&a.name)),
            q = esc(&url::form_urlencoded::byte_serialize(a.name.as_bytes()).collect::<String>()),
        );
    }
    let main = format!(
        "<table id=\"apps\"><thead><tr><th>App</th><th>Scopes</th><th>Merchants</th><th class=\"n\">Rate limit</th>\
         <th class=\"n\">Created, last hour</th><th class=\"n\">Created, last day</th></tr></thead><tbody>{rows}</tbody></table>"
    );
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Apps, "Apps", &main),
    )
}
