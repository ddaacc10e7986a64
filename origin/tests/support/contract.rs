//! The API contract as a test oracle: every response an API test receives
//! through [`CheckedClient`] (the `http` client of [`super::Origin`]) is
//! checked against `docs/openapi.yaml` — the status must be documented for
//! the operation, JSON bodies must match its schema ($refs resolved, formats
//! checked), required headers must be there, declared headers must match
//! their schema, a method the path does not have must be a 405 with
//! `Allow`. A violation fails the test at the request that got it.
//!
//! Paths outside the public contract (`/metrics`, `/internal/...`, paths
//! no operation matches) are not checked.

use jsonschema::{Registry, Validator};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, ResponseBuilderExt, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Base URI of the contract in the schema registry.
const BASE: &str = "https://shorturl.test/openapi.json";

/// The parsed contract and the validators built from it so far.
pub struct Contract {
    doc: Value,
    registry: Registry<'static>,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
    /// Responses checked (tests can assert the checker saw them).
    pub checked: std::sync::atomic::AtomicU64,
}

/// The contract compiled into the origin (`docs/openapi.yaml`).
pub fn contract() -> &'static Contract {
    static C: OnceLock<Contract> = OnceLock::new();
    C.get_or_init(|| Contract::from_yaml(shorturl_origin::http::openapi::YAML))
}

/// Unescapes one JSON-pointer token.
fn unescape(t: &str) -> String {
    t.replace("~1", "/").replace("~0", "~")
}

fn escape(t: &str) -> String {
    t.replace('~', "~0").replace('/', "~1")
}

impl Contract {
    pub fn from_yaml(yaml: &str) -> Contract {
        let doc: Value = serde_yaml::from_str(yaml).expect("openapi.yaml parses");
        let registry = Registry::new()
            .add(BASE, doc.clone())
            .expect("the contract registers as a schema resource")
            .prepare()
            .expect("the contract's schemas resolve");
        Contract {
            doc,
            registry,
            validators: Mutex::new(HashMap::new()),
            checked: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The value at JSON pointer `ptr` (`#/...`), following OpenAPI `$ref`s
    /// of the object found there; returns it with its own pointer.
    fn resolve(&self, ptr: &str) -> (String, &Value) {
        let mut ptr = ptr.to_owned();
        for _ in 0..8 {
            let v = self
                .doc
                .pointer(ptr.trim_start_matches('#'))
                .unwrap_or_else(|| panic!("contract: no {ptr}"));
            match v.get("$ref").and_then(Value::as_str) {
                Some(r) => ptr = r.to_owned(),
                None => return (ptr, v),
            }
        }
        panic!("contract: $ref loop at {ptr}")
    }

    /// Validates `instance` against the schema at `ptr`.
    fn validate(&self, ptr: &str, instance: &Value) -> Result<(), String> {
        let cached = self
            .validators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(ptr)
            .cloned();
        let v = match cached {
            Some(v) => v,
            None => {
                // The pointer is a URI fragment: braces must be escaped.
                let fragment = ptr.replace('{', "%7B").replace('}', "%7D");
                let schema = json!({"$ref": format!("{BASE}{fragment}")});
                let v = Arc::new(
                    jsonschema::options()
                        .with_registry(&self.registry)
                        .should_validate_formats(true)
                        .build(&schema)
                        .map_err(|e| format!("contract schema {ptr}: {e}"))?,
                );
                self.validators
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(ptr.to_owned(), Arc::clone(&v));
                v
            }
        };
        let errors: Vec<String> = v
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// The documented path templates matching `path`, those with more
    /// literal segments first (as OpenAPI matches concrete paths first).
    fn templates(&self, path: &str) -> Vec<String> {
        let segs: Vec<&str> = path.split('/').collect();
        let mut found: Vec<(usize, String)> = self.doc["paths"]
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| {
                let tsegs: Vec<&str> = t.split('/').collect();
                if tsegs.len() != segs.len() {
                    return None;
                }
                let mut literal = 0;
                for (a, b) in tsegs.iter().zip(&segs) {
                    // `{code}` or `{code}.svg`: a parameter and a literal suffix.
                    if let Some((_, suffix)) = a.strip_prefix('{').and_then(|t| t.split_once('}')) {
                        match b.strip_suffix(suffix) {
                            Some(v) if !v.is_empty() => literal += usize::from(!suffix.is_empty()),
                            _ => return None,
                        }
                    } else if a == b {
                        literal += 1;
                    } else {
                        return None;
                    }
                }
                Some((literal, t))
            })
            .collect();
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        found.into_iter().map(|(_, t)| t).collect()
    }

    /// Checks one response to `method path` against the contract.
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        status: StatusCode,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), String> {
        if path == "/metrics" || path.starts_with("/internal/") {
            return Ok(());
        }
        let templates = self.templates(path);
        if templates.is_empty() {
            return Ok(());
        }
        self.checked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let op_method = if *method == Method::HEAD {
            "get".to_owned()
        } else {
            method.as_str().to_ascii_lowercase()
        };
        let what = format!("{method} {path} -> {status}");
        // The most concrete path is the one that matches (`/healthz`, not
        // `/{code}`), whether or not it has the method.
        let op = templates.first().and_then(|t| {
            let ptr = format!("#/paths/{}/{op_method}", escape(t));
            self.doc
                .pointer(ptr.trim_start_matches('#'))
                .is_some()
                .then_some(ptr)
        });
        let Some(op) = op else {
            // A method the path does not have.
            if status != StatusCode::METHOD_NOT_ALLOWED || !headers.contains_key("allow") {
                return Err(format!(
                    "{what}: a method {templates:?} lacks must be 405 with Allow"
                ));
            }
            return self.check_json(&what, "#/components/schemas/Error", headers, body);
        };
        let code = status.as_str().to_owned();
        let range = format!("{}XX", &code[..1]);
        let responses = format!("{op}/responses");
        let key = [code.as_str(), range.as_str(), "default"]
            .into_iter()
            .find(|k| {
                self.doc
                    .pointer(&format!("{}/{k}", responses.trim_start_matches('#')))
                    .is_some()
            })
            .ok_or_else(|| format!("{what}: status not documented for {op}"))?;
        let (rptr, response) = self.resolve(&format!("{responses}/{key}"));
        if let Some(hs) = response.get("headers").and_then(Value::as_object) {
            for (name, _) in hs {
                let (hptr, h) = self.resolve(&format!("{rptr}/headers/{}", escape(name)));
                match headers.get(name.as_str()) {
                    None if h.get("required") == Some(&Value::Bool(true)) => {
                        return Err(format!("{what}: required header {name} missing"))
                    }
                    None => {}
                    Some(v) => {
                        let text = v
                            .to_str()
                            .map_err(|_| format!("{what}: header {name} is not text"))?;
                        let (sptr, schema) = self.resolve(&format!("{hptr}/schema"));
                        let value = if schema.get("type") == Some(&json!("integer")) {
                            text.trim().parse::<i64>().map(Value::from).map_err(|_| {
                                format!("{what}: header {name}: {text:?} is not an integer")
                            })?
                        } else {
                            Value::String(text.to_owned())
                        };
                        self.validate(&sptr, &value)
                            .map_err(|e| format!("{what}: header {name}: {e}"))?;
                    }
                }
            }
        }
        let content = response.get("content").and_then(Value::as_object);
        match content {
            None if !body.is_empty() => Err(format!(
                "{what}: documented without a body, got {} bytes",
                body.len()
            )),
            None => Ok(()),
            // HEAD: the headers of GET, no body.
            Some(_) if *method == Method::HEAD => Ok(()),
            // Pages for people (HTML, images): the content type must be one
            // documented; their bytes are the tests' business.
            Some(c) if !headers_json(headers) => {
                let ct = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let media = ct.split(';').next().unwrap_or("").trim();
                if c.keys().any(|k| k != "application/json" && k == media) {
                    Ok(())
                } else {
                    Err(format!(
                        "{what}: content-type {ct:?}, documented {:?}",
                        c.keys()
                    ))
                }
            }
            Some(c) if c.contains_key("application/json") => self.check_json(
                &what,
                &format!("{rptr}/content/application~1json/schema"),
                headers,
                body,
            ),
            Some(c) => Err(format!("{what}: unexpected content types {:?}", c.keys())),
        }
    }

    fn check_json(
        &self,
        what: &str,
        schema: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(), String> {
        let ct = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !ct.starts_with("application/json") {
            return Err(format!(
                "{what}: content-type {ct:?}, expected application/json"
            ));
        }
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            format!(
                "{what}: body is not JSON ({e}): {}",
                String::from_utf8_lossy(body)
            )
        })?;
        self.validate(schema, &v)
            .map_err(|e| format!("{what}: body {v} violates {schema}: {e}"))
    }
}

/// Whether a response says it is JSON (an absent content type counts as
/// JSON, so that the JSON check reports it).
fn headers_json(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| ct.starts_with("application/json"))
}

/// A `reqwest::Client` whose every response is checked against the
/// contract before the test sees it (same builder methods as reqwest's).
#[derive(Clone)]
pub struct CheckedClient {
    inner: reqwest::Client,
}

impl CheckedClient {
    pub fn new(inner: reqwest::Client) -> Self {
        CheckedClient { inner }
    }

    /// The unchecked client (for requests outside the contract on purpose).
    pub fn unchecked(&self) -> &reqwest::Client {
        &self.inner
    }

    pub fn request<U: reqwest::IntoUrl>(&self, method: Method, url: U) -> CheckedRequest {
        CheckedRequest {
            rb: self.inner.request(method, url),
        }
    }
    pub fn get<U: reqwest::IntoUrl>(&self, url: U) -> CheckedRequest {
        self.request(Method::GET, url)
    }
    pub fn head<U: reqwest::IntoUrl>(&self, url: U) -> CheckedRequest {
        self.request(Method::HEAD, url)
    }
    pub fn post<U: reqwest::IntoUrl>(&self, url: U) -> CheckedRequest {
        self.request(Method::POST, url)
    }
    pub fn put<U: reqwest::IntoUrl>(&self, url: U) -> CheckedRequest {
        self.request(Method::PUT, url)
    }
    pub fn patch<U: reqwest::IntoUrl>(&self, url: U) -> CheckedRequest {
        self.request(Method::PATCH, url)
    }
    pub fn delete<U: reqwest::IntoUrl>(&self, url: U) -> CheckedRequest {
        self.request(Method::DELETE, url)
    }
}

/// A request being built; [`CheckedRequest::send`] checks the answer.
pub struct CheckedRequest {
    rb: reqwest::RequestBuilder,
}

impl CheckedRequest {
    pub fn bearer_auth<T: std::fmt::Display>(self, token: T) -> Self {
        CheckedRequest {
            rb: self.rb.bearer_auth(token),
        }
    }
    pub fn header<K, V>(self, key: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        CheckedRequest {
            rb: self.rb.header(key, value),
        }
    }
    pub fn headers(self, headers: HeaderMap) -> Self {
        CheckedRequest {
            rb: self.rb.headers(headers),
        }
    }
    pub fn json<T: serde::Serialize + ?Sized>(self, json: &T) -> Self {
        CheckedRequest {
            rb: self.rb.json(json),
        }
    }
    pub fn body<T: Into<reqwest::Body>>(self, body: T) -> Self {
        CheckedRequest {
            rb: self.rb.body(body),
        }
    }
    pub fn timeout(self, t: std::time::Duration) -> Self {
        CheckedRequest {
            rb: self.rb.timeout(t),
        }
    }

    /// Sends the request, reads the whole answer, checks it against the
    /// contract (panicking on a violation) and hands it back.
    pub async fn send(self) -> reqwest::Result<reqwest::Response> {
        let (client, req) = self.rb.build_split();
        let req = req?;
        let method = req.method().clone();
        let url = req.url().clone();
        let path = url.path().to_owned();
        let r = client.execute(req).await?;
        let (status, version, headers) = (r.status(), r.version(), r.headers().clone());
        let body = r.bytes().await?;
        if let Err(e) = contract().check(&method, &path, status, &headers, &body) {
            panic!("contract violation (docs/openapi.yaml): {e}");
        }
        let mut back = http::Response::builder()
            .status(status)
            .version(version)
            .url(url)
            .body(body)
            .expect("a response rebuilt from a valid one");
        *back.headers_mut() = headers;
        Ok(reqwest::Response::from(back))
    }
}
