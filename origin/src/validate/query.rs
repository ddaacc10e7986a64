//! A query string read strictly, for every API route that takes one (the
//! search, the stats): each parameter known, given at most once and valid
//! UTF-8, so a typo is a 400 rather than a filter silently left out. The
//! values are checked by each route's own rules.

use crate::error::ApiError;
use shorturl_common::time::parse_rfc3339;

/// The parameters of one query string.
pub struct Params(Vec<(&'static str, String)>);

fn invalid_query(msg: String) -> ApiError {
    ApiError::bad_request("invalid_query", msg)
}

impl Params {
    /// `query` (`None`: none given) with only the `allowed` names.
    pub fn parse(query: Option<&str>, allowed: &[&'static str]) -> Result<Params, ApiError> {
        let mut seen: Vec<(&'static str, String)> = Vec::new();
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let Some(name) = allowed.iter().find(|p| **p == k) else {
                return Err(invalid_query(format!("unknown query parameter {k:?}")));
            };
            if seen.iter().any(|(n, _)| n == name) {
                return Err(invalid_query(format!("query parameter {name} given twice")));
            }
            if v.contains('\u{FFFD}') {
                return Err(invalid_query(format!(
                    "query parameter {name} is not valid UTF-8"
                )));
            }
            seen.push((name, v.into_owned()));
        }
        Ok(Params(seen))
    }

    /// The value of `name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `name` as an RFC 3339 date-time in Unix seconds (400
    /// `invalid_date`), if given.
    pub fn time(&self, name: &'static str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|t| {
                parse_rfc3339(t).ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_date",
                        format!("{name} must be an RFC 3339 date-time, e.g. 2026-01-31T00:00:00Z"),
                    )
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::Params;

    #[test]
    fn each_known_once_and_utf8() {
        let kind = |q: &str| Params::parse(Some(q), &["a", "t"]).err().map(|e| e.message);
        assert_eq!(kind("a=1&t=x"), None);
        assert_eq!(
            kind("b=1").as_deref(),
            Some("unknown query parameter \"b\"")
        );
        assert_eq!(
            kind("a=1&a=2").as_deref(),
            Some("query parameter a given twice")
        );
        assert_eq!(
            kind("a=%FF").as_deref(),
            Some("query parameter a is not valid UTF-8")
        );
        let p = Params::parse(Some("t=2026-01-31T00%3A00%3A00Z"), &["a", "t"]).unwrap();
        assert_eq!(p.get("a"), None);
        assert_eq!(p.time("t").unwrap(), Some(1_769_817_600));
        let p = Params::parse(Some("t=yesterday"), &["t"]).unwrap();
        assert_eq!(p.time("t").unwrap_err().kind, "invalid_date");
    }
}
