//! Validation of edit bodies (`PATCH /api/v1/links/{code}`).

use super::password;
use super::{json_object, validate_url};
use crate::config::LinksConfig;
use crate::error::ApiError;
use crate::links::options::{self, Settings};
use crate::links::tags::Tags;
use crate::links::unlock::NewPassword;
use serde_json::{Map, Value};
use shorturl_common::time::parse_rfc3339;

/// The state an edit may set (deleting is `DELETE`, for good).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchState {
    Active,
    Disabled,
}

/// An edit after validation: at least one field is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The new long URL, in its stored form.
    pub url: Option<String>,
    /// The new expiry, Unix seconds (in the future, within the maximum lifetime).
    pub expires_at: Option<u64>,
    pub state: Option<PatchState>,
    /// The option fields given (`links::options::FIELDS`), checked on
    /// their own; applied to the link's current options by the edit.
    pub options: Option<Map<String, Value>>,
    /// `password`: a new one, or `None` to remove it (hashed by the edit).
    pub password: Option<Option<NewPassword>>,
    /// `tags`: the link's tags from now on (empty: none).
    pub tags: Option<Tags>,
}

impl Patch {
    /// Whether the edit changes nothing but the tags (allowed on an
    /// expired link: they describe it, they do not make it resolve).
    pub fn only_tags(&self) -> bool {
        self.tags.is_some()
            && self.url.is_none()
            && self.expires_at.is_none()
            && self.state.is_none()
            && self.options.is_none()
            && self.password.is_none()
    }
}

const FIELDS: [&str; 17] = [
    "url",
    "expires_at",
    "state",
    "forward_query",
    "expired_url",
    "rules",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_term",
    "utm_content",
    "og_title",
    "og_description",
    "og_image",
    "inapp_guide",
    "password",
    "tags",
];

/// Parses and validates an edit body at `now` (Unix seconds).
pub fn parse_patch(body: &[u8], cfg: &LinksConfig, now: u64) -> Result<Patch, ApiError> {
    let obj = json_object(body, &FIELDS)?;
    if obj.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_field",
            "nothing to change: give url, expires_at and/or state",
        ));
    }
    let url = match obj.get("url") {
        None => None,
        Some(Value::String(s)) => Some(validate_url(s, cfg.max_url_bytes)?),
        Some(_) => return Err(ApiError::bad_request("invalid_url", "url must be a string")),
    };
    let max = now + u64::from(cfg.max_ttl_days) * 86_400;
    let bad_expiry = || {
        ApiError::bad_request(
            "invalid_expires_at",
            format!(
                "expires_at must be an RFC 3339 date-time in the future and within {} days",
                cfg.max_ttl_days
            ),
        )
    };
    let expires_at = match obj.get("expires_at") {
        None => None,
        Some(Value::String(s)) => match parse_rfc3339(s) {
            Some(t) if t > now && t <= max => Some(t),
            _ => return Err(bad_expiry()),
        },
        Some(_) => return Err(bad_expiry()),
    };
    let state = match obj.get("state") {
        None => None,
        Some(Value::String(s)) if s == "active" => Some(PatchState::Active),
        Some(Value::String(s)) if s == "disabled" => Some(PatchState::Disabled),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_state",
                "state must be \"active\" or \"disabled\" (DELETE deletes a link)",
            ))
        }
    };
    let given: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| options::FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let options = if given.is_empty() {
        None
    } else {
        Settings::default().apply(&given)?;
        Some(given)
    };
    Ok(Patch {
        url,
        expires_at,
        state,
        options,
        password: password::parse(&obj)?,
        tags: super::tags_of(&obj)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    /// Tighter limits than the shared ones, so their errors are easy to reach.
    fn cfg() -> LinksConfig {
        LinksConfig {
            forward_query: false,
            max_ttl_days: 10,
            max_url_bytes: 64,
            ..crate::validate::tests::cfg()
        }
    }

    fn kind(body: &str) -> String {
        match parse_patch(body.as_bytes(), &cfg(), NOW) {
            Ok(_) => "ok".into(),
            Err(e) => e.kind.to_string(),
        }
    }

    #[test]
    fn table_of_inputs() {
        let soon = shorturl_common::time::rfc3339(NOW + 86_400);
        let past = shorturl_common::time::rfc3339(NOW - 1);
        let now = shorturl_common::time::rfc3339(NOW);
        let too_far = shorturl_common::time::rfc3339(NOW + 10 * 86_400 + 1);
        let edge = shorturl_common::time::rfc3339(NOW + 10 * 86_400);
        let long = format!(r#"{{"url":"https://x.com/{}"}}"#, "a".repeat(64));
        let cases: Vec<(String, &str)> = vec![
            (r#"{"url":"https://new.example/"}"#.into(), "ok"),
            (format!(r#"{{"expires_at":"{soon}"}}"#), "ok"),
            (format!(r#"{{"expires_at":"{edge}"}}"#), "ok"),
            (r#"{"state":"disabled"}"#.into(), "ok"),
            (
                format!(r#"{{"url":"https://n/","expires_at":"{soon}","state":"active"}}"#),
                "ok",
            ),
            ("".into(), "invalid_json"),
            ("[]".into(), "invalid_json"),
            ("{nope".into(), "invalid_json"),
            ("{}".into(), "invalid_field"),
            (r#"{"code":"abcdef"}"#.into(), "invalid_field"),
            (
                r#"{"url":"https://x/","domain":"a.com"}"#.into(),
                "invalid_field",
            ),
            (r#"{"url":null}"#.into(), "invalid_url"),
            (r#"{"url":5}"#.into(), "invalid_url"),
            (r#"{"url":"ftp://x/"}"#.into(), "invalid_url"),
            (r#"{"url":"https://x/a b"}"#.into(), "invalid_url"),
            (long, "url_too_long"),
            (
                format!(r#"{{"expires_at":"{past}"}}"#),
                "invalid_expires_at",
            ),
            (format!(r#"{{"expires_at":"{now}"}}"#), "invalid_expires_at"),
            (
                format!(r#"{{"expires_at":"{too_far}"}}"#),
                "invalid_expires_at",
            ),
            (r#"{"expires_at":1900000000}"#.into(), "invalid_expires_at"),
            (r#"{"expires_at":"tomorrow"}"#.into(), "invalid_expires_at"),
            (r#"{"expires_at":null}"#.into(), "invalid_expires_at"),
            (r#"{"state":"deleted"}"#.into(), "invalid_state"),
            (r#"{"state":"ACTIVE"}"#.into(), "invalid_state"),
            (r#"{"state":true}"#.into(), "invalid_state"),
        ];
        for (body, want) in &cases {
            assert_eq!(kind(body), *want, "{body}");
        }
    }

    #[test]
    fn values() {
        let p = parse_patch(
            br#"{"url":"https://n.example/","expires_at":"2027-01-16T08:00:00+08:00","state":"disabled"}"#,
            &LinksConfig {
                max_ttl_days: 3650,
                ..cfg()
            },
            NOW,
        )
        .unwrap();
        assert_eq!(
            p,
            Patch {
                url: Some("https://n.example/".into()),
                expires_at: parse_rfc3339("2027-01-16T00:00:00Z"),
                state: Some(PatchState::Disabled),
                options: None,
                password: None,
                tags: None,
            }
        );
    }
}
