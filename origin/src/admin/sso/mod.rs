//! Console sign-in through an OpenID provider: the authorization code flow
//! with PKCE (S256), a nonce and a state, by the `openidconnect` crate.
//!
//! [`Sso::begin`] makes the provider's authorization URL and the
//! [`Pending`] secrets (state, nonce, PKCE verifier), which travel in a
//! short-lived `HttpOnly` cookie of the browser that started: any origin of
//! the installation can finish, and a callback that did not start in this
//! browser finds no cookie. [`Sso::finish`] exchanges the code (with the
//! verifier and the client secret), verifies the ID token (signature with
//! the provider's published keys, issuer, audience, expiry, nonce, access
//! token hash) and returns its claims merged with the user-info endpoint's
//! (providers put groups in either); [`identity`] turns claims into a
//! console user. The provider's metadata and keys are read at the first
//! sign-in and kept [`METADATA_TTL`]; a token signed with a key not yet seen
//! reads them again once.

pub mod identity;

use crate::config::OidcConfig;
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreGenderClaim, CoreProviderMetadata,
};
use openidconnect::{
    AccessTokenHash, AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    TokenResponse,
};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long the provider's metadata and keys are used before reading them
/// again.
pub const METADATA_TTL: Duration = Duration::from_secs(300);

/// After discovery failed, sign-ins are refused this long without asking
/// the provider again (a burst of sign-in clicks does not become a burst
/// of requests to a provider that is down).
const DISCOVERY_BACKOFF: Duration = Duration::from_secs(5);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A sign-in through the provider that did not complete. Logged, never
/// shown: the person is told the provider could not be reached or refused.
#[derive(Debug, thiserror::Error)]
pub enum SsoError {
    #[error("admin.oidc: building the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    CaFile(#[from] crate::ca_file::CaFileError),
    /// Unreachable from a validated config (`config::oidc` parses both).
    #[error("admin.oidc: {0}")]
    Url(#[source] url::ParseError),
    #[error("reading the provider's metadata from {issuer}: {source}")]
    Discovery {
        issuer: String,
        #[source]
        source: BoxError,
    },
    #[error("the provider's metadata could not be read a moment ago; not asking again yet")]
    Backoff,
    #[error("exchanging the authorization code: {0}")]
    Exchange(#[source] BoxError),
    #[error("the provider's token response has no ID token")]
    NoIdToken,
    #[error("the ID token does not verify: {0}")]
    IdToken(#[source] BoxError),
    #[error("the access token does not match the ID token's at_hash")]
    AccessTokenHash,
    #[error("reading the user-info endpoint: {0}")]
    UserInfo(#[source] BoxError),
}

fn boxed(e: impl std::error::Error + Send + Sync + 'static) -> BoxError {
    Box::new(e)
}

/// The secrets of a sign-in under way, kept by the browser that started it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub state: String,
    nonce: String,
    verifier: String,
}

impl Pending {
    /// The cookie value: the three secrets, dot-separated (none holds a
    /// dot: each is base64url).
    pub fn to_cookie(&self) -> String {
        format!("{}.{}.{}", self.state, self.nonce, self.verifier)
    }

    /// Read back from [`Pending::to_cookie`]; None for anything else.
    pub fn from_cookie(v: &str) -> Option<Pending> {
        let mut parts = v.split('.');
        let (state, nonce, verifier) = (parts.next()?, parts.next()?, parts.next()?);
        let b64url = |s: &str| {
            (16..=128).contains(&s.len())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        (parts.next().is_none() && b64url(state) && b64url(nonce) && b64url(verifier)).then(|| {
            Pending {
                state: state.to_owned(),
                nonce: nonce.to_owned(),
                verifier: verifier.to_owned(),
            }
        })
    }

    /// Whether the callback's `state` is this sign-in's (constant time).
    pub fn matches(&self, state: &str) -> bool {
        crate::admin::csrf::matches(&self.state, Some(state))
    }
}

struct Cached {
    meta: Option<(Instant, Arc<CoreProviderMetadata>)>,
    failed_at: Option<Instant>,
}

/// The console's OpenID relying party.
pub struct Sso {
    pub cfg: OidcConfig,
    /// `cfg.issuer` and `cfg.redirect_url`, parsed once.
    issuer: IssuerUrl,
    redirect: RedirectUrl,
    http: reqwest::Client,
    cached: Mutex<Cached>,
}

impl Sso {
    pub fn new(cfg: OidcConfig) -> Result<Sso, SsoError> {
        let mut b = reqwest::Client::builder()
            // Following redirects would let a response steer requests
            // carrying the client secret elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .user_agent(concat!("shorturl-console/", env!("CARGO_PKG_VERSION")));
        if let Some(p) = &cfg.ca_file {
            b = crate::ca_file::trust(b, "admin.oidc.ca_file", p)?;
        }
        Ok(Sso {
            http: b.build().map_err(SsoError::Client)?,
            issuer: IssuerUrl::new(cfg.issuer.clone()).map_err(SsoError::Url)?,
            redirect: RedirectUrl::new(cfg.redirect_url.clone()).map_err(SsoError::Url)?,
            cfg,
            cached: Mutex::new(Cached {
                meta: None,
                failed_at: None,
            }),
        })
    }

    /// The provider's metadata (with its keys): cached, or read now when
    /// there is none, it is older than [`METADATA_TTL`], or `refresh`.
    async fn metadata(&self, refresh: bool) -> Result<Arc<CoreProviderMetadata>, SsoError> {
        let mut c = self.cached.lock().await;
        if let Some((at, m)) = &c.meta {
            if !refresh && at.elapsed() < METADATA_TTL {
                return Ok(Arc::clone(m));
            }
        }
        if c.failed_at.is_some_and(|t| t.elapsed() < DISCOVERY_BACKOFF) {
            return Err(SsoError::Backoff);
        }
        match CoreProviderMetadata::discover_async(self.issuer.clone(), &self.http).await {
            Ok(m) => {
                let m = Arc::new(m);
                c.meta = Some((Instant::now(), Arc::clone(&m)));
                c.failed_at = None;
                Ok(m)
            }
            Err(e) => {
                c.failed_at = Some(Instant::now());
                Err(SsoError::Discovery {
                    issuer: self.cfg.issuer.clone(),
                    source: boxed(e),
                })
            }
        }
    }

    /// A client for the provider as `meta` describes it.
    fn client(&self, meta: &CoreProviderMetadata) -> ProviderClient {
        CoreClient::from_provider_metadata(
            meta.clone(),
            ClientId::new(self.cfg.client_id.clone()),
            Some(ClientSecret::new(self.cfg.client_secret.clone())),
        )
        .set_redirect_uri(self.redirect.clone())
    }

    /// Starts a sign-in: where to send the browser, and what it keeps.
    pub async fn begin(&self) -> Result<(url::Url, Pending), SsoError> {
        let meta = self.metadata(false).await?;
        let client = self.client(&meta);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .set_pkce_challenge(challenge);
        for s in &self.cfg.scopes {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (url, state, nonce) = req.url();
        Ok((
            url,
            Pending {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                verifier: verifier.secret().clone(),
            },
        ))
    }

    /// Finishes a sign-in (its state already checked): the verified claims
    /// of the ID token, with the user-info endpoint's on top.
    pub async fn finish(&self, p: &Pending, code: &str) -> Result<Map<String, Value>, SsoError> {
        let meta = self.metadata(false).await?;
        let client = self.client(&meta);
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| SsoError::Exchange(boxed(e)))?
            .set_pkce_verifier(PkceCodeVerifier::new(p.verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| SsoError::Exchange(boxed(e)))?;
        let id_token = tokens.id_token().ok_or(SsoError::NoIdToken)?;
        let nonce = Nonce::new(p.nonce.clone());
        let first = id_token
            .claims(&client.id_token_verifier(), &nonce)
            .cloned();
        let (client, verified) = match first {
            Ok(c) => (client, c),
            Err(ClaimsVerificationError::SignatureVerification(_)) => {
                // A key the cached set does not have yet: read it once more.
                let meta = self.metadata(true).await?;
                let client = self.client(&meta);
                let c = id_token
                    .claims(&client.id_token_verifier(), &nonce)
                    .map_err(|e| SsoError::IdToken(boxed(e)))?
                    .clone();
                (client, c)
            }
            Err(e) => return Err(SsoError::IdToken(boxed(e))),
        };
        if let Some(want) = verified.access_token_hash() {
            let verifier = client.id_token_verifier();
            let alg = id_token
                .signing_alg()
                .map_err(|e| SsoError::IdToken(boxed(e)))?;
            let key = id_token
                .signing_key(&verifier)
                .map_err(|e| SsoError::IdToken(boxed(e)))?;
            let got = AccessTokenHash::from_token(tokens.access_token(), alg, key)
                .map_err(|e| SsoError::IdToken(boxed(e)))?;
            if got != *want {
                return Err(SsoError::AccessTokenHash);
            }
        }
        // Verified above: its payload is the provider's word.
        let mut claims = jwt_payload(&id_token.to_string()).ok_or_else(|| {
            SsoError::IdToken("the ID token's payload is not a JSON object".into())
        })?;
        // Without a user-info endpoint the ID token is all there is.
        if let Ok(req) = client.user_info(
            tokens.access_token().clone(),
            Some(verified.subject().clone()),
        ) {
            let info = req
                .request_async::<AllClaims, _, CoreGenderClaim>(&self.http)
                .await
                .map_err(|e| SsoError::UserInfo(boxed(e)))?;
            if let Ok(Value::Object(more)) = serde_json::to_value(&info) {
                claims.extend(more);
            }
        }
        Ok(claims)
    }
}

/// [`CoreClient`] as made from discovered metadata.
type ProviderClient = openidconnect::Client<
    openidconnect::EmptyAdditionalClaims,
    openidconnect::core::CoreAuthDisplay,
    CoreGenderClaim,
    openidconnect::core::CoreJweContentEncryptionAlgorithm,
    openidconnect::core::CoreJsonWebKey,
    openidconnect::core::CoreAuthPrompt,
    openidconnect::StandardErrorResponse<openidconnect::core::CoreErrorResponseType>,
    openidconnect::core::CoreTokenResponse,
    openidconnect::core::CoreTokenIntrospectionResponse,
    openidconnect::core::CoreRevocableToken,
    openidconnect::core::CoreRevocationErrorResponse,
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// Every claim the user-info endpoint sends besides the standard ones.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct AllClaims {
    #[serde(flatten)]
    rest: Map<String, Value>,
}

impl openidconnect::AdditionalClaims for AllClaims {}

/// The payload of a compact JWS, as a JSON object.
fn jwt_payload(jwt: &str) -> Option<Map<String, Value>> {
    use base64::Engine;
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_round_trip_and_refusals() {
        let p = Pending {
            state: "s".repeat(22),
            nonce: "n-_".repeat(8),
            verifier: "v".repeat(43),
        };
        assert_eq!(Pending::from_cookie(&p.to_cookie()), Some(p.clone()));
        assert!(p.matches(&"s".repeat(22)) && !p.matches(&"t".repeat(22)) && !p.matches(""));
        for bad in [
            "",
            "a.b.c",
            &format!("{}.{}", "s".repeat(22), "n".repeat(22)),
            &format!("{}.x", p.to_cookie()),
            &p.to_cookie().replace('v', "+"),
        ] {
            assert_eq!(Pending::from_cookie(bad), None, "{bad}");
        }
    }

    #[test]
    fn payloads() {
        use base64::Engine;
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = format!("{}.{}.sig", enc("{}"), enc(r#"{"sub":"a","groups":["x"]}"#));
        assert_eq!(jwt_payload(&jwt).unwrap()["groups"][0], "x");
        assert_eq!(jwt_payload(&format!("h.{}.s", enc("[1]"))), None);
        assert_eq!(jwt_payload("nope"), None);
    }
}
