//! Apollo access-key signing (Apollo ≥ 1.6): the config service recomputes
//! the signature from the path and query it received, so we sign exactly the
//! bytes we send.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha1::Sha1;

/// `Base64(HMAC-SHA1(secret, timestamp + "\n" + path_and_query))`.
pub fn signature(secret: &str, timestamp_ms: u64, path_and_query: &str) -> String {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail here;
    // an empty signature would simply be refused (401) by the server.
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b"\n");
    mac.update(path_and_query.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// The two headers Apollo expects: `Authorization: Apollo {appId}:{sig}` and
/// `Timestamp: {ms}`.
pub fn headers(
    app_id: &str,
    secret: &str,
    timestamp_ms: u64,
    path_and_query: &str,
) -> [(&'static str, String); 2] {
    [
        (
            "Authorization",
            format!(
                "Apollo {app_id}:{}",
                signature(secret, timestamp_ms, path_and_query)
            ),
        ),
        ("Timestamp", timestamp_ms.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apollo_test_vector() {
        let sig = signature(
            "df23df3f59884980844ff3dada30fa97",
            1576478257344,
            "/configs/100004458/default/application?ip=10.0.0.1",
        );
        assert_eq!(sig, "EoKyziXvKqzHgwx+ijDJwgVTDgE=");
    }

    #[test]
    fn headers_carry_app_id_and_timestamp() {
        let [(a, auth), (t, ts)] = headers(
            "100004458",
            "df23df3f59884980844ff3dada30fa97",
            1576478257344,
            "/configs/100004458/default/application?ip=10.0.0.1",
        );
        assert_eq!((a, t), ("Authorization", "Timestamp"));
        assert_eq!(auth, "Apollo 100004458:EoKyziXvKqzHgwx+ijDJwgVTDgE=");
        assert_eq!(ts, "1576478257344");
    }
}
