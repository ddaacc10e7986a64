//! `screening:`: destination screening (protocol 4.7): the policy's domain
//! lists on disk and how often origins look for changes.

use super::file::ScreeningFile;
use super::{err, ConfigError};
use crate::screening::policy::Action;
use std::path::PathBuf;
use std::time::Duration;

/// The validated `screening:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreeningConfig {
    /// Domain lists, in order (a later list's entry wins over an earlier
    /// one's for the same domain; the managed entries win over all).
    pub files: Vec<ScreeningList>,
    /// How often the managed entries and the files are checked.
    pub refresh: Duration,
    /// The pass's lease.
    pub lease_ttl: Duration,
    /// Links read per statement of the pass.
    pub pass_batch: u32,
}

/// One domain list on disk and the action of its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreeningList {
    pub path: PathBuf,
    pub action: Action,
}

impl Default for ScreeningConfig {
    fn default() -> Self {
        ScreeningConfig {
            files: Vec::new(),
            refresh: Duration::from_secs(5),
            lease_ttl: Duration::from_secs(60),
            pass_batch: 500,
        }
    }
}

/// `screening:`.
pub fn screening(f: ScreeningFile) -> Result<ScreeningConfig, ConfigError> {
    let d = ScreeningConfig::default();
    let mut files = Vec::new();
    for (i, l) in f.files.into_iter().enumerate() {
        let action = match l.action.as_deref() {
            None => Action::Block,
            Some(a) => match Action::parse(a) {
                Some(a) => a,
                None => {
                    return err(
                        format!("screening.files[{i}].action"),
                        format!("{a:?} is not block, warn or allow"),
                    )
                }
            },
        };
        files.push(ScreeningList {
            path: l.path,
            action,
        });
    }
    let refresh = f.refresh_secs.unwrap_or(d.refresh.as_secs());
    if !(1..=3600).contains(&refresh) {
        return err("screening.refresh_secs", "must be 1-3600");
    }
    let lease = f.lease_ttl_secs.unwrap_or(d.lease_ttl.as_secs());
    if !(3..=3600).contains(&lease) {
        return err("screening.lease_ttl_secs", "must be 3-3600");
    }
    let pass_batch = f.pass_batch.unwrap_or(d.pass_batch);
    if !(1..=10_000).contains(&pass_batch) {
        return err("screening.pass_batch", "must be 1-10000");
    }
    Ok(ScreeningConfig {
        files,
        refresh: Duration::from_secs(refresh),
        lease_ttl: Duration::from_secs(lease),
        pass_batch,
    })
}
