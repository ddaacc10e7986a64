//! A file answered for download: the API's CSV groupings (`http/stats.rs`)
//! and the console's CSV links (`admin/html.rs`) alike. Here, below both,
//! so neither reaches into the other.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// `body` as `<name>.csv`: never cached, never sniffed as anything else.
/// `name` is a code or a fixed word (no quote to escape).
pub fn csv(name: &str, body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}.csv\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}
