//! The console's stylesheet and script, compiled into the binary and served
//! under a name holding their content hash, so a browser may keep them for
//! good (`immutable`) and a new build is fetched at once.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

const CSS: &str = include_str!("assets/admin.css");
const JS: &str = include_str!("assets/admin.js");

/// One asset and its hashed path.
pub struct Asset {
    pub path: String,
    body: &'static str,
    content_type: &'static str,
}

fn asset(stem: &str, ext: &str, body: &'static str, content_type: &'static str) -> Asset {
    let h = hex::encode(Sha256::digest(body.as_bytes()));
    Asset {
        path: format!("/admin/assets/{stem}.{}.{ext}", &h[..16]),
        body,
        content_type,
    }
}

/// The stylesheet and the script.
pub fn all() -> &'static [Asset; 2] {
    static A: OnceLock<[Asset; 2]> = OnceLock::new();
    A.get_or_init(|| {
        [
            asset("admin", "css", CSS, "text/css; charset=utf-8"),
            asset("admin", "js", JS, "text/javascript; charset=utf-8"),
        ]
    })
}

/// The stylesheet's path.
pub fn css_path() -> &'static str {
    &all()[0].path
}

/// The script's path.
pub fn js_path() -> &'static str {
    &all()[1].path
}

/// The asset at `path`, or `None` (an old or unknown hash).
pub fn serve(path: &str) -> Option<Response> {
    let a = all().iter().find(|a| a.path == path)?;
    let mut r = (StatusCode::OK, a.body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Some(r)
}
