//! The state filter of a search and the condition each state is, in
//! parts: `expired` is two ranges of `idx_state_created`.

use super::SearchQuery;
use crate::store::RowState;
use mysql_async::Value;

/// The state filter as the API names states (`expired` is a reaped link or
/// an active link past its expiry, `active` one before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    Active,
    Disabled,
    Deleted,
    Expired,
}

impl StateFilter {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StateFilter::Active => "active",
            StateFilter::Disabled => "disabled",
            StateFilter::Deleted => "deleted",
            StateFilter::Expired => "expired",
        }
    }

    /// The state spelled `s`.
    pub fn parse(s: &str) -> Option<StateFilter> {
        [
            StateFilter::Active,
            StateFilter::Disabled,
            StateFilter::Deleted,
            StateFilter::Expired,
        ]
        .into_iter()
        .find(|f| f.as_str() == s)
    }
}

/// The state condition of each part of the statement: one, except for
/// `expired`, which is two ranges of `idx_state_created` read newest first
/// (links the reaper marked expired; active links past their expiry it has
/// not reached yet), merged by a `UNION ALL` of one page each: an
/// `IN` of the two states would sort every expired link.
pub(super) fn state_conditions(q: &SearchQuery<'_>) -> Vec<(&'static str, Vec<Value>)> {
    match q.filters.state {
        None => vec![(
            "state IN (?, ?, ?, ?)",
            vec![
                RowState::Active.into(),
                RowState::Disabled.into(),
                RowState::Deleted.into(),
                RowState::Expired.into(),
            ],
        )],
        Some(StateFilter::Active) => vec![(
            "state = ? AND expires_at > ?",
            vec![RowState::Active.into(), q.now.into()],
        )],
        Some(StateFilter::Expired) => vec![
            ("state = ?", vec![RowState::Expired.into()]),
            (
                "state = ? AND expires_at <= ?",
                vec![RowState::Active.into(), q.now.into()],
            ),
        ],
        Some(StateFilter::Disabled) => vec![("state = ?", vec![RowState::Disabled.into()])],
        Some(StateFilter::Deleted) => vec![("state = ?", vec![RowState::Deleted.into()])],
    }
}
