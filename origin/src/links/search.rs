//! Search and list: the caller's filters, narrowed to the links it may see,
//! one keyset page at a time.

use super::{LinkError, LinkView, Links};
use crate::cursor::Position;
use crate::store::search::{SearchQuery, Tenant};
use crate::tenancy::{Caller, Scope};
use crate::validate::SearchRequest;
use serde::Serialize;
use shorturl_common::time::now_unix;

/// `GET /api/v1/links`: a page of links, newest first, each with its
/// total human clicks.
#[derive(Debug, Clone, Serialize)]
pub struct SearchView {
    pub links: Vec<LinkView>,
    /// The cursor of the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// The tenancy condition for `caller` given the filters, or `None` when
/// the filters ask for links the caller can never see (an empty answer,
/// exactly as for filters that match nothing).
pub(crate) fn tenant(caller: &Caller, kdt_id: Option<u64>, app: Option<&str>) -> Option<Tenant> {
    if caller.is_admin() {
        return Some(Tenant::All);
    }
    match caller.merchant_binding() {
        // A merchant filter inside the binding is narrower than the binding.
        Some(bound) => match kdt_id {
            Some(k) if bound.contains(&k) => Some(Tenant::All),
            Some(_) => None,
            None => Some(Tenant::Merchants(bound.iter().copied().collect())),
        },
        None if app.is_some_and(|a| a != caller.app) => None,
        None => Some(Tenant::App(caller.app.clone())),
    }
}

impl Links {
    /// One page of the links `caller` may see that match `req`.
    pub async fn search(
        &self,
        caller: &Caller,
        req: &SearchRequest,
    ) -> Result<SearchView, LinkError> {
        caller.require(Scope::LinksRead)?;
        // The cursor is bound to the filters and to the caller's app.
        let binding = format!("{}\n{}", caller.app, req.filters.canonical());
        let before = match &req.cursor {
            Some(c) => Some(
                self.cursor
                    .verify(&binding, c)
                    .ok_or(LinkError::InvalidCursor)?,
            ),
            None => None,
        };
        let empty = SearchView {
            links: Vec::new(),
            next_cursor: None,
        };
        let Some(tenant) = tenant(caller, req.filters.kdt_id, req.filters.app.as_deref()) else {
            return Ok(empty);
        };
        let now = now_unix();
        let mut rows = self
            .store
            .search(&SearchQuery {
                filters: &req.filters,
                tenant,
                before: before.map(|p| (p.created_at, p.id)),
                limit: req.limit + 1,
                now,
            })
            .await?;
        let more = rows.len() > req.limit as usize;
        rows.truncate(req.limit as usize);
        let next_cursor = match rows.last() {
            Some((id, row)) if more => Some(self.cursor.sign(
                &binding,
                Position {
                    created_at: row.created_at.unwrap_or(0),
                    id: *id,
                },
            )),
            _ => None,
        };
        // The rollups name links by key (protocol 3.6).
        let names: Vec<String> = rows.iter().map(|(_, r)| r.key().name()).collect();
        let clicks = self.human_clicks(&names).await?;
        let links = rows
            .iter()
            .zip(&names)
            .map(|((_, r), name)| {
                let mut v = self.view(r, now);
                v.clicks = Some(clicks.get(name).copied().unwrap_or(0));
                v
            })
            .collect();
        Ok(SearchView { links, next_cursor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenancy_conditions() {
        let admin = Caller::new("ops", [Scope::Admin], [55]);
        let m = Caller::new("m", [Scope::LinksRead], [55, 91]);
        let plain = Caller::new("demo", Scope::DEFAULT, []);
        assert_eq!(tenant(&admin, None, Some("x")), Some(Tenant::All));
        assert_eq!(
            tenant(&m, None, None),
            Some(Tenant::Merchants(vec![55, 91]))
        );
        assert_eq!(tenant(&m, Some(91), Some("x")), Some(Tenant::All));
        assert_eq!(tenant(&m, Some(7), None), None);
        assert_eq!(tenant(&plain, None, None), Some(Tenant::App("demo".into())));
        assert_eq!(
            tenant(&plain, Some(7), Some("demo")),
            Some(Tenant::App("demo".into()))
        );
        assert_eq!(tenant(&plain, None, Some("other")), None);
    }
}
