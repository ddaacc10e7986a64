//! The Apollo value: a JSON object mapping merchant id (kdt_id, as a string
//! key) to that merchant's domain. It is validated completely before anything
//! is swapped in, and a value that fails counts as empty (not as "keep the
//! previous one"), so a bad release can never silently freeze an old list.

use serde_json::Value;
use shorturl_common::host::normalize_host;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Where the value sits inside a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// A properties namespace: the JSON is the value of this key.
    Key(String),
    /// A `.json` namespace: Apollo delivers the file under the key `content`.
    Content,
}

/// The validated dynamic list: domain (normalised) → merchants mapped to it.
pub type ByDomain = HashMap<String, BTreeSet<u64>>;

/// Why a value is not a JSON object of kdt_id to domain.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ValueError {
    #[error("not JSON: {0}")]
    NotJson(#[source] Arc<serde_json::Error>),
    #[error("expected a JSON object of kdt_id to domain, got {0}")]
    NotAnObject(&'static str),
    #[error("key {0:?} is not a kdt_id (decimal integer)")]
    BadKdtId(String),
    #[error("kdt_id {kdt_id}: domain is {got}, expected a string")]
    DomainNotAString { kdt_id: String, got: &'static str },
    #[error("kdt_id {kdt_id}: {domain:?} is not a valid domain")]
    BadDomain { kdt_id: String, domain: String },
    #[error("configuration {key:?} is not a string but {got}")]
    NotAString { key: String, got: &'static str },
}

/// What a namespace's configurations say about the list.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// A valid value (possibly empty).
    List(ByDomain),
    /// The key is absent: treated as an empty value.
    Missing,
    /// Not a JSON object of kdt_id → domain; treated as empty, and reported.
    Invalid(ValueError),
}

/// Extracts and validates the value from a namespace's `configurations`.
pub fn from_configurations(configurations: &BTreeMap<String, Value>, layout: &Layout) -> Parsed {
    let key = match layout {
        Layout::Key(k) => k.as_str(),
        Layout::Content => "content",
    };
    match configurations.get(key) {
        None => Parsed::Missing,
        Some(Value::String(raw)) => match parse(raw) {
            Ok(list) => Parsed::List(list),
            Err(e) => Parsed::Invalid(e),
        },
        Some(other) => Parsed::Invalid(ValueError::NotAString {
            key: key.to_owned(),
            got: kind(other),
        }),
    }
}

/// Parses the JSON text. Blank text is the empty list (rule: an empty value
/// leaves only the static list).
pub fn parse(raw: &str) -> Result<ByDomain, ValueError> {
    if raw.trim().is_empty() {
        return Ok(ByDomain::new());
    }
    let value: Value = serde_json::from_str(raw).map_err(|e| ValueError::NotJson(Arc::new(e)))?;
    let Value::Object(map) = value else {
        return Err(ValueError::NotAnObject(kind(&value)));
    };
    let mut out = ByDomain::new();
    for (k, v) in map {
        let Some(kdt_id) = parse_kdt_id(&k) else {
            return Err(ValueError::BadKdtId(k));
        };
        let Value::String(d) = v else {
            return Err(ValueError::DomainNotAString {
                kdt_id: k,
                got: kind(&v),
            });
        };
        let Some(domain) = normalize_host(&d) else {
            return Err(ValueError::BadDomain {
                kdt_id: k,
                domain: d,
            });
        };
        out.entry(domain).or_default().insert(kdt_id);
    }
    Ok(out)
}

fn parse_kdt_id(k: &str) -> Option<u64> {
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    k.parse().ok()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn valid_value_is_normalised_and_grouped_by_domain() {
        let l = parse(r#"{"55": "S.Shop55.com.", "91": "go.brand91.cn", "92": "go.brand91.cn"}"#)
            .unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l["s.shop55.com"], [55].into_iter().collect());
        assert_eq!(l["go.brand91.cn"], [91, 92].into_iter().collect());
    }

    #[test]
    fn blank_and_empty_object_are_empty() {
        assert_eq!(parse("").unwrap(), ByDomain::new());
        assert_eq!(parse("  \n").unwrap(), ByDomain::new());
        assert_eq!(parse("{}").unwrap(), ByDomain::new());
    }

    #[test]
    fn anything_but_an_object_of_kdt_id_to_domain_is_invalid() {
        for bad in [
            "not json",
            "null",
            "[]",
            r#"["s.shop55.com"]"#,
            r#""s.shop55.com""#,
            "42",
            r#"{"55": 1}"#,
            r#"{"55": null}"#,
            r#"{"55": ["a.com"]}"#,
            r#"{"abc": "a.com"}"#,
            r#"{"-1": "a.com"}"#,
            r#"{"": "a.com"}"#,
            r#"{"99999999999999999999": "a.com"}"#,
            r#"{"55": ""}"#,
            r#"{"55": "bad domain"}"#,
            r#"{"55": "ok.com", "56": "x..y"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn both_namespace_layouts() {
        let props = conf(&[(
            "merchant_domains",
            Value::String(r#"{"55":"s.shop55.com"}"#.into()),
        )]);
        let key = Layout::Key("merchant_domains".into());
        assert!(
            matches!(from_configurations(&props, &key), Parsed::List(l) if l.contains_key("s.shop55.com"))
        );
        assert!(matches!(
            from_configurations(&props, &Layout::Content),
            Parsed::Missing
        ));
        let json = conf(&[("content", Value::String(r#"{"91":"go.brand91.cn"}"#.into()))]);
        assert!(
            matches!(from_configurations(&json, &Layout::Content), Parsed::List(l) if l.contains_key("go.brand91.cn"))
        );
        let odd = conf(&[("content", Value::Bool(true))]);
        assert!(matches!(
            from_configurations(&odd, &Layout::Content),
            Parsed::Invalid(_)
        ));
    }
}
