//! Export (issue 28): every link the caller may see that matches the
//! search filters, streamed as CSV or NDJSON one keyset page at a time —
//! the memory of an export is one page, whatever the number of links, and
//! the client's reading paces the reads from MySQL.

use super::search::tenant;
use super::{LinkError, LinkView, Links};
use crate::store::search::{SearchQuery, Tenant};
use crate::tenancy::{Caller, Scope};
use crate::validate::{ExportFormat, ExportRequest};
use axum::response::Response;
use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use http::{header, HeaderValue};
use shorturl_common::time::now_unix;
use std::sync::Arc;

/// Links read per statement (and sent per chunk).
pub const PAGE: u32 = 1000;

/// The CSV columns, in order (`docs/protocol.md`).
pub const CSV_COLUMNS: [&str; 13] = [
    "short_url",
    "code",
    "domain",
    "url",
    "state",
    "version",
    "app",
    "kdt_id",
    "created_at",
    "updated_at",
    "expires_at",
    "clicks",
    "tags",
];

/// Where an export is: the next page starts strictly before `before`.
struct Cursor {
    links: Arc<Links>,
    req: ExportRequest,
    tenant: Tenant,
    before: Option<(u64, u64)>,
    /// The CSV header is still to be sent.
    first: bool,
    done: bool,
}

impl Links {
    /// The export `req` of `caller`: chunks of the file, the first one
    /// (the CSV header, or the first page) once the first page is read.
    /// Refusals (scope) come before anything is sent; a failure later ends
    /// the stream with an error, which cuts the response short (never a
    /// file that looks complete and is not).
    pub fn export(
        self: &Arc<Self>,
        caller: &Caller,
        req: ExportRequest,
    ) -> Result<impl Stream<Item = Result<Bytes, LinkError>> + Send + 'static, LinkError> {
        caller.require(Scope::LinksRead)?;
        let tenant = tenant(caller, req.filters.kdt_id, req.filters.app.as_deref());
        let cursor = Cursor {
            links: Arc::clone(self),
            first: req.format == ExportFormat::Csv,
            done: tenant.is_none(),
            tenant: tenant.unwrap_or(Tenant::All),
            req,
            before: None,
        };
        Ok(futures::stream::try_unfold(cursor, next_chunk))
    }
}

async fn next_chunk(mut c: Cursor) -> Result<Option<(Bytes, Cursor)>, LinkError> {
    let mut out = String::new();
    if c.first {
        c.first = false;
        out.push_str(&CSV_COLUMNS.join(","));
        out.push_str("\r\n");
        if c.done {
            return Ok(Some((Bytes::from(out), c)));
        }
    }
    if c.done {
        return Ok(None);
    }
    let now = now_unix();
    let rows = c
        .links
        .store
        .search(&SearchQuery {
            filters: &c.req.filters,
            tenant: c.tenant.clone(),
            before: c.before,
            limit: PAGE,
            now,
        })
        .await?;
    c.done = rows.len() < PAGE as usize;
    c.before = rows.last().map(|(id, r)| (r.created_at.unwrap_or(0), *id));
    let names: Vec<String> = rows.iter().map(|(_, r)| r.key().name()).collect();
    let clicks = c.links.human_clicks(&names).await?;
    for ((_, r), name) in rows.iter().zip(&names) {
        let mut v = c.links.view(r, now);
        v.clicks = Some(clicks.get(name).copied().unwrap_or(0));
        match c.req.format {
            ExportFormat::Csv => csv_line(&mut out, &v),
            ExportFormat::Ndjson => {
                if let Ok(line) = serde_json::to_string(&v) {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
    }
    if out.is_empty() {
        return Ok(None);
    }
    Ok(Some((Bytes::from(out), c)))
}

/// One CSV record of `v` ([`CSV_COLUMNS`]).
fn csv_line(out: &mut String, v: &LinkView) {
    let kdt = v.kdt_id.map(|k| k.to_string()).unwrap_or_default();
    // Joined by commas as the API's list is (a tag has none), one field.
    let tags = v.tags.join(",");
    let fields: [&str; 13] = [
        &v.short_url,
        &v.code,
        &v.domain,
        &v.url,
        v.state,
        &v.version.to_string(),
        &v.app,
        &kdt,
        &v.created_at,
        &v.updated_at,
        &v.expires_at,
        &v.clicks.unwrap_or(0).to_string(),
        &tags,
    ];
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        csv_field(out, f);
    }
    out.push_str("\r\n");
}

/// `f` as a CSV field (RFC 4180: quoted when it holds a comma, quote or
/// line break, quotes doubled). A field a spreadsheet would run as a
/// formula (starting with `=`, `+`, `-`, `@`, tab or carriage return) is
/// prefixed with `'` (OWASP's advice against CSV injection); no value the
/// API writes starts so, only text a tenant chose (an app name) or an edge
/// counted (a UTM value). A lone `+` or `-` (the stats' "none") is no
/// formula and stays as it is.
pub(crate) fn csv_field(out: &mut String, f: &str) {
    let formula =
        f.starts_with(['=', '@', '\t', '\r']) || (f.len() > 1 && f.starts_with(['+', '-']));
    let quote = formula || f.contains([',', '"', '\n', '\r']);
    if quote {
        out.push('"');
    }
    if formula {
        out.push('\'');
    }
    for ch in f.chars() {
        if ch == '"' {
            out.push('"');
        }
        out.push(ch);
    }
    if quote {
        out.push('"');
    }
}

/// The answer to an export, for the API and the console alike: the file,
/// streamed, offered for download.
pub fn response(
    links: &Arc<Links>,
    caller: &Caller,
    req: ExportRequest,
) -> Result<Response, LinkError> {
    let format = req.format;
    let chunks = links.export(caller, req)?.inspect_err(|e| {
        tracing::warn!(error = %e, "export cut short: the response ends unfinished");
    });
    let mut r = Response::new(axum::body::Body::from_stream(chunks));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(format)),
    );
    if let Ok(v) = HeaderValue::from_str(&format!(
        "attachment; filename=\"{}\"",
        file_name(format, now_unix())
    )) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(r)
}

/// The `Content-Type` of a format.
pub fn content_type(f: ExportFormat) -> &'static str {
    match f {
        ExportFormat::Csv => "text/csv; charset=utf-8",
        ExportFormat::Ndjson => "application/x-ndjson",
    }
}

/// The file name offered for an export made at `now` (Unix seconds).
pub fn file_name(f: ExportFormat, now: u64) -> String {
    let ext = match f {
        ExportFormat::Csv => "csv",
        ExportFormat::Ndjson => "ndjson",
    };
    format!("links-{now}.{ext}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(f: &str) -> String {
        let mut s = String::new();
        csv_field(&mut s, f);
        s
    }

    #[test]
    fn fields_are_quoted_as_rfc_4180_says_and_formulas_defused() {
        assert_eq!(field("https://a.example/x?y=1"), "https://a.example/x?y=1");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two\nlines\"");
        assert_eq!(field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(field("@app"), "\"'@app\"");
        assert_eq!(field("-1+1"), "\"'-1+1\"");
        assert_eq!(field("-"), "-");
        assert_eq!(field(""), "");
        assert_eq!(file_name(ExportFormat::Ndjson, 7), "links-7.ndjson");
    }
}
