//! A small client for Apollo's config-service HTTP API (the part the
//! "other-language client" guide documents): `GET /configs/...` for a
//! namespace's release and `GET /notifications/v2` for long polling, with
//! optional access-key signing. No meta-server lookup: the config-service
//! addresses come from the origin's config.

use super::sign;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use reqwest::Url;

/// A namespace release as `/configs` returns it (and as the last-good file keeps it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    #[serde(rename = "appId")]
    pub app_id: String,
    pub cluster: String,
    #[serde(rename = "namespaceName")]
    pub namespace_name: String,
    #[serde(default)]
    pub configurations: BTreeMap<String, Value>,
    #[serde(rename = "releaseKey")]
    pub release_key: String,
}

/// One entry of a `/notifications/v2` answer.
#[derive(Debug, Clone, Deserialize)]
struct Notification {
    #[serde(rename = "namespaceName")]
    namespace_name: String,
    #[serde(rename = "notificationId")]
    notification_id: i64,
}

/// Why a request brought nothing usable. Every variant means "keep the last
/// good value and retry later".
#[derive(Debug, thiserror::Error)]
pub enum ApolloError {
    /// Connecting, sending or reading failed (the display carries the whole
    /// cause chain: `reqwest` keeps the useful part, e.g. "connection
    /// refused", in its sources).
    #[error("{url}: {}", error_chain(source))]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: unreadable answer: {source}")]
    Body {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("config server address {0:?} cannot take a path")]
    BadServer(String),
    /// The HTTP client could not be built.
    #[error("apollo http client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Who we are to Apollo.
#[derive(Clone)]
pub struct Identity {
    pub app_id: String,
    pub cluster: String,
    /// The namespace as used in `/configs` paths (with its format suffix, if any).
    pub namespace: String,
    pub secret: Option<String>,
    /// Sent as `ip` (Apollo uses it for grey releases); omitted when unset.
    pub ip: Option<String>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("app_id", &self.app_id)
            .field("cluster", &self.cluster)
            .field("namespace", &self.namespace)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("ip", &self.ip)
            .finish()
    }
}

impl Identity {
    /// The name used in notifications: properties namespaces without the
    /// `.properties` suffix, other formats with theirs (as Apollo documents).
    pub fn notification_name(&self) -> &str {
        self.namespace
            .strip_suffix(".properties")
            .unwrap_or(&self.namespace)
    }
}

/// The HTTP client.
pub struct Client {
    http: reqwest::Client,
    id: Identity,
}

impl Client {
    /// Builds the client; `connect_timeout` bounds connection set-up only
    /// (each call passes its own total timeout).
    pub fn new(id: Identity, connect_timeout: Duration) -> Result<Client, ApolloError> {
        let http = reqwest::Client::builder()
            // Config services are internal: never route them through an
            // HTTP(S)_PROXY meant for the outside world.
            .no_proxy()
            .connect_timeout(connect_timeout)
            .user_agent(concat!("shorturl-origin/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ApolloError::Client)?;
        Ok(Client { http, id })
    }

    /// Who we are.
    pub fn identity(&self) -> &Identity {
        &self.id
    }

    /// `GET /configs/{appId}/{cluster}/{namespace}`: `Ok(None)` is 304
    /// (`release_key` is still current). `notification_id`, when known, goes
    /// in `messages` so a multi-instance config service answers from fresh
    /// cache, as the Java client does.
    pub async fn fetch(
        &self,
        server: &Url,
        release_key: Option<&str>,
        notification_id: Option<i64>,
        timeout: Duration,
    ) -> Result<Option<Release>, ApolloError> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(k) = release_key {
            query.push(("releaseKey", k.to_owned()));
        }
        if let Some(n) = notification_id.filter(|n| *n >= 0) {
            let key = format!(
                "{}+{}+{}",
                self.id.app_id,
                self.id.cluster,
                self.id.notification_name()
            );
            query.push((
                "messages",
                serde_json::json!({ "details": { key: n } }).to_string(),
            ));
        }
        if let Some(ip) = &self.id.ip {
            query.push(("ip", ip.clone()));
        }
        let url = endpoint(
            server,
            &[
                "configs",
                &self.id.app_id,
                &self.id.cluster,
                &self.id.namespace,
            ],
            &query,
        )?;
        let (status, body) = self.get(&url, timeout).await?;
        match status {
            200 => serde_json::from_slice::<Release>(&body)
                .map(Some)
                .map_err(|source| ApolloError::Body {
                    url: url.to_string(),
                    source,
                }),
            304 => Ok(None),
            s => Err(ApolloError::Status {
                url: url.to_string(),
                status: s,
            }),
        }
    }

    /// `GET /notifications/v2` (long poll): `Ok(None)` is 304 (nothing
    /// released while the server held the request); `Ok(Some(id))` is our
    /// namespace's newest notification id.
    pub async fn poll(
        &self,
        server: &Url,
        notification_id: i64,
        timeout: Duration,
    ) -> Result<Option<i64>, ApolloError> {
        let name = self.id.notification_name();
        let notifications =
            serde_json::json!([{ "namespaceName": name, "notificationId": notification_id }]);
        let query = [
            ("appId", self.id.app_id.clone()),
            ("cluster", self.id.cluster.clone()),
            ("notifications", notifications.to_string()),
        ];
        let mut query: Vec<(&str, String)> = query.into();
        if let Some(ip) = &self.id.ip {
            query.push(("ip", ip.clone()));
        }
        let url = endpoint(server, &["notifications", "v2"], &query)?;
        let (status, body) = self.get(&url, timeout).await?;
        match status {
            200 => {
                let list: Vec<Notification> =
                    serde_json::from_slice(&body).map_err(|source| ApolloError::Body {
                        url: url.to_string(),
                        source,
                    })?;
                let newest = list
                    .iter()
                    .filter(|n| same_namespace(&n.namespace_name, name))
                    .map(|n| n.notification_id)
                    .max()
                    .unwrap_or(notification_id);
                Ok(Some(newest))
            }
            304 => Ok(None),
            s => Err(ApolloError::Status {
                url: url.to_string(),
                status: s,
            }),
        }
    }

    /// One signed GET; returns status and body.
    async fn get(&self, url: &Url, timeout: Duration) -> Result<(u16, bytes::Bytes), ApolloError> {
        let mut req = self.http.get(url.clone()).timeout(timeout);
        if let Some(secret) = &self.id.secret {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            for (name, value) in
                sign::headers(&self.id.app_id, secret, now_ms, &path_and_query(url))
            {
                req = req.header(name, value);
            }
        }
        let transport = |source: reqwest::Error| ApolloError::Transport {
            url: url.to_string(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(transport)?;
        Ok((status, body))
    }
}

/// `server` + path segments (each percent-encoded) + form-encoded query.
pub fn endpoint(
    server: &Url,
    segments: &[&str],
    query: &[(&str, String)],
) -> Result<Url, ApolloError> {
    let mut url = server.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .map_err(|_| ApolloError::BadServer(server.to_string()))?
        .pop_if_empty()
        .extend(segments);
    if !query.is_empty() {
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
    }
    Ok(url)
}

/// The path and query exactly as they go on the request line: what the
/// config service signs on its side (`getRequestURI` + `?` + `getQueryString`).
pub fn path_and_query(url: &Url) -> String {
    match url.query() {
        Some(q) if !q.is_empty() => format!("{}?{q}", url.path()),
        _ => url.path().to_owned(),
    }
}

fn same_namespace(a: &str, b: &str) -> bool {
    let strip = |s: &str| {
        s.strip_suffix(".properties")
            .unwrap_or(s)
            .to_ascii_lowercase()
    };
    strip(a) == strip(b)
}

/// `reqwest` hides the useful part ("connection refused") in the sources.
fn error_chain(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_path_is_the_one_sent() {
        let server = Url::parse("http://10.0.0.5:8080").unwrap();
        let url = endpoint(
            &server,
            &["configs", "100004458", "default", "application"],
            &[("ip", "10.0.0.1".into())],
        )
        .unwrap();
        assert_eq!(
            path_and_query(&url),
            "/configs/100004458/default/application?ip=10.0.0.1"
        );
        assert_eq!(
            sign::signature(
                "df23df3f59884980844ff3dada30fa97",
                1576478257344,
                &path_and_query(&url)
            ),
            "EoKyziXvKqzHgwx+ijDJwgVTDgE="
        );
    }

    #[test]
    fn server_prefixes_and_encoding() {
        let server = Url::parse("http://apollo.internal/config-service/?x=1#f").unwrap();
        let url = endpoint(&server, &["configs", "my app", "default", "a/b.json"], &[]).unwrap();
        assert_eq!(
            path_and_query(&url),
            "/config-service/configs/my%20app/default/a%2Fb.json"
        );
        let n =
            serde_json::json!([{"namespaceName": "application", "notificationId": -1}]).to_string();
        let url = endpoint(
            &server,
            &["notifications", "v2"],
            &[("appId", "a".into()), ("notifications", n)],
        )
        .unwrap();
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs[1].1,
            r#"[{"namespaceName":"application","notificationId":-1}]"#
        );
        assert!(!url.query().unwrap().contains('"'));
    }

    #[test]
    fn namespace_names() {
        let id = |ns: &str| Identity {
            app_id: "a".into(),
            cluster: "default".into(),
            namespace: ns.into(),
            secret: Some("s".into()),
            ip: None,
        };
        assert_eq!(
            id("application.properties").notification_name(),
            "application"
        );
        assert_eq!(id("domains.json").notification_name(), "domains.json");
        assert!(same_namespace("Application", "application.properties"));
        assert!(!format!("{:?}", id("x")).contains("\"s\""));
    }
}
