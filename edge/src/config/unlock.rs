//! `edge.unlock`: the keys password links' unlock tokens are opened with
//! (protocol 4.5), so a visitor who entered a password is redirected from
//! memory on every later visit.

use super::file::UnlockFile;
use super::ConfigError;
use shorturl_common::config::FieldError;
use shorturl_common::unlock::UnlockKeys;

/// Environment variable overriding `edge.unlock.keys` (comma-separated;
/// secrets).
pub const ENV_UNLOCK_KEYS: &str = "SHORTURL_EDGE_UNLOCK_KEYS";

/// `edge.unlock`, with `SHORTURL_EDGE_UNLOCK_KEYS` from `env` overriding
/// the file. No keys: no token opens (password links show their form).
pub fn from_file(
    f: &UnlockFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<UnlockKeys, ConfigError> {
    let from_env: Option<Vec<String>> = env(ENV_UNLOCK_KEYS).map(|v| {
        v.split(',')
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty())
            .collect()
    });
    let keys = from_env.as_ref().unwrap_or(&f.keys);
    // The error names the field, never the value.
    UnlockKeys::from_base64(keys.iter().map(String::as_str)).map_err(|e| {
        FieldError::new("edge.unlock.keys", format!("(or {ENV_UNLOCK_KEYS}) {e}")).into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn keys_from_the_file_or_the_environment() {
        let none = |_: &str| None;
        assert!(from_file(&UnlockFile::default(), &none).unwrap().is_empty());
        let f = UnlockFile {
            keys: vec![KEY.into()],
        };
        assert!(!from_file(&f, &none).unwrap().is_empty());
        let env = |k: &str| (k == ENV_UNLOCK_KEYS).then(|| "bad-secret".to_owned());
        let e = from_file(&f, &env).unwrap_err().to_string();
        assert!(
            e.contains("edge.unlock.keys") && !e.contains("bad-secret"),
            "{e}"
        );
    }
}
