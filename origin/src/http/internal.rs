//! Who may call the edges' routes (`/internal/*`) and `/metrics`: a peer in
//! `internal.allow` carrying the edges' shared token
//! (`Authorization: Bearer`), or, when no token is configured, a loopback
//! peer. Anyone outside the allowed networks gets exactly what an unknown
//! route gets, so the routes cannot even be found from there; an allowed
//! peer without the token gets 401, which tells a misconfigured edge what
//! is wrong.

use super::{no_route, not_found, AppState};
use crate::config::InternalConfig;
use crate::error::ApiError;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;

/// Why an internal request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not from an allowed network: answered as an unknown route.
    Hidden,
    /// From an allowed network, without the right token.
    Unauthorized,
}

impl Refused {
    /// The answer: the 404 of an unknown path, or 401.
    pub fn answer(self, s: &AppState, path: &str) -> Response {
        match self {
            Refused::Hidden if path.starts_with("/internal/") => no_route(path),
            Refused::Hidden => not_found(s),
            Refused::Unauthorized => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "internal routes need the edges' token (Authorization: Bearer)",
            )
            .into_response(),
        }
    }
}

/// `Ok` when `peer` may call an internal route with these `headers`.
pub fn admit(
    cfg: &InternalConfig,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Result<(), Refused> {
    let Some(ip) = peer.map(|p| p.ip().to_canonical()) else {
        return Err(Refused::Hidden);
    };
    let Some(want) = &cfg.token_sha256 else {
        return if ip.is_loopback() {
            Ok(())
        } else {
            Err(Refused::Hidden)
        };
    };
    if !cfg.allow.contains(ip) {
        return Err(Refused::Hidden);
    }
    let given = bearer(headers).ok_or(Refused::Unauthorized)?;
    let got: [u8; 32] = Sha256::digest(given.as_bytes()).into();
    // Equal digests, compared without an early exit.
    let diff = got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if diff == 0 {
        Ok(())
    } else {
        Err(Refused::Unauthorized)
    }
}

/// The token of the one `Authorization: Bearer` field.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let mut all = headers.get_all(header::AUTHORIZATION).iter();
    let v = all.next()?;
    if all.next().is_some() {
        return None;
    }
    let v = v.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shorturl_common::cidr::CidrList;

    fn cfg(allow: &[&str], token: Option<&str>) -> InternalConfig {
        InternalConfig {
            allow: CidrList::parse(allow).unwrap_or_else(|e| panic!("{e}")),
            token_sha256: token.map(|t| Sha256::digest(t.as_bytes()).into()),
        }
    }

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(
            s.parse().unwrap_or_else(|e| panic!("{e}")),
            4000,
        ))
    }

    fn auth(v: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for x in v {
            h.append(
                header::AUTHORIZATION,
                x.parse().unwrap_or_else(|e| panic!("{e}")),
            );
        }
        h
    }

    #[test]
    fn without_a_token_only_loopback() {
        let c = cfg(&["10.0.0.0/8"], None);
        assert_eq!(admit(&c, peer("127.0.0.1"), &auth(&[])), Ok(()));
        assert_eq!(admit(&c, peer("::1"), &auth(&[])), Ok(()));
        assert_eq!(admit(&c, peer("::ffff:127.0.0.1"), &auth(&[])), Ok(()));
        assert_eq!(
            admit(&c, peer("10.1.2.3"), &auth(&[])),
            Err(Refused::Hidden)
        );
        assert_eq!(admit(&c, None, &auth(&[])), Err(Refused::Hidden));
    }

    #[test]
    fn with_a_token_both_the_network_and_the_token() {
        let c = cfg(&["10.0.0.0/8"], Some("s3cret"));
        let good = auth(&["Bearer s3cret"]);
        assert_eq!(admit(&c, peer("10.1.2.3"), &good), Ok(()));
        assert_eq!(
            admit(&c, peer("10.1.2.3"), &auth(&["bearer s3cret"])),
            Ok(())
        );
        assert_eq!(admit(&c, peer("192.168.1.1"), &good), Err(Refused::Hidden));
        // Loopback is no exception once a token is configured.
        assert_eq!(admit(&c, peer("127.0.0.1"), &good), Err(Refused::Hidden));
        for bad in [
            auth(&[]),
            auth(&["Bearer s3cre"]),
            auth(&["Bearer s3cret!"]),
            auth(&["Basic s3cret"]),
            auth(&["Bearer "]),
            auth(&["Bearer s3cret", "Bearer s3cret"]),
        ] {
            assert_eq!(
                admit(&c, peer("10.1.2.3"), &bad),
                Err(Refused::Unauthorized),
                "{bad:?}"
            );
        }
    }
}
