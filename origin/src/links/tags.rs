//! A link's tags (issue 28 item 4): labels its owner sorts links by, set
//! at creation and by an edit, filtered on by the search, the export and
//! the tenant statistics.
//!
//! A tag is 1–[`MAX_CHARS`] characters once trimmed, without control
//! characters or commas; a list has at most [`MAX_TAGS`] items (repeats
//! included, as the contract's `maxItems` says), kept in the order given,
//! a repeat folded into its first. Tags are
//! compared exactly (`Sale` is not `sale`). They live in the link's own
//! row (`short_code.tags`, joined by `,` — hence no comma in a tag), so the
//! audit trail, the history and every read carry them with no second
//! statement; the edges never see them.

use serde_json::Value;
use thiserror::Error;

/// Most tags one link carries.
pub const MAX_TAGS: usize = 20;
/// Most characters of one tag.
pub const MAX_CHARS: usize = 50;

/// Why a tag list was refused (the API's `invalid_tags`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TagError {
    #[error("tags must be an array of strings")]
    NotAList,
    #[error("a tag must be 1-{MAX_CHARS} characters without control characters or commas: {0:?}")]
    BadTag(String),
    #[error("a link has at most {MAX_TAGS} tags (a list at most {MAX_TAGS} items)")]
    TooMany,
}

/// A link's tags, distinct, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tags(Vec<String>);

impl Tags {
    /// The tags of a JSON value: an array of strings; `null` is none.
    pub fn from_json(v: &Value) -> Result<Tags, TagError> {
        match v {
            Value::Null => Ok(Tags::default()),
            Value::Array(items) => {
                let mut tags = Vec::with_capacity(items.len());
                for item in items {
                    tags.push(item.as_str().ok_or(TagError::NotAList)?);
                }
                Tags::collect(tags)
            }
            _ => Err(TagError::NotAList),
        }
    }

    /// The tags of a comma-separated text (a console field, a CSV
    /// column); empty items are skipped.
    pub fn from_list(text: &str) -> Result<Tags, TagError> {
        Tags::collect(text.split(',').filter(|t| !t.trim().is_empty()))
    }

    /// The tags a `tags` column holds (`None`: none). The column holds
    /// only what [`Tags::to_column`] wrote.
    pub fn from_column(column: Option<&str>) -> Tags {
        Tags(
            column
                .unwrap_or("")
                .split(',')
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    /// The column's value: the tags joined by `,`, `None` for none.
    pub fn to_column(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| self.0.join(","))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    fn collect<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Tags, TagError> {
        let mut out: Vec<String> = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            if i == MAX_TAGS {
                return Err(TagError::TooMany);
            }
            let tag = one(item)?;
            if !out.contains(&tag) {
                out.push(tag);
            }
        }
        Ok(Tags(out))
    }
}

/// One tag, trimmed and checked (a filter's, or one of a list).
pub fn one(raw: &str) -> Result<String, TagError> {
    let t = raw.trim();
    let n = t.chars().count();
    if n == 0 || n > MAX_CHARS || t.chars().any(|c| c.is_control() || c == ',') {
        return Err(TagError::BadTag(raw.chars().take(MAX_CHARS + 10).collect()));
    }
    Ok(t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_are_trimmed_folded_and_kept_in_order() {
        let t = Tags::from_json(&json!([" spring ", "Sale", "spring", "sale"])).unwrap();
        assert_eq!(t.as_slice(), ["spring", "Sale", "sale"]);
        assert_eq!(t.to_column().as_deref(), Some("spring,Sale,sale"));
        assert_eq!(Tags::from_column(t.to_column().as_deref()), t);
        assert_eq!(Tags::from_list("a, b,,a ,").unwrap().as_slice(), ["a", "b"]);
        assert_eq!(Tags::from_json(&json!(null)).unwrap(), Tags::default());
        assert_eq!(Tags::from_json(&json!([])).unwrap().to_column(), None);
        assert_eq!(Tags::from_column(None), Tags::default());
        assert_eq!(one(" 春季 ").unwrap(), "春季");
    }

    #[test]
    fn bad_tags_and_lists_are_refused() {
        let at_most: Vec<String> = (0..MAX_TAGS).map(|i| format!("t{i}")).collect();
        assert!(Tags::from_json(&json!(at_most)).is_ok());
        let mut over = at_most.clone();
        over.push("one more".into());
        assert_eq!(Tags::from_json(&json!(over)), Err(TagError::TooMany));
        // Repeats count against the bound of the list.
        let mut repeated = at_most;
        repeated.push("t0".into());
        assert_eq!(Tags::from_json(&json!(repeated)), Err(TagError::TooMany));
        assert!(Tags::from_json(&json!(vec!["a"; MAX_TAGS])).is_ok());
        for bad in [json!("a"), json!([1]), json!({"a": 1}), json!([null])] {
            assert_eq!(Tags::from_json(&bad), Err(TagError::NotAList), "{bad}");
        }
        let long = "x".repeat(MAX_CHARS + 1);
        for bad in ["", "  ", "a,b", "a\nb", "\u{7f}", long.as_str()] {
            assert!(matches!(one(bad), Err(TagError::BadTag(_))), "{bad:?}");
        }
        assert!(one(&"é".repeat(MAX_CHARS)).is_ok());
    }
}
