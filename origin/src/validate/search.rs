//! Validation of search and export query strings (`GET /api/v1/links?...`,
//! `GET /api/v1/export/links?...`).

use super::query::Params;
use super::validate_url;
use crate::config::LinksConfig;
use crate::error::ApiError;
use crate::store::search::{Filters, StateFilter};
use shorturl_common::code::is_valid_code;
use shorturl_common::host::normalize_host;

/// Most links one page may hold.
pub const MAX_LIMIT: u32 = 1000;
/// Links per page when `limit` is not given.
pub const DEFAULT_LIMIT: u32 = 100;

/// A search after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    pub filters: Filters,
    /// 1..=[`MAX_LIMIT`].
    pub limit: u32,
    /// The opaque cursor of the previous page (verified later).
    pub cursor: Option<String>,
}

/// The filters' parameters, shared by a search and an export.
const FILTER_PARAMS: [&str; 10] = [
    "code",
    "url",
    "url_prefix",
    "domain",
    "app",
    "kdt_id",
    "state",
    "created_from",
    "created_to",
    "tag",
];

fn invalid(kind: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(kind, msg)
}

/// Parses and validates the query string of a search (`None`: no query).
pub fn parse_search(query: Option<&str>, cfg: &LinksConfig) -> Result<SearchRequest, ApiError> {
    let p = Params::parse(query, &[&FILTER_PARAMS[..], &["limit", "cursor"]].concat())?;
    let filters = filters(&p, cfg)?;
    let get = |name: &str| p.get(name);
    let limit = match get("limit") {
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n) && l.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                invalid(
                    "invalid_limit",
                    format!("limit must be an integer from 1 to {MAX_LIMIT}"),
                )
            })?,
        None => DEFAULT_LIMIT,
    };
    let cursor = match get("cursor") {
        Some("") => return Err(invalid("invalid_cursor", "cursor must not be empty")),
        c => c.map(str::to_owned),
    };
    Ok(SearchRequest {
        filters,
        limit,
        cursor,
    })
}

/// The file format of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// `text/csv`, a header line first.
    Csv,
    /// `application/x-ndjson`: one link object (as the search answers it) a line.
    Ndjson,
}

/// An export after validation: what to export, in which format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRequest {
    pub filters: Filters,
    pub format: ExportFormat,
}

/// Parses and validates the query string of an export.
pub fn parse_export(query: Option<&str>, cfg: &LinksConfig) -> Result<ExportRequest, ApiError> {
    // No `limit` or `cursor`: an export is every matching link.
    let p = Params::parse(query, &[&FILTER_PARAMS[..], &["format"]].concat())?;
    let format = match p.get("format") {
        None | Some("csv") => ExportFormat::Csv,
        Some("ndjson") => ExportFormat::Ndjson,
        Some(_) => return Err(invalid("invalid_format", "format must be csv or ndjson")),
    };
    Ok(ExportRequest {
        filters: filters(&p, cfg)?,
        format,
    })
}

/// The filters shared by a search and an export.
fn filters(p: &Params, cfg: &LinksConfig) -> Result<Filters, ApiError> {
    let get = |name: &str| p.get(name);

    let code = match get("code") {
        Some(c) if is_valid_code(c) => Some(c.to_owned()),
        Some(_) => return Err(ApiError::invalid_code()),
        None => None,
    };
    let url = get("url")
        .map(|u| validate_url(u, cfg.max_url_bytes))
        .transpose()?;
    let url_prefix = match get("url_prefix") {
        Some(p)
            if !p.is_empty()
                && p.len() <= cfg.max_url_bytes
                && p.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Some(p.to_owned())
        }
        Some(_) => {
            return Err(invalid(
                "invalid_url",
                format!(
                    "url_prefix must be 1-{} printable ASCII characters, as URLs are stored \
                     (percent-encode anything else)",
                    cfg.max_url_bytes
                ),
            ))
        }
        None => None,
    };
    let domain = match get("domain") {
        Some(d) => Some(
            normalize_host(d)
                .ok_or_else(|| invalid("invalid_domain", format!("not a valid domain: {d:?}")))?,
        ),
        None => None,
    };
    let app = match get("app") {
        Some(a) if !a.is_empty() && a.chars().count() <= 64 && !a.chars().any(char::is_control) => {
            Some(a.to_owned())
        }
        Some(_) => {
            return Err(invalid(
                "invalid_app",
                "app must be 1-64 characters without control characters",
            ))
        }
        None => None,
    };
    let kdt_id = match get("kdt_id") {
        Some(k) => Some(
            k.parse::<u64>()
                .ok()
                .filter(|_| k.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| invalid("invalid_kdt_id", "kdt_id must be an integer >= 0"))?,
        ),
        None => None,
    };
    let state = match get("state") {
        Some(s) => Some(StateFilter::parse(s).ok_or_else(|| {
            invalid(
                "invalid_state",
                "state must be one of active, disabled, deleted, expired",
            )
        })?),
        None => None,
    };
    let created_from = p.time("created_from")?;
    let created_to = p.time("created_to")?;
    let tag = get("tag").map(crate::links::tags::one).transpose()?;
    Ok(Filters {
        code,
        url,
        url_prefix,
        domain,
        app,
        kdt_id,
        state,
        created_from,
        created_to,
        tag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::tests::cfg;

    fn kind(q: &str) -> String {
        match parse_search(Some(q), &cfg()) {
            Ok(_) => "ok".into(),
            Err(e) => e.kind.to_string(),
        }
    }

    #[test]
    fn table_of_queries() {
        for (q, want) in [
            ("", "ok"),
            ("domain=S.Shop55.com.&state=expired&limit=1000", "ok"),
            ("url=https%3A%2F%2Fx.com%2Fa&kdt_id=55&app=demo", "ok"),
            (
                "url_prefix=https://x.com/p/&created_from=2026-01-01T00:00:00Z",
                "ok",
            ),
            (
                "code=abcd&created_to=2026-01-01T08:00:00%2B08:00&cursor=x",
                "ok",
            ),
            ("nope=1", "invalid_query"),
            ("domain=a.com&domain=b.com", "invalid_query"),
            ("domain=%FF", "invalid_query"),
            ("code=ab", "invalid_code"),
            ("url=ftp://x", "invalid_url"),
            ("url_prefix=", "invalid_url"),
            ("url_prefix=https://x/%20", "invalid_url"),
            ("url_prefix=https://例え", "invalid_url"),
            ("domain=bad%20domain", "invalid_domain"),
            ("domain=", "invalid_domain"),
            ("app=", "invalid_app"),
            ("kdt_id=-1", "invalid_kdt_id"),
            ("kdt_id=%2B5", "invalid_kdt_id"),
            ("kdt_id=99999999999999999999", "invalid_kdt_id"),
            ("state=gone", "invalid_state"),
            ("created_from=yesterday", "invalid_date"),
            ("created_to=2026-13-01T00:00:00Z", "invalid_date"),
            ("limit=0", "invalid_limit"),
            ("limit=1001", "invalid_limit"),
            ("limit=%2B5", "invalid_limit"),
            ("cursor=", "invalid_cursor"),
        ] {
            assert_eq!(kind(q), want, "{q}");
        }
    }

    #[test]
    fn values_are_normalised() {
        let r = parse_search(
            Some("domain=S.Shop55.com.&url=https://例え.jp/パ&created_from=1970-01-01T00:01:00Z"),
            &cfg(),
        )
        .unwrap();
        assert_eq!(r.filters.domain.as_deref(), Some("s.shop55.com"));
        assert!(r
            .filters
            .url
            .as_deref()
            .unwrap()
            .starts_with("https://xn--"));
        assert_eq!(r.filters.created_from, Some(60));
        assert_eq!(r.limit, DEFAULT_LIMIT);
    }
}
