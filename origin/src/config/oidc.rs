//! `admin.oidc:`: single sign-on for the console with an OpenID provider
//! (authorization code with PKCE). The provider says who someone is; the
//! claims named here say what they may do: `roles_claim`'s values map to
//! console roles (the highest wins), `merchants_claim` binds them to
//! merchants. See `crate::admin::sso`.

use super::file::OidcFile;
use super::role::Role;
use super::{err, ConfigError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use url::Url;

/// The client secret from the environment, overriding the file's.
pub const ENV_OIDC_CLIENT_SECRET: &str = "SHORTURL_OIDC_CLIENT_SECRET";

/// The console's callback path: `redirect_url` must end with it.
pub const CALLBACK_PATH: &str = "/admin/oidc/callback";

/// The validated `admin.oidc:` section.
#[derive(Clone)]
pub struct OidcConfig {
    /// The provider's issuer identifier as written (the provider's own
    /// metadata must say exactly this; its discovery document is read from
    /// `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Where the provider sends the browser back, as registered there.
    pub redirect_url: String,
    /// Scopes asked for besides `openid`.
    pub scopes: Vec<String>,
    /// The claim naming the user (dotted for nested claims).
    pub name_claim: String,
    /// The claim whose values map to roles through `roles`.
    pub roles_claim: String,
    pub roles: BTreeMap<String, Role>,
    /// The claim listing the merchants the user is bound to (none: the
    /// provider binds nobody).
    pub merchants_claim: Option<String>,
    /// The sign-in button's text.
    pub label: String,
    /// PEM certificates trusted for the provider besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Bound on each request to the provider.
    pub timeout: Duration,
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("redirect_url", &self.redirect_url)
            .field("roles_claim", &self.roles_claim)
            .finish_non_exhaustive()
    }
}

/// Whether `u` may be plain HTTP: only on this host (a provider or console
/// under test, or behind a local proxy).
fn loopback(u: &Url) -> bool {
    match u.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    }
}

fn url(field: &'static str, v: &str) -> Result<Url, ConfigError> {
    let u = Url::parse(v).map_err(|source| ConfigError::Url {
        field,
        value: v.to_owned(),
        source,
    })?;
    if u.scheme() != "https" && !(u.scheme() == "http" && loopback(&u)) {
        return err(field, "must be https (http only on loopback)");
    }
    if u.query().is_some() || u.fragment().is_some() {
        return err(field, "must have no query or fragment");
    }
    Ok(u)
}

fn claim(v: Option<String>, default: &str, field: &str) -> Result<String, ConfigError> {
    let c = v.unwrap_or_else(|| default.to_owned());
    if c.is_empty() || c.split('.').any(str::is_empty) || c.len() > 128 {
        return err(
            field,
            "a claim name, dotted for a nested one (realm_access.roles)",
        );
    }
    Ok(c)
}

/// `admin.oidc:` validated, `SHORTURL_OIDC_CLIENT_SECRET` from `env`
/// overriding `client_secret`.
pub fn parse(
    f: OidcFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<OidcConfig, ConfigError> {
    url("admin.oidc.issuer", &f.issuer)?;
    if url("admin.oidc.redirect_url", &f.redirect_url)?.path() != CALLBACK_PATH {
        return err(
            "admin.oidc.redirect_url",
            format!("must be the console's callback, https://<console host>{CALLBACK_PATH}"),
        );
    }
    if f.client_id.trim().is_empty() {
        return err("admin.oidc.client_id", "must not be empty");
    }
    let Some(client_secret) = env(ENV_OIDC_CLIENT_SECRET)
        .or(f.client_secret)
        .filter(|s| !s.is_empty())
    else {
        return err(
            "admin.oidc.client_secret",
            format!("missing (set it, or {ENV_OIDC_CLIENT_SECRET})"),
        );
    };
    let scopes = f
        .scopes
        .unwrap_or_else(|| vec!["profile".into(), "email".into()]);
    if let Some(s) = scopes.iter().find(|s| {
        s.is_empty()
            || !s
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    }) {
        return err("admin.oidc.scopes", format!("{s:?} is not a scope"));
    }
    let mut roles = BTreeMap::new();
    for (value, role) in f.roles {
        let Some(r) = Role::parse(&role) else {
            return err(
                format!("admin.oidc.roles.{value}"),
                format!("must be viewer, operator or admin (got {role:?})"),
            );
        };
        roles.insert(value, r);
    }
    if roles.is_empty() {
        return err(
            "admin.oidc.roles",
            "map at least one value of roles_claim to a role (nobody could sign in)",
        );
    }
    let timeout_ms = f.timeout_ms.unwrap_or(10_000);
    if timeout_ms == 0 {
        return err("admin.oidc.timeout_ms", "must be greater than zero");
    }
    Ok(OidcConfig {
        issuer: f.issuer,
        client_id: f.client_id,
        client_secret,
        redirect_url: f.redirect_url,
        scopes: scopes.into_iter().filter(|s| s != "openid").collect(),
        name_claim: claim(f.name_claim, "preferred_username", "admin.oidc.name_claim")?,
        roles_claim: claim(f.roles_claim, "groups", "admin.oidc.roles_claim")?,
        roles,
        merchants_claim: f
            .merchants_claim
            .map(|c| claim(Some(c), "", "admin.oidc.merchants_claim"))
            .transpose()?,
        label: f
            .label
            .filter(|l| !l.trim().is_empty())
            .unwrap_or_else(|| "Sign in with single sign-on".into()),
        ca_file: f.ca_file,
        timeout: Duration::from_millis(timeout_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(issuer: &str, redirect: &str) -> OidcFile {
        OidcFile {
            issuer: issuer.into(),
            client_id: "console".into(),
            client_secret: Some("s3cret".into()),
            redirect_url: redirect.into(),
            roles: [("ops".to_owned(), "operator".to_owned())].into(),
            ..OidcFile::default()
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_and_env() {
        let c = parse(
            file(
                "https://idp.example.com/realms/a",
                "https://admin.example.com/admin/oidc/callback",
            ),
            &no_env,
        )
        .unwrap();
        assert_eq!(c.name_claim, "preferred_username");
        assert_eq!(c.roles_claim, "groups");
        assert_eq!(c.scopes, ["profile", "email"]);
        assert_eq!(c.roles["ops"], Role::Operator);
        assert!(
            !format!("{c:?}").contains("s3cret"),
            "the secret is never printed"
        );
        let env = |k: &str| (k == ENV_OIDC_CLIENT_SECRET).then(|| "from-env".to_owned());
        let c = parse(
            file(
                "http://127.0.0.1:9000",
                "http://localhost:8080/admin/oidc/callback",
            ),
            &env,
        )
        .unwrap();
        assert_eq!(c.client_secret, "from-env");
    }

    #[test]
    fn errors_name_the_field() {
        let ok_redirect = "https://a.example/admin/oidc/callback";
        let cases: Vec<(OidcFile, &str)> = vec![
            (
                file("http://idp.example.com", ok_redirect),
                "admin.oidc.issuer",
            ),
            (file("not a url", ok_redirect), "admin.oidc.issuer"),
            (
                file("https://idp.example.com?x=1", ok_redirect),
                "admin.oidc.issuer",
            ),
            (
                file("https://idp.example.com", "https://a.example/elsewhere"),
                "admin.oidc.redirect_url",
            ),
            (
                file(
                    "https://idp.example.com",
                    "http://a.example/admin/oidc/callback",
                ),
                "admin.oidc.redirect_url",
            ),
            (
                OidcFile {
                    client_secret: None,
                    ..file("https://i.example", ok_redirect)
                },
                "admin.oidc.client_secret",
            ),
            (
                OidcFile {
                    client_id: " ".into(),
                    ..file("https://i.example", ok_redirect)
                },
                "admin.oidc.client_id",
            ),
            (
                OidcFile {
                    roles: BTreeMap::new(),
                    ..file("https://i.example", ok_redirect)
                },
                "admin.oidc.roles",
            ),
            (
                OidcFile {
                    roles: [("x".to_owned(), "root".to_owned())].into(),
                    ..file("https://i.example", ok_redirect)
                },
                "admin.oidc.roles.x",
            ),
            (
                OidcFile {
                    roles_claim: Some("a..b".into()),
                    ..file("https://i.example", ok_redirect)
                },
                "admin.oidc.roles_claim",
            ),
            (
                OidcFile {
                    scopes: Some(vec!["a b".into()]),
                    ..file("https://i.example", ok_redirect)
                },
                "admin.oidc.scopes",
            ),
            (
                OidcFile {
                    timeout_ms: Some(0),
                    ..file("https://i.example", ok_redirect)
                },
                "admin.oidc.timeout_ms",
            ),
        ];
        for (f, field) in cases {
            let e = parse(f, &no_env)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
