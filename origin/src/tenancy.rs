//! Who may do what to which link: scopes, merchant binding, visibility.
//!
//! An API key (an app) carries scopes and optionally a merchant binding (a
//! set of `kdt_id`). Visibility decides reads and changes: `admin` sees
//! every link, a merchant-bound key the links of its merchants, any other
//! key the links its app created. A link the caller may not see is
//! answered exactly like an unknown code (no existence oracle).

use std::collections::BTreeSet;
use std::fmt;

/// One permission of an API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Create links.
    LinksCreate,
    /// Read links (and their history).
    LinksRead,
    /// Edit, disable, enable and delete links.
    LinksManage,
    /// Read statistics.
    StatsRead,
    /// Everything, on every tenant's links.
    Admin,
}

impl Scope {
    /// Every scope, in configuration spelling order.
    pub const ALL: [Scope; 5] = [
        Scope::LinksCreate,
        Scope::LinksRead,
        Scope::LinksManage,
        Scope::StatsRead,
        Scope::Admin,
    ];

    /// Scopes of a key whose configuration names none (configurations
    /// written before scopes existed keep working, on their own links).
    pub const DEFAULT: [Scope; 3] = [Scope::LinksCreate, Scope::LinksRead, Scope::LinksManage];

    /// The configuration and API spelling (`links:create`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::LinksCreate => "links:create",
            Scope::LinksRead => "links:read",
            Scope::LinksManage => "links:manage",
            Scope::StatsRead => "stats:read",
            Scope::Admin => "admin",
        }
    }

    /// The scope spelled `s`.
    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An authenticated API caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The app's name: recorded as the owner of the links it creates.
    pub app: String,
    scopes: BTreeSet<Scope>,
    /// The merchants this key is bound to (empty: not bound).
    merchants: BTreeSet<u64>,
    /// May create links that point at a domain this fleet serves.
    short_domain_targets: bool,
}

/// A caller lacks the scope an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingScope(pub Scope);

impl Caller {
    /// A caller with exactly these scopes and merchants.
    pub fn new(
        app: impl Into<String>,
        scopes: impl IntoIterator<Item = Scope>,
        merchants: impl IntoIterator<Item = u64>,
    ) -> Caller {
        Caller {
            app: app.into(),
            scopes: scopes.into_iter().collect(),
            merchants: merchants.into_iter().collect(),
            short_domain_targets: false,
        }
    }

    /// Allows (or not) targets on the fleet's own domains
    /// (`apps[].allow_short_domain_targets`).
    pub fn with_short_domain_targets(mut self, allowed: bool) -> Caller {
        self.short_domain_targets = allowed;
        self
    }

    /// Whether this key may create links whose target is one of the
    /// fleet's own domains (otherwise refused: a loop or a chain that
    /// counts every hop as a click).
    pub fn may_target_short_domains(&self) -> bool {
        self.short_domain_targets
    }

    /// Whether the key is allowed `s` (`admin` allows everything).
    pub fn has(&self, s: Scope) -> bool {
        self.scopes.contains(&s) || self.scopes.contains(&Scope::Admin)
    }

    /// `Ok` if the key is allowed `s`.
    pub fn require(&self, s: Scope) -> Result<(), MissingScope> {
        if self.has(s) {
            Ok(())
        } else {
            Err(MissingScope(s))
        }
    }

    /// Whether the key acts on every tenant's links.
    pub fn is_admin(&self) -> bool {
        self.scopes.contains(&Scope::Admin)
    }

    /// Whether the key is bound to no merchant and is not admin: it cannot
    /// create on a merchant's domain.
    pub fn is_unbound(&self) -> bool {
        !self.is_admin() && self.merchants.is_empty()
    }

    /// The merchants this key is restricted to; `None` for an admin key or
    /// a key bound to no merchant.
    pub fn merchant_binding(&self) -> Option<&BTreeSet<u64>> {
        (!self.is_admin() && !self.merchants.is_empty()).then_some(&self.merchants)
    }

    /// Whether this caller may see a link created by `app` for `kdt_id`.
    pub fn can_see(&self, app: Option<&str>, kdt_id: Option<u64>) -> bool {
        if self.is_admin() {
            return true;
        }
        match self.merchant_binding() {
            Some(m) => kdt_id.is_some_and(|k| m.contains(&k)),
            None => app == Some(self.app.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_and_visibility() {
        let admin = Caller::new("ops", [Scope::Admin], [55]);
        let m55 = Caller::new("m55", [Scope::LinksRead], [55, 56]);
        let plain = Caller::new("demo", Scope::DEFAULT, []);
        assert!(admin.has(Scope::LinksManage) && admin.has(Scope::StatsRead));
        assert_eq!(admin.merchant_binding(), None);
        assert!(admin.can_see(Some("x"), None));
        assert!(m55.can_see(Some("other-app"), Some(56)));
        assert!(!m55.can_see(Some("m55"), Some(91)));
        assert!(!m55.can_see(Some("m55"), None));
        assert_eq!(
            m55.require(Scope::LinksCreate),
            Err(MissingScope(Scope::LinksCreate))
        );
        assert!(plain.can_see(Some("demo"), Some(55)));
        assert!(!plain.can_see(Some("other"), None));
        assert!(!plain.has(Scope::StatsRead));
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
        }
        assert_eq!(Scope::parse("links:delete"), None);
    }
}
