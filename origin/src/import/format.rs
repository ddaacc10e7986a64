//! The files an import reads: this service's CSV and the exports of the
//! products people move from (`docs/integrations.md`, samples under
//! `docs/samples/`), each turned into [`Row`]s of the same few fields.
//!
//! Columns are found by their header, whatever their order; a header is
//! compared lower-cased with spaces, `_` and `-` removed (`Long URL`,
//! `long_url` and `longUrl` are one name). Unknown columns are ignored
//! (an export carries click counts, titles, ids this service has no field
//! for), a missing required column refuses the whole file before any row is
//! written.

use super::row::Row;
use super::sql;
use shorturl_common::time::parse_rfc3339;
use std::io::Read;
use thiserror::Error;

/// Where a file comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// This service's columns (`url` required; `code`, `domain`, `title`,
    /// `tags` joined by commas, `created_at`, `expires_at`, `state`): its
    /// own export re-imports as it is (disabled and deleted links left out).
    Csv,
    /// Bitly's CSV export: `long_url`, the short link in `link` (or
    /// `bitlink`), `title`, `created_at`, `tags`.
    Bitly,
    /// Shlink's CSV export: `longUrl`, `shortCode` (or `shortUrl`),
    /// `title`, `tags` (`|`-separated), `createdAt`, `validUntil`.
    Shlink,
    /// Kutt's export: `target`, `address` (the code), `description`,
    /// `created_at`, `expire_in` (a date).
    Kutt,
    /// YOURLS' `yourls_url` table: as CSV with its column names
    /// (`keyword`, `url`, `title`, `timestamp`) or as the SQL of a dump
    /// (`INSERT INTO yourls_url ...`).
    Yourls,
}

impl Format {
    /// The format named `name` (its `--format` and `format=` value).
    pub fn named(name: &str) -> Option<Format> {
        <Format as clap::ValueEnum>::value_variants()
            .iter()
            .copied()
            .find(|f| f.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Bitly => "bitly",
            Format::Shlink => "shlink",
            Format::Kutt => "kutt",
            Format::Yourls => "yourls",
        }
    }

    /// Each field's column names in this format (normalised, see the
    /// module), the first found wins.
    fn columns(self) -> Columns {
        match self {
            Format::Csv => Columns {
                url: &["url", "longurl"],
                code: &["code", "shortcode"],
                short: &["shorturl"],
                domain: &["domain"],
                tags: &["tags"],
                created: &["createdat"],
                expires: &["expiresat"],
                state: &["state"],
                tag_separators: &[','],
            },
            Format::Bitly => Columns {
                url: &["longurl"],
                code: &[],
                short: &["link", "bitlink", "shortlink"],
                domain: &[],
                tags: &["tags"],
                created: &["createdat", "created", "datecreated"],
                expires: &[],
                state: &[],
                tag_separators: &[',', '|'],
            },
            Format::Shlink => Columns {
                url: &["longurl"],
                code: &["shortcode"],
                short: &["shorturl"],
                domain: &[],
                tags: &["tags"],
                created: &["createdat", "datecreated"],
                expires: &["validuntil"],
                state: &[],
                tag_separators: &['|', ','],
            },
            Format::Kutt => Columns {
                url: &["target"],
                code: &["address"],
                short: &["link", "shortlink"],
                domain: &[],
                tags: &[],
                created: &["createdat"],
                expires: &["expirein", "expiresat"],
                state: &[],
                tag_separators: &[','],
            },
            Format::Yourls => Columns {
                url: &["url"],
                code: &["keyword"],
                short: &[],
                domain: &[],
                tags: &[],
                created: &["timestamp"],
                expires: &[],
                state: &[],
                tag_separators: &[','],
            },
        }
    }
}

/// Which columns hold what, in one format.
struct Columns {
    url: &'static [&'static str],
    code: &'static [&'static str],
    /// A short URL whose last path segment is the code (used when there is
    /// no code column).
    short: &'static [&'static str],
    domain: &'static [&'static str],
    tags: &'static [&'static str],
    created: &'static [&'static str],
    expires: &'static [&'static str],
    state: &'static [&'static str],
    tag_separators: &'static [char],
}

/// Why a whole file cannot be read.
#[derive(Debug, Error)]
pub enum FileError {
    #[error("not a {format} file: no {field} column (looked for {names})")]
    MissingColumn {
        format: &'static str,
        field: &'static str,
        names: String,
    },
    #[error("line {line}: {source}")]
    Csv {
        line: u64,
        #[source]
        source: csv::Error,
    },
    #[error(transparent)]
    Sql(#[from] sql::SqlError),
    #[error("reading the file: {0}")]
    Read(#[from] std::io::Error),
}

/// The rows of a file in `format`, in file order.
pub fn rows(
    format: Format,
    input: impl Read + Send + 'static,
) -> Result<Box<dyn Iterator<Item = Result<Row, FileError>> + Send>, FileError> {
    let mut input = std::io::BufReader::new(input);
    if format == Format::Yourls && sql::looks_like_sql(&mut input)? {
        let mut text = String::new();
        input.read_to_string(&mut text)?;
        let rows = sql::yourls_rows(&text)?;
        return Ok(Box::new(rows.into_iter().map(Ok)));
    }
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(input);
    let header = reader
        .headers()
        .map_err(|source| FileError::Csv { line: 1, source })?
        .clone();
    let map = Mapping::of(format, &header)?;
    Ok(Box::new(reader.into_records().map(move |r| {
        let record = r.map_err(|source| FileError::Csv {
            line: source.position().map_or(0, |p| p.line()),
            source,
        })?;
        Ok(map.row(&record))
    })))
}

/// Where each field is in one file.
struct Mapping {
    url: usize,
    code: Option<usize>,
    short: Option<usize>,
    domain: Option<usize>,
    tags: Option<usize>,
    created: Option<usize>,
    expires: Option<usize>,
    state: Option<usize>,
    tag_separators: &'static [char],
}

/// A header name compared as the module says.
fn normalised(h: &str) -> String {
    h.trim_start_matches('\u{feff}')
        .chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-'))
        .flat_map(char::to_lowercase)
        .collect()
}

impl Mapping {
    fn of(format: Format, header: &csv::StringRecord) -> Result<Mapping, FileError> {
        let names: Vec<String> = header.iter().map(normalised).collect();
        let find = |wanted: &[&str]| {
            wanted
                .iter()
                .find_map(|w| names.iter().position(|n| n == w))
        };
        let c = format.columns();
        let url = find(c.url).ok_or_else(|| FileError::MissingColumn {
            format: format.name(),
            field: "url",
            names: c.url.join(", "),
        })?;
        Ok(Mapping {
            url,
            code: find(c.code),
            short: find(c.short),
            domain: find(c.domain),
            tags: find(c.tags),
            created: find(c.created),
            expires: find(c.expires),
            state: find(c.state),
            tag_separators: c.tag_separators,
        })
    }

    fn row(&self, r: &csv::StringRecord) -> Row {
        let get = |i: Option<usize>| {
            i.and_then(|i| r.get(i))
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let code = get(self.code).or_else(|| get(self.short).map(|s| code_of_short_url(&s)));
        Row {
            line: r.position().map_or(0, |p| p.line()),
            url: get(Some(self.url)).unwrap_or_default(),
            code,
            domain: get(self.domain),
            tags: get(self.tags)
                .map(|t| {
                    t.split(self.tag_separators)
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            created_at: get(self.created),
            expires_at: get(self.expires),
            state: get(self.state),
        }
    }
}

/// The code of a short URL: its last path segment (`https://bit.ly/3xYz`
/// and `bit.ly/3xYz` are `3xYz`), query and fragment left out.
pub fn code_of_short_url(s: &str) -> String {
    let s = s.split(['?', '#']).next().unwrap_or("");
    let s = s.trim_end_matches('/');
    s.rsplit('/').next().unwrap_or("").to_owned()
}

/// An instant of a file: RFC 3339, `YYYY-MM-DD HH:MM:SS` or `YYYY-MM-DD`
/// (both UTC), Unix seconds.
pub fn parse_time(s: &str) -> Option<u64> {
    let s = s.trim();
    if !s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    parse_rfc3339(s)
        .or_else(|| parse_rfc3339(&format!("{}Z", s.replacen(' ', "T", 1))))
        .or_else(|| parse_rfc3339(&format!("{s}T00:00:00Z")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(format: Format, text: &'static str) -> Vec<Row> {
        rows(format, text.as_bytes())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn columns_are_found_by_name_in_any_order() {
        let got = all(
            Format::Csv,
            "\u{feff}Tags,Long URL,code,created_at,extra\n\"a, b\",https://x.example/1,abc1,2020-01-02T03:04:05Z,zz\n,https://x.example/2,,,\n",
        );
        assert_eq!(
            got,
            vec![
                Row {
                    line: 2,
                    url: "https://x.example/1".into(),
                    code: Some("abc1".into()),
                    tags: vec!["a".into(), "b".into()],
                    created_at: Some("2020-01-02T03:04:05Z".into()),
                    ..Row::default()
                },
                Row {
                    line: 3,
                    url: "https://x.example/2".into(),
                    ..Row::default()
                },
            ]
        );
        // Bitly: the code is the short link's path; tags by `|` or `,`.
        let b = all(
            Format::Bitly,
            "title,long_url,link,created_at,tags\nT,https://y.example/,https://bit.ly/3xYz?x=1,2021-05-06 07:08:09,p|q\n",
        );
        assert_eq!(b[0].code.as_deref(), Some("3xYz"));
        assert_eq!(b[0].tags, ["p", "q"]);
        assert_eq!(
            parse_time(b[0].created_at.as_deref().unwrap()),
            parse_rfc3339("2021-05-06T07:08:09Z")
        );
    }

    #[test]
    fn a_file_without_its_url_column_is_refused_whole() {
        let e = rows(Format::Shlink, &b"shortCode,title\nabc,t\n"[..])
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("no url column (looked for longurl)"),
            "{e}"
        );
    }

    #[test]
    fn times_and_short_urls() {
        assert_eq!(
            parse_time("2020-01-02"),
            parse_rfc3339("2020-01-02T00:00:00Z")
        );
        assert_eq!(parse_time("1600000000"), Some(1_600_000_000));
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(code_of_short_url("bit.ly/abc/"), "abc");
        assert_eq!(code_of_short_url("https://s.test/xyz#f"), "xyz");
    }
}
