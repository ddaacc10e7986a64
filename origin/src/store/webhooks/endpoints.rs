//! Endpoints (`webhook_endpoint`, meta database).

use super::EventMask;
use crate::store::{DbError, Store};
use mysql_async::prelude::*;
use mysql_async::{TxOpts, Value};

/// An endpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointRow {
    pub id: u64,
    pub public_id: String,
    pub app: String,
    pub url: String,
    pub events: EventMask,
    pub description: String,
    pub secret_sealed: String,
    pub enabled: bool,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

const ENDPOINT_COLUMNS: &str = "id, public_id, app, url, events, description, secret_sealed, \
                                enabled, created_at_ms, updated_at_ms";

type EndpointCols = (
    u64,
    String,
    String,
    String,
    String,
    String,
    String,
    u8,
    u64,
    u64,
);

fn endpoint_of(c: EndpointCols) -> EndpointRow {
    EndpointRow {
        id: c.0,
        public_id: c.1,
        app: c.2,
        url: c.3,
        events: EventMask::from_column(&c.4),
        description: c.5,
        secret_sealed: c.6,
        enabled: c.7 != 0,
        created_at_ms: c.8,
        updated_at_ms: c.9,
    }
}

/// What may change on an endpoint (`None`: unchanged).
#[derive(Debug, Clone, Default)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub events: Option<EventMask>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
    pub secret_sealed: Option<String>,
}

/// An enabled endpoint, as the sender needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub id: u64,
    pub public_id: String,
    pub url: String,
    pub secret_sealed: String,
}

impl Store {
    pub async fn insert_endpoint(&self, e: &EndpointRow) -> Result<u64, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "INSERT INTO webhook_endpoint (public_id, app, url, events, description, secret_sealed, \
                 enabled, created_at_ms, updated_at_ms) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    e.public_id.as_str(),
                    e.app.as_str(),
                    e.url.as_str(),
                    e.events.column(),
                    e.description.as_str(),
                    e.secret_sealed.as_str(),
                    u8::from(e.enabled),
                    e.created_at_ms,
                    e.updated_at_ms,
                ),
            )
            .await?;
            Ok(conn.last_insert_id().unwrap_or(0))
        })
        .await
    }

    /// The endpoint with this public id.
    pub async fn endpoint(&self, public_id: &str) -> Result<Option<EndpointRow>, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let r: Option<EndpointCols> = conn
                .exec_first(
                    format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint WHERE public_id = ?"),
                    (public_id,),
                )
                .await?;
            Ok(r.map(endpoint_of))
        })
        .await
    }

    /// The endpoints of `app` (every app's: `None`), oldest first.
    pub async fn endpoints(&self, app: Option<&str>) -> Result<Vec<EndpointRow>, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<EndpointCols> = match app {
                Some(a) => {
                    conn.exec(
                        format!(
                            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint WHERE app = ? ORDER BY id LIMIT 1000"
                        ),
                        (a,),
                    )
                    .await?
                }
                None => {
                    conn.query(format!(
                        "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoint ORDER BY id LIMIT 1000"
                    ))
                    .await?
                }
            };
            Ok(rows.into_iter().map(endpoint_of).collect())
        })
        .await
    }

    /// How many endpoints `app` has.
    pub async fn endpoint_count(&self, app: &str) -> Result<u64, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let n: Option<u64> = conn
                .exec_first(
                    "SELECT COUNT(*) FROM webhook_endpoint WHERE app = ?",
                    (app,),
                )
                .await?;
            Ok(n.unwrap_or(0))
        })
        .await
    }

    pub async fn update_endpoint(
        &self,
        id: u64,
        p: &EndpointPatch,
        at_ms: u64,
    ) -> Result<(), DbError> {
        let mut sets = vec!["updated_at_ms = ?"];
        let mut params: Vec<Value> = vec![at_ms.into()];
        if let Some(u) = &p.url {
            sets.push("url = ?");
            params.push(u.as_str().into());
        }
        if let Some(e) = p.events {
            sets.push("events = ?");
            params.push(e.column().into());
        }
        if let Some(d) = &p.description {
            sets.push("description = ?");
            params.push(d.as_str().into());
        }
        if let Some(en) = p.enabled {
            sets.push("enabled = ?");
            params.push(u8::from(en).into());
        }
        if let Some(s) = &p.secret_sealed {
            sets.push("secret_sealed = ?");
            params.push(s.as_str().into());
        }
        params.push(id.into());
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                format!(
                    "UPDATE webhook_endpoint SET {} WHERE id = ?",
                    sets.join(", ")
                ),
                params,
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Removes an endpoint and its deliveries (in one transaction).
    pub async fn delete_endpoint(&self, id: u64) -> Result<(), DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let mut tx = conn.start_transaction(TxOpts::default()).await?;
            tx.exec_drop("DELETE FROM webhook_delivery WHERE endpoint_id = ?", (id,))
                .await?;
            tx.exec_drop("DELETE FROM webhook_endpoint WHERE id = ?", (id,))
                .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// The enabled endpoints, for the sender.
    pub async fn enabled_endpoints(&self) -> Result<Vec<Target>, DbError> {
        self.quiet(async {
            let mut conn = self.meta.get_conn().await?;
            let rows: Vec<(u64, String, String, String)> = conn
                .query(
                    "SELECT id, public_id, url, secret_sealed FROM webhook_endpoint WHERE enabled = 1",
                )
                .await?;
            Ok(rows
                .into_iter()
                .map(|(id, public_id, url, secret_sealed)| Target {
                    id,
                    public_id,
                    url,
                    secret_sealed,
                })
                .collect())
        })
        .await
    }
}
