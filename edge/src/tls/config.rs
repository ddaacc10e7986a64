//! The TLS part of the configuration: file format (`edge.tls_listen`,
//! `edge.tls`, `edge.https`, `edge.acme`) and the validated model. Kept
//! here, next to the code that uses it; `config/` only embeds it. It
//! imports no other part of `tls` but the HTTPS policy it validates (the
//! handshake takes its [`AcceptorSettings`] from here, not the other way
//! round), so loading a configuration never depends on the handshake, the
//! certificate store or the connection guard.

use super::https::{HttpsPolicy, Upgrade};
use http::HeaderValue;
use serde::Deserialize;
use shorturl_common::config::{at_most, bad, positive, FieldError};
use shorturl_common::host::normalize_host;
use shorturl_common::tls_seal::{StoreKey, StoreKeys};
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::time::Duration;

/// `edge.tls`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsFile {
    /// Directory of `<name>.crt` + `<name>.key` (wildcards `_wildcard.<domain>`).
    pub cert_dir: Option<String>,
    /// Name of the certificate served when no other matches (default: `default_domain`).
    pub default_cert: Option<String>,
    /// Read certificates from the shared store in Redis.
    pub shared_store: bool,
    /// How often the directory and the shared store are checked for changes.
    pub reload_interval_ms: u64,
    pub handshake_timeout_secs: u64,
    /// Full handshakes in progress at once per worker thread (0: no
    /// limit); other connections wait for a turn (`tls::turns`).
    pub handshakes_per_thread: usize,
    /// The longest a connection waits for a handshake turn before it
    /// starts without one.
    pub handshake_turn_wait_ms: u64,
    /// Offer HTTP/2 by ALPN.
    pub http2: bool,
    pub session_cache_size: i64,
    pub ticket_key_rotate_secs: u64,
    /// Budget of one shared-store operation.
    pub redis_timeout_ms: u64,
    /// Seals the private keys and the ACME account in the shared store
    /// (base64 of 32 random bytes); [`ENV_STORE_KEY`] overrides it.
    pub store_key: Option<String>,
    /// Earlier store keys, for opening values sealed before a rotation;
    /// [`ENV_STORE_OLD_KEYS`] (comma-separated) overrides them.
    pub store_old_keys: Vec<String>,
}

/// Most `edge.tls.handshakes_per_thread` (more is as good as no limit).
pub const MAX_HANDSHAKES_PER_THREAD: usize = 1024;
/// Most `edge.tls.handshake_turn_wait_ms`: longer lets stalled clients
/// delay the others' handshakes by as much.
pub const MAX_TURN_WAIT_MS: u64 = 1000;

/// Environment variable overriding `edge.tls.store_key` (the place for a
/// secret: an environment file readable by the service only).
pub const ENV_STORE_KEY: &str = "SHORTURL_EDGE_TLS_STORE_KEY";
/// Environment variable overriding `edge.tls.store_old_keys` (comma-separated).
pub const ENV_STORE_OLD_KEYS: &str = "SHORTURL_EDGE_TLS_STORE_OLD_KEYS";

impl Default for TlsFile {
    fn default() -> Self {
        TlsFile {
            cert_dir: None,
            default_cert: None,
            shared_store: true,
            reload_interval_ms: 2000,
            handshake_timeout_secs: 10,
            handshakes_per_thread: 0,
            handshake_turn_wait_ms: 20,
            http2: true,
            session_cache_size: 20_480,
            ticket_key_rotate_secs: 12 * 3600,
            redis_timeout_ms: 1000,
            store_key: None,
            store_old_keys: Vec::new(),
        }
    }
}

/// `edge.https.redirect`: `all`, or a list of domains.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RedirectFile {
    Word(String),
    Domains(Vec<String>),
}

/// `edge.https`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpsFile {
    pub redirect: RedirectFile,
    pub hsts: Option<String>,
    pub port: u16,
}

impl Default for HttpsFile {
    fn default() -> Self {
        HttpsFile {
            redirect: RedirectFile::Domains(Vec::new()),
            hsts: None,
            port: 443,
        }
    }
}

/// `edge.acme`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AcmeFile {
    pub enabled: bool,
    pub directory_url: String,
    pub contact: Vec<String>,
    /// Extra PEM roots trusted for the CA's own HTTPS (a test CA).
    pub ca_roots: Option<String>,
    /// Local copy of the account and the certificates.
    pub state_dir: String,
    pub check_interval_secs: u64,
    pub whitelist_interval_secs: u64,
    pub lease_ttl_secs: u64,
    pub retry_min_secs: u64,
    pub retry_max_secs: u64,
    pub order_timeout_secs: u64,
}

impl Default for AcmeFile {
    fn default() -> Self {
        AcmeFile {
            enabled: false,
            directory_url: "https://acme-v02.api.letsencrypt.org/directory".into(),
            contact: Vec::new(),
            ca_roots: None,
            state_dir: "var/acme".into(),
            check_interval_secs: 60,
            whitelist_interval_secs: 60,
            lease_ttl_secs: 120,
            retry_min_secs: 300,
            retry_max_secs: 6 * 3600,
            order_timeout_secs: 120,
        }
    }
}

/// The TLS listeners and the certificate store.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub listen: Vec<String>,
    pub cert_dir: Option<PathBuf>,
    pub default_cert: String,
    pub shared_store: bool,
    /// The keys of the shared store's key material (always present with
    /// `shared_store`; `Debug` shows key ids only).
    pub store_keys: Option<StoreKeys>,
    pub reload_interval: Duration,
    pub redis_timeout: Duration,
    pub acceptor: AcceptorSettings,
}

/// Settings of the TLS listeners (the acceptor `tls::handshake` builds).
#[derive(Debug, Clone)]
pub struct AcceptorSettings {
    pub http2: bool,
    pub handshake_timeout: Duration,
    /// Handshakes in progress at once per worker thread (0: no limit).
    pub handshakes_per_thread: usize,
    pub handshake_turn_wait: Duration,
    pub session_cache_size: i64,
    pub ticket_key_rotation: Duration,
}

/// ACME issuance.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    pub directory_url: String,
    pub contact: Vec<String>,
    pub ca_roots: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub check_interval: Duration,
    pub whitelist_interval: Duration,
    pub lease_ttl: Duration,
    pub retry_min: Duration,
    pub retry_max: Duration,
    pub order_timeout: Duration,
    /// Budget of one shared-store operation.
    pub redis_timeout: Duration,
}

/// The validated TLS settings.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// `None`: no TLS listener.
    pub tls: Option<TlsConfig>,
    pub https: HttpsPolicy,
    pub acme: Option<AcmeConfig>,
}

/// `store_key` and `store_old_keys`, the environment's first; `None`
/// without a current key. Errors name the setting, never the key.
fn store_keys(
    t: &TlsFile,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<StoreKeys>, FieldError> {
    let (current, current_name) = match env(ENV_STORE_KEY).filter(|v| !v.trim().is_empty()) {
        Some(v) => (Some(v), ENV_STORE_KEY),
        None => (t.store_key.clone(), "edge.tls.store_key"),
    };
    let (old, old_name): (Vec<String>, _) = match env(ENV_STORE_OLD_KEYS) {
        Some(list) => (
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            ENV_STORE_OLD_KEYS,
        ),
        None => (t.store_old_keys.clone(), "edge.tls.store_old_keys"),
    };
    let Some(current) = current.filter(|v| !v.trim().is_empty()) else {
        if !old.is_empty() {
            return bad(
                old_name,
                format!("needs a current key in edge.tls.store_key ({ENV_STORE_KEY})"),
            );
        }
        return Ok(None);
    };
    let current = StoreKey::from_base64(&current)
        .map_err(|e| FieldError::new(current_name, e.to_string()))?;
    let mut old_keys: Vec<StoreKey> = Vec::new();
    for (i, o) in old.iter().enumerate() {
        let field = format!("{old_name}[{i}]");
        let k = StoreKey::from_base64(o).map_err(|e| FieldError::new(&field, e.to_string()))?;
        if k.id() == current.id() || old_keys.iter().any(|x| x.id() == k.id()) {
            return bad(
                field,
                format!(
                    "key {} is listed twice (the current key is not an old one)",
                    k.id()
                ),
            );
        }
        old_keys.push(k);
    }
    Ok(Some(StoreKeys::new(current, old_keys)))
}

/// Validates the TLS sections; `env` looks up overrides (the store keys).
pub fn from_file(
    listen: Vec<String>,
    t: TlsFile,
    h: HttpsFile,
    a: AcmeFile,
    default_domain: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<TlsSettings, FieldError> {
    for l in &listen {
        if l.to_socket_addrs()
            .ok()
            .and_then(|mut i| i.next())
            .is_none()
        {
            return bad(
                "edge.tls_listen",
                format!("cannot resolve {l:?} as host:port"),
            );
        }
    }
    let redis_timeout =
        Duration::from_millis(positive(t.redis_timeout_ms, "edge.tls.redis_timeout_ms")?);
    let store_keys = store_keys(&t, env)?;
    let tls = if listen.is_empty() {
        None
    } else {
        if t.cert_dir.is_none() && !t.shared_store {
            return bad(
                "edge.tls",
                "set cert_dir or shared_store (no certificate source)",
            );
        }
        if t.shared_store && store_keys.is_none() {
            return bad(
                "edge.tls.store_key",
                format!(
                    "required with tls.shared_store on (private keys in Redis are sealed with \
                     it): base64 of 32 random bytes (`openssl rand -base64 32`), best given as \
                     {ENV_STORE_KEY} from a file only the service reads; or set \
                     edge.tls.shared_store: false"
                ),
            );
        }
        let default_cert = match &t.default_cert {
            Some(n) => n.trim().to_ascii_lowercase(),
            None => default_domain.to_owned(),
        };
        Some(TlsConfig {
            listen,
            cert_dir: t.cert_dir.map(PathBuf::from),
            default_cert,
            shared_store: t.shared_store,
            store_keys: t.shared_store.then_some(store_keys).flatten(),
            reload_interval: Duration::from_millis(positive(
                t.reload_interval_ms,
                "edge.tls.reload_interval_ms",
            )?),
            redis_timeout,
            acceptor: AcceptorSettings {
                http2: t.http2,
                handshake_timeout: Duration::from_secs(positive(
                    t.handshake_timeout_secs,
                    "edge.tls.handshake_timeout_secs",
                )?),
                handshakes_per_thread: at_most(
                    t.handshakes_per_thread,
                    MAX_HANDSHAKES_PER_THREAD,
                    "edge.tls.handshakes_per_thread",
                )?,
                handshake_turn_wait: Duration::from_millis(at_most(
                    positive(t.handshake_turn_wait_ms, "edge.tls.handshake_turn_wait_ms")?,
                    MAX_TURN_WAIT_MS,
                    "edge.tls.handshake_turn_wait_ms",
                )?),
                session_cache_size: t.session_cache_size.max(0),
                ticket_key_rotation: Duration::from_secs(positive(
                    t.ticket_key_rotate_secs,
                    "edge.tls.ticket_key_rotate_secs",
                )?),
            },
        })
    };
    let upgrade = match h.redirect {
        RedirectFile::Word(w) if w == "all" => Upgrade::All,
        RedirectFile::Word(w) if w == "none" || w.is_empty() => Upgrade::Off,
        RedirectFile::Word(w) => {
            return bad(
                "edge.https.redirect",
                format!("{w:?} is neither `all`, `none` nor a list of domains"),
            )
        }
        RedirectFile::Domains(d) if d.is_empty() => Upgrade::Off,
        RedirectFile::Domains(d) => Upgrade::Domains(
            d.iter()
                .map(|x| {
                    normalize_host(x).ok_or_else(|| {
                        FieldError::new("edge.https.redirect", format!("{x:?} is not a valid host"))
                    })
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    let hsts = match h.hsts.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(v) if v.starts_with("max-age=") => Some(HeaderValue::from_str(v).map_err(|_| {
            FieldError::new("edge.https.hsts", format!("{v:?} is not a header value"))
        })?),
        Some(v) => return bad("edge.https.hsts", format!("{v:?} must start with max-age=")),
    };
    if h.port == 0 {
        return bad("edge.https.port", "must be greater than zero");
    }
    if upgrade != Upgrade::Off && tls.is_none() {
        return bad(
            "edge.https.redirect",
            "needs a TLS listener (edge.tls_listen)",
        );
    }
    let acme = if a.enabled {
        if !a.directory_url.starts_with("https://") {
            return bad("edge.acme.directory_url", "must be an https:// URL");
        }
        if tls.as_ref().is_none_or(|t| !t.shared_store) {
            return bad("edge.acme", "needs a TLS listener with tls.shared_store on");
        }
        if a.retry_min_secs > a.retry_max_secs {
            return bad("edge.acme.retry_min_secs", "must be <= retry_max_secs");
        }
        Some(AcmeConfig {
            directory_url: a.directory_url,
            contact: a.contact,
            ca_roots: a.ca_roots.map(PathBuf::from),
            state_dir: PathBuf::from(a.state_dir),
            check_interval: Duration::from_secs(positive(
                a.check_interval_secs,
                "edge.acme.check_interval_secs",
            )?),
            whitelist_interval: Duration::from_secs(positive(
                a.whitelist_interval_secs,
                "edge.acme.whitelist_interval_secs",
            )?),
            lease_ttl: Duration::from_secs(positive(a.lease_ttl_secs, "edge.acme.lease_ttl_secs")?),
            retry_min: Duration::from_secs(positive(a.retry_min_secs, "edge.acme.retry_min_secs")?),
            retry_max: Duration::from_secs(positive(a.retry_max_secs, "edge.acme.retry_max_secs")?),
            order_timeout: Duration::from_secs(positive(
                a.order_timeout_secs,
                "edge.acme.order_timeout_secs",
            )?),
            redis_timeout,
        })
    } else {
        None
    };
    Ok(TlsSettings {
        tls,
        https: HttpsPolicy {
            upgrade,
            hsts,
            port: h.port,
        },
        acme,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // base64 of 32 bytes of 1s and of 2s.
    const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

    fn tls(t: TlsFile, env: &[(&str, &str)]) -> Result<TlsSettings, String> {
        tls_checked(t, env).map_err(|e| e.to_string())
    }

    fn tls_checked(t: TlsFile, env: &[(&str, &str)]) -> Result<TlsSettings, FieldError> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_file(
            vec!["127.0.0.1:8443".into()],
            t,
            HttpsFile::default(),
            AcmeFile::default(),
            "localhost",
            &|k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
        )
    }

    fn ids(s: &TlsSettings) -> Option<String> {
        s.tls
            .as_ref()
            .and_then(|t| t.store_keys.as_ref())
            .map(|k| k.current_id().to_owned())
    }

    #[test]
    fn a_shared_store_reader_needs_a_store_key() {
        let e = tls(TlsFile::default(), &[]).unwrap_err();
        assert!(
            e.contains("edge.tls.store_key") && e.contains(ENV_STORE_KEY),
            "{e}"
        );
        // Without the shared store, or without a TLS listener, none is needed.
        let off = TlsFile {
            shared_store: false,
            cert_dir: Some("/etc/shorturl/tls".into()),
            ..TlsFile::default()
        };
        assert!(tls(off, &[]).is_ok_and(|s| ids(&s).is_none()));
        let no_listener = from_file(
            vec![],
            TlsFile::default(),
            HttpsFile::default(),
            AcmeFile::default(),
            "localhost",
            &|_: &str| None,
        );
        assert!(no_listener.is_ok());
    }

    #[test]
    fn the_environment_overrides_the_file_and_errors_never_show_a_key() {
        let k1 = StoreKey::from_base64(K1).unwrap_or_else(|e| panic!("{e}"));
        let k2 = StoreKey::from_base64(K2).unwrap_or_else(|e| panic!("{e}"));
        let file = || TlsFile {
            store_key: Some(K1.into()),
            ..TlsFile::default()
        };
        let s = tls(file(), &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ids(&s).as_deref(), Some(k1.id()));
        let s = tls(file(), &[(ENV_STORE_KEY, K2), (ENV_STORE_OLD_KEYS, K1)])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ids(&s).as_deref(), Some(k2.id()));
        let debug = format!("{s:?}");
        assert!(!debug.contains(K1) && !debug.contains(K2), "{debug}");
        assert!(
            debug.contains(k1.id()) && debug.contains(k2.id()),
            "{debug}"
        );

        let short = "c2hvcnQ=";
        let e = tls(file(), &[(ENV_STORE_KEY, short)]).unwrap_err();
        assert!(
            e.starts_with(ENV_STORE_KEY) && e.contains("32 bytes"),
            "{e}"
        );
        assert!(!e.contains(short), "{e}");
        let e = tls(
            TlsFile {
                store_key: Some("???".into()),
                ..TlsFile::default()
            },
            &[],
        )
        .unwrap_err();
        assert!(e.starts_with("edge.tls.store_key: not base64"), "{e}");
    }

    #[test]
    fn handshake_turns_are_bounded() {
        let file = |per_thread, wait_ms| TlsFile {
            shared_store: false,
            cert_dir: Some("/etc/shorturl/tls".into()),
            handshakes_per_thread: per_thread,
            handshake_turn_wait_ms: wait_ms,
            ..TlsFile::default()
        };
        let acceptor = |s: TlsSettings| s.tls.map(|t| t.acceptor);
        let a = tls(file(8, 20), &[]).map(acceptor);
        assert!(matches!(a, Ok(Some(ref a)) if a.handshakes_per_thread == 8
            && a.handshake_turn_wait == Duration::from_millis(20)));
        // Off by default.
        let d = tls(file(TlsFile::default().handshakes_per_thread, 20), &[]).map(acceptor);
        assert!(matches!(d, Ok(Some(ref a)) if a.handshakes_per_thread == 0));
        let e = tls(file(MAX_HANDSHAKES_PER_THREAD + 1, 20), &[]).unwrap_err();
        assert!(
            e.starts_with("edge.tls.handshakes_per_thread: must be at most"),
            "{e}"
        );
        let e = tls(file(4, 0), &[]).unwrap_err();
        assert!(
            e.starts_with("edge.tls.handshake_turn_wait_ms: must be greater"),
            "{e}"
        );
        let e = tls(file(4, MAX_TURN_WAIT_MS + 1), &[]).unwrap_err();
        assert!(
            e.starts_with("edge.tls.handshake_turn_wait_ms: must be at most"),
            "{e}"
        );
    }

    #[test]
    fn old_keys_need_a_current_one_and_are_listed_once() {
        let e = tls(
            TlsFile {
                store_old_keys: vec![K1.into()],
                ..TlsFile::default()
            },
            &[],
        )
        .unwrap_err();
        assert!(e.starts_with("edge.tls.store_old_keys: needs"), "{e}");
        for old in [vec![K1.into()], vec![K2.into(), K2.into()]] {
            let e = tls(
                TlsFile {
                    store_key: Some(K1.into()),
                    store_old_keys: old,
                    ..TlsFile::default()
                },
                &[],
            )
            .unwrap_err();
            assert!(e.contains("listed twice"), "{e}");
        }
        let e = tls(
            TlsFile {
                store_key: Some(K1.into()),
                ..TlsFile::default()
            },
            &[(ENV_STORE_OLD_KEYS, &format!("{K2}, x"))],
        )
        .unwrap_err();
        assert!(e.starts_with(&format!("{ENV_STORE_OLD_KEYS}[1]")), "{e}");
    }
}
