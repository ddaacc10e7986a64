//! Apollo configuration-centre feed for the dynamic merchant-domain
//! whitelist.
//!
//! At start the namespace is read once (short timeout); if Apollo cannot be
//! reached the last-good file is loaded instead, and with neither the origin
//! starts on its static list. A background task then long-polls
//! `/notifications/v2`, re-reads the namespace on each release, and re-reads
//! it every few minutes as a safety net. Failures back off exponentially and
//! never touch the list in force: only a successful read replaces it.

pub mod client;
pub mod last_good;
mod metrics;
pub mod sign;
pub mod value;

pub use metrics::register_metrics;

use crate::whitelist::{DynamicList, Source, Whitelist};
use client::{ApolloError, Client, Identity, Release, Url};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;
use value::{ByDomain, Layout, Parsed};

/// Environment variable that supplies (and overrides) the access-key secret,
/// so it need not be written into the config file.
pub const SECRET_ENV: &str = "SHORTURL_APOLLO_SECRET";

/// `apollo:` section of the YAML file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApolloFile {
    /// Config-service base URLs (`http://host:8080`), tried in turn.
    pub config_servers: Vec<String>,
    pub app_id: String,
    #[serde(default)]
    pub cluster: Option<String>,
    /// `application` (properties) by default; a `.json` namespace also works.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Properties key holding the JSON (ignored for `.json` namespaces).
    #[serde(default)]
    pub key: Option<String>,
    /// Access-key secret; `SHORTURL_APOLLO_SECRET` overrides it.
    #[serde(default)]
    pub secret: Option<String>,
    /// Sent as `ip` for Apollo's grey releases.
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub last_good_file: Option<String>,
    #[serde(default)]
    pub startup_timeout_ms: Option<u64>,
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
    #[serde(default)]
    pub poll_timeout_ms: Option<u64>,
    #[serde(default)]
    pub backoff_initial_ms: Option<u64>,
    #[serde(default)]
    pub backoff_max_ms: Option<u64>,
    #[serde(default)]
    pub refresh_interval_ms: Option<u64>,
}

/// Validated Apollo settings. Defaults are Apollo's own client's.
#[derive(Debug, Clone)]
pub struct ApolloConfig {
    pub servers: Vec<Url>,
    pub identity: Identity,
    pub layout: Layout,
    /// Where the last successfully read release is kept.
    pub last_good_file: PathBuf,
    /// Bound on the first read at start (default 3 s).
    pub startup_timeout: Duration,
    /// Bound on one `/configs` request (default 5 s).
    pub request_timeout: Duration,
    /// Client timeout of one long poll; must exceed the server's hold (60 s). Default 90 s.
    pub poll_timeout: Duration,
    /// Retry delay after the first failure (default 1 s), doubling up to `backoff_max` (120 s).
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Full re-read period, a safety net for missed notifications (default 5 min).
    pub refresh_interval: Duration,
}

/// Apollo's namespace formats that are not properties.
const OTHER_FORMATS: [&str; 4] = ["xml", "yml", "yaml", "txt"];

impl ApolloConfig {
    /// Validates the file section; `env` supplies overrides such as the secret.
    pub fn from_file(
        f: ApolloFile,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<ApolloConfig, String> {
        if f.config_servers.is_empty() {
            return Err("apollo.config_servers: give at least one config-service URL".into());
        }
        let mut servers = Vec::new();
        for s in &f.config_servers {
            let url =
                Url::parse(s.trim()).map_err(|e| format!("apollo.config_servers: {s:?}: {e}"))?;
            if url.scheme() != "http" || url.host_str().is_none() {
                return Err(format!("apollo.config_servers: {s:?}: use http://host:port (this build speaks plain HTTP)"));
            }
            servers.push(url);
        }
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !name_ok(&f.app_id) {
            return Err(format!(
                "apollo.app_id: {:?} is not an Apollo app id",
                f.app_id
            ));
        }
        let cluster = f.cluster.unwrap_or_else(|| "default".into());
        if !name_ok(&cluster) {
            return Err(format!(
                "apollo.cluster: {cluster:?} is not an Apollo cluster name"
            ));
        }
        let namespace = f.namespace.unwrap_or_else(|| "application".into());
        if !name_ok(&namespace) {
            return Err(format!(
                "apollo.namespace: {namespace:?} is not an Apollo namespace name"
            ));
        }
        let suffix = namespace
            .rsplit_once('.')
            .map(|(_, s)| s.to_ascii_lowercase());
        let layout = match suffix.as_deref() {
            Some("json") => Layout::Content,
            Some(s) if OTHER_FORMATS.contains(&s) => {
                return Err(format!(
                    "apollo.namespace: {namespace:?}: use a properties or a .json namespace"
                ));
            }
            _ => {
                let key = f.key.unwrap_or_else(|| "merchant_domains".into());
                if key.is_empty() {
                    return Err("apollo.key: must not be empty".into());
                }
                Layout::Key(key)
            }
        };
        let secret = env(SECRET_ENV).or(f.secret).filter(|s| !s.is_empty());
        let ms = |v: Option<u64>, default: u64, name: &str| match v.unwrap_or(default) {
            0 => Err(format!("apollo.{name}: must be greater than zero")),
            n => Ok(Duration::from_millis(n)),
        };
        let backoff_initial = ms(f.backoff_initial_ms, 1_000, "backoff_initial_ms")?;
        let backoff_max = ms(f.backoff_max_ms, 120_000, "backoff_max_ms")?;
        if backoff_initial > backoff_max {
            return Err("apollo.backoff_initial_ms: larger than apollo.backoff_max_ms".into());
        }
        Ok(ApolloConfig {
            servers,
            identity: Identity {
                app_id: f.app_id,
                cluster,
                namespace,
                secret,
                ip: f.ip.filter(|s| !s.is_empty()),
            },
            layout,
            last_good_file: PathBuf::from(
                f.last_good_file
                    .unwrap_or_else(|| "var/apollo-config.json".into()),
            ),
            startup_timeout: ms(f.startup_timeout_ms, 3_000, "startup_timeout_ms")?,
            request_timeout: ms(f.request_timeout_ms, 5_000, "request_timeout_ms")?,
            poll_timeout: ms(f.poll_timeout_ms, 90_000, "poll_timeout_ms")?,
            backoff_initial,
            backoff_max,
            refresh_interval: ms(f.refresh_interval_ms, 300_000, "refresh_interval_ms")?,
        })
    }
}

/// Loads the dynamic whitelist (Apollo, else the last-good file) and keeps it
/// fresh in the background. Returns once the first value (or the decision
/// that there is none) is in place, so the origin starts with its best list.
/// `None` only when the HTTP client cannot be built (logged).
pub async fn start(
    cfg: ApolloConfig,
    whitelist: Arc<Whitelist>,
) -> Option<tokio::task::JoinHandle<()>> {
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
    Some(tokio::spawn(async move { feed.run(!from_apollo).await }))
}

/// Where the feed stands.
struct FeedState {
    /// Index of the config server in use; moves on after a failure.
    server: usize,
    /// Release key of the value in force (sent so Apollo can answer 304).
    release_key: Option<String>,
    /// Newest notification id seen (-1: none yet, as Apollo's clients start).
    notification_id: i64,
}

struct Feed {
    cfg: ApolloConfig,
    client: Client,
    whitelist: Arc<Whitelist>,
    state: Mutex<FeedState>,
    /// Serialises read-and-apply, so a slow refresh can never put an older
    /// release back over a newer one.
    fetch_lock: tokio::sync::Mutex<()>,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Feed {
    fn state(&self) -> MutexGuard<'_, FeedState> {
        // The state is plain data, valid after any panic; never propagate poison.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn server(&self) -> Result<Url, ApolloError> {
        let i = self.state().server;
        self.cfg
            .servers
            .get(i % self.cfg.servers.len().max(1))
            .cloned()
            .ok_or_else(|| ApolloError::BadServer("(none configured)".into()))
    }

    /// Counts a failure and moves to the next config server.
    fn failed(&self) {
        self.whitelist.note_refresh_error();
        let mut s = self.state();
        s.server = (s.server + 1) % self.cfg.servers.len().max(1);
    }

    /// First read at start: Apollo within `startup_timeout`, else the
    /// last-good file, else nothing. True when Apollo answered.
    async fn initial(&self) -> bool {
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
    async fn refresh(&self, timeout: Duration) -> Result<(), ApolloError> {
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

    /// The background work: long polling plus the periodic safety-net read.
    async fn run(self: Arc<Self>, fetch_first: bool) {
        tokio::join!(self.poll_loop(fetch_first), self.refresh_loop());
    }

    async fn poll_loop(&self, fetch_first: bool) {
        let mut pending = fetch_first;
        let mut backoff = Backoff::new(self.cfg.backoff_initial, self.cfg.backoff_max);
        // Apollo's Java client starts at most two long polls a second; this
        // keeps a proxy that answers polls at once from making us spin.
        let min_gap = Duration::from_millis(500).min(self.cfg.backoff_initial);
        let mut last_poll: Option<Instant> = None;
        loop {
            if pending {
                match self.refresh(self.cfg.request_timeout).await {
                    Ok(()) => {
                        pending = false;
                        backoff.reset();
                    }
                    Err(e) => {
                        let wait = backoff.next_delay();
                        tracing::warn!(error = %e, retry_in = ?wait, "apollo: cannot read the namespace; keeping the list in force");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                }
            }
            if let Some(t) = last_poll {
                tokio::time::sleep_until(t + min_gap).await;
            }
            last_poll = Some(Instant::now());
            let polled = match self.server() {
                Ok(server) => {
                    let id = self.state().notification_id;
                    self.client.poll(&server, id, self.cfg.poll_timeout).await
                }
                Err(e) => Err(e),
            };
            match polled {
                Ok(None) => {
                    backoff.reset();
                    self.whitelist.note_refresh_ok(now_unix());
                }
                Ok(Some(id)) => {
                    backoff.reset();
                    self.state().notification_id = id;
                    pending = true;
                }
                Err(e) => {
                    self.failed();
                    let wait = backoff.next_delay();
                    tracing::warn!(error = %e, retry_in = ?wait, "apollo: long poll failed; keeping the list in force");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn refresh_loop(&self) {
        let period = self.cfg.refresh_interval;
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.refresh(self.cfg.request_timeout).await {
                tracing::warn!(error = %e, "apollo: periodic refresh failed; keeping the list in force");
            }
        }
    }
}

/// Exponential backoff: `initial`, doubling, capped at `max`.
#[derive(Debug)]
struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> ApolloFile {
        serde_yaml::from_str(yaml).unwrap()
    }

    const MIN: &str = "config_servers: ['http://127.0.0.1:8080']\napp_id: shorturl\n";

    #[test]
    fn defaults_are_apollos() {
        let c = ApolloConfig::from_file(file(MIN), &|_| None).unwrap();
        assert_eq!(c.identity.cluster, "default");
        assert_eq!(c.identity.namespace, "application");
        assert_eq!(c.layout, Layout::Key("merchant_domains".into()));
        assert_eq!(c.poll_timeout, Duration::from_secs(90));
        assert_eq!(
            (c.backoff_initial, c.backoff_max),
            (Duration::from_secs(1), Duration::from_secs(120))
        );
        assert_eq!(c.refresh_interval, Duration::from_secs(300));
        assert_eq!(c.startup_timeout, Duration::from_secs(3));
        assert_eq!(c.identity.secret, None);
        assert_eq!(c.last_good_file, PathBuf::from("var/apollo-config.json"));
    }

    #[test]
    fn json_namespace_and_secret_from_env() {
        let y = format!("{MIN}namespace: shorturl.merchants.json\nsecret: from-file\n");
        let c = ApolloConfig::from_file(file(&y), &|k| {
            (k == SECRET_ENV).then(|| "from-env".to_string())
        })
        .unwrap();
        assert_eq!(c.layout, Layout::Content);
        assert_eq!(c.identity.secret.as_deref(), Some("from-env"));
        let c = ApolloConfig::from_file(file(&y), &|_| None).unwrap();
        assert_eq!(c.identity.secret.as_deref(), Some("from-file"));
        assert!(
            !format!("{c:?}").contains("from-file"),
            "secret must not be printed"
        );
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                "config_servers: []\napp_id: a\n".to_string(),
                "apollo.config_servers",
            ),
            (
                "config_servers: ['https://x']\napp_id: a\n".to_string(),
                "apollo.config_servers",
            ),
            (
                "config_servers: ['nope']\napp_id: a\n".to_string(),
                "apollo.config_servers",
            ),
            (
                "config_servers: ['http://x']\napp_id: 'a b'\n".to_string(),
                "apollo.app_id",
            ),
            (
                format!("{MIN}namespace: merchants.yaml\n"),
                "apollo.namespace",
            ),
            (format!("{MIN}key: ''\n"), "apollo.key"),
            (
                format!("{MIN}poll_timeout_ms: 0\n"),
                "apollo.poll_timeout_ms",
            ),
            (
                format!("{MIN}backoff_initial_ms: 5\nbackoff_max_ms: 1\n"),
                "apollo.backoff_initial_ms",
            ),
        ];
        for (y, field) in cases {
            let e = ApolloConfig::from_file(file(&y), &|_| None)
                .err()
                .unwrap_or_default();
            assert!(e.contains(field), "{field}: {e}");
        }
        assert!(serde_yaml::from_str::<ApolloFile>(&format!("{MIN}bogus: 1\n")).is_err());
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(120));
        let seq: Vec<u64> = (0..9).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(seq, [1, 2, 4, 8, 16, 32, 64, 120, 120]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }
}
