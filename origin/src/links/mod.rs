//! Link operations: create, read, edit, delete, history, search, batch
//! creation, resolve. They
//! speak the domain's language ([`LinkError`], [`Caller`]); the HTTP layer
//! alone translates to and from HTTP.
//!
//! [`create`] holds creation with its tenancy rules and deduplication,
//! [`batch`] many creations in one call, [`manage`] reads and changes of
//! existing links, [`search`] search and list with its signed
//! [`cursor`](crate::cursor),
//! [`resolve`] the resolution path, [`view`] the link JSON.

mod batch;
mod create;
mod error;
pub mod export;
pub mod guide;
mod manage;
pub mod options;
mod resolve;
mod search;
pub mod tags;
pub mod unlock;
mod view;

pub use batch::MAX_BATCH_ITEMS;
pub use create::Creation;
pub use error::LinkError;
pub use search::SearchView;
pub use view::{CreatedView, DeletedView, HistoryEntry, HistoryView, LinkView};

pub(crate) use manage::LinkRef;
pub(crate) use search::tenant;

use crate::bucket::{Rate, Refusals};
use crate::cache::Cache;
use crate::claim::Claimer;
use crate::config::Config;
use crate::cursor::CursorKey;
use crate::issuer::Issuer;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::screening::Screening;
use crate::store::Store;
use crate::whitelist::Whitelist;
use std::sync::Arc;

/// Apps the custom-code meter remembers (apps are configured, so few).
const MAX_CUSTOM_CODE_APPS: usize = 10_000;

/// Everything a link operation needs.
pub struct Links {
    pub cfg: Arc<Config>,
    pub store: Store,
    pub cache: Cache,
    pub issuer: Arc<Issuer>,
    pub claimer: Claimer,
    pub whitelist: Arc<Whitelist>,
    pub metrics: Arc<Metrics>,
    pub outbox: Arc<Outbox>,
    /// Signs and verifies search cursors.
    pub cursor: CursorKey,
    flight: Arc<resolve::Flight>,
    /// Custom-code attempts per app (refusals are metered: each says the
    /// code exists somewhere).
    custom_refusals: Refusals<String>,
    /// Password-protected links: new passwords' hashes, visitors' entries.
    pub unlock: unlock::Unlocker,
    /// The destination screening policy (protocol 4.7).
    pub screening: Arc<Screening>,
    /// The last hour's clicks per minute (`crate::clicks::live`).
    pub live: Arc<crate::clicks::live::Live>,
}

/// The parts [`Links`] is assembled from.
pub struct Parts {
    pub cfg: Arc<Config>,
    pub store: Store,
    pub cache: Cache,
    pub issuer: Arc<Issuer>,
    pub claimer: Claimer,
    pub whitelist: Arc<Whitelist>,
    pub metrics: Arc<Metrics>,
    pub cursor: CursorKey,
    pub screening: Arc<Screening>,
    pub live: Arc<crate::clicks::live::Live>,
}

impl Links {
    /// Assembles the service (and the outbox applier over the same store and cache).
    pub fn new(p: Parts) -> Arc<Links> {
        let custom_refusals = Refusals::new(
            Rate::per_minute(p.cfg.links.custom_code_refusals_per_min),
            MAX_CUSTOM_CODE_APPS,
        );
        let outbox = Outbox::new(p.store.clone(), p.cache.clone(), Arc::clone(&p.metrics));
        let unlock = unlock::Unlocker::new(
            &p.cfg.unlock,
            p.metrics.unlock_attempts.clone(),
            p.metrics.unlock_checks.clone(),
        );
        Arc::new(Links {
            cfg: p.cfg,
            store: p.store,
            cache: p.cache,
            issuer: p.issuer,
            claimer: p.claimer,
            whitelist: p.whitelist,
            metrics: p.metrics,
            outbox,
            cursor: p.cursor,
            flight: resolve::flight(),
            custom_refusals,
            unlock,
            screening: p.screening,
            live: p.live,
        })
    }
}
