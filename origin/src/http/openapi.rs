//! The API contract, `docs/openapi.yaml` (OpenAPI 3.1), compiled into the
//! binary and served as JSON at `/api/v1/openapi.json`, so the contract a
//! client fetches is always the one this build implements.

use crate::error::json_response;
use axum::response::Response;
use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};

/// `docs/openapi.yaml` as it was when this binary was built.
pub const YAML: &str = include_str!("../../../docs/openapi.yaml");

/// The contract, parsed.
pub fn parsed() -> Result<serde_json::Value, serde_yaml::Error> {
    serde_yaml::from_str(YAML)
}

/// The contract as JSON (converted once, at start).
pub fn json(contract: &serde_json::Value) -> Bytes {
    Bytes::from(serde_json::to_vec(contract).unwrap_or_default())
}

/// The answer of `GET /api/v1/openapi.json` (no authentication: the
/// contract is public).
pub fn response(body: &Bytes) -> Response {
    let mut r = json_response(StatusCode::OK, body.to_vec());
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_contract_parses_and_is_openapi_3_1() {
        let v: serde_json::Value =
            serde_json::from_slice(&super::json(&super::parsed().unwrap())).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        assert!(v["paths"]["/api/v1/links"]["get"].is_object());
    }
}
