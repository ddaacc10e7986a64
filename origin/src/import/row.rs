//! One link of an import file, as the file gives it (read by `format` and
//! `sql`, checked by `run` as a creation).

/// One link of a file, as given (checked by the import, as a creation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// Its line in the file (the header is line 1), for the report.
    pub line: u64,
    pub url: String,
    pub code: Option<String>,
    pub domain: Option<String>,
    /// Separated already; checked by the import.
    pub tags: Vec<String>,
    pub created_at: Option<String>,
    pub expires_at: Option<String>,
    /// This service's export names each link's state: only `active` and
    /// `expired` ones (or none given) are links to import.
    pub state: Option<String>,
}
