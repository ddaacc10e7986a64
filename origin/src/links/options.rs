//! A link's options as the API takes and shows them (`forward_query`,
//! `expired_url`, `rules`, the UTM fields), as the `short_code.options`
//! column stores them, and as the record carries them to the edges
//! (`shorturl_common::link_rules`, protocol 3.1.1).
//!
//! The API names conditions in full (`device`, `country`, ...); the record
//! uses the compact keys. UTM fields are merged into the stored URL when
//! set, and kept here too so the API shows them apart. The column's form
//! and the record's are `store::options`.

pub use crate::store::options::{Settings, UTM_FIELDS};

use crate::error::ApiError;
use serde_json::{json, Map, Value};
use shorturl_common::link_rules::{
    is_destination, App, Country, DeviceCond, Lang, Rule, When, MAX_RULES, MAX_VALUES,
};

/// The API fields this module owns (creation and edit bodies).
pub const FIELDS: [&str; 12] = [
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
];

/// Longest `og_title` and `og_description` (characters).
const MAX_OG_TITLE: usize = 200;
const MAX_OG_DESCRIPTION: usize = 1000;
/// Longest `og_image` (bytes).
const MAX_OG_IMAGE: usize = 2048;

/// Longest UTM value (bytes).
const MAX_UTM: usize = 200;

/// The API side of the options: shown and applied in the API's form.
impl Settings {
    /// The API fields (flattened into the link object).
    pub fn view(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("forward_query".into(), self.o.forward_query.into());
        m.insert("expired_url".into(), json!(self.o.expired_url));
        let rules: Vec<Value> = self.o.rules.iter().map(rule_view).collect();
        m.insert("rules".into(), Value::Array(rules));
        for (i, f) in UTM_FIELDS.iter().enumerate() {
            m.insert((*f).into(), json!(self.utm(i)));
        }
        m.insert("og_title".into(), json!(self.og.title));
        m.insert("og_description".into(), json!(self.og.description));
        m.insert("og_image".into(), json!(self.og.image));
        m.insert("password_protected".into(), self.password.is_some().into());
        m.insert("inapp_guide".into(), json!(self.guide));
        m.insert("inapp_guided".into(), (!self.o.guide.is_empty()).into());
        m.insert("screened".into(), json!(self.o.screen.map(|s| s.as_str())));
        m
    }

    /// Applies the option fields present in `obj` (a creation or edit
    /// body); `Ok(false)` when none is.
    pub fn apply(&mut self, obj: &Map<String, Value>) -> Result<bool, ApiError> {
        let mut any = false;
        if let Some(v) = obj.get("forward_query") {
            self.o.forward_query = v.as_bool().ok_or_else(|| {
                invalid("invalid_forward_query", "forward_query must be a boolean")
            })?;
            any = true;
        }
        if let Some(v) = obj.get("expired_url") {
            self.o.expired_url =
                match v {
                    Value::Null => None,
                    Value::String(s) if is_destination(s) => Some(s.clone()),
                    _ => return Err(invalid(
                        "invalid_expired_url",
                        "expired_url must be an absolute http(s) URL of printable ASCII, or null",
                    )),
                };
            any = true;
        }
        if let Some(v) = obj.get("rules") {
            self.o.rules = parse_rules(v)?;
            any = true;
        }
        for (i, f) in UTM_FIELDS.iter().enumerate() {
            if let Some(v) = obj.get(*f) {
                let val = match v {
                    Value::Null => None,
                    Value::String(s) if !s.is_empty() && s.len() <= MAX_UTM => Some(s.clone()),
                    _ => {
                        return Err(invalid(
                            "invalid_utm",
                            format!("{f} must be a string of 1-{MAX_UTM} bytes, or null"),
                        ))
                    }
                };
                if self.utm.len() < UTM_FIELDS.len() {
                    self.utm.resize(UTM_FIELDS.len(), None);
                }
                self.utm[i] = val;
                any = true;
            }
        }
        if self.utm.iter().all(Option::is_none) {
            self.utm.clear();
        }
        let og = [
            ("og_title", &mut self.og.title),
            ("og_description", &mut self.og.description),
            ("og_image", &mut self.og.image),
        ];
        for (f, slot) in og {
            if let Some(v) = obj.get(f) {
                *slot = card_field(f, v)?;
                any = true;
            }
        }
        if let Some(v) = obj.get("inapp_guide") {
            self.guide = match v {
                Value::Null => None,
                Value::Bool(b) => Some(*b),
                _ => {
                    return Err(invalid(
                        "invalid_inapp_guide",
                        "inapp_guide must be true, false or null (the domain's setting)",
                    ))
                }
            };
            any = true;
        }
        self.o
            .validate()
            .map_err(|e| invalid("invalid_rules", e.to_string()))?;
        Ok(any)
    }
}

/// One social card field: text without control characters (the title
/// and description), or an absolute `https` URL (the image); `null`
/// clears it.
fn card_field(f: &str, v: &Value) -> Result<Option<String>, ApiError> {
    let s = match v {
        Value::Null => return Ok(None),
        Value::String(s) => s,
        _ => return Err(card_error(f)),
    };
    let ok = match f {
        "og_image" => {
            s.len() <= MAX_OG_IMAGE
                && s.get(..8)
                    .is_some_and(|p| p.eq_ignore_ascii_case("https://"))
                && is_destination(s)
        }
        _ => {
            let max = if f == "og_title" {
                MAX_OG_TITLE
            } else {
                MAX_OG_DESCRIPTION
            };
            !s.trim().is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control)
        }
    };
    if ok {
        Ok(Some(s.clone()))
    } else {
        Err(card_error(f))
    }
}

fn card_error(f: &str) -> ApiError {
    let what = match f {
        "og_title" => format!("og_title must be 1-{MAX_OG_TITLE} characters without control characters, or null"),
        "og_description" => format!("og_description must be 1-{MAX_OG_DESCRIPTION} characters without control characters, or null"),
        _ => format!("og_image must be an absolute https URL of printable ASCII (at most {MAX_OG_IMAGE} bytes), or null"),
    };
    invalid("invalid_og", what)
}

fn invalid(code: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(code, msg)
}

/// The condition names of the API, as the error for an unknown one lists them.
const CONDITIONS: &str = "device, app, country, language, from, until, query";

/// Reads the API's `rules` array into the record's form.
fn parse_rules(v: &Value) -> Result<Vec<Rule>, ApiError> {
    let bad = |i: usize, m: String| invalid("invalid_rules", format!("rules[{i}]: {m}"));
    let Value::Array(items) = v else {
        return Err(invalid("invalid_rules", "rules must be an array"));
    };
    if items.len() > MAX_RULES {
        return Err(invalid(
            "invalid_rules",
            format!("at most {MAX_RULES} rules"),
        ));
    }
    let mut rules = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(r) = item else {
            return Err(bad(i, "must be an object".into()));
        };
        if let Some(k) = r
            .keys()
            .find(|k| !["when", "url", "split"].contains(&k.as_str()))
        {
            return Err(bad(i, format!("unknown field {k:?} (when, url, split)")));
        }
        let when = match r.get("when") {
            None => When::default(),
            Some(Value::Object(w)) => parse_when(w).map_err(|m| bad(i, m))?,
            Some(_) => return Err(bad(i, "when must be an object".into())),
        };
        let url = match r.get("url") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(bad(i, "url must be a string".into())),
        };
        let split = match r.get("split") {
            None => Vec::new(),
            Some(Value::Array(vs)) => vs
                .iter()
                .map(|v| {
                    let url = v.get("url").and_then(Value::as_str);
                    let w = v.get("weight").and_then(Value::as_u64);
                    match (url, w, v.as_object().map(|o| o.len())) {
                        (Some(u), Some(w), Some(2)) if w <= u64::from(u32::MAX) => {
                            Ok((u.to_owned(), w as u32))
                        }
                        _ => Err(bad(
                            i,
                            "split items are {\"url\": string, \"weight\": integer}".into(),
                        )),
                    }
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad(i, "split must be an array".into())),
        };
        rules.push(Rule { when, url, split });
    }
    Ok(rules)
}

/// A condition's list of strings (at most [`MAX_VALUES`]).
fn strings(v: &Value, name: &str) -> Result<Vec<String>, String> {
    match v {
        Value::Array(xs) if xs.len() > MAX_VALUES => {
            Err(format!("{name}: at most {MAX_VALUES} values"))
        }
        Value::Array(xs) => xs
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{name} must be an array of strings"))
            })
            .collect(),
        _ => Err(format!("{name} must be an array of strings")),
    }
}

fn parse_when(w: &Map<String, Value>) -> Result<When, String> {
    let mut when = When::default();
    for (k, v) in w {
        match k.as_str() {
            "device" => {
                when.dev = strings(v, k)?
                    .iter()
                    .map(|s| {
                        DeviceCond::parse(s).ok_or_else(|| {
                            format!("unknown device {s:?} (ios, android, mobile, tablet, desktop)")
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
            "app" => {
                when.app = strings(v, k)?
                    .iter()
                    .map(|s| {
                        App::parse(s).ok_or_else(|| {
                            let all: Vec<&str> = App::ALL.iter().map(|a| a.as_str()).collect();
                            format!("unknown app {s:?} ({})", all.join(", "))
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
            "country" => {
                when.cc = strings(v, k)?
                    .iter()
                    .map(|s| Country::parse(&s.to_ascii_uppercase()))
                    .collect::<Result<_, _>>()?
            }
            "language" => {
                when.lang = strings(v, k)?
                    .iter()
                    .map(|s| Lang::parse(&s.to_ascii_lowercase()))
                    .collect::<Result<_, _>>()?
            }
            "from" | "until" => {
                let t = v
                    .as_u64()
                    .ok_or_else(|| format!("{k} must be Unix seconds (an integer >= 0)"))?;
                if k == "from" {
                    when.from = Some(t);
                } else {
                    when.until = Some(t);
                }
            }
            "query" => {
                let name = v.get("name").and_then(Value::as_str);
                let value = v.get("value").and_then(Value::as_str);
                match (name, value, v.as_object().map(|o| o.len())) {
                    (Some(n), Some(val), Some(2)) => {
                        when.q = Some(Box::new((n.to_owned(), val.to_owned())))
                    }
                    _ => return Err("query is {\"name\": string, \"value\": string}".into()),
                }
            }
            other => return Err(format!("unknown condition {other:?} ({CONDITIONS})")),
        }
    }
    Ok(when)
}

/// A rule as the API shows it.
fn rule_view(r: &Rule) -> Value {
    let w = &r.when;
    let mut when = Map::new();
    if !w.dev.is_empty() {
        when.insert(
            "device".into(),
            json!(w.dev.iter().map(|d| d.as_str()).collect::<Vec<_>>()),
        );
    }
    if !w.app.is_empty() {
        when.insert(
            "app".into(),
            json!(w.app.iter().map(|a| a.as_str()).collect::<Vec<_>>()),
        );
    }
    if !w.cc.is_empty() {
        let cc: Vec<&str> = w.cc.iter().map(Country::as_str).collect();
        when.insert("country".into(), json!(cc));
    }
    if !w.lang.is_empty() {
        let lang: Vec<&str> = w.lang.iter().map(Lang::as_str).collect();
        when.insert("language".into(), json!(lang));
    }
    if let Some(f) = w.from {
        when.insert("from".into(), json!(f));
    }
    if let Some(u) = w.until {
        when.insert("until".into(), json!(u));
    }
    if let Some((n, v)) = w.q.as_deref() {
        when.insert("query".into(), json!({"name": n, "value": v}));
    }
    let mut out = Map::new();
    out.insert("when".into(), Value::Object(when));
    match &r.url {
        Some(u) => {
            out.insert("url".into(), json!(u));
        }
        None => {
            let split: Vec<Value> = r
                .split
                .iter()
                .map(|(u, w)| json!({"url": u, "weight": w}))
                .collect();
            out.insert("split".into(), Value::Array(split));
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> Map<String, Value> {
        match serde_json::from_str(s) {
            Ok(Value::Object(m)) => m,
            _ => panic!("not an object: {s}"),
        }
    }

    fn err_of(s: &str) -> String {
        match Settings::default().apply(&obj(s)) {
            Err(e) => format!("{} {}", e.kind, e.message),
            Ok(_) => panic!("accepted: {s}"),
        }
    }

    #[test]
    fn rules_round_trip_through_the_api_form() {
        let body = r#"{"forward_query":true,"expired_url":"https://a/over","rules":[
            {"when":{"device":["ios"],"app":["wechat"],"country":["cn"],"language":["ZH"],"from":1,"until":9,"query":{"name":"ref","value":"tw"}},"url":"https://a/1"},
            {"split":[{"url":"https://a/2","weight":30},{"url":"https://a/3","weight":70}]}],
            "utm_source":"mail","utm_campaign":"sale"}"#;
        let mut s = Settings::default();
        assert_eq!(s.apply(&obj(body)).ok(), Some(true));
        assert_eq!(&*s.o.rules[0].when.cc, &[Country(*b"CN")]);
        assert_eq!(s.o.rules[0].when.lang[0].as_str(), "zh");
        let view = Value::Object(s.view());
        assert_eq!(view["rules"][0]["when"]["country"], json!(["CN"]));
        assert_eq!(
            view["rules"][1]["split"][1],
            json!({"url":"https://a/3","weight":70})
        );
        assert_eq!(view["utm_source"], json!("mail"));
        assert_eq!(view["utm_medium"], Value::Null);
        // The view's rules are accepted back as they are.
        let mut again = Settings::default();
        let back = json!({"rules": view["rules"].clone()});
        assert!(again.apply(back.as_object().unwrap_or(&Map::new())).is_ok());
        assert_eq!(again.o.rules, s.o.rules);
        let col = s.to_column();
        assert_eq!(Settings::from_column(col.as_deref()), s);
        assert_eq!(Settings::default().to_column(), None);
    }

    #[test]
    fn refusals_name_the_problem() {
        assert!(
            err_of(r#"{"rules":[{"when":{"os":["ios"]},"url":"https://a"}]}"#)
                .contains("unknown condition \"os\"")
        );
        assert!(
            err_of(r#"{"rules":[{"when":{"device":["phone"]},"url":"https://a"}]}"#)
                .contains("unknown device \"phone\"")
        );
        assert!(err_of(r#"{"rules":[{"url":"ftp://a"}]}"#).starts_with("invalid_rules"));
        assert!(err_of(r#"{"rules":[{"when":{}}]}"#).contains("exactly one of url and split"));
        assert!(
            err_of(r#"{"rules":[{"split":[{"url":"https://a","weight":1}]}]}"#).contains("split")
        );
        assert!(
            err_of(r#"{"rules":[{"when":{"country":["CHN"]},"url":"https://a"}]}"#)
                .contains("ISO 3166")
        );
        assert!(err_of(r#"{"rules":{}}"#).contains("array"));
        assert!(err_of(r#"{"forward_query":"yes"}"#).starts_with("invalid_forward_query"));
        assert!(err_of(r#"{"expired_url":"javascript:x"}"#).starts_with("invalid_expired_url"));
        assert!(err_of(r#"{"utm_source":""}"#).starts_with("invalid_utm"));
        let many = format!(
            r#"{{"rules":[{}]}}"#,
            vec![r#"{"url":"https://a"}"#; 21].join(",")
        );
        assert!(err_of(&many).contains("at most 20"));
    }

    #[test]
    fn utm_fields_replace_their_parameters() {
        let mut s = Settings::default();
        let body = obj(r#"{"utm_source":"mail","utm_medium":"email"}"#);
        assert!(s.apply(&body).is_ok());
        assert_eq!(
            s.merge_utm("https://shop.example/p?utm_source=old&id=7#top"),
            "https://shop.example/p?id=7&utm_source=mail&utm_medium=email#top"
        );
        assert_eq!(
            Settings::default().merge_utm("https://x/?a=1"),
            "https://x/?a=1"
        );
        // Clearing a field in an edit takes its parameter out.
        let mut after = s.clone();
        assert!(after.apply(&obj(r#"{"utm_medium":null}"#)).is_ok());
        assert_eq!(
            after.merge_utm_after(
                "https://shop.example/p?id=7&utm_source=mail&utm_medium=email",
                &s
            ),
            "https://shop.example/p?id=7&utm_source=mail"
        );
        // The last parameter gone: no empty query left.
        assert_eq!(
            Settings::default().merge_utm_after("https://x.example/?utm_source=a", &s),
            "https://x.example/"
        );
    }
}
