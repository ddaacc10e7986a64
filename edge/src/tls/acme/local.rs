//! The issuer's local copy (`acme.state_dir`): the account credentials and
//! every certificate it obtained, so a Redis that lost everything gets them
//! back from the issuing edge instead of the CA being asked again.
//!
//! Layout: `account-<hash>.json` (per directory URL) and
//! `certs/<name>.crt` + `certs/<name>.key` (wildcards `_wildcard.<domain>`),
//! each file written to a temporary name and renamed. Every file is mode
//! 0600 and both directories 0700 (the account and the private keys are
//! plaintext here: the directory is the edge's own).

use super::AcmeFailure;
use crate::tls::dir::stem_of_name;
use shorturl_common::tls::CertBundle;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The state directory.
pub struct LocalState {
    dir: PathBuf,
}

fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        // `mode` applies on creation only: a leftover file keeps its own.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Creates `dir` (and its parents) and makes it 0700.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn account_file(directory_url: &str) -> String {
    let key = shorturl_common::keys::acme_account_key(directory_url);
    let hash = key.rsplit(':').next().unwrap_or("default");
    format!("account-{hash}.json")
}

impl LocalState {
    /// The state in `dir` (created on first write).
    pub fn new(dir: PathBuf) -> Self {
        LocalState { dir }
    }

    fn certs(&self) -> PathBuf {
        self.dir.join("certs")
    }

    /// The stored account credentials for `directory_url`.
    pub fn read_account(&self, directory_url: &str) -> Result<Option<String>, AcmeFailure> {
        match std::fs::read_to_string(self.dir.join(account_file(directory_url))) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Stores the account credentials.
    pub fn write_account(&self, directory_url: &str, json: &str) -> Result<(), AcmeFailure> {
        private_dir(&self.dir)?;
        write_atomic(&self.dir.join(account_file(directory_url)), json.as_bytes())?;
        Ok(())
    }

    /// Removes the account credentials.
    pub fn remove_account(&self, directory_url: &str) -> Result<(), AcmeFailure> {
        match std::fs::remove_file(self.dir.join(account_file(directory_url))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Stores a certificate obtained for `name`.
    pub fn write_cert(&self, name: &str, b: &CertBundle) -> Result<(), AcmeFailure> {
        private_dir(&self.dir)?;
        let dir = self.certs();
        private_dir(&dir)?;
        let stem = stem_of_name(name);
        write_atomic(&dir.join(format!("{stem}.key")), b.key.as_bytes())?;
        write_atomic(&dir.join(format!("{stem}.crt")), b.cert.as_bytes())?;
        Ok(())
    }

    /// The stored certificate for `name`, if any.
    pub fn read_cert(&self, name: &str) -> Option<(String, String)> {
        let stem = stem_of_name(name);
        let dir = self.certs();
        let cert = std::fs::read_to_string(dir.join(format!("{stem}.crt"))).ok()?;
        let key = std::fs::read_to_string(dir.join(format!("{stem}.key"))).ok()?;
        Some((cert, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_and_certs_round_trip() {
        let dir = std::env::temp_dir().join(format!("edge-acme-local-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let l = LocalState::new(dir.clone());
        let url = "https://ca.test/dir";
        assert_eq!(l.read_account(url).ok().flatten(), None);
        l.write_account(url, "{\"id\":1}")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            l.read_account(url).ok().flatten().as_deref(),
            Some("{\"id\":1}")
        );
        assert_eq!(l.read_account("https://other/dir").ok().flatten(), None);
        l.remove_account(url).unwrap_or_else(|e| panic!("{e}"));
        l.remove_account(url).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.read_account(url).ok().flatten(), None);
        let b = CertBundle {
            cert: "C".into(),
            key: "K".into(),
            not_after: 1,
        };
        // A leftover temporary file with a loose mode does not loosen the key.
        std::fs::create_dir_all(dir.join("certs")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("certs/_wildcard.a.com.tmp"), "x")
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(
            dir.join("certs/_wildcard.a.com.tmp"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        l.write_cert("*.a.com", &b)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(dir.join("certs/_wildcard.a.com.crt").exists());
        l.write_account(url, "{}").unwrap_or_else(|e| panic!("{e}"));
        let mode = |p: &str| {
            std::fs::metadata(dir.join(p))
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or_else(|e| panic!("{p}: {e}"))
        };
        for f in ["certs/_wildcard.a.com.key", "certs/_wildcard.a.com.crt"] {
            assert_eq!(mode(f), 0o600, "{f}");
        }
        assert_eq!(mode(&account_file(url)), 0o600);
        assert_eq!(mode("."), 0o700);
        assert_eq!(mode("certs"), 0o700);
        assert_eq!(l.read_cert("*.a.com"), Some(("C".into(), "K".into())));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
