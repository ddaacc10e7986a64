//! A `short_code` row as the link operations read it.

use super::{DbError, RowState};
use serde::{Deserialize, Serialize};

/// The columns [`LinkRow::from_row`] reads, in order.
pub const COLUMNS: &str = "code, state, long_url, domain, app, client_app, client_version, \
                           kdt_id, created_at, updated_at, expires_at, version, reaped_at, options, tags";

/// A link as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRow {
    pub code: String,
    pub state: RowState,
    pub url: Option<String>,
    pub domain: Option<String>,
    /// The app (API key) that created the link: its owner.
    pub app: Option<String>,
    pub client_app: Option<String>,
    pub client_version: Option<String>,
    pub kdt_id: Option<u64>,
    pub created_at: Option<u64>,
    pub updated_at: Option<u64>,
    pub expires_at: Option<u64>,
    pub version: u64,
    /// When the reaper marked it expired (Unix seconds); `None` otherwise.
    pub reaped_at: Option<u64>,
    /// The `options` column: JSON of `links::options::Settings`, `None`
    /// for a plain link.
    pub options: Option<String>,
    /// The `tags` column (`links::tags::Tags`), `None`: no tags.
    pub tags: Option<String>,
}

impl LinkRow {
    /// Reads the [`COLUMNS`] of one result row.
    /// The link's key (protocol 3.6): its code, on its domain.
    pub fn key(&self) -> super::LinkKey {
        super::LinkKey::new(&self.code, self.domain.as_deref().unwrap_or(""))
    }

    pub fn from_row(r: mysql_async::Row) -> Result<LinkRow, DbError> {
        LinkRow::from_row_at(r, 0)
    }

    /// Reads the [`COLUMNS`] of a result row in which they start at column `at`.
    pub fn from_row_at(mut r: mysql_async::Row, at: usize) -> Result<LinkRow, DbError> {
        let col = |r: &mut mysql_async::Row, i: usize| -> Result<mysql_async::Value, DbError> {
            r.take::<mysql_async::Value, usize>(at + i)
                .ok_or(DbError::BadColumn(at + i))
        };
        fn conv<T: mysql_async::prelude::FromValue>(
            v: Result<mysql_async::Value, DbError>,
            i: usize,
        ) -> Result<T, DbError> {
            mysql_async::from_value_opt(v?).map_err(|_| DbError::BadColumn(i))
        }
        let code: String = conv(col(&mut r, 0), 0)?;
        let state: u8 = conv(col(&mut r, 1), 1)?;
        let Some(state) = RowState::from_code(state) else {
            return Err(DbError::UnknownState { code, state });
        };
        Ok(LinkRow {
            code,
            state,
            url: conv(col(&mut r, 2), 2)?,
            domain: conv(col(&mut r, 3), 3)?,
            app: conv(col(&mut r, 4), 4)?,
            client_app: conv(col(&mut r, 5), 5)?,
            client_version: conv(col(&mut r, 6), 6)?,
            kdt_id: conv(col(&mut r, 7), 7)?,
            created_at: conv(col(&mut r, 8), 8)?,
            updated_at: conv(col(&mut r, 9), 9)?,
            expires_at: conv(col(&mut r, 10), 10)?,
            version: conv(col(&mut r, 11), 11)?,
            reaped_at: conv(col(&mut r, 12), 12)?,
            options: conv(col(&mut r, 13), 13)?,
            tags: conv(col(&mut r, 14), 14)?,
        })
    }

    /// The audit form of this row.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            state: self.state.name().to_owned(),
            version: self.version,
            url: self.url.clone(),
            domain: self.domain.clone(),
            app: self.app.clone(),
            client_app: self.client_app.clone(),
            client_version: self.client_version.clone(),
            kdt_id: self.kdt_id,
            created_at: self.created_at,
            updated_at: self.updated_at,
            expires_at: self.expires_at,
            reaped_at: self.reaped_at,
            options: self.options.clone(),
            tags: self.tags.clone(),
        }
    }
}

/// A link's state at one moment, as the audit table keeps it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub state: String,
    pub version: u64,
    pub url: Option<String>,
    pub domain: Option<String>,
    pub app: Option<String>,
    pub client_app: Option<String>,
    pub client_version: Option<String>,
    pub kdt_id: Option<u64>,
    pub created_at: Option<u64>,
    pub updated_at: Option<u64>,
    pub expires_at: Option<u64>,
    /// Absent in snapshots written before the lifecycle (issue 11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reaped_at: Option<u64>,
    /// The options column (issue 25); absent in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<String>,
    /// The tags column (issue 28); absent in older snapshots and for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
}

impl Snapshot {
    /// The row of `code` this snapshot describes (`None` for a state this
    /// build does not know).
    pub fn into_row(self, code: &str) -> Option<LinkRow> {
        Some(LinkRow {
            code: code.to_owned(),
            state: RowState::from_name(&self.state)?,
            url: self.url,
            domain: self.domain,
            app: self.app,
            client_app: self.client_app,
            client_version: self.client_version,
            kdt_id: self.kdt_id,
            created_at: self.created_at,
            updated_at: self.updated_at,
            expires_at: self.expires_at,
            version: self.version,
            reaped_at: self.reaped_at,
            options: self.options,
            tags: self.tags,
        })
    }

    /// JSON text (the `before_json`/`after_json` columns).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trips() {
        let row = LinkRow {
            code: "abcdef".into(),
            state: RowState::Disabled,
            url: Some("https://x/".into()),
            domain: Some("sho.rt".into()),
            app: Some("demo".into()),
            client_app: None,
            client_version: Some("1.2".into()),
            kdt_id: Some(55),
            created_at: Some(10),
            updated_at: Some(20),
            expires_at: Some(30),
            version: 3,
            reaped_at: Some(40),
            options: Some(r#"{"o":{"f":true}}"#.into()),
            tags: None,
        };
        let json = row.snapshot().to_json();
        let back: Snapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back.into_row("abcdef"), Some(row));
    }
}
