//! YOURLS' `yourls_url` table from the SQL of a dump (`mysqldump`,
//! phpMyAdmin): the rows of its `INSERT INTO ... VALUES (...), (...);`
//! statements, every other statement skipped. Only what such a dump
//! writes is read: single-quoted strings with backslash escapes or doubled
//! quotes, numbers, `NULL`.

use super::row::Row;
use std::io::BufRead;
use thiserror::Error;

/// The table's columns when a statement names none (YOURLS' schema order).
const DEFAULT_COLUMNS: [&str; 6] = ["keyword", "url", "title", "timestamp", "ip", "clicks"];

/// Why a dump cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("line {line}: {what}")]
pub struct SqlError {
    pub line: u64,
    pub what: &'static str,
}

/// Whether the file starts as SQL does (a comment or a statement), not as
/// a CSV header.
pub fn looks_like_sql(input: &mut impl BufRead) -> std::io::Result<bool> {
    let head = input.fill_buf()?;
    let text = String::from_utf8_lossy(&head[..head.len().min(64)]).to_ascii_uppercase();
    let text = text.trim_start_matches('\u{feff}').trim_start();
    Ok([
        "--", "/*", "INSERT", "SET ", "CREATE", "DROP", "LOCK", "USE ",
    ]
    .iter()
    .any(|p| text.starts_with(p)))
}

/// The `yourls_url` rows of a dump (a table named `url` or ending in
/// `_url`: YOURLS' prefix is configurable).
pub fn yourls_rows(text: &str) -> Result<Vec<Row>, SqlError> {
    let mut p = Parser {
        b: text.as_bytes(),
        i: 0,
        line: 1,
    };
    let mut out = Vec::new();
    while p.skip_to_insert() {
        let table = p
            .name()
            .ok_or_else(|| p.err("a table name after INSERT INTO"))?;
        p.ws();
        let mut columns: Vec<String> = DEFAULT_COLUMNS.iter().map(|c| (*c).to_owned()).collect();
        if p.peek() == Some(b'(') {
            p.i += 1;
            columns.clear();
            loop {
                p.ws();
                columns.push(
                    p.name()
                        .ok_or_else(|| p.err("a column name"))?
                        .to_ascii_lowercase(),
                );
                p.ws();
                match p.next() {
                    Some(b',') => {}
                    Some(b')') => break,
                    _ => return Err(p.err("`,` or `)` in the column list")),
                }
            }
            p.ws();
        }
        if !p.keyword("VALUES") {
            return Err(p.err("VALUES"));
        }
        let wanted = table == "url" || table.ends_with("_url");
        let at = |n: &str| columns.iter().position(|c| c == n);
        let (keyword, url, timestamp) = (at("keyword"), at("url"), at("timestamp"));
        loop {
            p.ws();
            let line = p.line;
            let values = p.tuple()?;
            if wanted {
                let get = |i: Option<usize>| i.and_then(|i| values.get(i).cloned().flatten());
                out.push(Row {
                    line,
                    url: get(url).unwrap_or_default(),
                    code: get(keyword),
                    created_at: get(timestamp),
                    ..Row::default()
                });
            }
            p.ws();
            match p.next() {
                Some(b',') => {}
                Some(b';') | None => break,
                _ => return Err(p.err("`,` or `;` after a row")),
            }
        }
    }
    Ok(out)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    line: u64,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> SqlError {
        SqlError {
            line: self.line,
            what,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        if c == b'\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.next();
        }
    }

    fn keyword(&mut self, k: &str) -> bool {
        let end = self.i + k.len();
        if self.b.len() >= end && self.b[self.i..end].eq_ignore_ascii_case(k.as_bytes()) {
            self.i = end;
            true
        } else {
            false
        }
    }

    /// Moves past the next `INSERT [IGNORE] INTO` at the start of a
    /// statement (skipping strings and comments on the way); `false` at
    /// the end.
    fn skip_to_insert(&mut self) -> bool {
        loop {
            self.ws();
            match self.peek() {
                None => return false,
                Some(b'-') if self.b.get(self.i + 1) == Some(&b'-') => self.skip_line(),
                Some(b'#') => self.skip_line(),
                Some(b'/') if self.b.get(self.i + 1) == Some(&b'*') => {
                    while self.peek().is_some() && !self.b[self.i..].starts_with(b"*/") {
                        self.next();
                    }
                    self.i = (self.i + 2).min(self.b.len());
                }
                Some(_) if self.keyword("INSERT") => {
                    self.ws();
                    if self.keyword("IGNORE") {
                        self.ws();
                    }
                    if self.keyword("INTO") {
                        self.ws();
                        return true;
                    }
                }
                Some(_) => self.skip_statement(),
            }
        }
    }

    fn skip_line(&mut self) {
        while let Some(c) = self.next() {
            if c == b'\n' {
                break;
            }
        }
    }

    /// Past the next `;` outside strings.
    fn skip_statement(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                b'\'' | b'"' => {
                    let _ = self.string();
                }
                b';' => {
                    self.next();
                    return;
                }
                _ => {
                    self.next();
                }
            }
        }
    }

    /// A name, bare or in backquotes (a `db.` prefix dropped).
    fn name(&mut self) -> Option<String> {
        loop {
            let name;
            if self.peek() == Some(b'`') {
                self.next();
                let start = self.i;
                while self.peek().is_some_and(|c| c != b'`') {
                    self.next();
                }
                name = String::from_utf8_lossy(&self.b[start..self.i]).into_owned();
                self.next()?;
            } else {
                let start = self.i;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'$')
                {
                    self.next();
                }
                if start == self.i {
                    return None;
                }
                name = String::from_utf8_lossy(&self.b[start..self.i]).into_owned();
            }
            if self.peek() != Some(b'.') {
                return Some(name);
            }
            self.next();
        }
    }

    /// `(v, v, ...)`: strings, numbers, `NULL` (`None`).
    fn tuple(&mut self) -> Result<Vec<Option<String>>, SqlError> {
        if self.next() != Some(b'(') {
            return Err(self.err("`(` starting a row"));
        }
        let mut values = Vec::new();
        loop {
            self.ws();
            let v = match self.peek() {
                Some(b'\'' | b'"') => Some(self.string()?),
                Some(_) if self.keyword("NULL") => None,
                Some(c) if c == b'-' || c == b'.' || c.is_ascii_digit() => {
                    let start = self.i;
                    while self
                        .peek()
                        .is_some_and(|c| c == b'-' || c == b'.' || c == b'e' || c.is_ascii_digit())
                    {
                        self.next();
                    }
                    Some(String::from_utf8_lossy(&self.b[start..self.i]).into_owned())
                }
                _ => return Err(self.err("a value (string, number or NULL)")),
            };
            values.push(v);
            self.ws();
            match self.next() {
                Some(b',') => {}
                Some(b')') => return Ok(values),
                _ => return Err(self.err("`,` or `)` in a row")),
            }
        }
    }

    /// A quoted string with MySQL's escapes.
    fn string(&mut self) -> Result<String, SqlError> {
        let quote = self.next().unwrap_or(b'\'');
        let mut out = Vec::new();
        loop {
            match self.next() {
                None => return Err(self.err("an unterminated string")),
                Some(b'\\') => {
                    let c = self
                        .next()
                        .ok_or_else(|| self.err("an unterminated string"))?;
                    out.push(match c {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'0' => 0,
                        b'Z' => 0x1a,
                        c => c,
                    });
                }
                Some(c) if c == quote => {
                    if self.peek() == Some(quote) {
                        self.next();
                        out.push(quote);
                    } else {
                        return Ok(String::from_utf8_lossy(&out).into_owned());
                    }
                }
                Some(c) => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_a_dump() {
        let dump = "-- MySQL dump\n/*!40101 SET NAMES utf8 */;\nDROP TABLE IF EXISTS `yourls_url`;\n\
                    CREATE TABLE `yourls_url` (`keyword` varchar(100) NOT NULL DEFAULT '');\n\
                    INSERT INTO `yourls_options` VALUES (1,'version','1.9');\n\
                    INSERT INTO `yourls_url` VALUES ('ozh','http://ozh.org/?a=1&b=\\'2\\'','It''s ozh','2009-01-01 10:00:00','127.0.0.1',3),\n\
                    ('abc','https://x.example/',NULL,'2010-02-03 04:05:06','::1',0);\n\
                    INSERT INTO db.yourls_url (url, keyword) VALUES ('https://y.example/', 'k9');\n";
        let rows = yourls_rows(dump).unwrap();
        let got: Vec<(u64, &str, Option<&str>, Option<&str>)> = rows
            .iter()
            .map(|r| {
                (
                    r.line,
                    r.url.as_str(),
                    r.code.as_deref(),
                    r.created_at.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    6,
                    "http://ozh.org/?a=1&b='2'",
                    Some("ozh"),
                    Some("2009-01-01 10:00:00")
                ),
                (
                    7,
                    "https://x.example/",
                    Some("abc"),
                    Some("2010-02-03 04:05:06")
                ),
                (8, "https://y.example/", Some("k9"), None),
            ]
        );
        let mut r = std::io::BufReader::new(dump.as_bytes());
        assert!(looks_like_sql(&mut r).unwrap());
        let mut r = std::io::BufReader::new(&b"keyword,url\n"[..]);
        assert!(!looks_like_sql(&mut r).unwrap());
    }

    #[test]
    fn a_broken_dump_names_its_line() {
        let e = yourls_rows("INSERT INTO yourls_url VALUES ('a','b'\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(yourls_rows("INSERT INTO yourls_url VALUES ('a").is_err());
    }
}
