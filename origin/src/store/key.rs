//! A link's identity in MySQL (protocol 3.6): its code and its scope.
//!
//! A code of the pre-generated grammar is one link in the whole fleet
//! (scope `''`); any other code is one link per domain (scope: the domain).
//! `short_code`'s unique key is `(code, code_scope)`, where `code_scope` is
//! a generated column of the same rule, so MySQL and this type cannot
//! disagree; tables keyed by link (rollups, audit) name it by
//! [`LinkKey::name`], `shorturl_common::code::link_key`.

use shorturl_common::code::{is_fleet_code, link_key};
use std::fmt;

/// `WHERE` condition selecting one link by its key (binds code, scope).
pub const BY_KEY: &str = "code = ? AND code_scope = ?";

/// Joins a table `h` keyed by link name to `short_code s`, usable from
/// either side: `s.link_key` (virtual) for a walk from `s`, the split name
/// on `uk_code` for a walk from `h`.
pub const JOIN_BY_NAME: &str = "s.link_key = h.code \
     AND s.code = SUBSTRING_INDEX(h.code, '/', -1) \
     AND s.code_scope = IF(LOCATE('/', h.code) = 0, '', SUBSTRING_INDEX(h.code, '/', 1))";

/// One link's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LinkKey {
    code: String,
    scope: String,
}

impl LinkKey {
    /// The link `code` names on `domain` (normalised).
    pub fn new(code: &str, domain: &str) -> LinkKey {
        let scope = if is_fleet_code(code) { "" } else { domain };
        LinkKey {
            code: code.to_owned(),
            scope: scope.to_owned(),
        }
    }

    /// The key of a fleet code, which needs no domain; `None` for a
    /// per-domain code.
    pub fn fleet(code: &str) -> Option<LinkKey> {
        is_fleet_code(code).then(|| LinkKey::new(code, ""))
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    /// `''` for a fleet code, else the domain.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The name tables keyed by link use: the code, or `<domain>/<code>`.
    pub fn name(&self) -> String {
        link_key(&self.code, &self.scope)
    }

    /// The parameters of [`BY_KEY`].
    pub fn params(&self) -> (&str, &str) {
        (&self.code, &self.scope)
    }

    /// [`BY_KEY`]'s parameters, then the same for a fleet code's free row
    /// in `code_pool` (`code = ? AND ? = ''`).
    pub fn pool_params(&self) -> (&str, &str, &str, &str) {
        (&self.code, &self.scope, &self.code, &self.scope)
    }
}

impl fmt::Display for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::LinkKey;

    #[test]
    fn keys() {
        let k = LinkKey::new("aB3xYz", "s.shop55.com");
        assert_eq!(
            (k.code(), k.scope(), k.name()),
            ("aB3xYz", "", "aB3xYz".into())
        );
        assert_eq!(LinkKey::fleet("aB3xYz"), Some(k));
        let k = LinkKey::new("sale", "s.shop55.com");
        assert_eq!(k.name(), "s.shop55.com/sale");
        assert_eq!(k.to_string(), k.name());
        assert_eq!(k.scope(), "s.shop55.com");
        assert_eq!(LinkKey::fleet("sale"), None);
    }
}
