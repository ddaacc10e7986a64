//! Sign-in and sign-out. The sign-in form is guarded by a double-submitted
//! token (a cookie and a hidden field that must match), failed attempts
//! are rate-limited per user name and per address, and success starts a
//! fresh session (never one the browser brought).

use super::super::form::Form;
use super::super::html::{self, esc, Nav};
use super::super::session::{self, Session, COOKIE, LOGIN_COOKIE};
use super::super::{csrf, users, Admin, Req, MAX_FORM_BYTES};
use crate::links::Links;
use axum::body::Body;
use axum::response::Response;
use http::{header, HeaderValue, StatusCode};

/// The sign-in page (with `problem` shown above the form).
pub fn form(admin: &Admin, req: &Req, problem: Option<(StatusCode, &str)>) -> Response {
    let token = csrf::token();
    let secure = session::is_tls(&admin.cfg, &req.headers, req.peer);
    let msg = problem
        .map(|(_, m)| format!("<p class=\"msg error\" id=\"error\">{}</p>", esc(m)))
        .unwrap_or_default();
    let main = format!(
        "<div class=\"login\">{msg}<form method=\"post\" action=\"/admin/login\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{token}\">\
         <label>User<input name=\"user\" id=\"user\" autocomplete=\"username\" required></label>\
         <label>Password<input name=\"password\" id=\"password\" type=\"password\" autocomplete=\"current-password\" required></label>\
         <button type=\"submit\" id=\"signin\">Sign in</button></form></div>"
    );
    let status = problem.map_or(StatusCode::OK, |(s, _)| s);
    let mut r = html::respond(status, html::page(None, Nav::None, "Sign in", &main));
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(LOGIN_COOKIE, &token, 3600, secure)) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// `POST /admin/login`.
pub async fn submit(links: &Links, admin: &Admin, req: &Req, body: Body, now: u64) -> Response {
    let f = match Form::read(&req.headers, body, MAX_FORM_BYTES).await {
        Ok(f) => f,
        Err(e) => return html::error(None, e.status, &e.message),
    };
    let expected = session::cookie(&req.headers, LOGIN_COOKIE).unwrap_or("");
    if !csrf::matches(expected, f.get("csrf")) {
        return html::error(
            None,
            StatusCode::FORBIDDEN,
            "the sign-in form is out of date (CSRF token missing or wrong): reload it and try again",
        );
    }
    let name = f.get("user").unwrap_or("").trim().to_owned();
    let password = f.get("password").unwrap_or("").to_owned();
    let addr = req.peer.map(|p| p.ip());
    if !admin.limiter.allows(&name, addr) {
        tracing::warn!(user = %name, ?addr, "admin sign-in refused: too many failures");
        return form(
            admin,
            req,
            Some((
                StatusCode::TOO_MANY_REQUESTS,
                "too many failed sign-ins for this user or address: wait a minute",
            )),
        );
    }
    let Some(user) = users::check(admin.users.clone(), name.clone(), password).await else {
        admin.limiter.failed(&name, addr);
        tracing::warn!(user = %name, ?addr, "admin sign-in failed");
        return form(
            admin,
            req,
            Some((StatusCode::UNAUTHORIZED, "wrong user name or password")),
        );
    };
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
    tracing::info!(user = %user.name, role = user.role.as_str(), ?addr, "admin signed in");
    let secure = session::is_tls(&admin.cfg, &req.headers, req.peer);
    let mut r = html::see_other(
        "/admin/",
        Some(session::set_cookie(
            COOKIE,
            &id,
            admin.cfg.absolute_timeout.as_secs(),
            secure,
        )),
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
