//! Sign-in and sign-out. The sign-in form is guarded by a double-submitted,
//! server-signed token (a cookie and a hidden field that must be equal and
//! verify, `csrf::FormTokens`); then an attempt must get a token of its
//! user-and-address and address budgets and a permit of the bound on
//! concurrent password checks (`users`), each refused at once with 429,
//! before its password is checked; success starts a fresh session (never
//! one the browser brought). With `admin.oidc` the page also offers the
//! identity provider (`super::sso`); with `admin.password_signin: false`
//! it offers only that, and a posted password is refused.

use super::super::html::{self, esc, Nav};
use super::super::session::{self, Session, COOKIE, LOGIN_COOKIE};
use super::super::{client, csrf, Admin, Req, MAX_FORM_BYTES};
use crate::form::Form;
use crate::links::Links;
use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, StatusCode};

/// The sign-in page (with `problem` shown above the form), with a fresh
/// signed token in its hidden field and cookie.
pub fn form(admin: &Admin, req: &Req, now: u64, problem: Option<(StatusCode, &str)>) -> Response {
    let token = admin.form_tokens.issue(now);
    let secure = session::is_tls(&admin.cfg, &req.headers, req.peer);
    let msg = problem
        .map(|(_, m)| format!("<p class=\"msg error\" id=\"error\">{}</p>", esc(m)))
        .unwrap_or_default();
    let sso = admin
        .cfg
        .oidc
        .as_ref()
        .map(|o| {
            format!(
                "<p class=\"sso\"><a class=\"button\" id=\"sso\" href=\"/admin/oidc/start\">{}</a></p>",
                esc(&o.label)
            )
        })
        .unwrap_or_default();
    let passwords = if admin.cfg.password_signin {
        format!(
            "<form method=\"post\" action=\"/admin/login\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{token}\">\
             <label>User<input name=\"user\" id=\"user\" autocomplete=\"username\" required></label>\
             <label>Password<input name=\"password\" id=\"password\" type=\"password\" autocomplete=\"current-password\" required></label>\
             <button type=\"submit\" id=\"signin\">Sign in</button></form>"
        )
    } else {
        String::new()
    };
    let main = format!("<div class=\"login\">{msg}{sso}{passwords}</div>");
    let status = problem.map_or(StatusCode::OK, |(s, _)| s);
    let mut r = html::respond(status, html::page(None, Nav::None, "Sign in", &main));
    let cookie = session::set_cookie(LOGIN_COOKIE, &token, csrf::FORM_TOKEN_MAX_AGE_SECS, secure);
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// What the limits key an attempt's user name under: the name itself when
/// it could be a user's (1-32 of `[A-Za-z0-9_.-]`), else one shared key, so
/// a long made-up name costs the limiter no more memory than a real one.
fn limit_key(name: &str) -> &str {
    let plausible = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if plausible {
        name
    } else {
        "\u{0}"
    }
}

/// The sign-in form again with a 429 and `why`.
fn too_many(admin: &Admin, req: &Req, now: u64, why: &str) -> Response {
    form(admin, req, now, Some((StatusCode::TOO_MANY_REQUESTS, why)))
}

/// `POST /admin/login`.
pub async fn submit(links: &Links, admin: &Admin, req: &Req, body: Body, now: u64) -> Response {
    if !admin.cfg.password_signin {
        return html::error(
            None,
            StatusCode::FORBIDDEN,
            "sign-in with a password is turned off: use the identity provider",
        );
    }
    let f = match Form::read(&req.headers, body, MAX_FORM_BYTES).await {
        Ok(f) => f,
        Err(e) => return html::error(None, e.status, &e.message),
    };
    let cookie = session::cookie(&req.headers, LOGIN_COOKIE);
    if !admin
        .form_tokens
        .double_submitted(cookie, f.get("csrf"), now)
    {
        admin.signins.bad_token.inc();
        return html::error(
            None,
            StatusCode::FORBIDDEN,
            "the sign-in form is out of date (CSRF token missing or wrong): reload it and try again",
        );
    }
    let name = f.get("user").unwrap_or("").trim().to_owned();
    let password = f.get("password").unwrap_or("").to_owned();
    let addr = client::address(&admin.cfg.trusted_proxies, &req.headers, req.peer);
    let key = limit_key(&name);
    // The attempt's token is taken before the check, so concurrent
    // attempts cannot all pass a budget that has room for one.
    if !admin.limiter.take(key, addr) {
        admin.signins.limited.inc();
        tracing::warn!(user = ?key, ?addr, "admin sign-in refused: too many failures");
        return too_many(
            admin,
            req,
            now,
            "too many failed sign-ins for this user from this address: wait a minute",
        );
    }
    let Some(permit) = admin.checks.try_start() else {
        // Nothing was checked: the attempt costs its budget nothing.
        admin.limiter.give_back(key, addr);
        admin.signins.busy.inc();
        tracing::warn!(user = ?key, ?addr, "admin sign-in refused: too many password checks at once");
        return too_many(
            admin,
            req,
            now,
            "too many sign-ins at this moment: try again in a few seconds",
        );
    };
    let checked = crate::admin::users::check(
        &admin.checks,
        permit,
        admin.users.clone(),
        name.clone(),
        password,
    )
    .await;
    let Some(user) = checked else {
        admin.signins.wrong.inc();
        tracing::warn!(user = ?key, ?addr, "admin sign-in failed");
        return form(
            admin,
            req,
            now,
            Some((StatusCode::UNAUTHORIZED, "wrong user name or password")),
        );
    };
    admin.limiter.give_back(key, addr);
    let id = match session::start(&links.store, &user, now).await {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(error = %e, "admin session start failed");
            return html::error(
                None,
                StatusCode::SERVICE_UNAVAILABLE,
                crate::error::DATABASE_UNAVAILABLE,
            );
        }
    };
    admin.signins.ok.inc();
    tracing::info!(user = %user.name, role = user.role.as_str(), ?addr, "admin signed in");
    let secure = session::is_tls(&admin.cfg, &req.headers, req.peer);
    let mut r = html::see_other(
        "/admin/",
        Some(session::started_cookie(&admin.cfg, &id, secure)),
    );
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(LOGIN_COOKIE, "", 0, secure)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// `POST /admin/logout` (CSRF already checked).
pub async fn logout(links: &Links, admin: &Admin, req: &Req, s: &Session, now: u64) -> Response {
    if let Err(e) = session::end(&links.store, &admin.cfg, s, now).await {
        tracing::warn!(error = %e, "admin sign-out failed");
        return html::error(
            Some(s),
            StatusCode::SERVICE_UNAVAILABLE,
            crate::error::DATABASE_UNAVAILABLE,
        );
    }
    tracing::info!(user = %s.user.name, "admin signed out");
    let secure = session::is_tls(&admin.cfg, &req.headers, req.peer);
    html::see_other(
        "/admin/login",
        Some(session::set_cookie(COOKIE, "", 0, secure)),
    )
}
