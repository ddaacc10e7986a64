//! Who links belong to, by their keys (the click live view's tenant view).

use super::{DbError, Store};
use mysql_async::prelude::*;
use shorturl_common::code::split_link_key;
use std::collections::HashSet;

/// A link's key, code, domain, app and merchant.
pub type OwnerRow = (String, String, String, String, Option<u64>);

impl Store {
    /// The owners of the links named `keys` (bare codes or
    /// `<domain>/<code>`), on every shard; a key without a link is absent.
    pub async fn link_owners(&self, keys: &[String]) -> Result<Vec<OwnerRow>, DbError> {
        let wanted: HashSet<&str> = keys.iter().map(String::as_str).collect();
        let codes: Vec<String> = keys
            .iter()
            .filter_map(|k| split_link_key(k).map(|(_, code)| code.to_owned()))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if codes.is_empty() {
            return Ok(Vec::new());
        }
        // By code on `uk_code`'s prefix; the key then picks the link.
        let sql = format!(
            "SELECT link_key, code, COALESCE(domain, ''), app, kdt_id FROM short_code \
             WHERE code IN ({}) AND app IS NOT NULL",
            vec!["?"; codes.len()].join(", ")
        );
        let mut out = Vec::new();
        for shard in self.every_shard() {
            let rows: Vec<OwnerRow> = shard
                .bounded(async {
                    let mut c = shard.pool.get_conn().await?;
                    Ok(c.exec(sql.as_str(), codes.clone()).await?)
                })
                .await?;
            out.extend(rows.into_iter().filter(|r| wanted.contains(r.0.as_str())));
        }
        Ok(out)
    }
}
