//! Sign-in through the OpenID provider (`admin.oidc`): `GET
//! /admin/oidc/start` sends the browser to the provider with a fresh state,
//! nonce and PKCE challenge (their secrets in a 10-minute `HttpOnly`,
//! `SameSite=Lax` cookie scoped to `/admin/oidc`: the provider's redirect
//! back is a cross-site navigation, which a `Strict` cookie would miss);
//! `GET /admin/oidc/callback` checks the state against that cookie before
//! anything else, spends one attempt of the address's sign-in budget,
//! exchanges the code, maps the verified claims to a console user and
//! starts a fresh session. The cookie is single-use: every answer of the
//! callback deletes it.

use super::super::html::{self, esc, Nav};
use super::super::session::{self, cookie};
use super::super::sso::{identity, Pending, Sso};
use super::super::{client, Admin, Req};
use crate::links::Links;
use axum::response::Response;
use http::{header, HeaderValue, StatusCode};

/// The cookie of a sign-in under way.
pub const PENDING_COOKIE: &str = "shorturl_admin_oidc";
/// How long a sign-in may take at the provider.
const PENDING_MAX_AGE_SECS: u64 = 600;
/// The sign-in budget's key for the provider's callbacks (no user name is
/// known before the exchange; the address budget is what counts).
const LIMIT_KEY: &str = "\u{1}sso";

fn pending_cookie(value: &str, max_age: u64, secure: bool) -> String {
    format!(
        "{PENDING_COOKIE}={value}; Path=/admin/oidc; HttpOnly; SameSite=Lax; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

fn with_cookie(mut r: Response, c: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(c) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// A page saying why the sign-in did not happen, with a way to start
/// again; the pending cookie is deleted.
fn stopped(req: &Req, admin: &Admin, status: StatusCode, why: &str) -> Response {
    let main = format!(
        "<div class=\"login\"><p class=\"msg error\" id=\"error\">{}</p>\
         <p><a href=\"/admin/login\" id=\"again\">Back to sign-in</a></p></div>",
        esc(why)
    );
    let r = html::respond(status, html::page(None, Nav::None, "Sign in", &main));
    with_cookie(
        r,
        &pending_cookie("", 0, session::is_tls(&admin.cfg, &req.headers, req.peer)),
    )
}

fn not_configured() -> Response {
    html::error(
        None,
        StatusCode::NOT_FOUND,
        "single sign-on is not configured",
    )
}

fn unreachable_provider(req: &Req, admin: &Admin) -> Response {
    stopped(
        req,
        admin,
        StatusCode::SERVICE_UNAVAILABLE,
        "the identity provider could not be reached: try again in a moment",
    )
}

/// `GET /admin/oidc/start`.
pub async fn start(admin: &Admin, req: &Req) -> Response {
    let Some(sso) = &admin.sso else {
        return not_configured();
    };
    match sso.begin().await {
        Ok((url, pending)) => {
            let secure = session::is_tls(&admin.cfg, &req.headers, req.peer);
            with_cookie(
                html::see_other(url.as_str(), None),
                &pending_cookie(&pending.to_cookie(), PENDING_MAX_AGE_SECS, secure),
            )
        }
        Err(e) => {
            admin.signins.sso_failed.inc();
            tracing::warn!(error = %e, "console single sign-on could not start");
            unreachable_provider(req, admin)
        }
    }
}

/// `GET /admin/oidc/callback`.
pub async fn callback(links: &Links, admin: &Admin, req: &Req, now: u64) -> Response {
    let Some(sso) = &admin.sso else {
        return not_configured();
    };
    let pending = cookie(&req.headers, PENDING_COOKIE).and_then(Pending::from_cookie);
    let state = req.param("state").unwrap_or_default();
    let Some(pending) = pending.filter(|p| p.matches(&state)) else {
        admin.signins.sso_bad_state.inc();
        return stopped(
            req,
            admin,
            StatusCode::FORBIDDEN,
            "this sign-in was not started in this browser, or took longer than 10 minutes: start again",
        );
    };
    if let Some(e) = req.param("error") {
        // The provider's own refusal (e.g. access_denied): only its code is
        // shown, and only when it is one.
        admin.signins.sso_refused.inc();
        let code = Some(e.as_str())
            .filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .unwrap_or("unknown");
        tracing::info!(
            error = code,
            "console single sign-on refused by the provider"
        );
        return stopped(
            req,
            admin,
            StatusCode::UNAUTHORIZED,
            &format!("the identity provider did not sign you in ({code})"),
        );
    }
    // RFC 9207: a provider that names itself must be the configured one.
    if req.param("iss").is_some_and(|i| i != sso.cfg.issuer) {
        admin.signins.sso_failed.inc();
        tracing::warn!("console single sign-on callback names another issuer");
        return stopped(
            req,
            admin,
            StatusCode::BAD_REQUEST,
            "the sign-in came back from another identity provider: start again",
        );
    }
    let Some(code) = req
        .param("code")
        .filter(|c| !c.is_empty() && c.len() <= 2048)
    else {
        admin.signins.sso_failed.inc();
        return stopped(
            req,
            admin,
            StatusCode::BAD_REQUEST,
            "the identity provider sent no authorization code: start again",
        );
    };
    let addr = client::address(&admin.cfg.trusted_proxies, &req.headers, req.peer);
    if !admin.limiter.take(LIMIT_KEY, addr) {
        admin.signins.limited.inc();
        tracing::warn!(?addr, "console single sign-on refused: too many failures");
        return stopped(
            req,
            admin,
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed sign-ins from this address: wait a minute",
        );
    }
    let user = match finish(sso, &pending, &code).await {
        Ok(Ok(u)) => u,
        Ok(Err(refusal)) => {
            admin.signins.sso_refused.inc();
            tracing::warn!(%refusal, ?addr, "console single sign-on refused");
            return stopped(req, admin, StatusCode::FORBIDDEN, &refusal.to_string());
        }
        Err(e) => {
            admin.signins.sso_failed.inc();
            tracing::warn!(error = %e, ?addr, "console single sign-on failed");
            return stopped(
                req,
                admin,
                StatusCode::BAD_GATEWAY,
                "the identity provider's answer could not be verified: start again",
            );
        }
    };
    admin.limiter.give_back(LIMIT_KEY, addr);
    let id = match session::start(&links.store, &user, now).await {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(error = %e, "admin session start failed");
            return stopped(
                req,
                admin,
                StatusCode::SERVICE_UNAVAILABLE,
                crate::error::DATABASE_UNAVAILABLE,
            );
        }
    };
    admin.signins.sso_ok.inc();
    tracing::info!(user = %user.name, role = user.role.as_str(), merchants = ?user.merchants, ?addr, "admin signed in through the identity provider");
    let secure = session::is_tls(&admin.cfg, &req.headers, req.peer);
    let r = html::continue_to(
        "/admin/",
        Some(session::started_cookie(&admin.cfg, &id, secure)),
    );
    with_cookie(r, &pending_cookie("", 0, secure))
}

/// The user the provider's answer makes, or why none.
async fn finish(
    sso: &Sso,
    pending: &Pending,
    code: &str,
) -> Result<Result<crate::config::AdminUser, identity::Refusal>, super::super::sso::SsoError> {
    let claims = sso.finish(pending, code).await?;
    Ok(identity::user(&sso.cfg, &claims))
}
