//! Managing endpoints: checks, sealing the secret, and what the API shows.
//! An app sees and changes its own endpoints; an admin key any app's.
//! Someone else's endpoint is "not found", never "forbidden".

use super::sign::new_secret;
use super::Webhooks;
use crate::store::webhooks::{
    DeliveryRow, DeliveryState, EndpointPatch, EndpointRow, EventMask, EventType,
};
use crate::store::DbError;
use crate::tenancy::Caller;
use serde::{Deserialize, Serialize};
use shorturl_common::time::{now_unix_ms, rfc3339_ms};
use shorturl_common::tls_seal::SealError;
use url::{Host, Url};

/// Longest endpoint URL and description.
pub const MAX_URL_BYTES: usize = 2048;
pub const MAX_DESCRIPTION_CHARS: usize = 200;

/// Why an endpoint operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("url {0}")]
    Url(&'static str),
    #[error("{0}")]
    Events(String),
    #[error("description: at most {MAX_DESCRIPTION_CHARS} characters, no control characters")]
    Description,
    #[error("{0}")]
    Body(String),
    /// `webhooks.key` is not set: secrets could not be sealed.
    #[error("webhooks are not configured on this origin (webhooks.key)")]
    NotConfigured,
    #[error("an app has at most {0} endpoints")]
    TooMany(u64),
    #[error("no such webhook endpoint")]
    NotFound,
    #[error("no such delivery")]
    DeliveryNotFound,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Seal(#[from] SealError),
}

/// The body of `POST /api/v1/webhooks` and `PATCH /api/v1/webhooks/{id}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointInput {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
    /// PATCH only: a new secret (shown once in the answer).
    #[serde(default)]
    pub rotate_secret: bool,
}

impl EndpointInput {
    pub fn parse(body: &[u8]) -> Result<EndpointInput, EndpointError> {
        serde_json::from_slice(body).map_err(|e| {
            // serde's text names the field or the position, never a value.
            EndpointError::Body(format!("body: {e}"))
        })
    }
}

/// Delivery counts by state.
#[derive(Debug, Clone, Serialize)]
pub struct Counts {
    pub pending: u64,
    pub delivered: u64,
    pub dead: u64,
}

/// An endpoint as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointView {
    pub id: String,
    pub app: String,
    pub url: String,
    pub events: Vec<&'static str>,
    pub description: String,
    pub enabled: bool,
    pub created_at: String,
    pub updated_at: String,
    /// Only in the answers that set it (creation, rotation): never again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deliveries: Option<Counts>,
}

impl EndpointView {
    fn of(e: &EndpointRow) -> EndpointView {
        EndpointView {
            id: e.public_id.clone(),
            app: e.app.clone(),
            url: e.url.clone(),
            events: e.events.types().map(EventType::as_str).collect(),
            description: e.description.clone(),
            enabled: e.enabled,
            created_at: rfc3339_ms(e.created_at_ms),
            updated_at: rfc3339_ms(e.updated_at_ms),
            secret: None,
            deliveries: None,
        }
    }
}

/// A delivery in the log.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryView {
    pub id: String,
    pub event_id: String,
    #[serde(rename = "type")]
    pub ty: String,
    /// The link's key: its code, and `@domain` for a per-domain code.
    pub link: String,
    pub state: &'static str,
    pub attempts: u32,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub last_latency_ms: Option<u32>,
    pub created_at: String,
    /// When the next attempt is due (pending deliveries).
    pub next_attempt_at: Option<String>,
    pub finished_at: Option<String>,
}

impl DeliveryView {
    pub fn of(d: &DeliveryRow) -> DeliveryView {
        DeliveryView {
            id: d.id.to_string(),
            event_id: d.event_id.clone(),
            ty: d.ty.clone(),
            link: d.link.clone(),
            state: d.state.name(),
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error.clone(),
            last_latency_ms: d.last_latency_ms,
            created_at: rfc3339_ms(d.created_at_ms),
            next_attempt_at: (d.state == DeliveryState::Pending).then(|| rfc3339_ms(d.next_at_ms)),
            finished_at: d.finished_at_ms.map(rfc3339_ms),
        }
    }
}

/// A page of the delivery log, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryView>,
    /// `before` for the next page; `null` at the end.
    pub next: Option<String>,
}

/// The Redis-free name a secret is sealed under (its associated data): a
/// sealed secret copied to another endpoint's row does not open.
pub fn seal_name(public_id: &str) -> String {
    format!("webhook:{public_id}")
}

fn events_of(names: &[String]) -> Result<EventMask, EndpointError> {
    let mut m = EventMask::default();
    for n in names {
        match EventType::parse(n) {
            Some(t) => m = m.with(t),
            None => {
                let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                return Err(EndpointError::Events(format!(
                    "events: {:?} is not one of {}",
                    n.chars().take(40).collect::<String>(),
                    known.join(", ")
                )));
            }
        }
    }
    if m.is_empty() {
        return Err(EndpointError::Events("events: name at least one".into()));
    }
    Ok(m)
}

fn description_of(d: &str) -> Result<String, EndpointError> {
    let d = d.trim();
    if d.chars().count() > MAX_DESCRIPTION_CHARS || d.chars().any(char::is_control) {
        return Err(EndpointError::Description);
    }
    Ok(d.to_owned())
}

impl Webhooks {
    /// The URL an endpoint may have: `https` (`http` when allowed), no
    /// credentials or fragment, not one of the fleet's own domains, an IP
    /// literal only if allowed (names are checked when resolved).
    pub fn check_url(&self, raw: &str) -> Result<String, EndpointError> {
        if raw.len() > MAX_URL_BYTES {
            return Err(EndpointError::Url("is longer than 2048 bytes"));
        }
        let u = Url::parse(raw.trim()).map_err(|_| EndpointError::Url("is not an absolute URL"))?;
        match u.scheme() {
            "https" => {}
            "http" if self.cfg.webhooks.allow_http => {}
            _ => return Err(EndpointError::Url("must be https")),
        }
        if u.host().is_none() {
            return Err(EndpointError::Url("has no host"));
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err(EndpointError::Url("must not carry credentials"));
        }
        if u.fragment().is_some() {
            return Err(EndpointError::Url("must not have a fragment"));
        }
        if let Some(why) = self.refusal(&u) {
            return Err(EndpointError::Url(why));
        }
        Ok(u.to_string())
    }

    /// Why `u`'s host may not receive deliveries, if it may not: none, one
    /// of the fleet's own domains, an IP literal that is not allowed (a
    /// name's addresses are checked when resolved). At creation and again
    /// before each attempt (the domain lists change).
    pub(super) fn refusal(&self, u: &Url) -> Option<&'static str> {
        let ip: std::net::IpAddr = match u.host()? {
            Host::Domain(d) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                return self
                    .whitelist
                    .is_listed(&d)
                    .then_some("is on one of this fleet's own domains");
            }
            Host::Ipv4(ip) => ip.into(),
            Host::Ipv6(ip) => ip.into(),
        };
        (!self.policy.allows(ip)).then_some("is not a public address")
    }

    /// The endpoint `public_id` if `caller` may see it.
    async fn visible(
        &self,
        caller: &Caller,
        public_id: &str,
    ) -> Result<EndpointRow, EndpointError> {
        let well_formed = public_id.len() == 24 && public_id.bytes().all(|b| b.is_ascii_hexdigit());
        if !well_formed {
            return Err(EndpointError::NotFound);
        }
        match self.store.endpoint(public_id).await? {
            Some(e) if caller.is_admin() || e.app == caller.app => Ok(e),
            _ => Err(EndpointError::NotFound),
        }
    }

    fn seal(&self, public_id: &str, secret: &str) -> Result<String, EndpointError> {
        let keys = self
            .cfg
            .webhooks
            .keys
            .as_ref()
            .ok_or(EndpointError::NotConfigured)?;
        Ok(keys.seal(&seal_name(public_id), secret.as_bytes())?)
    }

    /// Creates an endpoint of `caller`'s app; the answer carries its secret.
    pub async fn create(
        &self,
        caller: &Caller,
        input: EndpointInput,
    ) -> Result<EndpointView, EndpointError> {
        if self.cfg.webhooks.keys.is_none() {
            return Err(EndpointError::NotConfigured);
        }
        if input.rotate_secret {
            return Err(EndpointError::Body(
                "rotate_secret: only when changing an endpoint".into(),
            ));
        }
        let url = self.check_url(
            input
                .url
                .as_deref()
                .ok_or(EndpointError::Url("is required"))?,
        )?;
        let events = events_of(input.events.as_deref().unwrap_or_default())?;
        let description = description_of(input.description.as_deref().unwrap_or(""))?;
        let max = self.cfg.webhooks.max_endpoints_per_app;
        if self.store.endpoint_count(&caller.app).await? >= max {
            return Err(EndpointError::TooMany(max));
        }
        let public_id = hex::encode(rand::random::<[u8; 12]>());
        let secret = new_secret();
        let now = now_unix_ms();
        let row = EndpointRow {
            id: 0,
            secret_sealed: self.seal(&public_id, &secret)?,
            public_id,
            app: caller.app.clone(),
            url,
            events,
            description,
            enabled: input.enabled.unwrap_or(true),
            created_at_ms: now,
            updated_at_ms: now,
        };
        self.store.insert_endpoint(&row).await?;
        self.refresh().await;
        let mut v = EndpointView::of(&row);
        v.secret = Some(secret);
        Ok(v)
    }

    /// The endpoints of `caller`'s app (an admin: every app's, or `app`'s).
    pub async fn list(
        &self,
        caller: &Caller,
        app: Option<&str>,
    ) -> Result<Vec<EndpointView>, EndpointError> {
        let app = match (caller.is_admin(), app) {
            (true, a) => a,
            (false, _) => Some(caller.app.as_str()),
        };
        Ok(self
            .store
            .endpoints(app)
            .await?
            .iter()
            .map(EndpointView::of)
            .collect())
    }

    /// One endpoint with its delivery counts.
    pub async fn read(&self, caller: &Caller, id: &str) -> Result<EndpointView, EndpointError> {
        let e = self.visible(caller, id).await?;
        let (pending, delivered, dead) = self.store.delivery_counts(e.id).await?;
        let mut v = EndpointView::of(&e);
        v.deliveries = Some(Counts {
            pending,
            delivered,
            dead,
        });
        Ok(v)
    }

    /// Changes an endpoint; a rotated secret is in the answer.
    pub async fn update(
        &self,
        caller: &Caller,
        id: &str,
        input: EndpointInput,
    ) -> Result<EndpointView, EndpointError> {
        let e = self.visible(caller, id).await?;
        let mut p = EndpointPatch {
            url: input
                .url
                .as_deref()
                .map(|u| self.check_url(u))
                .transpose()?,
            events: input.events.as_deref().map(events_of).transpose()?,
            description: input
                .description
                .as_deref()
                .map(description_of)
                .transpose()?,
            enabled: input.enabled,
            secret_sealed: None,
        };
        let secret = if input.rotate_secret {
            let s = new_secret();
            p.secret_sealed = Some(self.seal(&e.public_id, &s)?);
            Some(s)
        } else {
            None
        };
        self.store.update_endpoint(e.id, &p, now_unix_ms()).await?;
        self.refresh().await;
        let mut v = self.read(caller, id).await?;
        v.secret = secret;
        Ok(v)
    }

    /// Deletes an endpoint and its delivery log.
    pub async fn delete(&self, caller: &Caller, id: &str) -> Result<(), EndpointError> {
        let e = self.visible(caller, id).await?;
        self.store.delete_endpoint(e.id).await?;
        self.refresh().await;
        Ok(())
    }

    /// A page of an endpoint's deliveries, newest first.
    pub async fn deliveries(
        &self,
        caller: &Caller,
        id: &str,
        state: Option<DeliveryState>,
        before: Option<u64>,
        limit: u32,
    ) -> Result<DeliveryPage, EndpointError> {
        let e = self.visible(caller, id).await?;
        let rows = self.store.deliveries(e.id, state, before, limit).await?;
        let next = (rows.len() == limit as usize)
            .then(|| rows.last().map(|d| d.id.to_string()))
            .flatten();
        Ok(DeliveryPage {
            deliveries: rows.iter().map(DeliveryView::of).collect(),
            next,
        })
    }

    /// Sends a delivery again (the same id and body), due now.
    pub async fn resend(
        &self,
        caller: &Caller,
        id: &str,
        delivery: &str,
    ) -> Result<DeliveryView, EndpointError> {
        let e = self.visible(caller, id).await?;
        let did: u64 = delivery
            .parse()
            .map_err(|_| EndpointError::DeliveryNotFound)?;
        let d = self
            .store
            .resend_delivery(e.id, did, now_unix_ms())
            .await?
            .ok_or(EndpointError::DeliveryNotFound)?;
        self.ready.notify_one();
        Ok(DeliveryView::of(&d))
    }

    /// Re-reads the subscriptions (after a change of an endpoint here).
    async fn refresh(&self) {
        if let Err(e) = self.store.refresh_subscriptions().await {
            tracing::warn!(error = %e, "webhooks: could not re-read the endpoints");
        }
    }
}
