//! Validation of request bodies: every rule that turns bad input into a
//! 400 with a precise kind, before anything is written. Creations and
//! batches here, edits in [`patch`], search queries in [`search`].

mod import;
mod password;
mod patch;
mod query;
mod search;
mod stats;
mod webhooks;

pub use import::{parse_import, ImportRequest};
pub use patch::{parse_patch, Patch, PatchState};
pub use search::{
    parse_export, parse_search, ExportFormat, ExportRequest, SearchRequest, DEFAULT_LIMIT,
    MAX_LIMIT,
};
pub use stats::{
    parse_link_stats, parse_live_link, parse_live_tenant, parse_tenant_stats, DEFAULT_TOP,
};
pub use webhooks::{parse_deliveries, parse_webhooks_list, DeliveriesQuery};

use crate::config::LinksConfig;
use crate::error::ApiError;
use crate::links::options::Settings;
use crate::links::tags::{TagError, Tags};
use crate::links::unlock::NewPassword;
use serde_json::{Map, Value};
use shorturl_common::code::{is_reserved_code, is_valid_code};
use shorturl_common::host::normalize_host;

/// A creation request after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    pub url: String,
    /// Normalised; `None` means the default domain.
    pub domain: Option<String>,
    pub client_app: Option<String>,
    pub client_version: Option<String>,
    pub kdt_id: Option<u64>,
    pub code: Option<String>,
    pub ttl_days: Option<u32>,
    /// Options, rules and UTM fields (`links::options`); the URL above
    /// already carries the UTM fields.
    pub settings: Settings,
    /// The password to protect it with (hashed by the creation).
    pub password: Option<NewPassword>,
    pub tags: Tags,
    /// An import's: when the link was created where it comes from (Unix
    /// seconds, not in the future); `None`: now. Never from an API body.
    pub created_at: Option<u64>,
    /// An import's: its expiry there (after now; within the lifetime
    /// limit); `None`: `ttl_days`. Never from an API body.
    pub expires_at: Option<u64>,
}

const FIELDS: [&str; 22] = [
    "url",
    "domain",
    "app",
    "client_version",
    "version",
    "kdt_id",
    "code",
    "ttl_days",
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

/// A JSON object with only `fields` in it, or the 400 saying why not.
fn json_object(body: &[u8], fields: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request("invalid_json", format!("body is not valid JSON: {e}"))
    })?;
    object_of(v, fields, "body")
}

/// `v` as an object with only `fields` in it (`what` names it in messages).
fn object_of(v: Value, fields: &[&str], what: &str) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(obj) = v else {
        return Err(ApiError::bad_request(
            "invalid_json",
            format!("{what} must be a JSON object"),
        ));
    };
    if let Some(k) = obj.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("unknown field {k:?}"),
        ));
    }
    Ok(obj)
}

/// Parses a batch body, `{"links": [<creation>, ...]}` with 1..=`max_items`
/// items: the envelope's faults are the whole request's 400; each item is
/// validated on its own (an invalid item fails alone).
pub fn parse_batch(
    body: &[u8],
    cfg: &LinksConfig,
    max_items: usize,
) -> Result<Vec<Result<CreateRequest, ApiError>>, ApiError> {
    let mut obj = json_object(body, &["links"])?;
    let bad = || {
        ApiError::bad_request(
            "invalid_batch",
            format!("links must be an array of 1 to {max_items} creation objects"),
        )
    };
    match obj.remove("links") {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= max_items => Ok(items
            .into_iter()
            .map(|item| create_of(object_of(item, &FIELDS, "each item")?, cfg))
            .collect()),
        _ => Err(bad()),
    }
}

/// Parses and validates a creation body.
pub fn parse_create(body: &[u8], cfg: &LinksConfig) -> Result<CreateRequest, ApiError> {
    create_of(json_object(body, &FIELDS)?, cfg)
}

/// Validates the fields of one creation.
fn create_of(obj: Map<String, Value>, cfg: &LinksConfig) -> Result<CreateRequest, ApiError> {
    let url = match obj.get("url") {
        Some(Value::String(s)) => validate_url(s, cfg.max_url_bytes)?,
        Some(_) => return Err(ApiError::bad_request("invalid_url", "url must be a string")),
        None => return Err(ApiError::bad_request("invalid_url", "url is required")),
    };
    let domain = match opt_str(&obj, "domain", "invalid_domain")? {
        Some(d) => Some(normalize_host(d).ok_or_else(|| {
            ApiError::bad_request("invalid_domain", format!("not a valid domain: {d:?}"))
        })?),
        None => None,
    };
    let client_app = opt_label(&obj, "app", 64)?;
    // `version` was the field's name before links had a row version; it is
    // still accepted, as a deprecated alias.
    let client_version = match (
        opt_label(&obj, "client_version", 32)?,
        opt_label(&obj, "version", 32)?,
    ) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_field",
                "give client_version only (version is its deprecated alias)",
            ))
        }
        (a, b) => a.or(b),
    };
    let kdt_id = match obj.get("kdt_id") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_u64().ok_or_else(|| {
            ApiError::bad_request("invalid_kdt_id", "kdt_id must be an integer >= 0")
        })?),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_kdt_id",
                "kdt_id must be an integer >= 0",
            ))
        }
    };
    let code = match opt_str(&obj, "code", "invalid_code")? {
        Some(c) if is_reserved_code(c) => {
            return Err(ApiError::bad_request(
                "invalid_code",
                format!("{c:?} is a reserved service path"),
            ))
        }
        Some(c) if is_valid_code(c) => Some(c.to_owned()),
        Some(_) => return Err(ApiError::invalid_code()),
        None => None,
    };
    let ttl_days = match obj.get("ttl_days") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(d) if d >= 1 && d <= u64::from(cfg.max_ttl_days) => Some(d as u32),
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_ttl",
                    format!("ttl_days must be an integer from 1 to {}", cfg.max_ttl_days),
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_ttl",
                "ttl_days must be an integer",
            ))
        }
    };
    let mut settings = Settings::default();
    settings.o.forward_query = cfg.forward_query;
    settings.apply(&obj)?;
    let url = settings.merge_utm(&url);
    if url.len() > cfg.max_url_bytes {
        return Err(ApiError::bad_request(
            "url_too_long",
            format!(
                "url with its UTM fields is over {} bytes",
                cfg.max_url_bytes
            ),
        ));
    }
    Ok(CreateRequest {
        url,
        domain,
        client_app,
        client_version,
        kdt_id,
        code,
        ttl_days,
        settings,
        password: password::parse(&obj)?.flatten(),
        tags: tags_of(&obj)?.unwrap_or_default(),
        created_at: None,
        expires_at: None,
    })
}

/// The `tags` field of a body (`None`: not given; `null` is no tags).
fn tags_of(obj: &Map<String, Value>) -> Result<Option<Tags>, ApiError> {
    obj.get("tags")
        .map(Tags::from_json)
        .transpose()
        .map_err(ApiError::from)
}

impl From<TagError> for ApiError {
    fn from(e: TagError) -> ApiError {
        ApiError::bad_request("invalid_tags", e.to_string())
    }
}

fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    kind: &'static str,
) -> Result<Option<&'a str>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::bad_request(
            kind,
            format!("{key} must be a string"),
        )),
    }
}

fn opt_label(obj: &Map<String, Value>, key: &str, max: usize) -> Result<Option<String>, ApiError> {
    match opt_str(obj, key, "invalid_field")? {
        Some(s) if s.chars().count() > max || s.chars().any(char::is_control) => {
            Err(ApiError::bad_request(
                "invalid_field",
                format!("{key} must be at most {max} characters without control characters"),
            ))
        }
        Some(s) => Ok(Some(s.to_owned())),
        None => Ok(None),
    }
}

/// Checks a long URL and returns the form to store: its WHATWG
/// serialisation (the `url` crate), which is ASCII (non-ASCII characters
/// percent-encoded / punycoded, so records stay one line of ASCII that Lua
/// can parse) and unambiguous (backslashes, case and dot segments resolved
/// as a browser resolves them).
pub fn validate_url(raw: &str, max_bytes: usize) -> Result<String, ApiError> {
    if raw.len() > max_bytes {
        return Err(ApiError::bad_request(
            "url_too_long",
            format!("url is longer than {max_bytes} bytes"),
        ));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ApiError::bad_request(
            "invalid_url",
            "url must not contain whitespace or control characters",
        ));
    }
    let lower = raw.get(..8).unwrap_or(raw).to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(ApiError::bad_request(
            "invalid_url",
            "url must be an absolute http:// or https:// URL",
        ));
    }
    let parsed = url::Url::parse(raw)
        .map_err(|e| ApiError::bad_request("invalid_url", format!("url does not parse: {e}")))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(ApiError::bad_request("invalid_url", "url must have a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ApiError::bad_request(
            "invalid_url",
            "url must not carry credentials",
        ));
    }
    // The WHATWG serialisation, always: it is what a browser will go to,
    // so what is stored, shown and redirected to is never read two ways
    // (`https://evil.example\\@good.example/` is `https://evil.example/@good.example/`).
    let stored = parsed.as_str().to_owned();
    if stored.len() > max_bytes {
        return Err(ApiError::bad_request(
            "url_too_long",
            format!("url is longer than {max_bytes} bytes once encoded"),
        ));
    }
    Ok(stored)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The limits every validation test runs with.
    pub(crate) fn cfg() -> LinksConfig {
        LinksConfig {
            forward_query: false,
            default_ttl_days: 730,
            max_ttl_days: 3650,
            max_url_bytes: 2048,
            max_body_bytes: 16384,
            max_batch_body_bytes: 1 << 21,
            max_import_body_bytes: 1 << 25,
            allowed_domains: BTreeSet::new(),
            merchant_domains: Default::default(),
            custom_code_refusals_per_min: 10,
        }
    }

    fn kind(body: &str) -> String {
        match parse_create(body.as_bytes(), &cfg()) {
            Ok(_) => "ok".into(),
            Err(e) => e.kind.to_string(),
        }
    }

    #[test]
    fn table_of_inputs() {
        let long = format!("{{\"url\":\"https://x.com/{}\"}}", "a".repeat(2100));
        let cases: &[(&str, &str)] = &[
            (r#"{"url":"https://example.com/a?b=c"}"#, "ok"),
            (r#"{"url":"HTTPS://EXAMPLE.COM"}"#, "ok"),
            (r#"{"url":"https://例え.jp/パス"}"#, "ok"),
            (
                r#"{"url":"https://x.com","domain":"S.Shop55.com.","kdt_id":55,"code":"my_code-1","ttl_days":7,"app":"a","version":"1"}"#,
                "ok",
            ),
            ("", "invalid_json"),
            ("not json", "invalid_json"),
            ("[1]", "invalid_json"),
            ("{}", "invalid_url"),
            (r#"{"url":5}"#, "invalid_url"),
            (r#"{"url":"ftp://x.com"}"#, "invalid_url"),
            (r#"{"url":"javascript:alert(1)"}"#, "invalid_url"),
            (r#"{"url":"/relative"}"#, "invalid_url"),
            (r#"{"url":"https://"}"#, "invalid_url"),
            (r#"{"url":"https://x.com/a b"}"#, "invalid_url"),
            (r#"{"url":"https://x.com/a\tb"}"#, "invalid_url"),
            (r#"{"url":"https://x.com/a\u0000"}"#, "invalid_url"),
            (r#"{"url":"https://u:p@x.com/"}"#, "invalid_url"),
            (&long, "url_too_long"),
            (
                r#"{"url":"https://x.com","domain":"bad domain"}"#,
                "invalid_domain",
            ),
            (r#"{"url":"https://x.com","domain":7}"#, "invalid_domain"),
            (r#"{"url":"https://x.com","code":"ab"}"#, "invalid_code"),
            (r#"{"url":"https://x.com","code":"ab/cd"}"#, "invalid_code"),
            (
                r#"{"url":"https://x.com","code":"healthz"}"#,
                "invalid_code",
            ),
            (
                r#"{"url":"https://x.com","code":"shorturl_status"}"#,
                "invalid_code",
            ),
            (r#"{"url":"https://x.com","kdt_id":-1}"#, "invalid_kdt_id"),
            (r#"{"url":"https://x.com","kdt_id":"55"}"#, "invalid_kdt_id"),
            (r#"{"url":"https://x.com","ttl_days":0}"#, "invalid_ttl"),
            (r#"{"url":"https://x.com","ttl_days":99999}"#, "invalid_ttl"),
            (r#"{"url":"https://x.com","ttl_days":1.5}"#, "invalid_ttl"),
            (r#"{"url":"https://x.com","evil":1}"#, "invalid_field"),
            (r#"{"url":"https://x.com","app":"\u0007"}"#, "invalid_field"),
            (
                r#"{"url":"https://x.com","client_version":"1","version":"1"}"#,
                "invalid_field",
            ),
            (
                r#"{"url":"https://x.com","client_version":5}"#,
                "invalid_field",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(kind(body), *want, "{body}");
        }
    }

    #[test]
    fn batch_envelopes_and_items() {
        let kinds = |body: &str| -> Result<Vec<String>, String> {
            parse_batch(body.as_bytes(), &cfg(), 3)
                .map(|v| {
                    v.into_iter()
                        .map(|r| r.map_or_else(|e| e.kind.to_string(), |_| "ok".into()))
                        .collect()
                })
                .map_err(|e| e.kind.to_string())
        };
        assert_eq!(
            kinds(
                r#"{"links":[{"url":"https://a.com"},{"url":"ftp://x"},7,{"url":"https://b.com","x":1}]}"#
            ),
            Err("invalid_batch".into())
        );
        assert_eq!(
            kinds(r#"{"links":[{"url":"https://a.com"},{"url":"ftp://x"},7]}"#),
            Ok(vec![
                "ok".into(),
                "invalid_url".into(),
                "invalid_json".into()
            ])
        );
        assert_eq!(
            kinds(r#"{"links":[{"url":"https://b.com","x":1}]}"#),
            Ok(vec!["invalid_field".into()])
        );
        for (body, kind) in [
            ("[]", "invalid_json"),
            ("nope", "invalid_json"),
            (r#"{"links":[]}"#, "invalid_batch"),
            (r#"{"links":{}}"#, "invalid_batch"),
            (r#"{}"#, "invalid_batch"),
            (r#"{"links":[],"more":1}"#, "invalid_field"),
        ] {
            assert_eq!(kinds(body), Err(kind.to_string()), "{body}");
        }
    }

    #[test]
    fn version_is_an_alias_of_client_version() {
        for body in [
            r#"{"url":"https://x.com","client_version":"2.1"}"#,
            r#"{"url":"https://x.com","version":"2.1"}"#,
        ] {
            let r = parse_create(body.as_bytes(), &cfg()).unwrap();
            assert_eq!(r.client_version.as_deref(), Some("2.1"), "{body}");
        }
    }

    #[test]
    fn non_ascii_urls_are_stored_encoded() {
        let u = validate_url("https://例え.jp/パス", 2048).unwrap();
        assert!(u.is_ascii(), "{u}");
        assert!(u.starts_with("https://xn--"), "{u}");
        let r = parse_create(
            br#"{"url":"https://x.com","domain":"S.Shop55.com."}"#,
            &cfg(),
        )
        .unwrap();
        assert_eq!(r.domain.as_deref(), Some("s.shop55.com"));
    }
}
