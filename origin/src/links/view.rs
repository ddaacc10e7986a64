//! The link JSON of the API (protocol section 5): one shape for reads,
//! creations, edits and history entries.

use super::options::Settings;
use super::tags::Tags;
use crate::config::Config;
use crate::store::{AuditEntry, LinkRow, RowState};
use serde::Serialize;
use shorturl_common::time::{rfc3339, rfc3339_ms};

/// A link as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkView {
    pub code: String,
    pub short_url: String,
    pub url: String,
    pub domain: String,
    /// `active`, `disabled`, `deleted`, or `expired` (reaped, or active
    /// past its expiry and not reaped yet).
    pub state: &'static str,
    /// The row version: 1 at creation (above the old link's for a recycled
    /// code), +1 on every change (`If-Match`).
    pub version: u64,
    /// The app (API key) that created the link: its owner.
    pub app: String,
    pub client_app: Option<String>,
    pub client_version: Option<String>,
    pub kdt_id: Option<u64>,
    pub created_at: String,
    pub updated_at: String,
    pub expires_at: String,
    pub expires_at_unix: u64,
    /// When the reaper marked it expired (RFC 3339); `null` otherwise.
    pub reaped_at: Option<String>,
    /// `forward_query`, `expired_url`, `rules` and the UTM fields
    /// (`links::options`).
    #[serde(flatten)]
    pub options: serde_json::Map<String, serde_json::Value>,
    /// The link's tags (`links::tags`), in their order; `[]` for none.
    pub tags: Vec<String>,
    /// Total human clicks: only in search results (`GET /api/v1/links`),
    /// which read them for the whole page in one statement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clicks: Option<u64>,
}

/// The state a row shows at `now`.
pub fn state_at(row: &LinkRow, now: u64) -> &'static str {
    match row.state {
        RowState::Active if row.expires_at.is_some_and(|e| e <= now) => "expired",
        s => s.name(),
    }
}

impl LinkView {
    /// The view of `row` as of `now` (Unix seconds; decides `expired`).
    pub fn of(cfg: &Config, row: &LinkRow, now: u64) -> LinkView {
        let domain = row.domain.clone().unwrap_or_default();
        let created = row.created_at.unwrap_or(0);
        let expires = row.expires_at.unwrap_or(0);
        LinkView {
            short_url: cfg.short_url(&domain, &row.code),
            code: row.code.clone(),
            url: row.url.clone().unwrap_or_default(),
            domain,
            state: state_at(row, now),
            version: row.version,
            app: row.app.clone().unwrap_or_default(),
            client_app: row.client_app.clone(),
            client_version: row.client_version.clone(),
            kdt_id: row.kdt_id,
            created_at: rfc3339(created),
            updated_at: rfc3339(row.updated_at.unwrap_or(created)),
            expires_at: rfc3339(expires),
            expires_at_unix: expires,
            reaped_at: row.reaped_at.map(rfc3339),
            options: Settings::from_column(row.options.as_deref()).view(),
            tags: Tags::from_column(row.tags.as_deref()).as_slice().to_vec(),
            clicks: None,
        }
    }
}

/// A creation's answer: the link and whether it was an earlier creation's.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedView {
    #[serde(flatten)]
    pub link: LinkView,
    pub deduplicated: bool,
}

/// The answer of `DELETE /api/v1/links/{code}`.
#[derive(Debug, Clone, Serialize)]
pub struct DeletedView {
    pub code: String,
    pub state: &'static str,
    pub version: u64,
}

/// One change in a link's history.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryEntry {
    /// When (RFC 3339 UTC with milliseconds).
    pub at: String,
    /// The app (API key) that made the change.
    pub actor: String,
    /// `create`, `edit`, `disable`, `enable`, `delete`, `expire`, `renew`.
    pub action: String,
    /// The link's version after the change.
    pub version: u64,
    pub before: Option<LinkView>,
    pub after: Option<LinkView>,
}

/// `GET /api/v1/links/{code}/history`.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryView {
    pub history: Vec<HistoryEntry>,
}

impl HistoryEntry {
    /// An audit row as the API shows it; the link objects are shown as of
    /// the change (an `expired` state means expired at that moment).
    pub fn of(cfg: &Config, e: &AuditEntry) -> HistoryEntry {
        let at = e.at_ms / 1000;
        HistoryEntry {
            at: rfc3339_ms(e.at_ms),
            actor: e.actor.clone(),
            action: e.action.clone(),
            version: e.version,
            before: e.before.as_ref().map(|r| LinkView::of(cfg, r, at)),
            after: e.after.as_ref().map(|r| LinkView::of(cfg, r, at)),
        }
    }
}
