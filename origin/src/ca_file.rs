//! Extra certificate authorities for the origin's outgoing HTTPS clients
//! (webhook receivers, the OpenID provider): a PEM bundle added to the
//! system's roots, for a private CA.

use std::path::Path;

/// A CA file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    #[error("{field} {path}: {source}")]
    Read {
        field: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{field} {path}: not PEM certificates: {source}")]
    Pem {
        field: &'static str,
        path: String,
        #[source]
        source: reqwest::Error,
    },
}

/// `b` trusting the certificates of `path` too (`field` names the setting
/// in errors).
pub fn trust(
    mut b: reqwest::ClientBuilder,
    field: &'static str,
    path: &Path,
) -> Result<reqwest::ClientBuilder, CaFileError> {
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| CaFileError::Read {
        field,
        path: shown.clone(),
        source,
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| CaFileError::Pem {
        field,
        path: shown,
        source,
    })?;
    for c in certs {
        b = b.add_root_certificate(c);
    }
    Ok(b)
}
