//! One link: every field, its QR code, its click charts (hourly for 48 h,
//! daily for 90 days), referrers, devices, its human clicks per value of
//! each dimension (country, browser, ...; the tables of [`super::dims`],
//! shared with the tenant pages) and history; for operators and
//! admins the forms that edit, disable, enable (and, for admins, delete)
//! it, with when the change was published to the edges.

use super::super::charts::{Chart, Series};
use super::super::html::{self, csrf_field, esc, num, Nav};
use super::super::session::Session;
use super::super::{api_error, caller, Req};
use crate::clicks::stats::groups_csv;
use crate::clicks::{Interval, LinkStats, StatsRange};
use crate::config::Role;
use crate::error::ApiError;
use crate::form::Form;
use crate::links::options::{Settings, UTM_FIELDS};
use crate::links::tags::Tags;
use crate::links::{HistoryView, LinkRef, LinkView, Links};
use crate::pages::qr::{self, QrParams};
use crate::store::{DbError, LinkKey};
use crate::tenancy::Caller;
use crate::validate::{parse_patch, Patch, PatchState};
use axum::response::Response;
use http::StatusCode;
use shorturl_common::clicks::{day_start, hour_start};
use shorturl_common::code::{is_valid_code, link_key, split_link_key};
use shorturl_common::link_rules::{self, LinkOptions, Visitor};
use shorturl_common::time::{now_unix_ms, rfc3339_ms};
use std::fmt::Write;

/// The hourly chart's range (48 h, this hour included) and the daily one's (90 days).
pub fn ranges(now: u64) -> [StatsRange; 2] {
    let h = hour_start(now);
    let d = day_start(now);
    [
        StatsRange {
            from: h - 47 * 3600,
            to: h + 3600,
            interval: Interval::Hour,
        },
        StatsRange {
            from: d - 89 * 86_400,
            to: d + 86_400,
            interval: Interval::Day,
        },
    ]
}

/// The console's path segment for a link: its link key (`<code>`, or
/// `<domain>/<code>` for a per-domain code, protocol 3.6).
pub fn path_name(l: &LinkView) -> String {
    link_key(&l.code, &l.domain)
}

/// The link a console path names (`None`: not a code or link key).
pub(super) fn link_of_path(name: &str) -> Option<LinkRef> {
    if is_valid_code(name) {
        return Some(LinkRef::code(name));
    }
    let (domain, code) = split_link_key(name)?;
    Some(LinkRef {
        code: code.to_owned(),
        domain: domain.map(str::to_owned),
    })
}

fn chart(code: &str, st: &LinkStats, hourly: bool) -> Chart {
    let labels = st
        .series
        .iter()
        .map(|p| {
            if hourly {
                p.start.get(5..13).unwrap_or("").replace('T', " ") + "h"
            } else {
                p.start.get(..10).unwrap_or("").to_owned()
            }
        })
        .collect();
    let (id, title, which) = if hourly {
        ("hourly", "Clicks per hour, last 48 hours (UTC)", "hour")
    } else {
        ("daily", "Clicks per day, last 90 days (UTC)", "day")
    };
    Chart {
        id,
        title: title.into(),
        labels,
        series: vec![
            Series {
                name: "human",
                class: "human",
                values: st.series.iter().map(|p| p.human).collect(),
            },
            Series {
                name: "bot",
                class: "bot",
                values: st.series.iter().map(|p| p.bot).collect(),
            },
        ],
        csv_href: format!("/admin/links/{code}?chart={which}&format=csv"),
    }
}

fn fields(l: &LinkView) -> String {
    let rows = [
        (
            "Short URL",
            format!("<a href=\"{u}\">{u}</a>", u = esc(&l.short_url)),
        ),
        (
            "Long URL",
            format!("<span class=\"url\" id=\"long-url\">{}</span>", esc(&l.url)),
        ),
        ("Domain", esc(&l.domain)),
        (
            "State",
            format!(
                "<span id=\"state\" class=\"state-{s}\">{s}</span>",
                s = l.state
            ),
        ),
        ("Version", l.version.to_string()),
        ("App (owner)", esc(&l.app)),
        ("Client app", esc(l.client_app.as_deref().unwrap_or(""))),
        (
            "Client version",
            esc(l.client_version.as_deref().unwrap_or("")),
        ),
        (
            "Merchant (kdt_id)",
            l.kdt_id
                .map(|k| format!("<a href=\"/admin/merchants/{k}\" id=\"merchant\">{k}</a>"))
                .unwrap_or_default(),
        ),
        ("Created", esc(&l.created_at)),
        ("Updated", esc(&l.updated_at)),
        ("Expires", esc(&l.expires_at)),
        ("Reaped", esc(l.reaped_at.as_deref().unwrap_or(""))),
        (
            "Forward query",
            if l.options["forward_query"] == true {
                "yes".into()
            } else {
                "no".into()
            },
        ),
        (
            "Expiry fallback",
            format!(
                "<span class=\"url\" id=\"expired-url\">{}</span>",
                esc(l.options["expired_url"].as_str().unwrap_or(""))
            ),
        ),
        (
            "Tags",
            format!("<span id=\"tags\">{}</span>", html::tag_links(&l.tags)),
        ),
        ("UTM", esc(&utm_text(l))),
        (
            "Social card",
            format!("<span id=\"card\">{}</span>", esc(&card_text(l))),
        ),
        (
            "Password",
            format!("<span id=\"password\">{}</span>", password_text(l)),
        ),
        (
            "In-app guidance",
            format!("<span id=\"guide\">{}</span>", guide_text(l)),
        ),
    ];
    let mut s = String::from("<table id=\"fields\">");
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    s.push_str("</table>");
    s.push_str(&rules_table(l));
    s
}

/// Whether visitors must enter a password (protocol 4.5; never the
/// password or its hash).
fn password_text(l: &LinkView) -> &'static str {
    if l.options["password_protected"] == true {
        "set: visitors enter it on the link's form"
    } else {
        "none"
    }
}

/// What in-app browsers get (protocol 4.6), and whose setting it is.
fn guide_text(l: &LinkView) -> &'static str {
    let guided = l.options["inapp_guided"] == true;
    match (guided, l.options["inapp_guide"].as_bool()) {
        (true, Some(true)) => {
            "shown (on for this link): an in-app browser cannot open a destination"
        }
        (true, _) => "shown: an in-app browser cannot open a destination",
        (false, Some(false)) => "off for this link",
        (false, _) => "not needed: every destination opens in in-app browsers",
    }
}

/// The UTM fields set, `name=value` joined by spaces.
fn utm_text(l: &LinkView) -> String {
    UTM_FIELDS
        .iter()
        .filter_map(|f| l.options[*f].as_str().map(|v| format!("{f}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The social card's fields set, `name: value` joined by ` · `.
fn card_text(l: &LinkView) -> String {
    CARD_FIELDS
        .iter()
        .filter_map(|(f, label)| l.options[*f].as_str().map(|v| format!("{label}: {v}")))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The social card's API fields and their labels in the console.
const CARD_FIELDS: [(&str, &str); 3] = [
    ("og_title", "Title"),
    ("og_description", "Description"),
    ("og_image", "Image URL (https)"),
];

/// The rules as a table: conditions, then where they send a visitor.
fn rules_table(l: &LinkView) -> String {
    let Some(rules) = l.options["rules"].as_array().filter(|r| !r.is_empty()) else {
        return "<p id=\"rules-none\">No targeting rules: every visitor goes to the long URL.</p>"
            .into();
    };
    let mut s = String::from(
        "<table id=\"rules\"><thead><tr><th>#</th><th>When</th><th>Goes to</th></tr></thead><tbody>",
    );
    for (i, r) in rules.iter().enumerate() {
        let when = match r["when"].as_object() {
            Some(w) if !w.is_empty() => w
                .iter()
                .map(|(k, v)| format!("{k}: {}", compact(v)))
                .collect::<Vec<_>>()
                .join("; "),
            _ => "everyone".into(),
        };
        let to = match (r["url"].as_str(), r["split"].as_array()) {
            (Some(u), _) => u.to_owned(),
            (None, Some(split)) => split
                .iter()
                .map(|v| format!("{} ({})", v["url"].as_str().unwrap_or(""), v["weight"]))
                .collect::<Vec<_>>()
                .join(", "),
            _ => String::new(),
        };
        let _ = write!(
            s,
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"url\">{}</td></tr>",
            i + 1,
            esc(&when),
            esc(&to)
        );
    }
    s.push_str("</tbody></table>");
    s
}

/// A condition's value as text: lists joined by commas.
fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Array(xs) => xs
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(","),
        serde_json::Value::Object(o) => o
            .values()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join("="),
        other => other.to_string(),
    }
}

fn history(h: &HistoryView) -> String {
    let mut s = String::from(
        "<table id=\"history\"><thead><tr><th>When (UTC)</th><th>Who</th><th>Action</th><th class=\"n\">Version</th>\
         <th>Long URL after</th><th>State after</th><th>Expires after</th></tr></thead><tbody>",
    );
    for e in &h.history {
        let after = e.after.as_ref();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"url\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&e.at),
            esc(&e.actor),
            esc(&e.action),
            e.version,
            esc(after.map_or("", |a| a.url.as_str())),
            after.map_or("", |a| a.state),
            esc(after.map_or("", |a| a.expires_at.as_str())),
        );
    }
    s.push_str("</tbody></table>");
    s
}

fn breakdown(st: &LinkStats) -> String {
    let mut s = String::from(
        "<div class=\"grid\"><div><h2>Top referrers (90 days)</h2><table id=\"referrers\"><thead><tr><th>Host</th><th class=\"n\">Clicks</th></tr></thead><tbody>",
    );
    for r in &st.referrers {
        let host = match r.host.as_str() {
            "-" => "(none)",
            "~other" => "(others)",
            h => h,
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
            esc(host),
            num(r.n)
        );
    }
    let d = &st.devices;
    let _ = write!(
        s,
        "</tbody></table></div><div><h2>Devices (90 days)</h2><table id=\"devices\"><tbody>\
         <tr><th>mobile</th><td class=\"n\">{}</td></tr><tr><th>desktop</th><td class=\"n\">{}</td></tr>\
         <tr><th>tablet</th><td class=\"n\">{}</td></tr><tr><th>bot</th><td class=\"n\">{}</td></tr>\
         <tr><th>other</th><td class=\"n\">{}</td></tr></tbody></table></div></div>",
        num(d.mobile),
        num(d.desktop),
        num(d.tablet),
        num(d.bot),
        num(d.other)
    );
    if !st.destinations.is_empty() {
        s.push_str(
            "<h2>Destinations (90 days, human clicks)</h2><table id=\"destinations\"><thead><tr>\
             <th>Destination</th><th>URL now</th><th class=\"n\">Clicks</th><th class=\"n\">Share</th></tr></thead><tbody>",
        );
        let total: u64 = st.destinations.iter().map(|d| d.human).sum();
        for d in &st.destinations {
            let share = d.human as f64 * 100.0 / total.max(1) as f64;
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{share:.1}%</td></tr>",
                esc(&d.destination),
                esc(d.url.as_deref().unwrap_or("(removed since)")),
                num(d.human)
            );
        }
        s.push_str("</tbody></table>");
    }
    s
}

fn controls(s: &Session, l: &LinkView) -> String {
    if !s.user.role.can_change() {
        return "<p id=\"read-only\">Your role (viewer) can read links but not change them.</p>"
            .into();
    }
    if l.state == "deleted" {
        return "<p>This link is deleted: it cannot change any more.</p>".into();
    }
    let csrf = csrf_field(s);
    let code = esc(&path_name(l));
    let version = l.version;
    let mut out = format!(
        "<h2>Change</h2><div class=\"actions\"><form method=\"post\" action=\"/admin/links/{code}\" id=\"edit-form\">{csrf}\
         <input type=\"hidden\" name=\"action\" value=\"edit\"><input type=\"hidden\" name=\"version\" value=\"{version}\">\
         <label>Long URL<input name=\"url\" id=\"edit-url\" size=\"48\" value=\"{url}\"></label>\
         <label>Expires (RFC 3339, UTC)<input name=\"expires_at\" id=\"edit-expires\" value=\"{exp}\"></label>\
         <label>Expiry fallback URL<input name=\"expired_url\" id=\"edit-expired-url\" size=\"48\" value=\"{xurl}\"></label>\
         <label>Tags (comma-separated, at most 20)<input name=\"tags\" id=\"edit-tags\" size=\"48\" value=\"{tags}\"></label>\
         <label><input type=\"checkbox\" name=\"forward_query\" id=\"edit-forward\" value=\"on\"{fq}> Forward the query string</label>\
         <input type=\"hidden\" name=\"options_form\" value=\"1\">\
         <label>Rules (JSON, as in the API; docs/protocol.md 3.1.1)<textarea name=\"rules\" id=\"edit-rules\" rows=\"8\" cols=\"60\">{rules}</textarea></label>\
         <fieldset><legend>Social card (what link previews show)</legend>{card}</fieldset>\
         <button type=\"submit\" id=\"save\">Save</button></form>",
        url = esc(&l.url),
        exp = esc(&l.expires_at),
        xurl = esc(l.options["expired_url"].as_str().unwrap_or("")),
        tags = esc(&l.tags.join(", ")),
        fq = if l.options["forward_query"] == true { " checked" } else { "" },
        rules = esc(&rules_json(l)),
        card = CARD_FIELDS
            .iter()
            .map(|(f, label)| format!(
                "<label>{label}<input name=\"{f}\" id=\"edit-{f}\" size=\"48\" value=\"{}\"></label>",
                esc(l.options[*f].as_str().unwrap_or(""))
            ))
            .collect::<String>(),
    );
    let (action, label, confirm) = if l.state == "disabled" {
        ("enable", "Enable", "")
    } else {
        (
            "disable",
            "Disable",
            " data-confirm=\"Disable this link? The edges will answer 404.\"",
        )
    };
    let _ = write!(
        out,
        "<form method=\"post\" action=\"/admin/links/{code}\" id=\"{action}-form\"{confirm}>{csrf}\
         <input type=\"hidden\" name=\"action\" value=\"{action}\"><input type=\"hidden\" name=\"version\" value=\"{version}\">\
         <button type=\"submit\" id=\"{action}\">{label}</button></form>"
    );
    if s.user.role == Role::Admin {
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/admin/links/{code}\" id=\"delete-form\" data-confirm=\"Delete this link for good?\">{csrf}\
             <input type=\"hidden\" name=\"action\" value=\"delete\"><input type=\"hidden\" name=\"version\" value=\"{version}\">\
             <button type=\"submit\" class=\"danger\" id=\"delete\">Delete</button></form>"
        );
    }
    out.push_str("</div>");
    out
}

/// The link's rules as the edit form shows them: pretty JSON, `[]` for none.
fn rules_json(l: &LinkView) -> String {
    serde_json::to_string_pretty(&l.options["rules"]).unwrap_or_else(|_| "[]".into())
}

/// The preview form and, when asked (`?preview=1`), which destination a
/// visitor with that User-Agent, country, Accept-Language and query gets
/// (the edges' evaluator, at this moment; a split shows the variant of a
/// client without an address, the first, unless a client address is given).
fn preview(req: &Req, l: &LinkView, now: u64) -> String {
    let p = |k: &str| req.param(k).unwrap_or_default();
    let (ua, country, lang, query, client) = (
        p("ua"),
        p("country"),
        p("language"),
        p("query"),
        p("client"),
    );
    let mut out = format!(
        "<h2>Preview</h2><form method=\"get\" action=\"/admin/links/{code}\" id=\"preview-form\">\
         <input type=\"hidden\" name=\"preview\" value=\"1\">\
         <label>User-Agent<input name=\"ua\" id=\"preview-ua\" size=\"48\" value=\"{ua}\"></label>\
         <label>Country<input name=\"country\" id=\"preview-country\" size=\"3\" value=\"{country}\"></label>\
         <label>Accept-Language<input name=\"language\" id=\"preview-language\" size=\"16\" value=\"{lang}\"></label>\
         <label>Query<input name=\"query\" id=\"preview-query\" size=\"24\" value=\"{query}\"></label>\
         <label>Client address<input name=\"client\" id=\"preview-client\" size=\"16\" value=\"{client}\"></label>\
         <button type=\"submit\" id=\"preview\">Which destination?</button></form>",
        code = esc(&path_name(l)),
        ua = esc(&ua),
        country = esc(&country),
        lang = esc(&lang),
        query = esc(&query),
        client = esc(&client),
    );
    if req.param("preview").is_none() {
        return out;
    }
    let mut settings = Settings::default();
    if settings.apply(&l.options).is_err() {
        out.push_str("<p id=\"preview-result\">The link's options cannot be read.</p>");
        return out;
    }
    let options = settings.o;
    let visitor = PreviewVisitor {
        ua,
        lang,
        country: country.to_ascii_uppercase().as_bytes().try_into().ok(),
        query: (!query.is_empty()).then(|| query.trim_start_matches('?').to_owned()),
        client: client.parse().ok(),
    };
    let expired = l.state == "expired" || l.expires_at_unix <= now;
    let gone = l.state == "disabled";
    let options = LinkOptions { gone, ..options };
    let result = if options.gone && options.expired_url.is_none() {
        None
    } else {
        link_rules::choose(&options, &l.url, expired, &l.code, &visitor, now)
    };
    let _ = match result {
        Some(c) => write!(
            out,
            "<p id=\"preview-result\">Goes to <span class=\"url\">{}</span> ({}).</p>",
            esc(&c.url),
            esc(&c.dest.label())
        ),
        None => write!(out, "<p id=\"preview-result\">Not found (404).</p>"),
    };
    out
}

/// The preview's visitor.
struct PreviewVisitor {
    ua: String,
    lang: String,
    country: Option<[u8; 2]>,
    query: Option<String>,
    client: Option<std::net::IpAddr>,
}

impl Visitor for PreviewVisitor {
    fn user_agent(&self) -> Option<&[u8]> {
        Some(self.ua.as_bytes())
    }
    fn accept_language(&self) -> Option<&[u8]> {
        Some(self.lang.as_bytes())
    }
    fn country(&self) -> Option<[u8; 2]> {
        self.country
    }
    fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }
    fn split_key(&self) -> Option<String> {
        self.client.map(link_rules::split_key)
    }
}

/// `GET /admin/links/{code}` (`?chart=hour|day&format=csv`: a chart's CSV).
pub async fn page(links: &Links, req: &Req, s: &Session, code: &str, now: u64) -> Response {
    let Some(r) = link_of_path(code) else {
        return html::error(Some(s), StatusCode::NOT_FOUND, "no such short link");
    };
    let c = caller(&s.user);
    let link = match links.info(&c, &r).await {
        Ok(l) => l,
        Err(e) => return api_error(Some(s), e.into()),
    };
    // From here on the link is named by its key, with its domain.
    let r = LinkRef {
        code: link.code.clone(),
        domain: Some(link.domain.clone()),
    };
    let key = LinkKey::new(&link.code, &link.domain);
    let name = path_name(&link);
    let code = name.as_str();
    let [hr, dr] = ranges(now);
    let (hourly, daily, dims, hist, pending) = match tokio::try_join!(
        async {
            links
                .link_stats(&c, &r, &hr, None)
                .await
                .map_err(ApiError::from)
        },
        async {
            links
                .link_stats(&c, &r, &dr, None)
                .await
                .map_err(ApiError::from)
        },
        async {
            links
                .link_dimensions(&c, &r, &dr)
                .await
                .map_err(ApiError::from)
        },
        async { links.history(&c, &r).await.map_err(ApiError::from) },
        async {
            links
                .store
                .outbox_pending(&key, &link.domain)
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "outbox lookup failed");
                    ApiError::unavailable(crate::error::DATABASE_UNAVAILABLE)
                })
        },
    ) {
        Ok(v) => v,
        Err(e) => return api_error(Some(s), e),
    };
    let (hc, dc) = (chart(code, &hourly, true), chart(code, &daily, false));
    if req.param("format").as_deref() == Some("csv") {
        if let Some(dim) = req.param("dim") {
            return match dims.iter().find(|(g, _)| g.as_str() == dim) {
                Some((g, groups)) => {
                    html::csv(&format!("{}-{}", link.code, g.as_str()), groups_csv(groups))
                }
                None => html::error(Some(s), StatusCode::BAD_REQUEST, "no such dimension"),
            };
        }
        return match req.param("chart").as_deref() {
            Some("hour") => html::csv(&format!("{}-hourly", link.code), hc.csv()),
            Some("day") => html::csv(&format!("{}-daily", link.code), dc.csv()),
            _ => html::error(
                Some(s),
                StatusCode::BAD_REQUEST,
                "chart must be hour or day",
            ),
        };
    }
    let mut main = String::new();
    if let Some(done) = req.param("done") {
        let published = match req.param("published").and_then(|p| p.parse::<u64>().ok()) {
            Some(ms) => format!("published to the edges at {} UTC", rfc3339_ms(ms)),
            None => "not yet published to the edges (the outbox retries)".into(),
        };
        let _ = write!(
            main,
            "<p class=\"msg\" id=\"done\">Done: {}; {}.</p>",
            esc(&done),
            esc(&published)
        );
    }
    let qr = qr::svg(
        &qr::scan_url(&link.short_url),
        QrParams {
            size: 160,
            margin: 2,
        },
    )
    .ok()
    .and_then(|b| String::from_utf8(b).ok())
    .map(|svg| match svg.find("<svg") {
        Some(i) => svg[i..].to_owned(),
        None => String::new(),
    })
    .unwrap_or_default();
    let outbox = match pending {
        (0, _) => "<p id=\"outbox\">Every change is published to the edges (no pending outbox row).</p>".to_owned(),
        (n, since) => format!(
            "<p id=\"outbox\" class=\"dim-bad\">{n} change(s) waiting to be published since {}.</p>",
            since.map(rfc3339_ms).unwrap_or_default()
        ),
    };
    let _ = write!(
        main,
        "<div class=\"grid\"><div>{fields}{outbox}</div><div class=\"qr\" id=\"qr\">{qr}</div></div>{controls}{preview}\
         <h2>Clicks</h2><p id=\"totals\">Human {h} · bot {b} · unique visitors {u} in the last 90 days \
         (<a href=\"/admin/live?link={code}\" id=\"live\">live: the last hour per minute</a>).</p>{hc}{dc}{breakdown}{dimensions}<h2>History</h2>{history}",
        fields = fields(&link),
        controls = controls(s, &link),
        preview = preview(req, &link, now),
        h = num(daily.totals.human),
        b = num(daily.totals.bot),
        u = num(daily.uniques),
        hc = hc.html(),
        dc = dc.html(),
        breakdown = breakdown(&daily),
        dimensions = super::dims::tables(
            "Human clicks by dimension (90 days)",
            &format!("/admin/links/{code}?"),
            &dims
        ),
        history = history(&hist),
    );
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Search, &format!("Link {code}"), &main),
    )
}

fn patch(links: &Links, current: &LinkView, f: &Form, now: u64) -> Result<Patch, ApiError> {
    let mut body = serde_json::Map::new();
    if let Some(u) = f.get("url").map(str::trim).filter(|u| *u != current.url) {
        body.insert("url".into(), u.into());
    }
    if let Some(e) = f
        .get("expires_at")
        .map(str::trim)
        .filter(|e| *e != current.expires_at)
    {
        body.insert("expires_at".into(), e.into());
    }
    // The options, only from a form that shows them (an older page's
    // form leaves them as they are).
    if f.get("options_form").is_some() {
        let fq = f.get("forward_query") == Some("on");
        if current.options["forward_query"] != fq {
            body.insert("forward_query".into(), fq.into());
        }
        // Text fields: an emptied one clears the field; one the form does
        // not have (an older page's) stays.
        let texts = std::iter::once("expired_url").chain(CARD_FIELDS.iter().map(|(f, _)| *f));
        for name in texts {
            let Some(x) = f.get(name).map(str::trim) else {
                continue;
            };
            if current.options[name].as_str().unwrap_or("") != x {
                let v = if x.is_empty() {
                    serde_json::Value::Null
                } else {
                    x.into()
                };
                body.insert(name.into(), v);
            }
        }
        let text = f.get("rules").map(str::trim).unwrap_or("");
        let rules: serde_json::Value = if text.is_empty() {
            serde_json::Value::Array(Vec::new())
        } else {
            serde_json::from_str(text).map_err(|e| {
                ApiError::bad_request("invalid_rules", format!("rules are not valid JSON: {e}"))
            })?
        };
        if rules != current.options["rules"] {
            body.insert("rules".into(), rules);
        }
        if let Some(text) = f.get("tags") {
            let tags = Tags::from_list(text)?;
            if tags.as_slice() != current.tags.as_slice() {
                body.insert("tags".into(), tags.as_slice().into());
            }
        }
    }
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    parse_patch(&bytes, &links.cfg.links, now)
}

/// `POST /admin/links/{code}` (CSRF already checked): `action` is `edit`,
/// `disable`, `enable` (operator, admin) or `delete` (admin).
pub async fn post(links: &Links, s: &Session, code: &str, f: &Form, now: u64) -> Response {
    if !s.user.role.can_change() {
        tracing::warn!(user = %s.user.name, code, "admin change refused: viewer");
        return html::error(
            Some(s),
            StatusCode::FORBIDDEN,
            "your role (viewer) may not change links",
        );
    }
    let Some(r) = link_of_path(code) else {
        return html::error(Some(s), StatusCode::NOT_FOUND, "no such short link");
    };
    let c = caller(&s.user);
    let version = f.get("version").and_then(|v| v.parse::<u64>().ok());
    let action = f.get("action").unwrap_or("");
    let result = match action {
        "edit" => match links.info(&c, &r).await {
            Ok(current) => match patch(links, &current, f, now) {
                Ok(p) => links
                    .edit(&c, &r, &p, version)
                    .await
                    .map(|_| ())
                    .map_err(ApiError::from),
                Err(e) => Err(e),
            },
            Err(e) => Err(e.into()),
        },
        "disable" | "enable" => {
            let p = Patch {
                url: None,
                expires_at: None,
                state: Some(if action == "disable" {
                    PatchState::Disabled
                } else {
                    PatchState::Active
                }),
                options: None,
                password: None,
                tags: None,
            };
            links
                .edit(&c, &r, &p, version)
                .await
                .map(|_| ())
                .map_err(ApiError::from)
        }
        "delete" if s.user.role == Role::Admin => links
            .delete(&c, &r, version)
            .await
            .map(|_| ())
            .map_err(ApiError::from),
        "delete" => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only an admin may delete links",
        )),
        _ => Err(ApiError::bad_request(
            "invalid_action",
            "action must be edit, disable, enable or delete",
        )),
    };
    if let Err(e) = result {
        return api_error(Some(s), e);
    }
    // The change's outbox row is applied before `edit` answers; if Redis
    // was down it stays pending and the drainer retries.
    let published = match pending_of(links, &c, &r).await {
        Ok((0, _)) => format!("&published={}", now_unix_ms()),
        _ => String::new(),
    };
    tracing::info!(user = %s.user.name, code, action, "admin changed a link");
    html::see_other(
        &format!("/admin/links/{code}?done={action}{published}"),
        None,
    )
}

/// Outbox rows of the link `r` names still pending (after a change).
async fn pending_of(links: &Links, c: &Caller, r: &LinkRef) -> Result<(u64, Option<u64>), DbError> {
    match links.find_visible(c, r).await {
        Ok((key, row)) => {
            let domain = row.domain.unwrap_or_default();
            links.store.outbox_pending(&key, &domain).await
        }
        Err(_) => Ok((0, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shorturl_common::time::rfc3339;

    #[test]
    fn ranges_cover_48_hours_and_90_days() {
        let now = 1_700_000_000;
        let [h, d] = ranges(now);
        assert_eq!((h.to - h.from) / 3600, 48);
        assert_eq!((d.to - d.from) / 86_400, 90);
        assert!(h.from <= now && now < h.to && d.from <= now && now < d.to);
        assert_eq!(rfc3339(d.from).get(11..), Some("00:00:00Z"));
    }
}
