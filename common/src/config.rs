//! What both binaries' configuration loaders share: the error that names
//! the field an operator has to fix. Each binary keeps its own file format
//! (serde structs with their defaults) and turns it into its internal
//! model; every value the model refuses is a [`FieldError`].

use std::path::{Path, PathBuf};

/// A value the configuration cannot take, and the field that holds it
/// (its path in the file, `edge.redis.nodes`, `admin.users[2].name`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// A configuration file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The text of the configuration file at `path`.
pub fn read(path: &Path) -> Result<String, ReadError> {
    std::fs::read_to_string(path).map_err(|source| ReadError {
        path: path.to_owned(),
        source,
    })
}

/// `Err(FieldError)`, for a loader's early returns.
pub fn bad<T>(field: impl Into<String>, problem: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError::new(field, problem))
}

/// `v` when it is above zero (a count, a size, a duration in the file's
/// unit).
pub fn positive<T: PartialOrd + Default + Copy>(v: T, field: &str) -> Result<T, FieldError> {
    if v > T::default() {
        Ok(v)
    } else {
        bad(field, "must be greater than zero")
    }
}

/// `v` when it is at most `max`.
pub fn at_most<T: PartialOrd + Copy + std::fmt::Display>(
    v: T,
    max: T,
    field: &str,
) -> Result<T, FieldError> {
    if v <= max {
        Ok(v)
    } else {
        bad(field, format!("must be at most {max}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_field_then_the_problem() {
        let e = FieldError::new("edge.listen", "must list at least one address");
        assert_eq!(e.to_string(), "edge.listen: must list at least one address");
        assert_eq!(bad::<()>("a.b", "c"), Err(FieldError::new("a.b", "c")));
        assert_eq!(positive(3u64, "x"), Ok(3));
        assert_eq!(
            positive(0u64, "x.y").unwrap_err().to_string(),
            "x.y: must be greater than zero"
        );
        assert_eq!(at_most(3u64, 3, "x"), Ok(3));
        assert_eq!(
            at_most(4u64, 3, "x.z").unwrap_err().to_string(),
            "x.z: must be at most 3"
        );
    }
}
