//! The certificate directory (`tls.cert_dir`): `<name>.crt` (leaf, then
//! chain) next to `<name>.key`; a wildcard is `_wildcard.<domain>.crt`.
//! Polled: a change of any file's name, size or modification time reloads
//! the whole directory. A pair that does not load is logged and skipped;
//! the others still load.

use super::cert::{Certified, Source};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// What the directory looked like at the last scan.
pub type Fingerprint = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

/// The certificate name a file stem stands for (`_wildcard.a.com` → `*.a.com`).
pub fn name_of_stem(stem: &str) -> String {
    match stem.strip_prefix("_wildcard.") {
        Some(base) => format!("*.{}", base.to_ascii_lowercase()),
        None => stem.to_ascii_lowercase(),
    }
}

/// The file stem for a certificate name (`*.a.com` → `_wildcard.a.com`).
pub fn stem_of_name(name: &str) -> String {
    match name.strip_prefix("*.") {
        Some(base) => format!("_wildcard.{base}"),
        None => name.to_owned(),
    }
}

/// The `.crt`/`.key` files of `dir` with their size and mtime.
pub fn fingerprint(dir: &Path) -> std::io::Result<Fingerprint> {
    let mut fp = Fingerprint::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        let ext = p.extension().and_then(|x| x.to_str());
        if !matches!(ext, Some("crt") | Some("key")) {
            continue;
        }
        let meta = std::fs::metadata(&p)?;
        fp.insert(p, (meta.len(), meta.modified().ok()));
    }
    Ok(fp)
}

/// Loads every complete pair of `dir`.
pub fn load(dir: &Path) -> std::io::Result<Vec<(String, Arc<Certified>)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().and_then(|x| x.to_str()) != Some("crt") {
            continue;
        }
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let key_path = p.with_extension("key");
        let loaded = std::fs::read(&p).and_then(|c| Ok((c, std::fs::read(&key_path)?)));
        let (crt, key) = match loaded {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(file = %p.display(), error = %e, "certificate skipped: cannot read it or its .key");
                continue;
            }
        };
        match Certified::from_pem(&crt, &key, Source::Dir) {
            Ok(c) => out.push((name_of_stem(stem), Arc::new(c))),
            Err(e) => {
                tracing::warn!(file = %p.display(), error = %e, "certificate skipped");
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::cert::test_certs::self_signed;

    #[test]
    fn names_and_stems_round_trip() {
        assert_eq!(name_of_stem("_wildcard.Shop55.com"), "*.shop55.com");
        assert_eq!(name_of_stem("S.shop55.com"), "s.shop55.com");
        assert_eq!(stem_of_name("*.shop55.com"), "_wildcard.shop55.com");
        assert_eq!(stem_of_name("a.com"), "a.com");
    }

    #[test]
    fn loads_pairs_and_skips_broken_ones() {
        let dir = std::env::temp_dir().join(format!("edge-tls-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let write = |name: &str, data: &[u8]| {
            std::fs::write(dir.join(name), data).unwrap_or_else(|e| panic!("{e}"));
        };
        let (c1, k1) = self_signed(&["a.com"], 10, 1);
        let (c2, k2) = self_signed(&["*.b.com"], 10, 2);
        write("a.com.crt", &c1);
        write("a.com.key", &k1);
        write("_wildcard.b.com.crt", &c2);
        write("_wildcard.b.com.key", &k2);
        write("broken.com.crt", b"not pem");
        write("broken.com.key", &k1);
        write("nokey.com.crt", &c1);
        write("README", b"ignored");
        let fp1 = fingerprint(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fp1.len(), 7);
        let mut names: Vec<String> = load(&dir)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        names.sort();
        assert_eq!(names, ["*.b.com", "a.com"]);
        write("a.com.crt", &c2);
        assert_ne!(fingerprint(&dir).unwrap_or_else(|e| panic!("{e}")), fp1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
