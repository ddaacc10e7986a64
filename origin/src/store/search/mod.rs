//! The search statement of `GET /api/v1/links`: filters, the caller's
//! tenancy condition and a keyset page boundary, newest first.
//!
//! Every shape is one index range read in `(created_at DESC, id DESC)`
//! order (migration 3 lists which index serves which filter), so a page
//! costs about `limit` rows read whatever the table size. A merchant-bound
//! caller with several merchants gets one range per merchant, merged by a
//! `UNION ALL` of per-merchant pages (an `IN` list would have to sort every
//! link of those merchants).

mod state;

pub use state::StateFilter;

use super::row::COLUMNS;
use super::{DbError, LinkRow, Store};
use mysql_async::prelude::*;
use mysql_async::Value;
use state::state_conditions;

/// What a search asks for (validated: URLs in their stored form, domains
/// normalised, times in Unix seconds). Every field narrows the answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    pub code: Option<String>,
    /// Exact long URL.
    pub url: Option<String>,
    /// Long URLs starting with this (byte-wise).
    pub url_prefix: Option<String>,
    pub domain: Option<String>,
    /// The owner app.
    pub app: Option<String>,
    pub kdt_id: Option<u64>,
    pub state: Option<StateFilter>,
    /// `created_at >= created_from`.
    pub created_from: Option<u64>,
    /// `created_at < created_to`.
    pub created_to: Option<u64>,
    /// Links carrying this tag (`links::tags`).
    pub tag: Option<String>,
}

impl Filters {
    /// A canonical text of the filters (a cursor is bound to it): each
    /// given filter as `name=value`, in a fixed order, values
    /// length-prefixed so no two filter sets share a text.
    pub fn canonical(&self) -> String {
        let mut out = String::new();
        let mut put = |name: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push_str(&format!("{name}={}:{v};", v.len()));
            }
        };
        put("code", self.code.clone());
        put("url", self.url.clone());
        put("url_prefix", self.url_prefix.clone());
        put("domain", self.domain.clone());
        put("app", self.app.clone());
        put("kdt_id", self.kdt_id.map(|k| k.to_string()));
        put("state", self.state.map(|s| s.as_str().to_owned()));
        put("created_from", self.created_from.map(|t| t.to_string()));
        put("created_to", self.created_to.map(|t| t.to_string()));
        put("tag", self.tag.clone());
        out
    }
}

/// Which links the caller may see, as a condition of the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tenant {
    /// Every link (an admin key, or a filter already narrower than the binding).
    All,
    /// The links this app created.
    App(String),
    /// The links of these merchants (never empty).
    Merchants(Vec<u64>),
}

/// Above this many merchants a binding is one `IN` list (one sort of all
/// their links) instead of one ordered range per merchant.
const MAX_UNION_PARTS: usize = 32;

/// One search: filters, tenancy, the page boundary (exclusive) and how
/// many rows to read.
#[derive(Debug, Clone)]
pub struct SearchQuery<'a> {
    pub filters: &'a Filters,
    pub tenant: Tenant,
    /// Read links strictly before this `(created_at, id)`.
    pub before: Option<(u64, u64)>,
    pub limit: u32,
    /// Now (Unix seconds): decides `active` against `expired`.
    pub now: u64,
}

/// Escapes `s` for a `LIKE ... ESCAPE '!'` pattern.
fn like_prefix(s: &str) -> String {
    let mut p = String::with_capacity(s.len() + 1);
    for c in s.chars() {
        if matches!(c, '!' | '%' | '_') {
            p.push('!');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// The conditions every part of the statement shares (all but the state
/// and the merchant), with their parameters.
fn conditions(q: &SearchQuery<'_>) -> (Vec<&'static str>, Vec<Value>) {
    let f = q.filters;
    let mut w: Vec<&'static str> = Vec::new();
    let mut p: Vec<Value> = Vec::new();
    // Only links, never free or reserved rows; links always have a
    // created_at, so this is also the index range that leaves out the
    // (NULL) free rows.
    w.push("created_at IS NOT NULL");
    if let Some(c) = &f.code {
        w.push("code = ?");
        p.push(c.as_str().into());
    }
    if let Some(u) = &f.url {
        w.push("long_url = ?");
        p.push(u.as_str().into());
    }
    if let Some(u) = &f.url_prefix {
        w.push("long_url LIKE ? ESCAPE '!'");
        p.push(like_prefix(u).into());
    }
    if let Some(d) = &f.domain {
        w.push("domain = ?");
        p.push(d.as_str().into());
    }
    let tenant_app = match &q.tenant {
        Tenant::App(a) => Some(a.as_str()),
        _ => None,
    };
    if let Some(a) = f.app.as_deref().or(tenant_app) {
        w.push("app = ?");
        p.push(a.into());
        if let (Some(fa), Some(ta)) = (f.app.as_deref(), tenant_app) {
            if fa != ta {
                w.push("app = ?");
                p.push(ta.into());
            }
        }
    }
    if let Some(k) = f.kdt_id {
        w.push("kdt_id = ?");
        p.push(k.into());
    }
    if let Some(t) = f.created_from {
        w.push("created_at >= ?");
        p.push(t.into());
    }
    if let Some(t) = f.created_to {
        w.push("created_at < ?");
        p.push(t.into());
    }
    if let Some(t) = &f.tag {
        // A condition on the rows the chosen index range reads (no index
        // of its own: a page reads the links up to its `limit`th tagged one).
        w.push("FIND_IN_SET(?, tags) > 0");
        p.push(t.as_str().into());
    }
    if let Some((c, id)) = q.before {
        // `created_at <= c` is the index range; the rest picks the rows of
        // second `c` that come after the boundary.
        w.push("created_at <= ? AND (created_at < ? OR id < ?)");
        p.extend([c.into(), c.into(), id.into()]);
    }
    (w, p)
}

/// The indexes a search may read: `idx_created` and the index of each
/// equality it has. Naming them (`FORCE INDEX`) keeps the optimizer off
/// the other indexes (`idx_state_id` for `state IN`, a table scan) and,
/// above all, makes it read a range of the chosen index: left to itself,
/// MariaDB 10.11 reads a large equality (`domain = 'sho.rt'`) as `ref`,
/// from the newest row, ignoring the page boundary on `created_at` that
/// the same index could seek to (a second page then read 70,000 rows
/// instead of 101; `tests/search_indexes.rs`).
fn indexes(q: &SearchQuery<'_>) -> String {
    let f = q.filters;
    let mut ix = vec!["idx_created"];
    if f.code.is_some() {
        ix.push("uk_code");
    }
    if f.url.is_some() || f.url_prefix.is_some() {
        ix.push("idx_url_created");
    }
    if f.domain.is_some() {
        ix.push("idx_domain_created");
    }
    if f.app.is_some() || matches!(q.tenant, Tenant::App(_)) {
        ix.push("idx_app_created");
    }
    if f.kdt_id.is_some() || matches!(q.tenant, Tenant::Merchants(_)) {
        ix.push("idx_kdt_created");
    }
    if f.state.is_some() {
        ix.push("idx_state_created");
    }
    ix.join(", ")
}

/// The statement and its parameters. Rows are `id` then [`COLUMNS`].
///
/// One part per state condition and per merchant range; several parts are
/// each an ordered page, merged by `UNION ALL` and cut to one page.
pub fn statement(q: &SearchQuery<'_>) -> (String, Vec<Value>) {
    const ORDER: &str = "ORDER BY created_at DESC, id DESC";
    let (w, p) = conditions(q);
    let select = format!(
        "SELECT id, {COLUMNS} FROM short_code FORCE INDEX ({}) WHERE ",
        indexes(q)
    );
    let tenants: Vec<(String, Vec<Value>)> = match &q.tenant {
        Tenant::Merchants(m) if m.len() > MAX_UNION_PARTS => {
            let marks = vec!["?"; m.len()].join(", ");
            vec![(
                format!("kdt_id IN ({marks})"),
                m.iter().map(|k| Value::from(*k)).collect(),
            )]
        }
        Tenant::Merchants(m) => m
            .iter()
            .map(|k| ("kdt_id = ?".to_owned(), vec![Value::from(*k)]))
            .collect(),
        Tenant::All | Tenant::App(_) => vec![(String::new(), Vec::new())],
    };
    let mut parts: Vec<(String, Vec<Value>)> = Vec::new();
    for (sc, sp) in state_conditions(q) {
        for (tc, tp) in &tenants {
            let mut conds: Vec<&str> = w.clone();
            conds.push(sc);
            if !tc.is_empty() {
                conds.push(tc);
            }
            let mut params = p.clone();
            params.extend(sp.iter().cloned());
            params.extend(tp.iter().cloned());
            parts.push((conds.join(" AND "), params));
        }
    }
    let limit = Value::from(q.limit);
    if parts.len() == 1 {
        let (c, mut params) = parts.remove(0);
        params.push(limit);
        return (format!("{select}{c} {ORDER} LIMIT ?"), params);
    }
    let mut params = Vec::new();
    let texts: Vec<String> = parts
        .into_iter()
        .map(|(c, ps)| {
            params.extend(ps);
            params.push(limit.clone());
            format!("({select}{c} {ORDER} LIMIT ?)")
        })
        .collect();
    params.push(limit);
    (
        format!(
            "SELECT * FROM ({}) AS page {ORDER} LIMIT ?",
            texts.join(" UNION ALL ")
        ),
        params,
    )
}

impl Store {
    /// Runs a search: `(id, link)` newest first, at most `q.limit`.
    ///
    /// Sharded, every shard answers the same query (at most `q.limit` rows
    /// after the same cursor) and the pages are merged by the same key,
    /// `(created_at, id)` descending (ids are unique across shards), so the
    /// keyset pages stay exact. A shard that does not answer fails the search.
    pub async fn search(&self, q: &SearchQuery<'_>) -> Result<Vec<(u64, LinkRow)>, DbError> {
        if !self.shards.sharded {
            return self.search_here(q).await;
        }
        let pages = futures::future::join_all(
            self.every_shard()
                .into_iter()
                .map(|s| async move { s.search_here(q).await }),
        )
        .await;
        let mut all = Vec::new();
        for p in pages {
            all.extend(p?);
        }
        all.sort_by(|(ia, a), (ib, b)| (b.created_at, ib).cmp(&(a.created_at, ia)));
        all.truncate(usize::try_from(q.limit).unwrap_or(usize::MAX));
        Ok(all)
    }

    async fn search_here(&self, q: &SearchQuery<'_>) -> Result<Vec<(u64, LinkRow)>, DbError> {
        self.metrics.mysql_select.inc();
        let (sql, params) = statement(q);
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            let rows: Vec<mysql_async::Row> = conn.exec(sql, params).await?;
            rows.into_iter()
                .map(|mut r| {
                    let id: u64 = r
                        .take::<Value, usize>(0)
                        .and_then(|v| mysql_async::from_value_opt(v).ok())
                        .ok_or(DbError::BadColumn(0))?;
                    Ok((id, LinkRow::from_row_at(r, 1)?))
                })
                .collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(f: &Filters, tenant: Tenant) -> (String, usize) {
        let (sql, p) = statement(&SearchQuery {
            filters: f,
            tenant,
            before: Some((10, 5)),
            limit: 3,
            now: 100,
        });
        (sql, p.len())
    }

    #[test]
    fn statements_have_one_parameter_per_mark() {
        let full = Filters {
            code: Some("abcd".into()),
            url: Some("https://a/".into()),
            url_prefix: Some("https://a/".into()),
            domain: Some("sho.rt".into()),
            app: Some("x".into()),
            kdt_id: Some(5),
            state: Some(StateFilter::Active),
            created_from: Some(1),
            created_to: Some(2),
            tag: Some("spring sale".into()),
        };
        for f in [Filters::default(), full] {
            for t in [
                Tenant::All,
                Tenant::App("demo".into()),
                Tenant::Merchants(vec![55]),
                Tenant::Merchants(vec![55, 56, 57]),
                Tenant::Merchants((0..40).collect()),
            ] {
                let (sql, n) = q(&f, t.clone());
                assert_eq!(sql.matches('?').count(), n, "{sql}");
                if let Tenant::Merchants(m) = &t {
                    assert_eq!(sql.contains("UNION ALL"), (2..=32).contains(&m.len()));
                }
                let expired = Filters {
                    state: Some(StateFilter::Expired),
                    ..f.clone()
                };
                let (sql, n) = q(&expired, t.clone());
                assert_eq!(sql.matches('?').count(), n, "{sql}");
                assert!(sql.contains("UNION ALL"), "{sql}");
            }
        }
    }

    #[test]
    fn like_patterns_are_escaped() {
        assert_eq!(like_prefix("https://a/%_!b"), "https://a/!%!_!!b%");
    }

    #[test]
    fn canonical_filters_differ() {
        let a = Filters {
            domain: Some("a".into()),
            ..Filters::default()
        };
        let b = Filters {
            app: Some("a".into()),
            ..Filters::default()
        };
        let c = Filters {
            domain: Some("a;app=1:a".into()),
            ..Filters::default()
        };
        assert_ne!(a.canonical(), b.canonical());
        assert_ne!(a.canonical(), c.canonical());
        assert_eq!(Filters::default().canonical(), "");
    }
}
