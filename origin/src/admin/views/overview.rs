//! The overview: links created and clicks per day for 30 days, the code
//! pool (capacity, issued, remaining, and the day it runs out at the last
//! 7 days' rate: the old system's "expand before 100 million" alarm), the
//! four legacy status dimensions of this origin and of every edge that
//! reports in, and the whitelist.

use super::super::charts::{Chart, Series};
use super::super::html::{self, esc, num, Nav};
use super::super::session::Session;
use super::super::{api_error, Admin, Req};
use super::{day, when};
use crate::admin::days::{window, DAYS};
use crate::error::ApiError;
use crate::links::Links;
use crate::store::console::DayRows;
use axum::response::Response;
use http::StatusCode;
use shorturl_common::status::{IssuerDim, LockDim, MysqlDim, RedisDim};
use std::fmt::Write;

/// `rows` spread over the `DAYS` days from `from`: `(labels, a, b)`.
fn dense(from: u64, rows: &DayRows) -> (Vec<String>, Vec<u64>, Vec<u64>) {
    let mut a = vec![0; DAYS as usize];
    let mut b = vec![0; DAYS as usize];
    for (d, x, y) in rows {
        if let Some(i) = d.checked_sub(from).map(|o| (o / 86_400) as usize) {
            if i < a.len() {
                a[i] += x;
                b[i] += y;
            }
        }
    }
    let labels = (0..DAYS).map(|i| day(from + i * 86_400)).collect();
    (labels, a, b)
}

/// The day the pool runs out: `remaining` codes at `per_day`, from `now`.
pub fn exhaustion(remaining: u64, per_day: f64, now: u64) -> Option<u64> {
    if per_day <= 0.0 {
        return None;
    }
    let days = remaining as f64 / per_day;
    // Past ~27 million years the date is meaningless anyway.
    (days < 1e10).then(|| now + (days * 86_400.0) as u64)
}

fn dims_row(
    name: &str,
    state: &str,
    redis: &RedisDim,
    mysql: Option<&MysqlDim>,
    lock: &LockDim,
    issuer: Option<&IssuerDim>,
) -> String {
    let cls = if state == "ok" { "dim-ok" } else { "dim-bad" };
    format!(
        "<tr><td>{}</td><td class=\"{cls}\">{}</td><td>hit {} · miss {} · error {}</td><td>{}</td>\
         <td>get {} · error {}</td><td>{}</td></tr>",
        esc(name),
        esc(state),
        num(redis.hit),
        num(redis.miss),
        num(redis.error),
        mysql.map_or("—".into(), |m| format!(
            "update {} · select {} · error {}",
            num(m.update),
            num(m.select),
            num(m.error)
        )),
        num(lock.get),
        num(lock.error),
        issuer.map_or("—".into(), |i| format!(
            "current {} · remaining {} · error {}",
            num(i.current),
            num(i.remaining),
            num(i.error)
        )),
    )
}

/// `GET /admin/` (`?chart=created|clicks&format=csv`: a chart's CSV).
pub async fn page(links: &Links, admin: &Admin, req: &Req, s: &Session, now: u64) -> Response {
    let (from, today) = window(now);
    let db = |e: crate::store::DbError| {
        tracing::warn!(error = %e, "admin overview query failed");
        ApiError::unavailable(crate::error::DATABASE_UNAVAILABLE)
    };
    let counted = tokio::try_join!(
        async {
            admin
                .past_days
                .get(&links.store, from, today)
                .await
                .map_err(db)
        },
        async {
            links
                .store
                .created_per_day(today, today + 86_400)
                .await
                .map_err(db)
        },
        async {
            links
                .store
                .clicks_per_day(today, today + 86_400)
                .await
                .map_err(db)
        },
    );
    let ((mut created, mut clicks), created_today, clicks_today) = match counted {
        Ok(v) => v,
        Err(e) => return api_error(Some(s), e),
    };
    created.extend(created_today);
    clicks.extend(clicks_today);
    // The current rate: creations since the start of the day 6 days ago
    // (six full days and today so far), per day elapsed since then.
    let since = today - 6 * 86_400;
    let week: u64 = created
        .iter()
        .filter(|(d, _, _)| *d >= since)
        .map(|(_, n, _)| n)
        .sum();
    let days_elapsed = (now - since) as f64 / 86_400.0;
    let (labels, per_day, _) = dense(from, &created);
    let created_chart = Chart {
        id: "created",
        title: "Links created per day, last 30 days (UTC)".into(),
        labels: labels.clone(),
        series: vec![Series {
            name: "created",
            class: "count",
            values: per_day,
        }],
        csv_href: "/admin/?chart=created&format=csv".into(),
    };
    let (_, human, bot) = dense(from, &clicks);
    let clicks_chart = Chart {
        id: "clicks",
        title: "Clicks per day, last 30 days (UTC)".into(),
        labels,
        series: vec![
            Series {
                name: "human",
                class: "human",
                values: human,
            },
            Series {
                name: "bot",
                class: "bot",
                values: bot,
            },
        ],
        csv_href: "/admin/?chart=clicks&format=csv".into(),
    };
    if req.param("format").as_deref() == Some("csv") {
        return match req.param("chart").as_deref() {
            Some("created") => html::csv("created-per-day", created_chart.csv()),
            Some("clicks") => html::csv("clicks-per-day", clicks_chart.csv()),
            _ => html::error(
                Some(s),
                StatusCode::BAD_REQUEST,
                "chart must be created or clicks",
            ),
        };
    }
    let issuer = links.issuer.dim();
    let rate = week as f64 / days_elapsed;
    let forecast = match exhaustion(issuer.remaining, rate, now) {
        Some(t) => format!(
            "runs out around <strong id=\"exhaustion\">{}</strong>",
            day(t)
        ),
        None => {
            "<span id=\"exhaustion\">no creations in the last 7 days: no forecast</span>".into()
        }
    };
    let m = &links.metrics;
    let mut main = String::new();
    let _ = write!(
        main,
        "<div class=\"grid\"><div class=\"panel\" id=\"pool\"><h2>Code pool</h2><table>\
         <tr><th>Capacity</th><td class=\"n\">{}</td></tr><tr><th>Issued</th><td class=\"n\">{}</td></tr>\
         <tr><th>Remaining</th><td class=\"n\">{}</td></tr><tr><th>Created, last 7 days</th><td class=\"n\">{}</td></tr></table>\
         <p>At {:.1} a day (the last 7 days' rate) the pool {forecast}.</p></div>",
        num(issuer.capacity),
        num(issuer.current),
        num(issuer.remaining),
        num(week),
        rate,
    );
    let w = links.whitelist.status();
    let _ = write!(
        main,
        "<div class=\"panel\" id=\"whitelist\"><h2>Whitelist</h2><table><tr><th>Source</th><td>{}</td></tr>\
         <tr><th>Size</th><td class=\"n\">{} ({} static, {} dynamic)</td></tr><tr><th>Last refresh</th><td>{}</td></tr>\
         <tr><th>Release</th><td>{}</td></tr><tr><th>Refresh errors</th><td class=\"n\">{}</td></tr></table></div></div>",
        esc(&w.source),
        num(w.size as u64),
        num(w.static_size as u64),
        num(w.dynamic_size as u64),
        w.last_refresh_unix.map_or("never".into(), when),
        esc(w.release_key.as_deref().unwrap_or("—")),
        num(w.refresh_errors),
    );
    main.push_str(&created_chart.html());
    main.push_str(&clicks_chart.html());
    main.push_str(
        "<h2>Status</h2><table id=\"status\"><thead><tr><th>Service</th><th>State</th><th>redis</th><th>mysql</th>\
         <th>lock</th><th>issuer</th></tr></thead><tbody>",
    );
    main.push_str(&dims_row(
        "origin (this one)",
        "ok",
        &m.redis_dim(),
        Some(&m.mysql_dim()),
        &m.lock_dim(),
        Some(&issuer),
    ));
    let edges = admin.edges.list();
    for e in &edges {
        let state = if e.missing() {
            format!("missing (silent {} s)", e.silent_for.as_secs())
        } else if e.status.origin_reachable {
            "ok".into()
        } else {
            "origin unreachable".into()
        };
        main.push_str(&dims_row(
            &format!("edge {}", e.node),
            &state,
            &e.status.redis,
            e.status.mysql.as_ref(),
            &e.status.lock,
            e.status.issuer.as_ref(),
        ));
    }
    main.push_str("</tbody></table>");
    if edges.is_empty() {
        main.push_str(
            "<p id=\"no-edges\">No edge has reported to this origin in the last hour.</p>",
        );
    }
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Overview, "Overview", &main),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forecast_and_dense_days() {
        assert_eq!(exhaustion(100, 10.0, 0), Some(10 * 86_400));
        assert_eq!(exhaustion(100, 0.0, 0), None);
        let from = 86_400 * 10;
        let (labels, a, b) = dense(
            from,
            &vec![
                (from, 3, 1),
                (from + 86_400 * 29, 2, 0),
                (from - 86_400, 9, 9),
            ],
        );
        assert_eq!(labels.len(), 30);
        assert_eq!((a[0], b[0], a[29]), (3, 1, 2));
        assert_eq!(a.iter().sum::<u64>(), 5);
    }
}
