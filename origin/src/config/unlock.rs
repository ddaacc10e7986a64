//! `unlock:`: password-protected links (protocol 4.5): the key unlock
//! tokens are signed with, how long they last, and the attempt limits.

use super::file::UnlockFile;
use super::{err, ConfigError};
use shorturl_common::unlock::UnlockKeys;
use std::time::Duration;

/// Environment variable overriding `unlock.key` (a secret).
pub const ENV_UNLOCK_KEY: &str = "SHORTURL_UNLOCK_KEY";

/// The validated `unlock:` section.
#[derive(Debug, Clone)]
pub struct UnlockConfig {
    /// `key` first (it signs), then `old_keys`; empty: passwords cannot be
    /// set (the edges could not open a token).
    pub keys: UnlockKeys,
    /// How long a token (and its cookie) lasts.
    pub token_ttl: Duration,
    /// Attempts per (link, client address): burst, refill per minute.
    pub burst: u32,
    pub refill_per_min: u32,
    /// Attempts per client address, every link.
    pub address_burst: u32,
    pub address_refill_per_min: u32,
    /// Password checks (argon2id) running at once, past which 429.
    pub max_concurrent_checks: u32,
}

impl Default for UnlockConfig {
    fn default() -> Self {
        UnlockConfig {
            keys: UnlockKeys::default(),
            token_ttl: Duration::from_secs(3600),
            burst: 5,
            refill_per_min: 5,
            address_burst: 20,
            address_refill_per_min: 20,
            max_concurrent_checks: 4,
        }
    }
}

/// `unlock:` with `SHORTURL_UNLOCK_KEY` from `env` overriding `key`.
pub fn unlock(
    f: UnlockFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<UnlockConfig, ConfigError> {
    let d = UnlockConfig::default();
    let key = env(ENV_UNLOCK_KEY).or(f.key);
    if key.is_none() && !f.old_keys.is_empty() {
        return err(
            "unlock.old_keys",
            format!("needs a current key in unlock.key ({ENV_UNLOCK_KEY})"),
        );
    }
    let mut keys = Vec::new();
    for (field, text) in key.iter().map(|k| ("unlock.key".to_owned(), k)).chain(
        f.old_keys
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("unlock.old_keys[{i}]"), k)),
    ) {
        match shorturl_common::secret_key::SecretKey::from_base64(text) {
            Ok(k) => keys.push(k),
            // The error names the field, never the value.
            Err(e) => return err(field, e.to_string()),
        }
    }
    let ttl = f.token_ttl_secs.unwrap_or(d.token_ttl.as_secs());
    if !(60..=30 * 86_400).contains(&ttl) {
        return err("unlock.token_ttl_secs", "must be 60 to 2592000 (30 days)");
    }
    let at_least_one = |v: Option<u32>, default: u32, field: &str| match v.unwrap_or(default) {
        0 => err(field, "must be at least 1"),
        n => Ok(n),
    };
    Ok(UnlockConfig {
        keys: UnlockKeys::new(keys),
        token_ttl: Duration::from_secs(ttl),
        burst: at_least_one(f.burst, d.burst, "unlock.burst")?,
        refill_per_min: at_least_one(f.refill_per_min, d.refill_per_min, "unlock.refill_per_min")?,
        address_burst: at_least_one(f.address_burst, d.address_burst, "unlock.address_burst")?,
        address_refill_per_min: at_least_one(
            f.address_refill_per_min,
            d.address_refill_per_min,
            "unlock.address_refill_per_min",
        )?,
        max_concurrent_checks: at_least_one(
            f.max_concurrent_checks,
            d.max_concurrent_checks,
            "unlock.max_concurrent_checks",
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn keys_come_from_the_file_or_the_environment_and_name_no_secret() {
        let none = |_: &str| None;
        let c = unlock(UnlockFile::default(), &none).unwrap();
        assert!(c.keys.is_empty());
        let f = UnlockFile {
            key: Some("bad".into()),
            ..UnlockFile::default()
        };
        let e = unlock(f, &none).unwrap_err().to_string();
        assert!(e.contains("unlock.key") && !e.contains("bad"), "{e}");
        let env = |k: &str| (k == ENV_UNLOCK_KEY).then(|| KEY.to_owned());
        let c = unlock(UnlockFile::default(), &env).unwrap();
        assert!(c.keys.sign("d", "c", 1, 2).is_some());
        let f = UnlockFile {
            old_keys: vec![KEY.into()],
            ..UnlockFile::default()
        };
        assert!(unlock(f, &none).is_err(), "old keys need a current one");
        let f = UnlockFile {
            token_ttl_secs: Some(10),
            ..UnlockFile::default()
        };
        assert!(unlock(f, &none).is_err());
    }
}
