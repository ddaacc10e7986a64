//! The last-good file: the last namespace release read from Apollo, so an
//! origin that starts while Apollo is down still serves the merchant domains.
//! Written atomically (temp file in the same directory, fsync, rename), so a
//! crash mid-write leaves either the old file or the new one, never half.

use super::client::Release;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The file's content: the Apollo `/configs` answer plus when it was saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    #[serde(flatten)]
    pub release: Release,
    #[serde(rename = "savedAtUnix")]
    pub saved_at_unix: u64,
}

/// Writes `saved` to `path` atomically, creating the parent directory.
pub fn store(path: &Path, saved: &Saved) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(saved).map_err(std::io::Error::other)?;
    write_atomic(path, &bytes)
}

/// Why the last-good file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LastGoodError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a saved Apollo release: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Reads the file: `Ok(None)` when there is none.
pub fn load(path: &Path) -> Result<Option<Saved>, LastGoodError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LastGoodError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| LastGoodError::Parse {
            path: path.to_owned(),
            source,
        })
}

/// Temp file + fsync + rename (+ fsync of the directory, best effort).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "apollo-config.json".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("apollo-last-good-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn saved() -> Saved {
        let mut configurations = BTreeMap::new();
        configurations.insert(
            "merchant_domains".to_string(),
            serde_json::json!(r#"{"55":"s.shop55.com"}"#),
        );
        Saved {
            release: Release {
                app_id: "shorturl".into(),
                cluster: "default".into(),
                namespace_name: "application".into(),
                configurations,
                release_key: "20260101000000-abc".into(),
            },
            saved_at_unix: 1_700_000_000,
        }
    }

    #[test]
    fn round_trip_creates_the_directory_and_leaves_no_temp_file() {
        let d = dir("rt");
        let p = d.join("sub/apollo-config.json");
        assert_eq!(load(&p).unwrap(), None);
        store(&p, &saved()).unwrap();
        assert_eq!(load(&p).unwrap(), Some(saved()));
        let mut s2 = saved();
        s2.release.release_key = "k2".into();
        store(&p, &s2).unwrap();
        assert_eq!(load(&p).unwrap(), Some(s2));
        let names: Vec<_> = std::fs::read_dir(d.join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("apollo-config.json")]);
        // The file is Apollo's own answer shape, readable by people and tools.
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(v["releaseKey"], "k2");
        assert_eq!(v["namespaceName"], "application");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn corrupt_file_is_an_error_not_a_value() {
        let d = dir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("apollo-config.json");
        std::fs::write(&p, b"{truncated").unwrap();
        assert!(load(&p).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
