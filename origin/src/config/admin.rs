//! `admin:`: the console's users (argon2id hashes and roles), single
//! sign-on (`super::oidc`), session timeouts, the proxies whose
//! `X-Forwarded-Proto` and `X-Forwarded-For` are believed, and the sign-in
//! limits.

use super::file::{AdminFile, AdminUserFile};
use super::oidc::{self, OidcConfig};
pub use super::role::Role;
use super::{err, positive, ConfigError};
use shorturl_common::cidr::CidrList;
use std::collections::BTreeSet;
use std::time::Duration;

/// One console user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminUser {
    /// `[A-Za-z0-9_.-]`, 1-32 characters; the audit actor is `admin:<name>`.
    pub name: String,
    /// An argon2id PHC string (`shorturl-origin hash-password`).
    pub password_hash: String,
    pub role: Role,
    /// Merchants a support user is restricted to (empty: every tenant).
    pub merchants: BTreeSet<u64>,
    /// Signed in through the OpenID provider (no password here; the audit
    /// actor is `sso:<name>`).
    pub sso: bool,
}

impl AdminUser {
    /// Who the audit trail says made a change: `admin:<name>`, or
    /// `sso:<name>` for a user of the OpenID provider (so that a provider's
    /// user never passes for a configured one of the same name).
    pub fn actor(&self) -> String {
        format!("{}:{}", if self.sso { "sso" } else { "admin" }, self.name)
    }
}

/// The validated `admin:` section.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub users: Vec<AdminUser>,
    /// A session unused this long is over.
    pub idle_timeout: Duration,
    /// A session is over this long after sign-in, used or not.
    pub absolute_timeout: Duration,
    /// Peers whose `X-Forwarded-Proto: https` marks the request as TLS
    /// (the cookie then gets `Secure`) and whose `X-Forwarded-For` names
    /// the client the sign-in limits count. Empty: never believed.
    pub trusted_proxies: CidrList,
    /// Sign-in attempts allowed per user name *and* address in a burst,
    /// refilled at `signin_refill_per_min` per minute (a success gives its
    /// attempt back). Never per user name alone: a stranger must not be
    /// able to lock the real user out from elsewhere.
    pub signin_burst: u32,
    pub signin_refill_per_min: u32,
    /// Sign-in attempts allowed per address over every user name.
    pub signin_address_burst: u32,
    pub signin_address_refill_per_min: u32,
    /// Password checks (argon2id, ~19 MiB each) running at once on this
    /// origin; an attempt beyond them is answered 429 at once.
    pub max_concurrent_signins: u32,
    /// Whether `users` may sign in with their passwords.
    pub password_signin: bool,
    /// Single sign-on, when configured.
    pub oidc: Option<OidcConfig>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            users: Vec::new(),
            idle_timeout: Duration::from_secs(30 * 60),
            absolute_timeout: Duration::from_secs(12 * 3600),
            trusted_proxies: CidrList::default(),
            signin_burst: 5,
            signin_refill_per_min: 5,
            signin_address_burst: 20,
            signin_address_refill_per_min: 20,
            max_concurrent_signins: 2,
            password_signin: true,
            oidc: None,
        }
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn user(u: AdminUserFile) -> Result<AdminUser, ConfigError> {
    if !valid_name(&u.name) {
        return err(
            "admin.users",
            format!(
                "name {:?} must be 1-32 characters of [A-Za-z0-9_.-]",
                u.name
            ),
        );
    }
    if !u.password_hash.starts_with("$argon2id$")
        || argon2::PasswordHash::new(&u.password_hash).is_err()
    {
        return err(
            format!("admin.users.{}.password_hash", u.name),
            "expected an argon2id PHC string (shorturl-origin hash-password)",
        );
    }
    let Some(role) = Role::parse(&u.role) else {
        return err(
            format!("admin.users.{}.role", u.name),
            format!("must be viewer, operator or admin (got {:?})", u.role),
        );
    };
    if role == Role::Admin && !u.merchants.is_empty() {
        return err(
            format!("admin.users.{}.merchants", u.name),
            "an admin sees every tenant; give merchants to a viewer or operator",
        );
    }
    Ok(AdminUser {
        name: u.name,
        password_hash: u.password_hash,
        role,
        merchants: u.merchants.into_iter().collect(),
        sso: false,
    })
}

/// `admin:` validated (`env` may hold the single sign-on client secret).
pub fn admin(
    f: Option<AdminFile>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<AdminConfig, ConfigError> {
    let d = AdminConfig::default();
    let Some(f) = f else {
        return Ok(d);
    };
    let mut names = BTreeSet::new();
    let mut users = Vec::new();
    for u in f.users {
        let u = user(u)?;
        if !names.insert(u.name.clone()) {
            return err("admin.users", format!("name {:?} is repeated", u.name));
        }
        users.push(u);
    }
    let secs = |v: Option<u64>, default: Duration, field: &str| match v {
        Some(0) => err(field, "must be greater than zero"),
        Some(s) => Ok(Duration::from_secs(s)),
        None => Ok(default),
    };
    let idle_timeout = secs(
        f.idle_timeout_secs,
        d.idle_timeout,
        "admin.idle_timeout_secs",
    )?;
    let absolute_timeout = secs(
        f.absolute_timeout_secs,
        d.absolute_timeout,
        "admin.absolute_timeout_secs",
    )?;
    if idle_timeout > absolute_timeout {
        return err(
            "admin.idle_timeout_secs",
            "larger than admin.absolute_timeout_secs",
        );
    }
    let trusted_proxies =
        CidrList::parse(&f.trusted_proxies).map_err(|source| ConfigError::Cidr {
            field: "admin.trusted_proxies",
            source,
        })?;
    let oidc = f.oidc.map(|o| oidc::parse(o, env)).transpose()?;
    let password_signin = f.password_signin.unwrap_or(true);
    if !password_signin && oidc.is_none() {
        return err(
            "admin.password_signin",
            "false leaves no way to sign in: configure admin.oidc",
        );
    }
    Ok(AdminConfig {
        users,
        password_signin,
        oidc,
        idle_timeout,
        absolute_timeout,
        trusted_proxies,
        signin_burst: positive(f.signin_burst, d.signin_burst, "admin.signin_burst")?,
        signin_refill_per_min: positive(
            f.signin_refill_per_min,
            d.signin_refill_per_min,
            "admin.signin_refill_per_min",
        )?,
        signin_address_burst: positive(
            f.signin_address_burst,
            d.signin_address_burst,
            "admin.signin_address_burst",
        )?,
        signin_address_refill_per_min: positive(
            f.signin_address_refill_per_min,
            d.signin_address_refill_per_min,
            "admin.signin_address_refill_per_min",
        )?,
        max_concurrent_signins: positive(
            f.max_concurrent_signins,
            d.max_concurrent_signins,
            "admin.max_concurrent_signins",
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::MIN;
    use super::super::Config;
    use super::*;

    const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$3KOLpBRkUgJ1Ky9X3Mz2l1lX0vXOXlK9S+ok8ilHuEk";

    #[test]
    fn users_and_defaults() {
        let c = Config::parse(
            &format!(
                "{MIN}admin:\n  users:\n    - {{name: ops, password_hash: '{HASH}', role: operator, merchants: [55]}}\n"
            ),
            |_| None,
        )
        .unwrap();
        assert_eq!(c.admin.users.len(), 1);
        assert_eq!(c.admin.users[0].role, Role::Operator);
        assert_eq!(c.admin.idle_timeout, Duration::from_secs(1800));
        assert!(Role::Operator.can_change() && !Role::Viewer.can_change());
        assert!(Config::parse(MIN, |_| None).unwrap().admin.users.is_empty());
        assert_eq!(c.admin.max_concurrent_signins, 2);
        assert!(c.admin.password_signin && c.admin.oidc.is_none());
        let c = Config::parse(
            &format!(
                "{MIN}admin:\n  password_signin: false\n  oidc: {{issuer: 'https://i.example', client_id: c, redirect_url: 'https://a.example/admin/oidc/callback', roles: {{g: admin}}}}\n"
            ),
            |k| (k == super::super::oidc::ENV_OIDC_CLIENT_SECRET).then(|| "s".to_owned()),
        )
        .unwrap();
        assert!(!c.admin.password_signin);
        assert_eq!(c.admin.oidc.unwrap().roles["g"], Role::Admin);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (format!("admin: {{users: [{{name: 'a b', password_hash: '{HASH}', role: admin}}]}}"), "admin.users"),
            ("admin: {users: [{name: a, password_hash: 'plain', role: admin}]}".to_owned(), "admin.users.a.password_hash"),
            (format!("admin: {{users: [{{name: a, password_hash: '{HASH}', role: root}}]}}"), "admin.users.a.role"),
            (format!("admin: {{users: [{{name: a, password_hash: '{HASH}', role: admin, merchants: [5]}}]}}"), "admin.users.a.merchants"),
            ("admin: {idle_timeout_secs: 100, absolute_timeout_secs: 10}".to_owned(), "admin.idle_timeout_secs"),
            ("admin: {trusted_proxies: [nope]}".to_owned(), "admin.trusted_proxies"),
            ("admin: {signin_burst: 0}".to_owned(), "admin.signin_burst"),
            ("admin: {signin_address_refill_per_min: 0}".to_owned(), "admin.signin_address_refill_per_min"),
            ("admin: {max_concurrent_signins: 0}".to_owned(), "admin.max_concurrent_signins"),
            ("admin: {password_signin: false}".to_owned(), "admin.password_signin"),
            ("admin: {oidc: {issuer: 'https://i.example', client_id: c, client_secret: s, redirect_url: 'https://a.example/admin/oidc/callback'}}".to_owned(), "admin.oidc.roles"),
        ];
        for (text, field) in cases {
            let e = Config::parse(&format!("{MIN}{text}\n"), |_| None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
