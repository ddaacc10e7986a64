//! `edge.geo`: where a visitor's country comes from, for the link rules'
//! `country` condition (protocol 3.1.1).

use super::file::GeoFile;
use super::{ms, ConfigError};
use shorturl_common::config::FieldError;
use std::path::PathBuf;
use std::time::Duration;

/// The country sources.
#[derive(Debug, Clone, Default)]
pub struct GeoConfig {
    /// A header a trusted proxy or CDN sets (`CF-IPCountry`), lower case;
    /// read only from peers in `trusted_proxies`.
    pub country_header: Option<String>,
    /// An MMDB country database (`country_code`, or GeoLite2's
    /// `country.iso_code`), reloaded when the file changes.
    pub mmdb_path: Option<PathBuf>,
    /// How often the file is checked for a change.
    pub reload_interval: Duration,
}

/// `edge.geo`.
pub fn from_file(f: &GeoFile) -> Result<GeoConfig, ConfigError> {
    let country_header = match f.country_header.as_deref() {
        None | Some("") => None,
        Some(h) if http::HeaderName::from_bytes(h.as_bytes()).is_ok() => {
            Some(h.to_ascii_lowercase())
        }
        Some(h) => {
            return Err(FieldError::new(
                "edge.geo.country_header",
                format!("{h:?} is not a header name"),
            )
            .into())
        }
    };
    Ok(GeoConfig {
        country_header,
        mmdb_path: f
            .mmdb_path
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        reload_interval: ms(f.reload_interval_ms, "edge.geo.reload_interval_ms")?,
    })
}
