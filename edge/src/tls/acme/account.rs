//! The ACME account: created once, then reused from the shared store or
//! the local copy (`acme.state_dir`), so neither a restart nor a lost Redis
//! creates accounts (Let's Encrypt limits new accounts per IP).

use super::client::AcmeHttp;
use super::local::LocalState;
use super::AcmeFailure;
use crate::tls::shared::{SharedError, SharedStore};
use instant_acme::{Account, AccountCredentials, NewAccount};

/// Loads the account, or registers one and stores it in both places.
pub async fn load_or_create(
    http: &AcmeHttp,
    shared: &SharedStore,
    local: &LocalState,
    directory_url: &str,
    contact: &[String],
) -> Result<Account, AcmeFailure> {
    // A stored account that does not open (another store key, tampered)
    // is left alone: registering another would replace the fleet's account.
    let mut refused = false;
    let in_redis = match shared.account(directory_url).await {
        Ok(v) => v,
        Err(SharedError::Refused(e)) => {
            tracing::warn!(error = %e, "ACME account in the shared store refused, trying the local copy");
            refused = true;
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "ACME account: shared store unavailable, trying the local copy");
            None
        }
    };
    let stored = match in_redis.clone() {
        Some(j) => Some(j),
        None => local.read_account(directory_url)?,
    };
    if let Some(json) = stored {
        let creds: AccountCredentials = serde_json::from_str(&json)?;
        let account = Account::builder_with_http(Box::new(http.clone()))
            .from_credentials(creds)
            .await?;
        // Keep both copies.
        if in_redis.is_none() && !refused {
            shared.put_account(directory_url, &json).await?;
        }
        local.write_account(directory_url, &json)?;
        return Ok(account);
    }
    if refused {
        return Err(AcmeFailure::Invalid(
            "the ACME account in the shared store does not open with this edge's store keys \
             (edge.tls.store_key / store_old_keys); not registering another"
                .into(),
        ));
    }
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, creds) = Account::builder_with_http(Box::new(http.clone()))
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            directory_url.to_owned(),
            None,
        )
        .await?;
    let json = serde_json::to_string(&creds)?;
    local.write_account(directory_url, &json)?;
    shared.put_account(directory_url, &json).await?;
    tracing::info!(id = account.id(), "ACME account registered");
    Ok(account)
}

/// Forgets a stored account the CA no longer knows (a CA that lost its
/// state, as Pebble does on restart), so the next pass registers a new one.
pub async fn forget(
    shared: &SharedStore,
    local: &LocalState,
    directory_url: &str,
) -> Result<(), AcmeFailure> {
    local.remove_account(directory_url)?;
    shared.delete_account(directory_url).await?;
    Ok(())
}
