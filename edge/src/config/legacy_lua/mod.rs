//! `shorturl-edge --lua-config config.lua`: the legacy OpenResty deployment's
//! `config.lua` (a Lua file returning a table of redis, mysql/origin and
//! domain settings) mapped onto the edge configuration, so a node can be
//! migrated without rewriting its config first.
//!
//! Three steps, one module each: [`sandbox`] evaluates the file (no `os`,
//! `io`, `require`, `load`; bounded memory and instructions), [`value`]
//! turns what it returned into plain data, and [`mapping`] maps that data
//! key by key onto the file model ([`FileConfig`]): every key is mapped,
//! known and ignored with a note (the MySQL settings now belong to the
//! origin), or refused with an error naming it. The file model then goes
//! through [`config::from_file`], the same validation as `conf/edge.yaml`.
//! See `lua-compat/README.md` for the mapping table.

pub mod mapping;
pub mod sandbox;
pub mod section;
pub mod value;

use crate::config::{self, ConfigError, Loaded};
use std::path::Path;

pub use mapping::{map, Mapped};
pub use sandbox::eval;
pub use value::Data;

/// Why a legacy config was refused.
#[derive(Debug, thiserror::Error)]
pub enum LegacyError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Lua refused the file or the sandbox stopped it.
    #[error("{msg}")]
    Lua { msg: String, source: mlua::Error },
    /// A key is missing, unknown or of the wrong type.
    #[error("{0}")]
    Invalid(String),
    /// The mapped configuration failed the edge's own validation.
    #[error("{0} (as mapped onto the edge config)")]
    Edge(#[source] ConfigError),
}

impl LegacyError {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        LegacyError::Invalid(msg.into())
    }

    pub(crate) fn lua(msg: impl Into<String>, source: mlua::Error) -> Self {
        LegacyError::Lua {
            msg: msg.into(),
            source,
        }
    }
}

impl From<LegacyError> for ConfigError {
    fn from(e: LegacyError) -> Self {
        ConfigError::Legacy(Box::new(e))
    }
}

/// Evaluates, maps and validates a legacy config text (`env` as in
/// [`config::parse`]). Returns the loaded config and the notes.
pub fn parse(
    source: &str,
    name: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Loaded, Vec<String>), LegacyError> {
    let data = eval(source, name)?;
    let mapped = map(&data)?;
    let loaded = config::from_file(mapped.file, env).map_err(LegacyError::Edge)?;
    Ok((loaded, mapped.notes))
}

/// Reads `path` and [`parse`]s it with the process environment.
pub fn load(path: &Path) -> Result<(Loaded, Vec<String>), LegacyError> {
    let text = std::fs::read_to_string(path).map_err(|source| LegacyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, &path.display().to_string(), |k| {
        std::env::var(k).ok()
    })
}

/// `--conf` YAML, or with `legacy` the Lua file at `path` (its notes go to
/// stderr: they are for the operator running `--test`).
pub fn load_either(path: &Path, legacy: bool) -> Result<Loaded, ConfigError> {
    if !legacy {
        return config::load(path);
    }
    let (loaded, notes) = load(path)?;
    for n in notes {
        eprintln!("shorturl-edge: {}: {n}", path.display());
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests;
