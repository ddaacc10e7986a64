//! One certificate order (RFC 8555 section 7.4) for one name, with HTTP-01:
//! the key authorisations go to the shared store, where every edge answers
//! them, and are removed once the CA has decided.

use super::AcmeFailure;
use crate::tls::cert::{Certified, Source};
use crate::tls::shared::SharedStore;
use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, OrderStatus, RetryPolicy,
};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::stack::Stack;
use openssl::x509::extension::SubjectAlternativeName;
use openssl::x509::X509ReqBuilder;
use shorturl_common::tls::CertBundle;
use std::time::Duration;

/// A fresh P-256 key (PEM, PKCS#8) and a CSR for `name` (DER).
pub fn key_and_csr(name: &str) -> Result<(String, Vec<u8>), AcmeFailure> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    let key = PKey::from_ec_key(EcKey::generate(&group)?)?;
    let mut req = X509ReqBuilder::new()?;
    req.set_pubkey(&key)?;
    let mut exts = Stack::new()?;
    exts.push(
        SubjectAlternativeName::new()
            .dns(name)
            .build(&req.x509v3_context(None))?,
    )?;
    req.add_extensions(&exts)?;
    req.sign(&key, MessageDigest::sha256())?;
    let pem = String::from_utf8(key.private_key_to_pem_pkcs8()?)
        .map_err(|e| AcmeFailure::Invalid(e.to_string()))?;
    Ok((pem, req.build().to_der()?))
}

/// Orders a certificate for `name`; `budget` bounds each polling phase.
pub async fn order(
    account: &Account,
    shared: &SharedStore,
    name: &str,
    budget: Duration,
) -> Result<CertBundle, AcmeFailure> {
    let ids = [Identifier::Dns(name.to_owned())];
    let mut order = account.new_order(&NewOrder::new(&ids)).await?;
    let mut tokens = Vec::new();
    let answered = answer_challenges(&mut order, shared, budget, &mut tokens).await;
    let retry = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .backoff(1.5)
        .timeout(budget);
    let ready = match answered {
        Ok(()) => order.poll_ready(&retry).await.map_err(AcmeFailure::from),
        Err(e) => Err(e),
    };
    for t in &tokens {
        if let Err(e) = shared.delete_challenge(t).await {
            tracing::debug!(token = %t, error = %e, "challenge answer left to expire");
        }
    }
    match ready? {
        OrderStatus::Ready => {}
        other => {
            let why = order
                .state()
                .error
                .as_ref()
                .map(|p| p.to_string())
                .unwrap_or_default();
            return Err(AcmeFailure::Invalid(format!("order {other:?} {why}")));
        }
    }
    let (key_pem, csr) = key_and_csr(name)?;
    order.finalize_csr(&csr).await?;
    let chain = order.poll_certificate(&retry).await?;
    let cert = Certified::from_pem(chain.as_bytes(), key_pem.as_bytes(), Source::Shared)
        .map_err(|e| AcmeFailure::Invalid(format!("the CA's certificate: {e}")))?;
    Ok(CertBundle {
        cert: chain,
        key: key_pem,
        not_after: cert.not_after,
    })
}

async fn answer_challenges(
    order: &mut instant_acme::Order,
    shared: &SharedStore,
    budget: Duration,
    tokens: &mut Vec<String>,
) -> Result<(), AcmeFailure> {
    let mut authzs = order.authorizations();
    while let Some(a) = authzs.next().await {
        let mut a = a?;
        match a.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(AcmeFailure::Invalid(format!("authorization {other:?}"))),
        }
        let mut ch = a
            .challenge(ChallengeType::Http01)
            .ok_or_else(|| AcmeFailure::Invalid("the CA offers no http-01 challenge".into()))?;
        let token = ch.token.clone();
        let key_auth = ch.key_authorization();
        // Kept past the polling budget: the CA may validate late.
        shared
            .put_challenge(&token, key_auth.as_str(), budget * 2)
            .await?;
        tokens.push(token);
        ch.set_ready().await?;
    }
    Ok(())
}
