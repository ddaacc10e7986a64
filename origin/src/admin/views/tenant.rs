//! A tenant's page: one merchant (`/admin/merchants/{kdt_id}`) or one app
//! (`/admin/apps/{app}`) over the last `?days=` days (default 30,
//! `admin::days`): its human and bot clicks with a chart per day, a table
//! per dimension (the link page's, [`super::dims`]) and its top links.
//! `?dim=<name>&format=csv` downloads a dimension as the API's
//! `GET /api/v1/stats?group_by=<name>&format=csv` answers it (the same
//! query), `?chart=day&format=csv` the chart.
//!
//! Tenancy is the console's: a merchant-bound user sees only its own
//! merchants' pages (any other is "no such merchant", as another
//! merchant's link is "no such short link"), and no app page (apps are
//! internal tenants, refused by the router as `/admin/apps` is).

use super::super::charts::{Chart, Series};
use super::super::days;
use super::super::html::{self, esc, num, Nav};
use super::super::session::Session;
use super::super::{api_error, caller, Req};
use crate::clicks::stats::groups_csv;
use crate::clicks::{GroupBy, TenantDetails, TenantFilter, TenantQuery, TenantStats};
use crate::links::Links;
use crate::tenancy::Caller;
use crate::validate::DEFAULT_TOP;
use axum::response::Response;
use http::StatusCode;
use shorturl_common::code::link_key;
use std::fmt::Write;

/// The ranges offered as links (any other is `?days=N`).
const OFFERED_DAYS: [u64; 3] = [7, 30, 90];

/// The tenant a page is about, with what names it in paths and titles.
struct Tenant {
    filter: TenantFilter,
    /// The page's path (`/admin/merchants/55`).
    path: String,
    /// The tenant's filter as a query (`kdt_id=55`): its search and live view.
    query: String,
    title: String,
    nav: Nav,
}

/// `GET /admin/merchants/{kdt_id}`: `segment` is the path's last segment.
pub async fn merchant(links: &Links, req: &Req, s: &Session, segment: &str, now: u64) -> Response {
    let Some(k) = segment
        .parse::<u64>()
        .ok()
        .filter(|_| segment.bytes().all(|b| b.is_ascii_digit()))
    else {
        return html::error(
            Some(s),
            StatusCode::BAD_REQUEST,
            "a merchant is named by its kdt_id, an integer >= 0",
        );
    };
    if !s.user.merchants.is_empty() && !s.user.merchants.contains(&k) {
        return html::error(Some(s), StatusCode::NOT_FOUND, "no such merchant");
    }
    let t = Tenant {
        filter: TenantFilter::KdtId(k),
        path: format!("/admin/merchants/{k}"),
        query: format!("kdt_id={k}"),
        title: format!("Merchant {k}"),
        nav: Nav::Merchants,
    };
    page(links, req, s, &t, now).await
}

/// `GET /admin/apps/{app}` (a user bound to merchants is refused before):
/// `name` is the path's last segment, percent-decoded.
pub async fn app(links: &Links, req: &Req, s: &Session, name: &str, now: u64) -> Response {
    if !links.cfg.apps.iter().any(|a| a.name == name) {
        return html::error(Some(s), StatusCode::NOT_FOUND, "no such app");
    }
    let t = Tenant {
        filter: TenantFilter::App(name.to_owned()),
        path: app_path(name),
        query: url::form_urlencoded::Serializer::new(String::new())
            .append_pair("app", name)
            .finish(),
        title: format!("App {name}"),
        nav: Nav::Apps,
    };
    page(links, req, s, &t, now).await
}

/// The path of an app's page (its name percent-encoded as a segment; not
/// HTML-escaped).
pub fn app_path(name: &str) -> String {
    // Form encoding leaves only `*-._` and alphanumerics as they are and
    // writes a space as `+`, which a path would keep as a plus.
    let segment: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
    format!("/admin/apps/{}", segment.replace('+', "%20"))
}

/// The query of the tenant `t` over the `days` days ending today.
fn query(t: &Tenant, days: u64, now: u64, group_by: Option<GroupBy>) -> TenantQuery {
    TenantQuery {
        filter: t.filter.clone(),
        tag: None,
        range: days::range(now, days),
        limit: DEFAULT_TOP,
        group_by,
        csv: group_by.is_some(),
    }
}

async fn page(links: &Links, req: &Req, s: &Session, t: &Tenant, now: u64) -> Response {
    let days = match days::param(req, links.cfg.clicks.max_day_points) {
        Ok(d) => d,
        Err(m) => return html::error(Some(s), StatusCode::BAD_REQUEST, &m),
    };
    let c = caller(&s.user);
    if req.param("format").as_deref() == Some("csv") {
        return csv(links, req, s, &c, t, days, now).await;
    }
    let q = query(t, days, now, None);
    let (stats, details) =
        match tokio::try_join!(links.tenant_stats(&c, &q), links.tenant_details(&c, &q)) {
            Ok(v) => v,
            Err(e) => return api_error(Some(s), e.into()),
        };
    let main = format!(
        "{range}<p id=\"totals\">Human <strong>{h}</strong> · bot {b} clicks over the last {days} days \
         (UTC, today included). See its <a href=\"/admin/links?{q}\" id=\"search\">links</a> \
         and its <a href=\"/admin/live?{q}\" id=\"live\">live view</a> (the last hour per minute).</p>{chart}{dims}{top}",
        range = range_links(t, days),
        h = num(stats.totals.human),
        b = num(stats.totals.bot),
        q = esc(&t.query),
        chart = chart(t, days, &details).html(),
        dims = super::dims::tables(
            &format!("Human clicks by dimension (last {days} days)"),
            &format!("{}?days={days}&", t.path),
            &details.dims,
        ),
        top = top_links(&stats),
    );
    html::respond(StatusCode::OK, html::page(Some(s), t.nav, &t.title, &main))
}

/// `?dim=<name>&format=csv` (the API's CSV of that grouping) or
/// `?chart=day&format=csv`.
async fn csv(
    links: &Links,
    req: &Req,
    s: &Session,
    c: &Caller,
    t: &Tenant,
    days: u64,
    now: u64,
) -> Response {
    let stem = match &t.filter {
        TenantFilter::KdtId(k) => format!("merchant-{k}"),
        _ => "app".to_owned(),
    };
    if let Some(dim) = req.param("dim") {
        // As the API: a destination label means another URL on every link.
        let Some(g) = GroupBy::parse(&dim).filter(|g| *g != GroupBy::Destination) else {
            return html::error(Some(s), StatusCode::BAD_REQUEST, "no such dimension");
        };
        return match links.tenant_stats(c, &query(t, days, now, Some(g))).await {
            Ok(st) => html::csv(
                &format!("{stem}-{}", g.as_str()),
                groups_csv(st.groups.as_deref().unwrap_or_default()),
            ),
            Err(e) => api_error(Some(s), e.into()),
        };
    }
    if req.param("chart").as_deref() != Some("day") {
        return html::error(
            Some(s),
            StatusCode::BAD_REQUEST,
            "format=csv needs dim (a dimension) or chart=day",
        );
    }
    match links.tenant_details(c, &query(t, days, now, None)).await {
        Ok(d) => html::csv(&format!("{stem}-daily"), chart(t, days, &d).csv()),
        Err(e) => api_error(Some(s), e.into()),
    }
}

/// The offered ranges as links, the current one marked.
fn range_links(t: &Tenant, days: u64) -> String {
    let links: Vec<String> = OFFERED_DAYS
        .iter()
        .map(|d| {
            let cur = if *d == days {
                " aria-current=\"page\""
            } else {
                ""
            };
            format!(
                "<a href=\"{}\"{cur}>{d} days</a>",
                esc(&format!("{}?days={d}", t.path))
            )
        })
        .collect();
    format!("<p id=\"range\">Range: {}</p>", links.join(" · "))
}

fn chart(t: &Tenant, days: u64, d: &TenantDetails) -> Chart {
    Chart {
        id: "daily",
        title: format!("Clicks per day, last {days} days (UTC)"),
        labels: d
            .series
            .iter()
            .map(|p| p.start.get(..10).unwrap_or("").to_owned())
            .collect(),
        series: vec![
            Series {
                name: "human",
                class: "human",
                values: d.series.iter().map(|p| p.human).collect(),
            },
            Series {
                name: "bot",
                class: "bot",
                values: d.series.iter().map(|p| p.bot).collect(),
            },
        ],
        csv_href: format!("{}?days={days}&chart=day&format=csv", t.path),
    }
}

/// The tenant's links with the most human clicks in the range.
fn top_links(st: &TenantStats) -> String {
    let mut s = String::from("<h2>Top links</h2>");
    if st.links.is_empty() {
        s.push_str("<p id=\"top-none\">No clicks in the range.</p>");
        return s;
    }
    s.push_str(
        "<table id=\"top-links\"><thead><tr><th>Link</th><th>Domain</th>\
         <th class=\"n\">Human</th><th class=\"n\">Bot</th></tr></thead><tbody>",
    );
    for l in &st.links {
        let _ = write!(
            s,
            "<tr><td><a href=\"/admin/links/{k}\">{c}</a></td><td>{d}</td>\
             <td class=\"n\">{h}</td><td class=\"n\">{b}</td></tr>",
            k = esc(&link_key(&l.code, &l.domain)),
            c = esc(&l.code),
            d = esc(&l.domain),
            h = num(l.human),
            b = num(l.bot),
        );
    }
    s.push_str("</tbody></table>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_paths_are_one_segment() {
        assert_eq!(app_path("demo"), "/admin/apps/demo");
        assert_eq!(app_path("a b+c/d"), "/admin/apps/a%20b%2Bc%2Fd");
    }
}
