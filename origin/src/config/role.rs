//! What a console user may do (configured users and the identity
//! provider's alike).

/// What a console user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read every page.
    Viewer,
    /// Read, and edit, disable and enable links.
    Operator,
    /// Everything, every tenant (also deletes links).
    Admin,
}

impl Role {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// The role spelled `s`.
    pub fn parse(s: &str) -> Option<Role> {
        [Role::Viewer, Role::Operator, Role::Admin]
            .into_iter()
            .find(|r| r.as_str() == s)
    }

    /// Whether this role may change links (edit, disable, enable).
    pub fn can_change(self) -> bool {
        self >= Role::Operator
    }
}
