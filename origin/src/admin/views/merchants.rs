//! Merchants: every merchant domain (static configuration and Apollo, with
//! the source), and each merchant's links and clicks (30 days), each
//! linked to its page (`tenant`).

use super::super::days;
use super::super::html::{self, esc, num, Nav};
use super::super::session::Session;
use super::super::{api_error, caller};
use crate::clicks::{TenantFilter, TenantQuery};
use crate::error::ApiError;
use crate::links::Links;
use axum::response::Response;
use http::StatusCode;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Most merchants the page counts links and clicks for.
const MAX_MERCHANTS: usize = 200;

/// `GET /admin/merchants`.
pub async fn page(links: &Links, s: &Session, now: u64) -> Response {
    // kdt_id → (domain, source)
    let mut by_kdt: BTreeMap<u64, BTreeSet<(String, String)>> = BTreeMap::new();
    for (k, domains) in &links.cfg.links.merchant_domains {
        for d in domains {
            by_kdt
                .entry(*k)
                .or_default()
                .insert((d.clone(), "static".into()));
        }
    }
    let dynamic = links.whitelist.dynamic();
    for (d, kdts) in &dynamic.by_domain {
        for k in kdts {
            by_kdt
                .entry(*k)
                .or_default()
                .insert((d.clone(), dynamic.source.as_str().to_owned()));
        }
    }
    let c = caller(&s.user);
    let range = days::range(now, days::DAYS);
    let mut rows = String::new();
    for (k, domains) in by_kdt.iter().take(MAX_MERCHANTS) {
        let counted = async {
            let n = links.store.merchant_links(*k).await.map_err(|e| {
                tracing::warn!(error = %e, "merchant links query failed");
                ApiError::unavailable(crate::error::DATABASE_UNAVAILABLE)
            })?;
            let st = links
                .tenant_stats(
                    &c,
                    &TenantQuery {
                        filter: TenantFilter::KdtId(*k),
                        tag: None,
                        range,
                        limit: 1,
                        group_by: None,
                        csv: false,
                    },
                )
                .await
                .map_err(ApiError::from)?;
            Ok::<_, ApiError>((n, st.totals))
        };
        let (n, totals) = match counted.await {
            Ok(v) => v,
            Err(e) => return api_error(Some(s), e),
        };
        let list: Vec<String> = domains
            .iter()
            .map(|(d, src)| format!("{} <small>({})</small>", esc(d), esc(src)))
            .collect();
        let _ = write!(
            rows,
            "<tr><td><a href=\"/admin/merchants/{k}\">{k}</a> <small><a href=\"/admin/links?kdt_id={k}\">links</a> · \
             <a href=\"/admin/live?kdt_id={k}\">live</a></small></td><td>{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            list.join("<br>"),
            num(n),
            num(totals.human),
            num(totals.bot),
        );
    }
    let mut main = format!(
        "<p>Whitelist source: <strong>{}</strong>. Clicks over the last 30 days.</p>",
        esc(dynamic.source.as_str())
    );
    if by_kdt.is_empty() {
        main.push_str("<p id=\"none\">No merchant domain is configured or published.</p>");
    } else {
        let _ = write!(
            main,
            "<table id=\"merchants\"><thead><tr><th>Merchant (kdt_id)</th><th>Domains (source)</th>\
             <th class=\"n\">Links</th><th class=\"n\">Human clicks</th><th class=\"n\">Bot clicks</th></tr></thead>\
             <tbody>{rows}</tbody></table>"
        );
        if by_kdt.len() > MAX_MERCHANTS {
            let _ = write!(
                main,
                "<p>First {MAX_MERCHANTS} of {} merchants.</p>",
                by_kdt.len()
            );
        }
    }
    html::respond(
        StatusCode::OK,
        html::page(Some(s), Nav::Merchants, "Merchants", &main),
    )
}
