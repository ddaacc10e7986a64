//! `webhooks:` (issue 28): the key endpoint secrets are sealed with, which
//! destinations are allowed, and the delivery schedule.

use super::file::WebhooksFile;
use super::{err, ConfigError};
use shorturl_common::cidr::CidrList;
use shorturl_common::secret_key::SecretKey;
use shorturl_common::tls_seal::StoreKeys;
use std::path::PathBuf;
use std::time::Duration;

/// Environment variable overriding `webhooks.key` (a secret).
pub const ENV_WEBHOOK_KEY: &str = "SHORTURL_WEBHOOK_KEY";

/// The validated `webhooks:` section.
#[derive(Debug, Clone)]
pub struct WebhooksConfig {
    /// Seals endpoint secrets at rest (`key` first, then `old_keys`);
    /// `None`: endpoints cannot be created.
    pub keys: Option<StoreKeys>,
    /// `http://` endpoints too (tests, internal receivers); default https only.
    pub allow_http: bool,
    /// Networks allowed although loopback, private or otherwise not public.
    pub allow_networks: CidrList,
    /// A PEM bundle trusted next to the system's roots (private CAs).
    pub ca_file: Option<PathBuf>,
    /// One attempt's bound (connect to the end of the answer's head).
    pub timeout: Duration,
    /// Deliveries one origin sends to one endpoint at once.
    pub max_in_flight_per_endpoint: usize,
    /// Backoff after the first failure, doubled per failure up to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// A delivery still failing this long after its event is dead.
    pub give_up_after: Duration,
    /// Finished deliveries stay in the log this long.
    pub keep_finished: Duration,
    /// Endpoints per app.
    pub max_endpoints_per_app: u64,
    /// The period of a `link.clicked` digest.
    pub click_digest: Duration,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            keys: None,
            allow_http: false,
            allow_networks: CidrList::default(),
            ca_file: None,
            timeout: Duration::from_secs(10),
            max_in_flight_per_endpoint: 4,
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(600),
            give_up_after: Duration::from_secs(86_400),
            keep_finished: Duration::from_secs(7 * 86_400),
            max_endpoints_per_app: 20,
            click_digest: Duration::from_secs(60),
        }
    }
}

/// `webhooks:` with `SHORTURL_WEBHOOK_KEY` from `env` overriding `key`.
pub fn webhooks(
    f: WebhooksFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<WebhooksConfig, ConfigError> {
    let d = WebhooksConfig::default();
    let key = env(ENV_WEBHOOK_KEY).or(f.key);
    let parse = |field: String, text: &str| {
        // The error names the field, never the value.
        SecretKey::from_base64(text).or_else(|e| err(field, e.to_string()))
    };
    let keys = match key {
        None if !f.old_keys.is_empty() => {
            return err(
                "webhooks.old_keys",
                format!("needs a current key in webhooks.key ({ENV_WEBHOOK_KEY})"),
            )
        }
        None => None,
        Some(k) => {
            let current = parse("webhooks.key".into(), &k)?;
            let mut old = Vec::new();
            for (i, o) in f.old_keys.iter().enumerate() {
                old.push(parse(format!("webhooks.old_keys[{i}]"), o)?);
            }
            Some(StoreKeys::new(current, old))
        }
    };
    let allow_networks =
        CidrList::parse(&f.allow_networks).map_err(|source| ConfigError::Cidr {
            field: "webhooks.allow_networks",
            source,
        })?;
    let ranged = |v: Option<u64>, default: u64, field: &str, lo: u64, hi: u64| {
        let v = v.unwrap_or(default);
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            err(field, format!("must be {lo}-{hi}"))
        }
    };
    let ms = |d: Duration| d.as_millis() as u64;
    let timeout = ranged(
        f.timeout_ms,
        ms(d.timeout),
        "webhooks.timeout_ms",
        100,
        60_000,
    )?;
    let in_flight = ranged(
        f.max_in_flight_per_endpoint,
        d.max_in_flight_per_endpoint as u64,
        "webhooks.max_in_flight_per_endpoint",
        1,
        64,
    )?;
    let base = ranged(
        f.retry_base_ms,
        ms(d.retry_base),
        "webhooks.retry_base_ms",
        10,
        3_600_000,
    )?;
    let max = ranged(
        f.retry_max_ms,
        ms(d.retry_max),
        "webhooks.retry_max_ms",
        base,
        86_400_000,
    )?;
    let give_up = ranged(
        f.give_up_after_secs,
        d.give_up_after.as_secs(),
        "webhooks.give_up_after_secs",
        1,
        30 * 86_400,
    )?;
    let keep = ranged(
        f.keep_finished_days,
        d.keep_finished.as_secs() / 86_400,
        "webhooks.keep_finished_days",
        1,
        365,
    )?;
    let per_app = ranged(
        f.max_endpoints_per_app,
        d.max_endpoints_per_app,
        "webhooks.max_endpoints_per_app",
        1,
        1000,
    )?;
    let digest = ranged(
        f.click_digest_secs,
        d.click_digest.as_secs(),
        "webhooks.click_digest_secs",
        1,
        3600,
    )?;
    Ok(WebhooksConfig {
        click_digest: Duration::from_secs(digest),
        keys,
        allow_http: f.allow_http.unwrap_or(false),
        allow_networks,
        ca_file: f.ca_file,
        timeout: Duration::from_millis(timeout),
        max_in_flight_per_endpoint: in_flight as usize,
        retry_base: Duration::from_millis(base),
        retry_max: Duration::from_millis(max),
        give_up_after: Duration::from_secs(give_up),
        keep_finished: Duration::from_secs(keep * 86_400),
        max_endpoints_per_app: per_app,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_and_ranges() {
        let c = webhooks(WebhooksFile::default(), &no_env).unwrap();
        assert!(c.keys.is_none());
        assert_eq!(c.max_in_flight_per_endpoint, 4);
        let f = WebhooksFile {
            retry_base_ms: Some(5000),
            retry_max_ms: Some(1000),
            ..WebhooksFile::default()
        };
        let e = webhooks(f, &no_env).unwrap_err().to_string();
        assert!(e.contains("webhooks.retry_max_ms"), "{e}");
    }

    #[test]
    fn key_errors_name_the_field_not_the_value() {
        let f = WebhooksFile {
            key: Some("c2VjcmV0LXZhbHVl".into()),
            ..WebhooksFile::default()
        };
        let e = webhooks(f, &no_env).unwrap_err().to_string();
        assert!(e.contains("webhooks.key") && !e.contains("c2VjcmV0"), "{e}");
        let env = |k: &str| (k == ENV_WEBHOOK_KEY).then(|| "A".repeat(43) + "=");
        assert!(webhooks(WebhooksFile::default(), &env)
            .unwrap()
            .keys
            .is_some());
    }
}
