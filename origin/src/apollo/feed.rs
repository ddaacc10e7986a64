//! The feed's state machine: which config server is in use, which release
//! is in force, the first read at start (Apollo, else the last-good file),
//! and putting a release in force (validate completely, then swap).

use super::client::{ApolloError, Client, Release, Url};
use super::value::{self, ByDomain, Parsed};
use super::{last_good, ApolloConfig};
use crate::whitelist::{DynamicList, Source, Whitelist};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the feed stands.
pub(super) struct FeedState {
    /// Index of the config server in use; moves on after a failure.
    pub(super) server: usize,
    /// Release key of the value in force (sent so Apollo can answer 304).
    pub(super) release_key: Option<String>,
    /// Newest notification id seen (-1: none yet, as Apollo's clients start).
    pub(super) notification_id: i64,
}

pub(super) struct Feed {
    pub(super) cfg: ApolloConfig,
    pub(super) client: Client,
    pub(super) whitelist: Arc<Whitelist>,
    pub(super) state: Mutex<FeedState>,
    /// Serialises read-and-apply, so a slow refresh can never put an older
    /// release back over a newer one.
    pub(super) fetch_lock: tokio::sync::Mutex<()>,
}

pub(super) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Feed {
    pub(super) fn state(&self) -> MutexGuard<'_, FeedState> {
        // The state is plain data, valid after any panic; never propagate poison.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn server(&self) -> Result<Url, ApolloError> {
        let i = self.state().server;
        self.cfg
            .servers
            .get(i % self.cfg.servers.len().max(1))
            .cloned()
            .ok_or_else(|| ApolloError::BadServer("(none configured)".into()))
    }

    /// Counts a failure and moves to the next config server.
    pub(super) fn failed(&self) {
        self.whitelist.note_refresh_error();
        let mut s = self.state();
        s.server = (s.server + 1) % self.cfg.servers.len().max(1);
    }

    /// First read at start: Apollo within `startup_timeout`, else the
    /// last-good file, else nothing. True when Apollo answered.
    pub(super) async fn initial(&self) -> bool {
        let attempts = async {
            for _ in 0..self.cfg.servers.len() {
                match self.refresh(self.cfg.request_timeout).await {
                    Ok(()) => return true,
                    Err(e) => tracing::warn!(error = %e, "apollo: not reachable at start"),
                }
            }
            false
        };
        match tokio::time::timeout(self.cfg.startup_timeout, attempts).await {
            Ok(true) => return true,
            Ok(false) => {}
            Err(_) => {
                self.failed();
                tracing::warn!(timeout = ?self.cfg.startup_timeout, "apollo: no answer at start");
            }
        }
        let path = &self.cfg.last_good_file;
        match last_good::load(path) {
            Ok(Some(saved)) if self.is_ours(&saved.release) => {
                tracing::warn!(file = %path.display(), release_key = %saved.release.release_key,
                    "apollo: unreachable; using the last good merchant-domain list");
                self.apply(&saved.release, Source::File, saved.saved_at_unix);
            }
            Ok(Some(saved)) => {
                tracing::error!(file = %path.display(), app_id = %saved.release.app_id,
                cluster = %saved.release.cluster, namespace = %saved.release.namespace_name,
                "apollo: last-good file is for another app or namespace; ignored, static whitelist only")
            }
            Ok(None) => tracing::warn!(file = %path.display(),
                "apollo: unreachable and no last-good file; static whitelist only until Apollo answers"),
            Err(e) => {
                tracing::error!(error = %e, "apollo: last-good file unusable; static whitelist only")
            }
        }
        false
    }

    /// Whether a saved release is for our app and namespace. The cluster is
    /// not compared: Apollo answers from `default` when our cluster has no
    /// release of its own, and saves that.
    fn is_ours(&self, r: &Release) -> bool {
        let id = &self.cfg.identity;
        r.app_id == id.app_id
            && r.namespace_name.eq_ignore_ascii_case(
                id.namespace
                    .strip_suffix(".properties")
                    .unwrap_or(&id.namespace),
            )
    }

    /// Reads the namespace (304 when unchanged) and puts a new release in force.
    pub(super) async fn refresh(&self, timeout: Duration) -> Result<(), ApolloError> {
        let _serial = self.fetch_lock.lock().await;
        let server = self.server()?;
        let (release_key, notification_id) = {
            let s = self.state();
            (s.release_key.clone(), s.notification_id)
        };
        match self
            .client
            .fetch(
                &server,
                release_key.as_deref(),
                Some(notification_id),
                timeout,
            )
            .await
        {
            Ok(Some(release)) => {
                let now = now_unix();
                self.apply(&release, Source::Apollo, now);
                self.whitelist.note_refresh_ok(now);
                self.persist(release, now).await;
                Ok(())
            }
            Ok(None) => {
                let now = now_unix();
                // 304 on a value loaded from the file: Apollo confirms it.
                let current = self.whitelist.dynamic();
                if current.source != Source::Apollo {
                    let mut confirmed = (*current).clone();
                    confirmed.source = Source::Apollo;
                    confirmed.refreshed_at_unix = Some(now);
                    self.whitelist.swap_dynamic(confirmed);
                    tracing::info!(release_key = ?release_key, "apollo: reachable again; last-good list is current");
                }
                self.whitelist.note_refresh_ok(now);
                Ok(())
            }
            Err(e) => {
                self.failed();
                Err(e)
            }
        }
    }

    /// Validates the release's value completely, then swaps it in. An
    /// invalid value counts as empty (never as "keep the previous one").
    fn apply(&self, release: &Release, source: Source, refreshed_at: u64) {
        let by_domain = match value::from_configurations(&release.configurations, &self.cfg.layout)
        {
            Parsed::List(l) => l,
            Parsed::Missing => {
                tracing::warn!(release_key = %release.release_key, layout = ?self.cfg.layout,
                    "apollo: namespace has no merchant-domain value; treating it as empty");
                ByDomain::new()
            }
            Parsed::Invalid(reason) => {
                self.whitelist.note_invalid_value();
                tracing::error!(release_key = %release.release_key, %reason,
                    "apollo: merchant-domain value is not a JSON object of kdt_id to domain; treating it as empty");
                ByDomain::new()
            }
        };
        let domains = by_domain.len();
        self.whitelist.swap_dynamic(DynamicList {
            by_domain,
            source,
            release_key: Some(release.release_key.clone()),
            refreshed_at_unix: Some(refreshed_at),
        });
        self.state().release_key = Some(release.release_key.clone());
        tracing::info!(release_key = %release.release_key, ?source, domains, "apollo: merchant-domain list in force");
    }

    /// Keeps the release as the last-good file (a failure is logged; the
    /// list in force is unaffected).
    async fn persist(&self, release: Release, now: u64) {
        let path = self.cfg.last_good_file.clone();
        let saved = last_good::Saved {
            release,
            saved_at_unix: now,
        };
        let shown = path.display().to_string();
        match tokio::task::spawn_blocking(move || last_good::store(&path, &saved)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(file = %shown, error = %e, "apollo: cannot write the last-good file")
            }
            Err(e) => {
                tracing::error!(file = %shown, error = %e, "apollo: last-good file writer failed")
            }
        }
    }
}
