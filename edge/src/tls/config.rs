//! The TLS part of the configuration: file format (`edge.tls_listen`,
//! `edge.tls`, `edge.https`, `edge.acme`) and the validated model. Kept
//! here, next to the code that uses it; `config/` only embeds it.

use super::handshake::AcceptorSettings;
use super::https::{HttpsPolicy, Upgrade};
use http::HeaderValue;
use serde::Deserialize;
use shorturl_common::host::normalize_host;
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
    /// Offer HTTP/2 by ALPN.
    pub http2: bool,
    pub session_cache_size: i64,
    pub ticket_key_rotate_secs: u64,
    /// Budget of one shared-store operation.
    pub redis_timeout_ms: u64,
}

impl Default for TlsFile {
    fn default() -> Self {
        TlsFile {
            cert_dir: None,
            default_cert: None,
            shared_store: true,
            reload_interval_ms: 2000,
            handshake_timeout_secs: 10,
            http2: true,
            session_cache_size: 20_480,
            ticket_key_rotate_secs: 12 * 3600,
            redis_timeout_ms: 1000,
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
    pub reload_interval: Duration,
    pub redis_timeout: Duration,
    pub acceptor: AcceptorSettings,
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

fn positive(v: u64, name: &str) -> Result<u64, String> {
    if v == 0 {
        return Err(format!("{name} must be > 0"));
    }
    Ok(v)
}

/// Validates the TLS sections.
pub fn from_file(
    listen: Vec<String>,
    t: TlsFile,
    h: HttpsFile,
    a: AcmeFile,
    default_domain: &str,
) -> Result<TlsSettings, String> {
    for l in &listen {
        if l.to_socket_addrs()
            .ok()
            .and_then(|mut i| i.next())
            .is_none()
        {
            return Err(format!(
                "edge.tls_listen: cannot resolve {l:?} as host:port"
            ));
        }
    }
    let redis_timeout =
        Duration::from_millis(positive(t.redis_timeout_ms, "edge.tls.redis_timeout_ms")?);
    let tls = if listen.is_empty() {
        None
    } else {
        if t.cert_dir.is_none() && !t.shared_store {
            return Err("edge.tls: set cert_dir or shared_store (no certificate source)".into());
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
            return Err(format!(
                "edge.https.redirect: {w:?} is neither `all`, `none` nor a list of domains"
            ))
        }
        RedirectFile::Domains(d) if d.is_empty() => Upgrade::Off,
        RedirectFile::Domains(d) => Upgrade::Domains(
            d.iter()
                .map(|x| {
                    normalize_host(x)
                        .ok_or_else(|| format!("edge.https.redirect: {x:?} is not a valid host"))
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    let hsts = match h.hsts.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(v) if v.starts_with("max-age=") => Some(
            HeaderValue::from_str(v)
                .map_err(|_| format!("edge.https.hsts: {v:?} is not a header value"))?,
        ),
        Some(v) => return Err(format!("edge.https.hsts: {v:?} must start with max-age=")),
    };
    if h.port == 0 {
        return Err("edge.https.port must be > 0".into());
    }
    if upgrade != Upgrade::Off && tls.is_none() {
        return Err("edge.https.redirect needs a TLS listener (edge.tls_listen)".into());
    }
    let acme = if a.enabled {
        if !a.directory_url.starts_with("https://") {
            return Err("edge.acme.directory_url must be an https:// URL".into());
        }
        if tls.as_ref().is_none_or(|t| !t.shared_store) {
            return Err("edge.acme needs a TLS listener with tls.shared_store on".into());
        }
        if a.retry_min_secs > a.retry_max_secs {
            return Err("edge.acme.retry_min_secs must be <= retry_max_secs".into());
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
