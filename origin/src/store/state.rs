//! `short_code.state`: one enum for every statement. SQL never spells a
//! state as a literal; statements bind these values, so a state can be
//! renumbered or added in one place.

/// The life of a `short_code` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RowState {
    /// Pre-generated, not issued yet.
    Free = 0,
    /// A link.
    Active = 1,
    /// Kept out of issue (taken by hand or by a benchmark).
    Reserved = 2,
    /// A link its owner disabled (it can be enabled again).
    Disabled = 3,
    /// A link deleted for good: it never resolves or changes again. With
    /// recycling on, its pre-generated code may go back to the pool after
    /// the quarantine (the row is archived; a new row takes the code).
    Deleted = 4,
    /// A link the reaper found past its expiry (a tombstone: the row and
    /// its URL stay for the audit trail). It never resolves; its owner can
    /// renew it with a later expiry, which makes it active again.
    Expired = 5,
}

const ALL: [RowState; 6] = [
    RowState::Free,
    RowState::Active,
    RowState::Reserved,
    RowState::Disabled,
    RowState::Deleted,
    RowState::Expired,
];

impl RowState {
    /// The stored value.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The state stored as `v`, if it is one.
    pub fn from_code(v: u8) -> Option<RowState> {
        ALL.into_iter().find(|s| s.code() == v)
    }

    /// Whether a row in this state is a link (was issued to a caller).
    pub fn is_link(self) -> bool {
        matches!(
            self,
            RowState::Active | RowState::Disabled | RowState::Deleted | RowState::Expired
        )
    }

    /// The name used in the API and in audit snapshots.
    pub fn name(self) -> &'static str {
        match self {
            RowState::Free => "free",
            RowState::Active => "active",
            RowState::Reserved => "reserved",
            RowState::Disabled => "disabled",
            RowState::Deleted => "deleted",
            RowState::Expired => "expired",
        }
    }

    /// The state called `name` (see [`RowState::name`]).
    pub fn from_name(name: &str) -> Option<RowState> {
        ALL.into_iter().find(|s| s.name() == name)
    }
}

impl From<RowState> for mysql_async::Value {
    fn from(s: RowState) -> Self {
        mysql_async::Value::UInt(u64::from(s.code()))
    }
}

#[cfg(test)]
mod tests {
    use super::RowState;

    #[test]
    fn codes_round_trip_and_match_the_migrations() {
        let init = include_str!("../../migrations/0001_init.sql");
        assert!(
            init.contains("state: 0 free, 1 active, 2 reserved (kept out of issue), 3 disabled")
        );
        let m2 = include_str!("../../migrations/0002_versions_audit_outbox.sql");
        assert!(m2.contains(
            "state: 0 free, 1 active, 2 reserved (kept out of issue), 3 disabled, 4 deleted."
        ));
        let m4 = include_str!("../../migrations/0004_lifecycle.sql");
        assert!(m4.contains(
            "state: 0 free, 1 active, 2 reserved (kept out of issue), 3 disabled, 4 deleted, 5 expired."
        ));
        for (s, v, name) in [
            (RowState::Free, 0, "free"),
            (RowState::Active, 1, "active"),
            (RowState::Reserved, 2, "reserved"),
            (RowState::Disabled, 3, "disabled"),
            (RowState::Deleted, 4, "deleted"),
            (RowState::Expired, 5, "expired"),
        ] {
            assert_eq!(s.code(), v);
            assert_eq!(RowState::from_code(v), Some(s));
            assert_eq!(RowState::from_name(name), Some(s));
        }
        assert_eq!(RowState::from_code(6), None);
        // `pregen` inserts rows without a state: the column default must be free.
        let default = format!(
            "state          TINYINT UNSIGNED NOT NULL DEFAULT {}",
            RowState::Free.code()
        );
        assert!(init.contains(&default));
    }
}
