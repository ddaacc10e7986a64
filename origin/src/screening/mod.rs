//! Destination screening (protocol 4.7): a policy of blocked, flagged and
//! allowed domains — the configured lists (`screening.files`) and the
//! entries managed through the admin API and console (MySQL, every
//! origin) — applied when a link is written (refused, `400
//! destination_blocked`) and, when the policy changes, to every existing
//! link by the pass ([`pass`]), which writes `w` into the records of links
//! with a screened destination; the edges then answer the warning page.
//!
//! Every origin refreshes its policy every `screening.refresh_secs` (the
//! managed entries, and a list whose file changed); a refresh that fails
//! keeps the last good policy in force.

pub mod pass;
pub mod policy;

pub use policy::{domain, parse_list, Action, Hit, ParsedList, Policy};

use crate::config::ScreeningConfig;
use crate::metrics::Metrics;
use crate::store::{DbError, ScreenEntry, Settings, Store};
use arc_swap::ArcSwap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Why the policy could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScreeningError {
    #[error("screening list {path}: {source}")]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("screening entries: {0}")]
    Database(#[from] DbError),
}

/// Longest note of a managed entry (characters).
pub const MAX_NOTE: usize = 200;

/// Why a managed entry was refused.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("not a domain name or address")]
    Domain,
    #[error("note: at most {MAX_NOTE} characters, no control characters")]
    Note,
    #[error(transparent)]
    Database(#[from] DbError),
}

/// One configured list as last read.
struct ListState {
    modified: Option<SystemTime>,
    domains: Vec<String>,
}

/// The policy in force and what it was built from.
pub struct Screening {
    cfg: ScreeningConfig,
    policy: ArcSwap<Policy>,
    lists: Mutex<Vec<ListState>>,
    managed: Mutex<Vec<ScreenEntry>>,
    metrics: Arc<Metrics>,
}

impl Screening {
    /// Reads the configured lists (a list that cannot be read stops the
    /// start: an origin must not come up with less of a policy than asked).
    /// The managed entries come with the first [`Screening::refresh`].
    pub fn new(cfg: ScreeningConfig, metrics: Arc<Metrics>) -> Result<Screening, ScreeningError> {
        let mut lists = Vec::new();
        for l in &cfg.files {
            let (modified, text) = read_list(&l.path)?;
            let parsed = parse_list(&text);
            tracing::info!(path = %l.path.display(), action = l.action.as_str(),
                domains = parsed.domains.len(), skipped_lines = parsed.skipped, "screening list read");
            lists.push(ListState {
                modified,
                domains: parsed.domains,
            });
        }
        let s = Screening {
            cfg,
            policy: ArcSwap::from_pointee(Policy::default()),
            lists: Mutex::new(lists),
            managed: Mutex::new(Vec::new()),
            metrics,
        };
        s.rebuild();
        Ok(s)
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    pub fn config(&self) -> &ScreeningConfig {
        &self.cfg
    }

    /// Reads the managed entries and every list whose file changed, and
    /// puts the policy they make in force. `Ok(true)` when it changed.
    pub async fn refresh(&self, store: &Store) -> Result<bool, ScreeningError> {
        let entries = store.screen_entries().await;
        let entries = match entries {
            Ok(e) => e,
            Err(e) => {
                self.metrics.screening_refresh_errors.inc();
                return Err(e.into());
            }
        };
        let mut failed = None;
        let mut lists_changed = false;
        {
            let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
            for (l, state) in self.cfg.files.iter().zip(lists.iter_mut()) {
                let modified = std::fs::metadata(&l.path).and_then(|m| m.modified()).ok();
                if modified.is_some() && modified == state.modified {
                    continue;
                }
                match read_list(&l.path) {
                    Ok((m, text)) => {
                        state.modified = m;
                        state.domains = parse_list(&text).domains;
                        lists_changed = true;
                    }
                    Err(e) => {
                        // The list read last stays in force.
                        self.metrics.screening_refresh_errors.inc();
                        tracing::warn!(error = %e, "screening list unreadable; keeping its last read");
                        failed = Some(e);
                    }
                }
            }
        }
        let entries_changed = {
            let mut m = self.managed.lock().unwrap_or_else(|e| e.into_inner());
            let changed = *m != entries;
            *m = entries;
            changed
        };
        // Rebuilt only on a change: a public feed holds ~10^5 domains.
        let before = self.policy().fingerprint().to_owned();
        if lists_changed || entries_changed {
            self.rebuild();
        }
        let changed = self.policy().fingerprint() != before;
        match failed {
            Some(e) if !changed => Err(e),
            _ => Ok(changed),
        }
    }

    /// Builds the policy from the lists and the managed entries.
    fn rebuild(&self) {
        let lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let managed = self.managed.lock().unwrap_or_else(|e| e.into_inner());
        let by_action = |a: Action| -> Vec<String> {
            managed
                .iter()
                .filter(|e| e.action == a)
                .map(|e| e.domain.clone())
                .collect()
        };
        let m = [Action::Block, Action::Warn, Action::Allow].map(|a| (a, by_action(a)));
        let layers = self
            .cfg
            .files
            .iter()
            .zip(lists.iter())
            .map(|(l, s)| (l.action, &s.domains[..]))
            .chain(m.iter().map(|(a, d)| (*a, &d[..])));
        let p = Policy::new(layers);
        self.metrics
            .screening_entries
            .set(i64::try_from(p.len()).unwrap_or(i64::MAX));
        self.policy.store(Arc::new(p));
    }

    /// The configured lists: path, action and domains as last read.
    pub fn lists(&self) -> Vec<(PathBuf, Action, usize)> {
        let lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        self.cfg
            .files
            .iter()
            .zip(lists.iter())
            .map(|(l, s)| (l.path.clone(), l.action, s.domains.len()))
            .collect()
    }

    /// Sets the managed entry of `domain` (validated here) and puts the
    /// policy in force on this origin at once (the others follow within
    /// `screening.refresh_secs`). `true` when the entry is new.
    pub async fn put(
        &self,
        store: &Store,
        domain: &str,
        action: Action,
        note: Option<String>,
        actor: &str,
    ) -> Result<(ScreenEntry, bool), EntryError> {
        let domain = policy::domain(domain).ok_or(EntryError::Domain)?;
        if note
            .as_deref()
            .is_some_and(|n| n.chars().count() > MAX_NOTE || n.chars().any(char::is_control))
        {
            return Err(EntryError::Note);
        }
        let e = ScreenEntry {
            domain,
            action,
            note,
            created_by: actor.to_owned(),
            updated_at: shorturl_common::time::now_unix(),
        };
        let created = store.screen_put(&e).await?;
        self.refresh_after_change(store).await;
        Ok((e, created))
    }

    /// Removes the managed entry of `domain`; `true` when there was one.
    pub async fn remove(&self, store: &Store, domain: &str) -> Result<bool, EntryError> {
        let domain = policy::domain(domain).ok_or(EntryError::Domain)?;
        let removed = store.screen_delete(&domain).await?;
        self.refresh_after_change(store).await;
        Ok(removed)
    }

    async fn refresh_after_change(&self, store: &Store) {
        if let Err(e) = self.refresh(store).await {
            tracing::warn!(error = %e, "screening refresh after a change failed; the next one applies it");
        }
    }

    /// The managed entries as last read.
    pub fn managed(&self) -> Vec<ScreenEntry> {
        self.managed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Policy {
    /// The screening of a link to `url` with `s`'s other destinations,
    /// written into `s.o.screen`; the hit that decided it.
    pub fn apply(&self, url: &str, s: &mut Settings) -> Option<Hit> {
        let hit = self.check_all(std::iter::once(url).chain(s.destinations()));
        s.o.screen = hit.as_ref().map(|h| h.screen);
        hit
    }

    /// The options column of a link to `url` whose column is `column`,
    /// when this policy changes its screening (`None`: unchanged; the
    /// column is then left byte for byte as it is).
    pub fn rescreen(&self, url: &str, column: Option<&str>) -> Option<Option<String>> {
        let mut s = Settings::from_column(column);
        let before = s.o.screen;
        self.apply(url, &mut s);
        (s.o.screen != before).then(|| s.to_column())
    }
}

fn read_list(path: &std::path::Path) -> Result<(Option<SystemTime>, String), ScreeningError> {
    let err = |source| ScreeningError::List {
        path: path.to_owned(),
        source,
    };
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path).map_err(err)?;
    Ok((modified, text))
}
