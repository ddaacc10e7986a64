//! Search: the API's filters (code, URL exact or prefix, domain, app,
//! merchant, state, creation dates, tag) as a GET form, one keyset page at a
//! time, each row with its total human clicks.

use super::super::html::{self, esc, num, Nav};
use super::super::session::Session;
use super::super::{api_error, caller, Req};
use super::when;
use crate::links::{LinkView, Links};
use crate::validate::{parse_export, parse_search};
use axum::response::Response;
use http::StatusCode;
use shorturl_common::config::FieldError;
use shorturl_common::time::parse_rfc3339;
use std::sync::Arc;

/// Links per page.
const PAGE: u32 = 50;

/// The console's search fields, as typed.
#[derive(Debug, Default)]
struct Fields {
    code: String,
    url: String,
    url_match: String,
    domain: String,
    app: String,
    kdt_id: String,
    state: String,
    created_from: String,
    created_to: String,
    tag: String,
    cursor: String,
}

impl Fields {
    fn of(req: &Req) -> Fields {
        let p = |n: &str| {
            req.param(n)
                .map(|v| v.trim().to_owned())
                .unwrap_or_default()
        };
        Fields {
            code: p("code"),
            url: p("url"),
            url_match: p("url_match"),
            domain: p("domain"),
            app: p("app"),
            kdt_id: p("kdt_id"),
            state: p("state"),
            created_from: p("created_from"),
            created_to: p("created_to"),
            tag: p("tag"),
            cursor: p("cursor"),
        }
    }

    /// The console's own query string (for the next page's link).
    fn query(&self, cursor: Option<&str>) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("code", &self.code),
            ("url", &self.url),
            ("url_match", &self.url_match),
            ("domain", &self.domain),
            ("app", &self.app),
            ("kdt_id", &self.kdt_id),
            ("state", &self.state),
            ("created_from", &self.created_from),
            ("created_to", &self.created_to),
            ("tag", &self.tag),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        if let Some(c) = cursor {
            q.append_pair("cursor", c);
        }
        q.finish()
    }

    /// The API's query string: empty fields left out, dates as the start
    /// of the day (`created_to` inclusive: the start of the next day).
    fn api_query(&self) -> Result<String, FieldError> {
        let mut q = url::form_urlencoded::Serializer::for_suffix(self.filters_query()?, 0);
        q.append_pair("limit", &PAGE.to_string());
        if !self.cursor.is_empty() {
            q.append_pair("cursor", &self.cursor);
        }
        Ok(q.finish())
    }

    /// The API's filters alone (an export's query, with `format`).
    fn filters_query(&self) -> Result<String, FieldError> {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        let mut put = |k: &str, v: &str| {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        };
        put("code", &self.code);
        match self.url_match.as_str() {
            "prefix" => put("url_prefix", &self.url),
            _ => put("url", &self.url),
        }
        put("domain", &self.domain);
        put("app", &self.app);
        put("kdt_id", &self.kdt_id);
        put("state", &self.state);
        put("tag", &self.tag);
        let date = |name: &str, d: &str, add: u64| -> Result<String, FieldError> {
            parse_rfc3339(&format!("{d}T00:00:00Z"))
                .map(|t| shorturl_common::time::rfc3339(t + add))
                .ok_or_else(|| FieldError::new(name, "must be a date (YYYY-MM-DD)"))
        };
        if !self.created_from.is_empty() {
            put(
                "created_from",
                &date("created from", &self.created_from, 0)?,
            );
        }
        if !self.created_to.is_empty() {
            put("created_to", &date("created to", &self.created_to, 86_400)?);
        }
        Ok(q.finish())
    }
}

fn input(name: &str, label: &str, value: &str, kind: &str) -> String {
    format!(
        "<label>{label}<input name=\"{name}\" id=\"f-{name}\" type=\"{kind}\" value=\"{}\"></label>",
        esc(value)
    )
}

fn select(name: &str, label: &str, value: &str, options: &[(&str, &str)]) -> String {
    let opts: String = options
        .iter()
        .map(|(v, t)| {
            let sel = if *v == value { " selected" } else { "" };
            format!("<option value=\"{v}\"{sel}>{t}</option>")
        })
        .collect();
    format!("<label>{label}<select name=\"{name}\" id=\"f-{name}\">{opts}</select></label>")
}

fn form(f: &Fields) -> String {
    format!(
        "<form class=\"search\" method=\"get\" action=\"/admin/links\">{}{}{}{}{}{}{}{}{}{}\
         <button type=\"submit\" id=\"search\">Search</button></form>",
        input("code", "Code", &f.code, "text"),
        input("url", "Long URL", &f.url, "text"),
        select(
            "url_match",
            "URL match",
            &f.url_match,
            &[("exact", "exact"), ("prefix", "prefix")]
        ),
        input("domain", "Domain", &f.domain, "text"),
        input("app", "App", &f.app, "text"),
        input("kdt_id", "Merchant (kdt_id)", &f.kdt_id, "text"),
        select(
            "state",
            "State",
            &f.state,
            &[
                ("", "any"),
                ("active", "active"),
                ("disabled", "disabled"),
                ("expired", "expired"),
                ("deleted", "deleted")
            ],
        ),
        input("created_from", "Created from", &f.created_from, "date"),
        input(
            "created_to",
            "Created to (inclusive)",
            &f.created_to,
            "date"
        ),
        input("tag", "Tag", &f.tag, "text"),
    )
}

/// One result row.
pub fn row(l: &LinkView) -> String {
    format!(
        "<tr><td><a href=\"/admin/links/{path}\">{code}</a></td><td>{domain}</td><td class=\"url\">{url}</td>\
         <td class=\"state-{state}\">{state}</td><td>{app}</td><td>{kdt}</td><td>{created}</td><td class=\"n\">{clicks}</td>\
         <td class=\"tags\">{tags}</td></tr>",
        code = esc(&l.code),
        path = esc(&super::link::path_name(l)),
        domain = esc(&l.domain),
        url = esc(&l.url),
        state = l.state,
        app = esc(&l.app),
        kdt = l.kdt_id.map(|k| k.to_string()).unwrap_or_default(),
        created = when(shorturl_common::time::parse_rfc3339(&l.created_at).unwrap_or(0)),
        clicks = num(l.clicks.unwrap_or(0)),
        tags = html::tag_links(&l.tags),
    )
}

/// `GET /admin/export`: the search's filters as a file (`format` csv or
/// ndjson), streamed as the API's export is.
pub async fn export(links: &Arc<Links>, req: &Req, s: &Session) -> Response {
    let f = Fields::of(req);
    let q = match f.filters_query() {
        Ok(q) => {
            let mut q = url::form_urlencoded::Serializer::for_suffix(q, 0);
            q.append_pair("format", &req.param("format").unwrap_or_default());
            q.finish()
        }
        Err(m) => return html::error(Some(s), StatusCode::BAD_REQUEST, &m.to_string()),
    };
    let r = match parse_export(Some(&q), &links.cfg.links) {
        Ok(r) => r,
        Err(e) => return html::error(Some(s), e.status, &e.message),
    };
    match crate::links::export::response(links, &caller(&s.user), r) {
        Ok(r) => r,
        Err(e) => api_error(Some(s), e.into()),
    }
}

/// `GET /admin/links`.
pub async fn page(links: &Links, req: &Req, s: &Session) -> Response {
    let f = Fields::of(req);
    let mut main = form(&f);
    let searched = req.query.as_deref().is_some_and(|q| !q.is_empty());
    if !searched {
        main.push_str("<p>Give any filters (none: the newest links).</p>");
    }
    let api_q = match f.api_query() {
        Ok(q) => q,
        Err(m) => {
            main.push_str(&format!(
                "<p class=\"msg error\" id=\"error\">{}</p>",
                esc(&m.to_string())
            ));
            return html::respond(
                StatusCode::BAD_REQUEST,
                html::page(Some(s), Nav::Search, "Search links", &main),
            );
        }
    };
    let r = match parse_search(Some(&api_q), &links.cfg.links) {
        Ok(r) => r,
        Err(e) => {
            main.push_str(&format!(
                "<p class=\"msg error\" id=\"error\">{}</p>",
                esc(&e.message)
            ));
            return html::respond(
                e.status,
                html::page(Some(s), Nav::Search, "Search links", &main),
            );
        }
    };
    let view = match links.search(&caller(&s.user), &r).await {
        Ok(v) => v,
        Err(e) => return api_error(Some(s), e.into()),
    };
    if view.links.is_empty() {
        main.push_str("<p id=\"none\">No link matches.</p>");
    } else {
        main.push_str(
            "<table id=\"results\"><thead><tr><th>Code</th><th>Domain</th><th>Long URL</th><th>State</th>\
             <th>App</th><th>Merchant</th><th>Created (UTC)</th><th class=\"n\">Clicks</th><th>Tags</th></tr></thead><tbody>",
        );
        for l in &view.links {
            main.push_str(&row(l));
        }
        main.push_str("</tbody></table>");
        let q = f.query(None);
        let amp = if q.is_empty() { "" } else { "&" };
        main.push_str(&format!(
            "<p>Every matching link: <a id=\"export-csv\" href=\"/admin/export?{q}{amp}format=csv\">CSV</a> · \
             <a id=\"export-ndjson\" href=\"/admin/export?{q}{amp}format=ndjson\">NDJSON</a></p>",
            q = esc(&q),
        ));
    }
    if let Some(c) = &view.next_cursor {
        main.push_str(&format!(
            "<p><a id=\"next\" href=\"/admin/links?{}\">Next page</a></p>",
            esc(&f.query(Some(c)))
        ));
    }
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Search, "Search links", &main),
    )
}
