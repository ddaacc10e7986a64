//! Reads and changes of existing links. Every change goes through
//! [`Store::modify`](crate::store::Store::modify): the row is locked, the
//! rules below decide, and the new row, its audit row and its outbox row
//! commit together; then the outbox row is applied (Redis record and
//! invalidation message) before the caller is answered.

use super::options::Settings;
use super::view::{DeletedView, HistoryEntry, HistoryView};
use super::{LinkError, LinkView, Links};
use crate::config::GuideConfig;
use crate::screening::Policy;
use crate::store::{AuditAction, Change, LinkKey, LinkRow, Modified, RowState};
use crate::tenancy::{Caller, Scope};
use crate::validate::{Patch, PatchState};
use shorturl_common::time::now_unix;

/// The row, if it is a link `caller` may see; otherwise exactly the
/// answer for an unknown code.
pub(crate) fn visible<'a>(
    caller: &Caller,
    row: Option<&'a LinkRow>,
) -> Result<&'a LinkRow, LinkError> {
    match row {
        Some(r) if r.state.is_link() && caller.can_see(r.app.as_deref(), r.kdt_id) => Ok(r),
        _ => Err(LinkError::NotFound),
    }
}

/// A link as a request names it (`/api/v1/links/{code}?domain=`): its code
/// and, optionally, its domain. A fleet code needs no domain; a
/// per-domain code without one means the one link of that code the caller
/// sees (protocol 3.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRef {
    pub code: String,
    pub domain: Option<String>,
}

impl LinkRef {
    /// A reference by code alone.
    pub fn code(code: &str) -> LinkRef {
        LinkRef {
            code: code.to_owned(),
            domain: None,
        }
    }
}

/// Most rows of one per-domain code read to find the caller's.
const SAME_CODE_ROWS: usize = 1000;

/// `If-Match`: the caller's idea of the version must be the row's.
fn check_version(row: &LinkRow, if_match: Option<u64>) -> Result<(), LinkError> {
    match if_match {
        Some(v) if v != row.version => Err(LinkError::VersionMismatch {
            expected: v,
            current: row.version,
        }),
        _ => Ok(()),
    }
}

/// What an edit changes in `row`, or `None` when every value is already so.
/// `password`: the new password's hash, or `Some(None)` to remove it
/// (hashed before the change: `patch.password` is the plain one).
fn apply_edit(
    row: &LinkRow,
    patch: &Patch,
    password: Option<Option<&str>>,
    guide: &GuideConfig,
    policy: &Policy,
) -> Option<Change> {
    let mut after = row.clone();
    if let Some(u) = &patch.url {
        after.url = Some(u.clone());
    }
    if let Some(e) = patch.expires_at {
        after.expires_at = Some(e);
    }
    if let Some(t) = &patch.tags {
        after.tags = t.to_column();
    }
    if patch.url.is_some() || patch.options.is_some() || password.is_some() {
        let before = Settings::from_column(row.options.as_deref());
        let mut settings = before.clone();
        if let Some(given) = &patch.options {
            // Checked when the body was parsed; the rules replace whole.
            settings.apply(given).ok()?;
        }
        if let Some(p) = password {
            settings.password = p.map(str::to_owned);
        }
        let url = after.url.clone().unwrap_or_default();
        let url = settings.merge_utm_after(&url, &before);
        super::guide::apply(
            guide,
            row.domain.as_deref().unwrap_or_default(),
            &url,
            &mut settings,
        );
        after.url = Some(url);
        after.options = settings.to_column();
    }
    // Screened again under the policy in force, whatever the edit (a
    // renewed or enabled link too): as the pass would (protocol 4.7).
    if let Some(options) = policy.rescreen(
        after.url.as_deref().unwrap_or_default(),
        after.options.as_deref(),
    ) {
        after.options = options;
    }
    match patch.state {
        Some(PatchState::Active) => after.state = RowState::Active,
        Some(PatchState::Disabled) => after.state = RowState::Disabled,
        // A later expiry renews an expired link (the owner's way back).
        None if row.state == RowState::Expired && patch.expires_at.is_some() => {
            after.state = RowState::Active;
        }
        None => {}
    }
    if after.state != RowState::Expired {
        // The audit trail keeps when it was reaped; the live row forgets.
        after.reaped_at = None;
    }
    if after == *row {
        return None;
    }
    let action = match (row.state, after.state) {
        (RowState::Expired, s) if s != RowState::Expired => AuditAction::Renew,
        (RowState::Active, RowState::Disabled) => AuditAction::Disable,
        (RowState::Disabled, RowState::Active) => AuditAction::Enable,
        _ => AuditAction::Edit,
    };
    Some(Change { after, action })
}

impl Links {
    /// The key of the link `r` names, as `caller` sees it: a domain given
    /// or a fleet code names one key; a per-domain code without a domain
    /// names the one such link the caller may see (404 when none, 400
    /// `domain_required` when several: other tenants' links with that
    /// code count for nothing, so the answer tells nothing about them).
    pub(crate) async fn key_of(&self, caller: &Caller, r: &LinkRef) -> Result<LinkKey, LinkError> {
        if let Some(d) = &r.domain {
            return Ok(LinkKey::new(&r.code, d));
        }
        if let Some(k) = LinkKey::fleet(&r.code) {
            return Ok(k);
        }
        let rows = self.store.domains_of_code(&r.code, SAME_CODE_ROWS).await?;
        let mut seen = rows
            .iter()
            .filter(|row| visible(caller, Some(row)).is_ok())
            .filter_map(|row| row.domain.as_deref());
        match (seen.next(), seen.next()) {
            (Some(d), None) => Ok(LinkKey::new(&r.code, d)),
            (Some(_), Some(_)) => Err(LinkError::DomainRequired(r.code.clone())),
            (None, _) => Err(LinkError::NotFound),
        }
    }

    /// The row of the link `r` names, if `caller` may see it, and its key.
    pub(crate) async fn find_visible(
        &self,
        caller: &Caller,
        r: &LinkRef,
    ) -> Result<(LinkKey, LinkRow), LinkError> {
        let key = self.key_of(caller, r).await?;
        let row = self.store.find(&key).await?;
        let row = visible(caller, row.as_ref())?.clone();
        Ok((key, row))
    }

    /// Reads a link the caller may see.
    pub async fn info(&self, caller: &Caller, r: &LinkRef) -> Result<LinkView, LinkError> {
        caller.require(Scope::LinksRead)?;
        let (_, row) = self.find_visible(caller, r).await?;
        Ok(self.view(&row, now_unix()))
    }

    /// The changes of a link the caller may see, newest first.
    pub async fn history(&self, caller: &Caller, r: &LinkRef) -> Result<HistoryView, LinkError> {
        caller.require(Scope::LinksRead)?;
        let (key, _) = self.find_visible(caller, r).await?;
        let entries = self.store.history(&key).await?;
        Ok(HistoryView {
            history: entries
                .iter()
                .map(|e| HistoryEntry::of(&self.cfg, e))
                .collect(),
        })
    }

    /// Runs one change of `code` for `caller` and brings Redis and the
    /// edges up to date; returns the row as it now is.
    async fn change(
        &self,
        caller: &Caller,
        r: &LinkRef,
        decide: impl FnOnce(&LinkRow) -> Result<Option<Change>, LinkError>,
    ) -> Result<LinkRow, LinkError> {
        caller.require(Scope::LinksManage)?;
        let key = self.key_of(caller, r).await?;
        let modified = self
            .store
            .modify(&key, &caller.app, self.cfg.redirect.status, |row| {
                decide(visible(caller, Some(row))?)
            })
            .await??;
        match modified {
            Modified::Missing => Err(LinkError::NotFound),
            Modified::Unchanged(row) => Ok(row),
            Modified::Changed {
                after,
                outbox_id,
                shard,
            } => {
                self.outbox.apply_now(shard, outbox_id).await;
                Ok(after)
            }
        }
    }

    /// Edits a link: any of its URL, expiry and state (active/disabled).
    /// Nothing changes (no new version) when the values are already so.
    /// An expired (reaped) link takes only an edit with a later expiry,
    /// which renews it (active, or disabled if the edit says so).
    pub async fn edit(
        &self,
        caller: &Caller,
        r: &LinkRef,
        patch: &Patch,
        if_match: Option<u64>,
    ) -> Result<LinkView, LinkError> {
        if let Some(url) = &patch.url {
            caller.require(Scope::LinksManage)?;
            self.check_target(caller, url)?;
        }
        if let Some(given) = &patch.options {
            // Checked on their own (the body's); a destination on one of
            // this fleet's domains would chain short links.
            let mut s = Settings::default();
            if s.apply(given).is_ok() {
                for d in s.destinations() {
                    self.check_target(caller, d)?;
                }
            }
        }
        let password = match &patch.password {
            Some(Some(p)) => Some(Some(self.unlock.hash(p.clone()).await?)),
            Some(None) => Some(None),
            None => None,
        };
        let policy = self.screening.policy();
        let row = self
            .change(caller, r, |row| {
                if row.state == RowState::Deleted {
                    return Err(LinkError::LinkDeleted);
                }
                check_version(row, if_match)?;
                // Past its expiry it can only be renewed (a later expiry):
                // any other edit would leave a link that never resolves.
                if row.state == RowState::Expired
                    && patch.expires_at.is_none()
                    && !patch.only_tags()
                {
                    return Err(LinkError::LinkExpired);
                }
                Ok(apply_edit(
                    row,
                    patch,
                    password.as_ref().map(Option::as_deref),
                    &self.cfg.guide,
                    &policy,
                ))
            })
            .await?;
        Ok(self.view(&row, now_unix()))
    }

    /// Deletes a link for good. Deleting a deleted link changes nothing
    /// and answers the same.
    pub async fn delete(
        &self,
        caller: &Caller,
        r: &LinkRef,
        if_match: Option<u64>,
    ) -> Result<DeletedView, LinkError> {
        let row = self
            .change(caller, r, |row| {
                if row.state == RowState::Deleted {
                    return Ok(None);
                }
                check_version(row, if_match)?;
                let mut after = row.clone();
                after.state = RowState::Deleted;
                Ok(Some(Change {
                    after,
                    action: AuditAction::Delete,
                }))
            })
            .await?;
        Ok(DeletedView {
            code: row.code,
            state: RowState::Deleted.name(),
            version: row.version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: RowState) -> LinkRow {
        LinkRow {
            code: "abcdef".into(),
            state,
            url: Some("https://a/".into()),
            domain: Some("sho.rt".into()),
            app: Some("demo".into()),
            client_app: None,
            client_version: None,
            kdt_id: Some(55),
            created_at: Some(1),
            updated_at: Some(1),
            expires_at: Some(100),
            version: 3,
            reaped_at: None,
            options: None,
            tags: None,
        }
    }

    fn edit(row: &LinkRow, patch: &Patch) -> Option<Change> {
        apply_edit(
            row,
            patch,
            None,
            &GuideConfig::default(),
            &Policy::default(),
        )
    }

    fn patch(url: Option<&str>, exp: Option<u64>, state: Option<PatchState>) -> Patch {
        Patch {
            url: url.map(str::to_owned),
            expires_at: exp,
            state,
            options: None,
            password: None,
            tags: None,
        }
    }

    #[test]
    fn edits_and_their_actions() {
        let r = row(RowState::Active);
        assert!(edit(
            &r,
            &patch(Some("https://a/"), Some(100), Some(PatchState::Active))
        )
        .is_none());
        let c = edit(&r, &patch(Some("https://b/"), None, None)).unwrap();
        assert_eq!(
            (c.action, c.after.url.as_deref()),
            (AuditAction::Edit, Some("https://b/"))
        );
        let c = edit(&r, &patch(None, None, Some(PatchState::Disabled))).unwrap();
        assert_eq!(
            (c.action, c.after.state),
            (AuditAction::Disable, RowState::Disabled)
        );
        let c = edit(
            &row(RowState::Disabled),
            &patch(None, Some(200), Some(PatchState::Active)),
        )
        .unwrap();
        assert_eq!(
            (c.action, c.after.expires_at),
            (AuditAction::Enable, Some(200))
        );
    }

    #[test]
    fn a_later_expiry_renews_an_expired_link() {
        let mut r = row(RowState::Expired);
        r.reaped_at = Some(150);
        let c = edit(&r, &patch(None, Some(500), None)).unwrap();
        assert_eq!(
            (
                c.action,
                c.after.state,
                c.after.reaped_at,
                c.after.expires_at
            ),
            (AuditAction::Renew, RowState::Active, None, Some(500))
        );
        let c = edit(&r, &patch(None, Some(500), Some(PatchState::Disabled))).unwrap();
        assert_eq!(
            (c.action, c.after.state),
            (AuditAction::Renew, RowState::Disabled)
        );
    }

    #[test]
    fn visibility_and_versions() {
        let owner = Caller::new("demo", Scope::DEFAULT, []);
        let stranger = Caller::new("other", Scope::DEFAULT, []);
        let m91 = Caller::new("m", Scope::DEFAULT, [91]);
        let r = row(RowState::Active);
        assert!(visible(&owner, Some(&r)).is_ok());
        assert!(matches!(
            visible(&stranger, Some(&r)),
            Err(LinkError::NotFound)
        ));
        assert!(matches!(visible(&m91, Some(&r)), Err(LinkError::NotFound)));
        assert!(matches!(
            visible(&owner, Some(&row(RowState::Free))),
            Err(LinkError::NotFound)
        ));
        assert!(check_version(&r, None).is_ok() && check_version(&r, Some(3)).is_ok());
        assert!(matches!(
            check_version(&r, Some(2)),
            Err(LinkError::VersionMismatch {
                expected: 2,
                current: 3
            })
        ));
    }
}
