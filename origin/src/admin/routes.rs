//! The console's routes on axum's `Router`, with extractors for what every
//! page needs: [`Req`] (the request's parts), [`Signed`] (a live session,
//! else the sign-in page or a 403) and [`Posted`] (a signed-in form whose
//! CSRF token matches the session's). A path or method the console does not
//! serve is answered only after the session (and, for a POST, its token):
//! a stranger learns nothing of which console pages exist.

use super::{api_error, assets, csrf, html, session, views, Admin, Req};
use crate::error::{ApiError, DATABASE_UNAVAILABLE};
use crate::form::Form;
use crate::links::Links;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Request, State};
use axum::response::Response;
use axum::routing::{any, get, post, MethodRouter};
use axum::Router;
use http::request::Parts;
use http::{Method, StatusCode};
use session::Session;
use shorturl_common::time::now_unix;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

/// Largest form body the console reads.
pub(super) const MAX_FORM_BYTES: usize = 16 * 1024;

/// What the console's handlers share: the links service (shared with the
/// API) and the console's own state.
#[derive(Clone)]
pub struct Console {
    pub links: Arc<Links>,
    pub admin: Arc<Admin>,
    pub webhooks: Arc<crate::webhooks::Webhooks>,
}

/// The console under `/admin`, ready to merge into a router of any state.
pub fn router<S: Clone + Send + Sync + 'static>(console: Console) -> Router<S> {
    let assets = get(asset)
        .fallback(|| async { html::error(None, StatusCode::METHOD_NOT_ALLOWED, "use GET") });
    Router::new()
        .route("/admin", any(|| async { html::see_other("/admin/", None) }))
        .route("/admin/assets/", assets.clone())
        .route("/admin/assets/{*file}", assets)
        .route(
            "/admin/login",
            get(login_form).post(login_submit).fallback(|| async {
                html::error(None, StatusCode::METHOD_NOT_ALLOWED, "use GET or POST")
            }),
        )
        .route(
            "/admin/oidc/start",
            get(sso_start).fallback(|| async {
                html::error(None, StatusCode::METHOD_NOT_ALLOWED, "use GET")
            }),
        )
        .route(
            "/admin/oidc/callback",
            get(sso_callback).fallback(|| async {
                html::error(None, StatusCode::METHOD_NOT_ALLOWED, "use GET")
            }),
        )
        .route("/admin/logout", signed_in(post(logout)))
        .route("/admin/", signed_in(get(overview)))
        .route("/admin/links", signed_in(get(search)))
        .route("/admin/export", signed_in(get(export)))
        .route("/admin/merchants", signed_in(get(merchants)))
        .route("/admin/apps", signed_in(get(apps)))
        .route("/admin/merchants/{kdt_id}", signed_in(get(merchant)))
        .route("/admin/apps/{app}", signed_in(get(app)))
        .route("/admin/screening", signed_in(get(screening).post(screen)))
        .route("/admin/links/{*code}", signed_in(get(link).post(edit)))
        .route("/admin/live", signed_in(get(live)))
        .route(
            "/admin/webhooks",
            signed_in(get(webhooks).post(change_webhooks)),
        )
        .route(
            "/admin/webhooks/{id}",
            signed_in(get(webhook_log).post(webhook_resend)),
        )
        .route("/admin/{*page}", signed_in(MethodRouter::new()))
        .with_state(console)
}

/// `m`, any other method answered by [`elsewhere`].
fn signed_in(m: MethodRouter<Console>) -> MethodRouter<Console> {
    m.fallback(elsewhere)
}

fn is_read(m: &Method) -> bool {
    m == Method::GET || m == Method::HEAD
}

impl<S: Send + Sync> FromRequestParts<S> for Req {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        Ok(Req::of(parts, peer))
    }
}

/// The request's live session. Without one, a read is sent to the sign-in
/// page and anything else refused 403; a session store that fails is 503.
pub struct Signed(pub Session);

impl FromRequestParts<Console> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Response> {
        match session::load(&c.links.store, &c.admin.cfg, &parts.headers, now_unix()).await {
            Ok(Some(s)) => Ok(Signed(s)),
            Ok(None) if is_read(&parts.method) => Err(html::see_other("/admin/login", None)),
            Ok(None) => Err(html::error(
                None,
                StatusCode::FORBIDDEN,
                "not signed in (or the session has ended): sign in again",
            )),
            Err(e) => {
                tracing::warn!(error = %e, "admin session lookup failed");
                Err(api_error(None, ApiError::unavailable(DATABASE_UNAVAILABLE)))
            }
        }
    }
}

/// A signed-in user's form: every state-changing form carries the
/// session's CSRF token, checked before any route acts on it.
pub struct Posted {
    pub session: Session,
    pub form: Form,
}

impl FromRequest<Console> for Posted {
    type Rejection = Response;

    async fn from_request(req: Request, c: &Console) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Signed(s) = Signed::from_request_parts(&mut parts, c).await?;
        let form = match Form::read(&parts.headers, body, MAX_FORM_BYTES).await {
            Ok(f) => f,
            Err(e) => return Err(api_error(Some(&s), e)),
        };
        if !csrf::matches(&s.csrf, form.get("csrf")) {
            tracing::warn!(user = %s.user.name, path = %parts.uri.path(), "admin POST with a missing or wrong CSRF token");
            return Err(html::error(
                Some(&s),
                StatusCode::FORBIDDEN,
                "this form is out of date or was not sent by the console (CSRF token missing or wrong): reload the page and try again",
            ));
        }
        Ok(Posted { session: s, form })
    }
}

/// A path or method no console route serves, for a signed-in user (and a
/// POST's token checked): 404, or 405 for a method the console never takes.
async fn elsewhere(State(c): State<Console>, req: Request) -> Response {
    if req.method() == Method::POST {
        return match Posted::from_request(req, &c).await {
            Ok(p) => not_a_page(&p.session),
            Err(r) => r,
        };
    }
    let (mut parts, _) = req.into_parts();
    let s = match Signed::from_request_parts(&mut parts, &c).await {
        Ok(Signed(s)) => s,
        Err(r) => return r,
    };
    if is_read(&parts.method) {
        return not_a_page(&s);
    }
    html::error(Some(&s), StatusCode::METHOD_NOT_ALLOWED, "use GET or POST")
}

fn not_a_page(s: &Session) -> Response {
    html::error(Some(s), StatusCode::NOT_FOUND, "no such console page")
}

/// A page that shows every tenant, refused to a user bound to merchants.
fn all_tenants(s: &Session) -> Option<Response> {
    (!s.user.merchants.is_empty()).then(|| {
        html::error(
            Some(s),
            StatusCode::FORBIDDEN,
            "this page shows every tenant; your user is bound to merchants: use Search",
        )
    })
}

async fn asset(req: Req) -> Response {
    assets::serve(&req.path)
        .unwrap_or_else(|| html::error(None, StatusCode::NOT_FOUND, "no such asset"))
}

async fn login_form(State(c): State<Console>, req: Req) -> Response {
    views::login::form(&c.admin, &req, now_unix(), None)
}

async fn login_submit(State(c): State<Console>, req: Req, body: Body) -> Response {
    views::login::submit(&c.links, &c.admin, &req, body, now_unix()).await
}

async fn sso_start(State(c): State<Console>, req: Req) -> Response {
    views::sso::start(&c.admin, &req).await
}

async fn sso_callback(State(c): State<Console>, req: Req) -> Response {
    views::sso::callback(&c.links, &c.admin, &req, now_unix()).await
}

async fn logout(State(c): State<Console>, req: Req, p: Posted) -> Response {
    views::login::logout(&c.links, &c.admin, &req, &p.session, now_unix()).await
}

async fn overview(State(c): State<Console>, req: Req, Signed(s): Signed) -> Response {
    if let Some(r) = all_tenants(&s) {
        return r;
    }
    views::overview::page(&c.links, &c.admin, &req, &s, now_unix()).await
}

async fn search(State(c): State<Console>, req: Req, Signed(s): Signed) -> Response {
    views::search::page(&c.links, &req, &s).await
}

async fn export(State(c): State<Console>, req: Req, Signed(s): Signed) -> Response {
    views::search::export(&c.links, &req, &s).await
}

async fn merchants(State(c): State<Console>, Signed(s): Signed) -> Response {
    if let Some(r) = all_tenants(&s) {
        return r;
    }
    views::merchants::page(&c.links, &s, now_unix()).await
}

async fn apps(State(c): State<Console>, Signed(s): Signed) -> Response {
    if let Some(r) = all_tenants(&s) {
        return r;
    }
    views::apps::page(&c.links, &s, now_unix()).await
}

/// A tenant page whose path segment does not percent-decode to UTF-8.
fn not_a_tenant(s: &Session) -> Response {
    html::error(
        Some(s),
        StatusCode::BAD_REQUEST,
        "the path is not a tenant's name",
    )
}

async fn merchant(
    State(c): State<Console>,
    req: Req,
    Signed(s): Signed,
    p: Result<Path<String>, PathRejection>,
) -> Response {
    match p {
        Ok(Path(k)) => views::tenant::merchant(&c.links, &req, &s, &k, now_unix()).await,
        Err(_) => not_a_tenant(&s),
    }
}

/// An app's page: apps are internal tenants, so a user bound to merchants
/// is refused as on `/admin/apps`.
async fn app(
    State(c): State<Console>,
    req: Req,
    Signed(s): Signed,
    p: Result<Path<String>, PathRejection>,
) -> Response {
    if let Some(r) = all_tenants(&s) {
        return r;
    }
    match p {
        Ok(Path(name)) => views::tenant::app(&c.links, &req, &s, &name, now_unix()).await,
        Err(_) => not_a_tenant(&s),
    }
}

async fn screening(State(c): State<Console>, Signed(s): Signed) -> Response {
    if let Some(r) = all_tenants(&s) {
        return r;
    }
    views::screening::page(&c.links, &s, None).await
}

async fn screen(State(c): State<Console>, p: Posted) -> Response {
    if let Some(r) = all_tenants(&p.session) {
        return r;
    }
    views::screening::post(&c.links, &p.session, &p.form).await
}

/// The code as the path carries it (not percent-decoded: the page
/// validates it as it came).
fn code_of(req: &Req) -> &str {
    req.path.strip_prefix("/admin/links/").unwrap_or_default()
}

async fn link(State(c): State<Console>, req: Req, Signed(s): Signed) -> Response {
    views::link::page(&c.links, &req, &s, code_of(&req), now_unix()).await
}

async fn edit(State(c): State<Console>, req: Req, p: Posted) -> Response {
    views::link::post(&c.links, &p.session, code_of(&req), &p.form, now_unix()).await
}

async fn live(State(c): State<Console>, req: Req, Signed(s): Signed) -> Response {
    views::live::page(&c.links, &req, &s, now_unix()).await
}

async fn webhooks(State(c): State<Console>, Signed(s): Signed) -> Response {
    if let Some(r) = all_tenants(&s) {
        return r;
    }
    views::webhooks::page(&c.links, &c.webhooks, &s, None).await
}

async fn change_webhooks(State(c): State<Console>, p: Posted) -> Response {
    if let Some(r) = all_tenants(&p.session) {
        return r;
    }
    views::webhooks::post(&c.links, &c.webhooks, &p.session, &p.form).await
}

/// The endpoint id as the path carries it (an id is hex: anything else is
/// "no such endpoint").
fn endpoint_of(req: &Req) -> &str {
    req.path
        .strip_prefix("/admin/webhooks/")
        .unwrap_or_default()
}

async fn webhook_log(State(c): State<Console>, req: Req, Signed(s): Signed) -> Response {
    if let Some(r) = all_tenants(&s) {
        return r;
    }
    views::webhooks::log(&c.webhooks, &s, endpoint_of(&req), None).await
}

async fn webhook_resend(State(c): State<Console>, req: Req, p: Posted) -> Response {
    if let Some(r) = all_tenants(&p.session) {
        return r;
    }
    views::webhooks::resend(&c.webhooks, &p.session, endpoint_of(&req), &p.form).await
}
