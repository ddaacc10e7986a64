//! The `apollo:` section: its file format ([`ApolloFile`]) and the validated
//! settings ([`ApolloConfig`]), with Apollo's own client defaults.

use super::client::{Identity, Url};
use super::value::Layout;
use crate::config::{err, ConfigError};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

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
    ) -> Result<ApolloConfig, ConfigError> {
        if f.config_servers.is_empty() {
            return err(
                "apollo.config_servers",
                "give at least one config-service URL",
            );
        }
        let mut servers = Vec::new();
        for s in &f.config_servers {
            let url = Url::parse(s.trim()).map_err(|source| ConfigError::Url {
                field: "apollo.config_servers",
                value: s.clone(),
                source,
            })?;
            if url.scheme() != "http" || url.host_str().is_none() {
                return err(
                    "apollo.config_servers",
                    format!("{s:?}: use http://host:port (this build speaks plain HTTP)"),
                );
            }
            servers.push(url);
        }
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !name_ok(&f.app_id) {
            return err(
                "apollo.app_id",
                format!("{:?} is not an Apollo app id", f.app_id),
            );
        }
        let cluster = f.cluster.unwrap_or_else(|| "default".into());
        if !name_ok(&cluster) {
            return err(
                "apollo.cluster",
                format!("{cluster:?} is not an Apollo cluster name"),
            );
        }
        let namespace = f.namespace.unwrap_or_else(|| "application".into());
        if !name_ok(&namespace) {
            return err(
                "apollo.namespace",
                format!("{namespace:?} is not an Apollo namespace name"),
            );
        }
        let suffix = namespace
            .rsplit_once('.')
            .map(|(_, s)| s.to_ascii_lowercase());
        let layout = match suffix.as_deref() {
            Some("json") => Layout::Content,
            Some(s) if OTHER_FORMATS.contains(&s) => {
                return err(
                    "apollo.namespace",
                    format!("{namespace:?}: use a properties or a .json namespace"),
                );
            }
            _ => {
                let key = f.key.unwrap_or_else(|| "merchant_domains".into());
                if key.is_empty() {
                    return err("apollo.key", "must not be empty");
                }
                Layout::Key(key)
            }
        };
        let secret = env(SECRET_ENV).or(f.secret).filter(|s| !s.is_empty());
        let ms = |v: Option<u64>, default: u64, name: &str| match v.unwrap_or(default) {
            0 => err(format!("apollo.{name}"), "must be greater than zero"),
            n => Ok(Duration::from_millis(n)),
        };
        let backoff_initial = ms(f.backoff_initial_ms, 1_000, "backoff_initial_ms")?;
        let backoff_max = ms(f.backoff_max_ms, 120_000, "backoff_max_ms")?;
        if backoff_initial > backoff_max {
            return err(
                "apollo.backoff_initial_ms",
                "larger than apollo.backoff_max_ms",
            );
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
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(field), "{field}: {e}");
        }
        assert!(serde_yaml::from_str::<ApolloFile>(&format!("{MIN}bogus: 1\n")).is_err());
    }
}
