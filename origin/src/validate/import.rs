//! Validation of `POST /api/v1/imports?format&domain&dry_run`.

use super::query::Params;
use crate::error::ApiError;
use crate::import::format::Format;
use shorturl_common::host::normalize_host;

/// An import's parameters after validation (the file is the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportRequest {
    pub format: Format,
    pub domain: Option<String>,
    pub dry_run: bool,
}

/// Parses the query string of an import.
pub fn parse_import(query: Option<&str>) -> Result<ImportRequest, ApiError> {
    let p = Params::parse(query, &["format", "domain", "dry_run"])?;
    let format = match p.get("format") {
        None => Format::Csv,
        Some(f) => Format::named(f).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_format",
                "format must be csv, bitly, shlink, kutt or yourls",
            )
        })?,
    };
    let domain = match p.get("domain") {
        Some(d) => Some(normalize_host(d).ok_or_else(|| {
            ApiError::bad_request("invalid_domain", format!("not a valid domain: {d:?}"))
        })?),
        None => None,
    };
    let dry_run = match p.get("dry_run") {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_dry_run",
                "dry_run must be true or false",
            ))
        }
    };
    Ok(ImportRequest {
        format,
        domain,
        dry_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        assert_eq!(
            parse_import(Some("format=bitly&domain=S.Shop.com&dry_run=true")).unwrap(),
            ImportRequest {
                format: Format::Bitly,
                domain: Some("s.shop.com".into()),
                dry_run: true
            }
        );
        assert_eq!(parse_import(None).unwrap().format, Format::Csv);
        for (q, kind) in [
            ("format=xls", "invalid_format"),
            ("domain=a%20b", "invalid_domain"),
            ("dry_run=yes", "invalid_dry_run"),
            ("limit=1", "invalid_query"),
        ] {
            assert_eq!(parse_import(Some(q)).unwrap_err().kind, kind, "{q}");
        }
    }
}
