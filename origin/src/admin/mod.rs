//! The admin console, served by the origin under `/admin/`: server-rendered
//! HTML over the same domain functions as the API (search, read, edit,
//! history, stats), called in-process. See `docs/admin.md`.
//!
//! [`session`] signs users in and out, [`sso`] signs them in through an
//! OpenID provider, [`users`] checks passwords and
//! limits sign-ins (per user and address, per address, and concurrent
//! checks), [`client`] finds the address they count under, [`csrf`] guards
//! every form, [`views`] renders the pages, [`charts`] draws their SVG
//! charts, [`countries`] names the country codes of their tables,
//! [`edges`] keeps the edges' heartbeats, [`assets`] serves the
//! stylesheet and script, [`routes`] maps paths to pages.

mod assets;
pub mod charts;
pub mod client;
mod countries;
pub mod csrf;
pub mod days;
pub mod edges;
pub mod html;
mod routes;
pub mod session;
pub mod sso;
pub mod users;
mod views;

use routes::MAX_FORM_BYTES;
pub use routes::{router, Console};

/// The console's stylesheet (its hashed path), which other pages of the
/// origin share (the API reference).
pub fn stylesheet() -> &'static str {
    assets::css_path()
}

use crate::config::{AdminConfig, AdminUser};
use crate::error::ApiError;
use crate::passwords::{Checks, SigninLimiter};
use crate::tenancy::{Caller, Scope};
use axum::response::Response;
use edges::Edges;
use http::request::Parts;
use http::Method;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use session::Session;
use std::net::SocketAddr;
use std::sync::Arc;

/// Sign-in attempts by outcome (`shorturl_admin_signins_total{result}`).
pub struct SigninCounts {
    /// Signed in.
    pub ok: IntCounter,
    /// Wrong user name or password (401).
    pub wrong: IntCounter,
    /// The user-and-address or address budget was spent (429).
    pub limited: IntCounter,
    /// `admin.max_concurrent_signins` checks were running (429).
    pub busy: IntCounter,
    /// The form's signed token was missing, forged or expired (403).
    pub bad_token: IntCounter,
    /// Signed in through the identity provider.
    pub sso_ok: IntCounter,
    /// The provider refused, or its claims give no console user.
    pub sso_refused: IntCounter,
    /// The provider could not be reached or its answer did not verify.
    pub sso_failed: IntCounter,
    /// A callback without this browser's pending sign-in (forged, replayed
    /// or too late).
    pub sso_bad_state: IntCounter,
}

/// The console's own state (the links service is shared with the API).
pub struct Admin {
    pub cfg: AdminConfig,
    users: Arc<Vec<AdminUser>>,
    limiter: SigninLimiter,
    checks: Checks,
    form_tokens: csrf::FormTokens,
    signins: SigninCounts,
    /// Single sign-on, when `admin.oidc` is configured.
    pub sso: Option<sso::Sso>,
    /// The edges' heartbeats.
    pub edges: Edges,
    /// The overview's past days, kept by a background task.
    pub past_days: Arc<days::PastDays>,
}

impl Admin {
    /// From `admin:` (and its single sign-on client, built from
    /// `admin.oidc`); `form_key` signs the sign-in form's tokens (the same
    /// on every origin of the installation); the sign-in metrics are
    /// registered in `reg`.
    pub fn new(
        cfg: AdminConfig,
        sso: Option<sso::Sso>,
        form_key: [u8; 32],
        reg: &Registry,
    ) -> Result<Admin, prometheus::Error> {
        let signins = IntCounterVec::new(
            Opts::new(
                "admin_signins_total",
                "Console sign-in attempts by result (ok, wrong, limited, busy, bad_token; \
                 sso_ok, sso_refused, sso_failed, sso_bad_state through the identity provider)",
            ),
            &["result"],
        )?;
        reg.register(Box::new(signins.clone()))?;
        let checks = IntCounter::new(
            "admin_password_checks_total",
            "Console password checks run (argon2id)",
        )?;
        reg.register(Box::new(checks.clone()))?;
        let result = |r: &str| signins.with_label_values(&[r]);
        Ok(Admin {
            users: Arc::new(cfg.users.clone()),
            limiter: SigninLimiter::new(
                cfg.signin_burst,
                cfg.signin_refill_per_min,
                cfg.signin_address_burst,
                cfg.signin_address_refill_per_min,
            ),
            checks: Checks::new(cfg.max_concurrent_signins, checks),
            form_tokens: csrf::FormTokens::new(form_key),
            signins: SigninCounts {
                ok: result("ok"),
                wrong: result("wrong"),
                limited: result("limited"),
                busy: result("busy"),
                bad_token: result("bad_token"),
                sso_ok: result("sso_ok"),
                sso_refused: result("sso_refused"),
                sso_failed: result("sso_failed"),
                sso_bad_state: result("sso_bad_state"),
            },
            sso,
            edges: Edges::default(),
            past_days: Arc::default(),
            cfg,
        })
    }
}

/// The caller the domain functions see for a console user: the audit
/// actor is [`AdminUser::actor`]; a user bound to merchants sees only theirs.
pub fn caller(user: &AdminUser) -> Caller {
    let actor = user.actor();
    if user.merchants.is_empty() {
        return Caller::new(actor, [Scope::Admin], []);
    }
    let mut scopes = vec![Scope::LinksRead, Scope::StatsRead];
    if user.role.can_change() {
        scopes.push(Scope::LinksManage);
    }
    Caller::new(actor, scopes, user.merchants.iter().copied())
}

/// One console request, split.
pub struct Req {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub headers: http::HeaderMap,
    pub peer: Option<SocketAddr>,
}

impl Req {
    /// From the request's parts.
    pub fn of(parts: &Parts, peer: Option<SocketAddr>) -> Req {
        Req {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts.headers.clone(),
            peer,
        }
    }

    /// Whether the request is a GET or HEAD.
    pub fn is_read(&self) -> bool {
        self.method == Method::GET || self.method == Method::HEAD
    }

    /// The query parameter `name` (first value).
    pub fn param(&self, name: &str) -> Option<String> {
        url::form_urlencoded::parse(self.query.as_deref().unwrap_or("").as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

/// An error page for a domain or validation error.
pub fn api_error(session: Option<&Session>, e: ApiError) -> Response {
    html::error(session, e.status, &e.message)
}
