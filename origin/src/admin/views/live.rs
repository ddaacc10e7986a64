//! The live view (`GET /admin/live`): clicks per minute over the last hour
//! for one link (`?link=<key>`) or one tenant (`?app=`, `?kdt_id=`,
//! `?domain=`, as the API's `GET /api/v1/live`), reloading itself every
//! [`REFRESH_SECS`] seconds (a `<meta>` refresh: the console's policy
//! allows no inline script). `&format=csv` downloads the minutes.

use super::super::charts::{Chart, Series};
use super::super::html::{self, esc, num, Nav};
use super::super::session::Session;
use super::super::{api_error, caller, Req};
use super::link::link_of_path;
use crate::clicks::live::{LiveLink, LiveSeries};
use crate::clicks::LiveQuery;
use crate::links::Links;
use axum::response::Response;
use http::StatusCode;
use std::fmt::Write;

/// Seconds between reloads.
pub const REFRESH_SECS: u32 = 15;

fn chart(series: &LiveSeries, csv_href: String) -> Chart {
    Chart {
        id: "live",
        title: "Clicks per minute, last 60 minutes (UTC; the last minute is still counting)".into(),
        labels: series
            .minutes
            .iter()
            .map(|m| m.start.get(11..16).unwrap_or("").to_owned())
            .collect(),
        series: vec![
            Series {
                name: "human",
                class: "human",
                values: series.minutes.iter().map(|m| m.human).collect(),
            },
            Series {
                name: "bot",
                class: "bot",
                values: series.minutes.iter().map(|m| m.bot).collect(),
            },
        ],
        csv_href,
    }
}

fn top_table(links: &[LiveLink]) -> String {
    if links.is_empty() {
        return "<p id=\"live-none\">No clicks in the last hour.</p>".into();
    }
    let mut t = String::from(
        "<table id=\"live-links\"><thead><tr><th>Link</th><th>Domain</th>\
         <th class=\"n\">Human</th><th class=\"n\">Bot</th></tr></thead><tbody>",
    );
    for l in links {
        let key = shorturl_common::code::link_key(&l.code, &l.domain);
        let _ = write!(
            t,
            "<tr><td><a href=\"/admin/links/{k}\">{c}</a></td><td>{d}</td>\
             <td class=\"n\">{h}</td><td class=\"n\">{b}</td></tr>",
            k = esc(&key),
            c = esc(&l.code),
            d = esc(&l.domain),
            h = num(l.human),
            b = num(l.bot),
        );
    }
    t.push_str("</tbody></table>");
    t
}

/// `GET /admin/live`.
pub async fn page(links: &Links, req: &Req, s: &Session, now: u64) -> Response {
    let c = caller(&s.user);
    let csv = req.param("format").as_deref() == Some("csv");
    // `format` is the page's own; the rest is the API's query.
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(
            url::form_urlencoded::parse(req.query.as_deref().unwrap_or("").as_bytes())
                .filter(|(k, _)| k != "format"),
        )
        .finish();
    let (title, series, table) = if let Some(key) = req.param("link") {
        let Some(r) = link_of_path(&key) else {
            return html::error(Some(s), StatusCode::NOT_FOUND, "no such short link");
        };
        match links.live_link(&c, &r, now).await {
            Ok(v) => (
                format!("Live: {}", key),
                v.series,
                format!(
                    "<p><a href=\"/admin/links/{k}\" id=\"back\">The link's page</a></p>",
                    k = esc(&key)
                ),
            ),
            Err(e) => return api_error(Some(s), e.into()),
        }
    } else {
        let q: LiveQuery = match crate::validate::parse_live_tenant(Some(&query)) {
            Ok(q) => q,
            Err(e) => return api_error(Some(s), e),
        };
        let who = match &q.filter {
            crate::clicks::TenantFilter::App(a) => format!("app {a}"),
            crate::clicks::TenantFilter::KdtId(k) => format!("merchant {k}"),
            crate::clicks::TenantFilter::Domain(d) => format!("domain {d}"),
        };
        match links.live_tenant(&c, &q, now) {
            Ok(v) => (format!("Live: {who}"), v.series, top_table(&v.links)),
            Err(e) => return api_error(Some(s), e.into()),
        }
    };
    let here = format!("/admin/live?{query}");
    let sep = if query.is_empty() { "" } else { "&" };
    let ch = chart(&series, format!("/admin/live?{query}{sep}format=csv"));
    if csv {
        return html::csv("live", ch.csv());
    }
    let main = format!(
        "<p class=\"muted\" id=\"live-totals\">{h} human and {b} bot clicks in the last 60 minutes \
         (updated every {REFRESH_SECS} s; a click shows within the edges' flush interval).</p>{chart}{table}",
        h = num(series.totals.human),
        b = num(series.totals.bot),
        chart = ch.html(),
    );
    html::respond(
        StatusCode::OK,
        html::refreshing(Some(s), Nav::None, &title, &main, REFRESH_SECS, &here),
    )
}
