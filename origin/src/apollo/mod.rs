//! Apollo configuration-centre feed for the dynamic merchant-domain
//! whitelist.
//!
//! At start the namespace is read once (short timeout); if Apollo cannot be
//! reached the last-good file is loaded instead, and with neither the origin
//! starts on its static list. A background task then long-polls
//! `/notifications/v2`, re-reads the namespace on each release, and re-reads
//! it every few minutes as a safety net. Failures back off exponentially and
//! never touch the list in force: only a successful read replaces it.
//!
//! By concern: [`config`] (the file format and settings), `feed` (the state
//! machine: server in use, release in force, first read, apply), `poll`
//! (long polling and the periodic read), `backoff` (retry delays),
//! [`client`] (the HTTP API), [`value`] (the list's JSON), [`last_good`]
//! (the file kept for outages).

mod backoff;
pub mod client;
pub mod config;
mod feed;
pub mod last_good;
mod metrics;
mod poll;
pub mod sign;
pub mod value;

pub use config::{ApolloConfig, ApolloFile, SECRET_ENV};
pub use metrics::register_metrics;

use client::Client;
use feed::{Feed, FeedState};
use std::sync::{Arc, Mutex};

use crate::whitelist::Whitelist;

/// Loads the dynamic whitelist (Apollo, else the last-good file); returns
/// once the first value (or the decision that there is none) is in place,
/// so the origin starts with its best list, with the work that keeps it
/// fresh (to run in the background). `None` only when the HTTP client
/// cannot be built (logged).
pub async fn start(
    cfg: ApolloConfig,
    whitelist: Arc<Whitelist>,
) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
    let client = match Client::new(
        cfg.identity.clone(),
        cfg.request_timeout.min(cfg.startup_timeout),
    ) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "apollo: disabled; static whitelist only");
            return None;
        }
    };
    let feed = Arc::new(Feed {
        cfg,
        client,
        whitelist,
        state: Mutex::new(FeedState {
            server: 0,
            release_key: None,
            notification_id: -1,
        }),
        fetch_lock: tokio::sync::Mutex::new(()),
    });
    let from_apollo = feed.initial().await;
    Some(async move { feed.run(!from_apollo).await })
}
