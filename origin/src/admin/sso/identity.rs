//! Who a provider's claims make someone in the console: a name, a role
//! (the highest that `roles_claim`'s values map to) and a merchant binding
//! (`merchants_claim`). Pure: the claims come in as JSON, the user goes out.
//!
//! A binding always restricts: an admin bound to merchants is an operator
//! of those merchants (an admin sees every tenant). A binding that does
//! not read as merchant ids refuses the sign-in rather than binding to
//! nothing (which would mean every tenant).

use crate::config::{AdminUser, OidcConfig, Role};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Longest name (the audit actor `sso:<name>` fits its 64 characters).
pub const MAX_NAME: usize = 60;

/// Why claims give no console user; the text is shown to the person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the identity provider sent no {0} claim to name you by")]
    NoName(String),
    #[error("your name at the identity provider ({0:?}) is not a console name: 1-60 characters of letters, digits and _ . @ + -")]
    BadName(String),
    #[error("your account at the identity provider has no console role: ask an administrator to add you to a group the console maps")]
    NoRole,
    #[error("your merchant binding from the identity provider is not a list of merchant ids: ask an administrator to fix it")]
    BadMerchants,
}

/// The claim at `path`: the key itself first (namespaced claims such as
/// `https://example.com/roles` hold dots), else a dotted path into nested
/// objects (`realm_access.roles`).
pub fn claim<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    let mut parts = path.split('.');
    let mut v = claims.get(parts.next()?)?;
    for p in parts {
        v = v.as_object()?.get(p)?;
    }
    Some(v)
}

/// A claim's values: an array's strings, or one string.
fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn merchant(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|&m| m > 0)
}

/// The merchants a claim binds to: ids as numbers or strings, in an array
/// or one string separated by commas or spaces.
fn merchants(v: &Value) -> Option<BTreeSet<u64>> {
    match v {
        Value::Array(a) => a.iter().map(merchant).collect(),
        Value::String(s) => s
            .split([',', ' '])
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().ok().filter(|&m| m > 0))
            .collect(),
        Value::Number(_) => merchant(v).map(|m| BTreeSet::from([m])),
        Value::Null => Some(BTreeSet::new()),
        _ => None,
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NAME
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b'+' | b'-'))
}

/// The console user `claims` make, or why none.
pub fn user(cfg: &OidcConfig, claims: &Map<String, Value>) -> Result<AdminUser, Refusal> {
    let name = match claim(claims, &cfg.name_claim) {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(Refusal::NoName(cfg.name_claim.clone())),
    };
    if !valid_name(&name) {
        return Err(Refusal::BadName(name));
    }
    let role = claim(claims, &cfg.roles_claim)
        .map(strings)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| cfg.roles.get(v).copied())
        .max()
        .ok_or(Refusal::NoRole)?;
    let merchants = match cfg
        .merchants_claim
        .as_deref()
        .and_then(|c| claim(claims, c))
    {
        Some(v) => merchants(v).ok_or(Refusal::BadMerchants)?,
        None => BTreeSet::new(),
    };
    let role = if merchants.is_empty() {
        role
    } else {
        role.min(Role::Operator)
    };
    Ok(AdminUser {
        name,
        password_hash: String::new(),
        role,
        merchants,
        sso: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::OidcFile;
    use serde_json::json;

    fn cfg() -> OidcConfig {
        let f = OidcFile {
            issuer: "https://idp.example".into(),
            client_id: "c".into(),
            client_secret: Some("s".into()),
            redirect_url: "https://a.example/admin/oidc/callback".into(),
            roles_claim: Some("realm_access.roles".into()),
            roles: [
                ("su-admins", "admin"),
                ("su-ops", "operator"),
                ("su-view", "viewer"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into(),
            merchants_claim: Some("https://example.com/merchants".into()),
            ..OidcFile::default()
        };
        crate::config::parse_oidc(f, &|_| None).unwrap()
    }

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn highest_role_and_nested_claims() {
        let u = user(
            &cfg(),
            &claims(json!({"preferred_username": "ann@example.com",
                "realm_access": {"roles": ["su-view", "other", "su-ops"]}})),
        )
        .unwrap();
        assert_eq!(u.name, "ann@example.com");
        assert_eq!(u.role, Role::Operator);
        assert!(u.merchants.is_empty() && u.sso);
        assert_eq!(u.actor(), "sso:ann@example.com");
    }

    #[test]
    fn a_binding_restricts() {
        let c = cfg();
        let base = json!({"preferred_username": "bo", "realm_access": {"roles": ["su-admins"]}});
        for (binding, want) in [
            (json!([55, "77"]), vec![55, 77]),
            (json!("55, 77"), vec![55, 77]),
            (json!(55), vec![55]),
            (json!([]), vec![]),
            (Value::Null, vec![]),
        ] {
            let mut m = claims(base.clone());
            m.insert("https://example.com/merchants".into(), binding.clone());
            let u = user(&c, &m).unwrap();
            assert_eq!(
                u.merchants.iter().copied().collect::<Vec<_>>(),
                want,
                "{binding}"
            );
            let role = if want.is_empty() {
                Role::Admin
            } else {
                Role::Operator
            };
            assert_eq!(u.role, role, "{binding}");
        }
        for bad in [
            json!(["x"]),
            json!([0]),
            json!("55;77"),
            json!({"a": 1}),
            json!(-5),
            json!([55, true]),
        ] {
            let mut m = claims(base.clone());
            m.insert("https://example.com/merchants".into(), bad.clone());
            assert_eq!(user(&c, &m), Err(Refusal::BadMerchants), "{bad}");
        }
    }

    #[test]
    fn refusals() {
        let c = cfg();
        let roles = json!({"roles": ["su-view"]});
        assert_eq!(
            user(&c, &claims(json!({"realm_access": roles}))),
            Err(Refusal::NoName("preferred_username".into()))
        );
        assert_eq!(
            user(
                &c,
                &claims(json!({"preferred_username": 7, "realm_access": roles}))
            ),
            Err(Refusal::NoName("preferred_username".into()))
        );
        for bad in ["", "a b", "<script>", &"x".repeat(61), "ünï"] {
            assert_eq!(
                user(
                    &c,
                    &claims(json!({"preferred_username": bad, "realm_access": roles}))
                ),
                Err(Refusal::BadName(bad.into()))
            );
        }
        for r in [
            json!({"roles": ["staff"]}),
            json!({"roles": "su-views"}),
            json!({}),
            json!("su-view"),
        ] {
            assert_eq!(
                user(
                    &c,
                    &claims(json!({"preferred_username": "a", "realm_access": r}))
                ),
                Err(Refusal::NoRole),
                "{r}"
            );
        }
        // One string is one value.
        let u = user(
            &c,
            &claims(json!({"preferred_username": "a", "realm_access": {"roles": "su-view"}})),
        )
        .unwrap();
        assert_eq!(u.role, Role::Viewer);
    }
}
