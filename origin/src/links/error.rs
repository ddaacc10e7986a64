//! Why a link operation failed, in the domain's terms. The HTTP layer
//! (`crate::error`) alone turns these into statuses and JSON bodies; the
//! sources (MySQL's and Redis's own errors) stay here, for the log.

use crate::issuer::IssueError;
use crate::store::DbError;
use crate::tenancy::{MissingScope, Scope};
use shorturl_common::singleflight::FlightError;

/// A link operation that did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LinkError {
    /// No such link, or not one the caller may see (the two are
    /// indistinguishable on purpose).
    #[error("no such short link")]
    NotFound,
    /// The API key lacks the scope the operation needs.
    #[error("this API key lacks the {0} scope")]
    InsufficientScope(Scope),
    /// The custom code exists, as a link or as an issued code: answered
    /// the same whoever owns it.
    #[error("code {0} is not available; choose another")]
    CodeUnavailable(String),
    /// The app was refused too many custom codes lately (probing).
    #[error("too many refused custom codes; retry in {retry_after_secs} s")]
    CustomCodesLimited { retry_after_secs: u64 },
    /// The target is on a domain this fleet serves (a loop or a chain).
    #[error("url points at {0}, a short-link domain of this service")]
    TargetIsShortDomain(String),
    /// A destination's host is screened `block` or `warn` (protocol 4.7).
    #[error("destinations on {0} are not accepted (screened as unsafe)")]
    DestinationBlocked(String),
    /// The domain is on no whitelist, or not one of the caller's merchants'.
    #[error("domain {0} is not allowed for short links")]
    DomainNotAllowed(String),
    /// The domain belongs to another merchant.
    #[error("domain {domain} does not belong to merchant {kdt_id}")]
    MerchantMismatch { domain: String, kdt_id: u64 },
    /// A merchant domain without the owning merchant's id, or a key bound
    /// to several merchants that did not say which.
    #[error("a link on {0} must name its merchant (kdt_id)")]
    KdtIdRequired(String),
    /// A merchant-bound key named a merchant it is not bound to.
    #[error("this API key may not create links for merchant {0}")]
    ForbiddenMerchant(u64),
    /// `If-Match` named another version than the link's.
    #[error("the link is at version {current}, not {expected}")]
    VersionMismatch { expected: u64, current: u64 },
    /// A search cursor that this installation did not sign for this query.
    #[error("the cursor is not one this query returned")]
    InvalidCursor,
    /// The link was deleted; it can no longer change.
    #[error("the link was deleted and cannot change")]
    LinkDeleted,
    /// A per-domain code the caller sees on several domains, named
    /// without `?domain=` (protocol 3.6).
    #[error("code {0} names links on several domains; say which with ?domain=")]
    DomainRequired(String),
    /// The link was reaped past its expiry: only a later expiry (a
    /// renewal) may change it.
    #[error("the link expired; renew it with a later expires_at")]
    LinkExpired,
    /// A password was given but this origin has no `unlock.key`: the
    /// edges could not open its tokens.
    #[error("this service cannot protect links with a password (no unlock.key configured)")]
    PasswordsDisabled,
    /// Hashing a new password failed (no permit, a panicked thread).
    #[error("the password could not be hashed")]
    PasswordHash,
    /// Every pre-generated code has been issued.
    #[error("all {capacity} pre-generated codes have been issued")]
    CodesExhausted { capacity: u64 },
    /// MySQL failed or timed out.
    #[error("the link database is unavailable")]
    Database(#[source] DbError),
    /// The id counter failed.
    #[error("the id counter is unavailable")]
    Issuer(#[source] IssueError),
    /// The shared lookup this request waited on ended without an answer.
    #[error("the lookup of this code failed")]
    LookupAbandoned(#[source] FlightError),
    /// Issued ids kept landing on rows that are not free.
    #[error("no free code after {skips} issued ids; is the issuer counter behind the table?")]
    NoFreeCode { skips: usize },
}

impl From<DbError> for LinkError {
    fn from(e: DbError) -> Self {
        LinkError::Database(e)
    }
}

impl From<MissingScope> for LinkError {
    fn from(e: MissingScope) -> Self {
        LinkError::InsufficientScope(e.0)
    }
}

impl From<IssueError> for LinkError {
    fn from(e: IssueError) -> Self {
        match e {
            IssueError::Exhausted { capacity } => LinkError::CodesExhausted { capacity },
            e => LinkError::Issuer(e),
        }
    }
}
