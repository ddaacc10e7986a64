//! Console sessions: a random 256-bit id in an `HttpOnly; SameSite=Strict`
//! cookie scoped to `/admin`; MySQL keeps only the id's SHA-256 (so every
//! origin agrees and a database leak gives no usable session), the user,
//! the session's CSRF token and its times. A session ends at sign-out,
//! after `admin.idle_timeout_secs` unused, or `admin.absolute_timeout_secs`
//! after sign-in, whichever comes first. A user of the OpenID provider has
//! the role and merchants its claims granted at sign-in stored in the row;
//! a configured user's are read from the configuration at every request.

use super::csrf;
use crate::config::{AdminConfig, AdminUser, Role};
use crate::store::console::{SessionRow, SsoGrant};
use crate::store::{DbError, Store};
use http::{header, HeaderMap};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;

/// The session cookie.
pub const COOKIE: &str = "shorturl_admin";
/// The sign-in form's double-submit cookie.
pub const LOGIN_COOKIE: &str = "shorturl_admin_login";

/// A signed-in user.
#[derive(Debug, Clone)]
pub struct Session {
    pub user: AdminUser,
    /// The token every form of this session carries.
    pub csrf: String,
    id_hash: [u8; 32],
}

fn hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// The value of cookie `name` in the request, if any.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Whether the request came over TLS: only a trusted proxy's
/// `X-Forwarded-Proto` says so (the origin itself speaks plain HTTP).
pub fn is_tls(cfg: &AdminConfig, headers: &HeaderMap, peer: Option<SocketAddr>) -> bool {
    peer.is_some_and(|p| cfg.trusted_proxies.contains(p.ip()))
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` value for `name=value` (`max_age` seconds; 0 deletes).
pub fn set_cookie(name: &str, value: &str, max_age: u64, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` of a session just started (`id`), for the whole
/// absolute timeout.
pub fn started_cookie(cfg: &AdminConfig, id: &str, secure: bool) -> String {
    set_cookie(COOKIE, id, cfg.absolute_timeout.as_secs(), secure)
}

/// Starts a session for `user`; returns the cookie value.
pub async fn start(store: &Store, user: &AdminUser, now: u64) -> Result<String, DbError> {
    let id = csrf::token();
    let grant = user.sso.then(|| SsoGrant {
        role: user.role.as_str().to_owned(),
        merchants: user
            .merchants
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    });
    store
        .session_insert(&hash(&id), &user.name, grant.as_ref(), &csrf::token(), now)
        .await?;
    Ok(id)
}

/// The user a session row is of: a configured user as configured now, a
/// provider's user as granted at sign-in while single sign-on is still
/// configured. None: the user is gone (removed, or sign-on turned off).
fn user_of(cfg: &AdminConfig, row: &SessionRow) -> Option<AdminUser> {
    let Some(g) = &row.sso else {
        return cfg
            .users
            .iter()
            .find(|u| u.name == row.user && cfg.password_signin)
            .cloned();
    };
    cfg.oidc.as_ref()?;
    let merchants = if g.merchants.is_empty() {
        Default::default()
    } else {
        // A binding that does not read back binds to nothing rather than
        // to every tenant.
        g.merchants
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?
    };
    Some(AdminUser {
        name: row.user.clone(),
        password_hash: String::new(),
        role: Role::parse(&g.role)?,
        merchants,
        sso: true,
    })
}

/// The live session of the request, if any (touching it at most once a
/// minute); an expired one is deleted.
pub async fn load(
    store: &Store,
    cfg: &AdminConfig,
    headers: &HeaderMap,
    now: u64,
) -> Result<Option<Session>, DbError> {
    let Some(id) = cookie(headers, COOKIE).filter(|v| v.len() == 64) else {
        return Ok(None);
    };
    let id_hash = hash(id);
    let Some(row) = store.session_find(&id_hash).await? else {
        return Ok(None);
    };
    let idle = cfg.idle_timeout.as_secs();
    let user = user_of(cfg, &row);
    let expired = now.saturating_sub(row.last_seen_at) >= idle
        || now.saturating_sub(row.created_at) >= cfg.absolute_timeout.as_secs();
    let Some(user) = user.filter(|_| !expired) else {
        // Timed out, or the user was removed from the configuration (or
        // its way of signing in was turned off).
        store
            .session_delete(&id_hash, now.saturating_sub(idle))
            .await?;
        return Ok(None);
    };
    if now.saturating_sub(row.last_seen_at) >= 60.min(idle / 2) {
        store.session_touch(&id_hash, now).await?;
    }
    Ok(Some(Session {
        user,
        csrf: row.csrf,
        id_hash,
    }))
}

/// Ends `s` (sign-out), purging idle sessions on the way.
pub async fn end(store: &Store, cfg: &AdminConfig, s: &Session, now: u64) -> Result<(), DbError> {
    store
        .session_delete(&s.id_hash, now.saturating_sub(cfg.idle_timeout.as_secs()))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn cookies_and_tls() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; shorturl_admin=xyz ; b=2"),
        );
        assert_eq!(cookie(&h, COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, "c"), None);
        let c = set_cookie(COOKIE, "v", 60, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("Secure"));
        assert!(c.contains("Path=/admin"));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let mut cfg = AdminConfig::default();
        let peer: SocketAddr = "10.1.2.3:5000".parse().unwrap();
        assert!(!is_tls(&cfg, &h, Some(peer)));
        cfg.trusted_proxies = shorturl_common::cidr::CidrList::parse(&["10.0.0.0/8"]).unwrap();
        assert!(is_tls(&cfg, &h, Some(peer)));
        assert!(!is_tls(&cfg, &h, Some("192.0.2.1:1".parse().unwrap())));
    }
}
