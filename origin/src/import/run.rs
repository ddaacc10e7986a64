//! Importing rows: each is a creation for the importing app (the API's
//! validation, tenancy rules and dedup), with the row's code kept on its
//! domain when free and its creation time kept; chunks go through the
//! batch creation, so their claims share the group commit.

use super::format::{parse_time, Format};
use super::row::Row;
use crate::error::ApiError;
use crate::links::{Creation, LinkError, Links};
use crate::store::{LinkKey, RowState};
use crate::tenancy::Caller;
use crate::validate::{parse_create, CreateRequest};
use serde::Serialize;
use shorturl_common::time::now_unix;
use std::collections::BTreeMap;
use std::sync::Arc;
use thiserror::Error;

/// What became of one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new link.
    Created,
    /// Its code already holds this app's link to the same URL on that
    /// domain: an earlier run imported it (a resumed import repeats the
    /// chunks that were in flight).
    Existing,
    /// The app's identical recent link (the creation's dedup).
    Deduplicated,
    /// Not imported: an invalid row, a taken code, an expired link.
    Refused { kind: String, message: String },
}

/// A row that was not imported, for the report.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Refusal {
    pub line: u64,
    pub code: Option<String>,
    pub kind: String,
    pub message: String,
}

/// Counts of an import so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Summary {
    pub rows: u64,
    pub created: u64,
    pub existing: u64,
    pub deduplicated: u64,
    pub refused: u64,
    /// Refused rows by kind (`code_unavailable`, `invalid_url`, ...).
    pub refused_by_kind: BTreeMap<String, u64>,
}

impl Summary {
    /// Counts `row`'s outcome; a refused row comes back for the report.
    pub fn count(&mut self, row: &Row, o: Outcome) -> Option<Refusal> {
        self.rows += 1;
        match o {
            Outcome::Created => self.created += 1,
            Outcome::Existing => self.existing += 1,
            Outcome::Deduplicated => self.deduplicated += 1,
            Outcome::Refused { kind, message } => {
                self.refused += 1;
                *self.refused_by_kind.entry(kind.clone()).or_default() += 1;
                return Some(Refusal {
                    line: row.line,
                    code: row.code.clone(),
                    kind,
                    message,
                });
            }
        }
        None
    }
}

/// Why an import stopped (rows already imported stay; a resumed run
/// continues after the last whole chunk).
#[derive(Debug, Error)]
pub enum ImportError {
    /// MySQL or Redis did not answer: no row of the chunk is counted
    /// refused for it.
    #[error("line {line}: {message}; nothing after the last whole chunk was counted")]
    Unavailable { line: u64, message: String },
}

/// One import: who imports, where the links go, whether anything is written.
pub struct Importer {
    pub links: Arc<Links>,
    pub caller: Caller,
    pub format: Format,
    /// Every row's domain (else the row's own, for this service's CSV,
    /// else the default domain).
    pub domain: Option<String>,
    /// Check every row (and whether its code is free) without writing.
    pub dry_run: bool,
}

impl Importer {
    /// The outcomes of `rows`, in order.
    pub async fn chunk(&self, rows: &[Row]) -> Result<Vec<Outcome>, ImportError> {
        let now = now_unix();
        let checked: Vec<Result<CreateRequest, Outcome>> =
            rows.iter().map(|r| self.request(r, now)).collect();
        let mut out: Vec<Option<Outcome>> = vec![None; rows.len()];
        let mut todo: Vec<(usize, CreateRequest)> = Vec::new();
        for (i, c) in checked.into_iter().enumerate() {
            match c {
                Ok(req) => todo.push((i, req)),
                Err(o) => out[i] = Some(o),
            }
        }
        if self.dry_run {
            for (i, req) in todo {
                out[i] = Some(
                    self.would_be(&req)
                        .await
                        .map_err(|e| unavailable(&rows[i], e))?,
                );
            }
        } else {
            for (i, req, r) in self.create(todo).await {
                let o = match r {
                    Ok(Creation::New(_)) => Outcome::Created,
                    Ok(Creation::Deduplicated(_)) => Outcome::Deduplicated,
                    Err(LinkError::CodeUnavailable(_)) => self
                        .taken(&req)
                        .await
                        .map_err(|e| unavailable(&rows[i], e))?,
                    Err(e) => {
                        let e = ApiError::from(e);
                        if e.status.is_server_error() {
                            return Err(ImportError::Unavailable {
                                line: rows[i].line,
                                message: e.message,
                            });
                        }
                        Outcome::Refused {
                            kind: e.kind.to_string(),
                            message: e.message,
                        }
                    }
                };
                out[i] = Some(o);
            }
        }
        Ok(out
            .into_iter()
            .map(|o| o.unwrap_or(Outcome::Created))
            .collect())
    }

    /// Creates `todo` through the batch path; rows refused by the
    /// custom-code refusal meter (an API import: protocol 5) wait for it
    /// and are tried again, so the meter paces such an import instead of
    /// refusing its rows.
    async fn create(
        &self,
        mut todo: Vec<(usize, CreateRequest)>,
    ) -> Vec<(usize, CreateRequest, Result<Creation, LinkError>)> {
        let mut done = Vec::with_capacity(todo.len());
        while !todo.is_empty() {
            let reqs: Vec<CreateRequest> = todo.iter().map(|(_, r)| r.clone()).collect();
            let results = self.links.create_batch(&self.caller, reqs).await;
            let mut again = Vec::new();
            let mut wait = 0;
            for ((i, req), r) in todo.into_iter().zip(results) {
                match r {
                    Err(LinkError::CustomCodesLimited { retry_after_secs }) => {
                        wait = wait.max(retry_after_secs);
                        again.push((i, req));
                    }
                    r => done.push((i, req, r)),
                }
            }
            if !again.is_empty() {
                tokio::time::sleep(std::time::Duration::from_secs(wait.clamp(1, 60))).await;
            }
            todo = again;
        }
        done
    }

    /// The creation a row asks for, checked as an API body is, or why not.
    fn request(&self, r: &Row, now: u64) -> Result<CreateRequest, Outcome> {
        let refused = |kind: &str, message: String| Outcome::Refused {
            kind: kind.to_owned(),
            message,
        };
        // An export's disabled or deleted link is not one to bring back.
        if let Some(s) = r
            .state
            .as_deref()
            .filter(|s| !matches!(*s, "active" | "expired"))
        {
            return Err(refused(
                "not_active",
                format!("state {s:?}: only active links are imported"),
            ));
        }
        let domain = self.domain.clone().or_else(|| {
            (self.format == Format::Csv)
                .then(|| r.domain.clone())
                .flatten()
        });
        let mut body = serde_json::json!({ "url": r.url, "tags": r.tags });
        if let Some(c) = &r.code {
            body["code"] = c.as_str().into();
        }
        if let Some(d) = domain {
            body["domain"] = d.into();
        }
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let cfg = &self.links.cfg.links;
        let mut req = parse_create(&bytes, cfg).map_err(|e| refused(e.kind, e.message))?;
        if let Some(t) = &r.created_at {
            match parse_time(t) {
                Some(t) if t <= now => req.created_at = Some(t),
                _ => {
                    return Err(refused(
                        "invalid_created_at",
                        format!("created_at {t:?} is not a date-time up to now"),
                    ))
                }
            }
        }
        if let Some(t) = &r.expires_at {
            let max = now + u64::from(cfg.max_ttl_days) * 86_400;
            match parse_time(t) {
                Some(t) if t <= now => {
                    return Err(refused(
                        "expired",
                        format!("expired at {t} (Unix seconds), before the import"),
                    ))
                }
                Some(t) if t <= max => req.expires_at = Some(t),
                _ => {
                    return Err(refused(
                        "invalid_expires_at",
                        format!(
                            "expires_at {t:?} is not a date-time within {} days",
                            cfg.max_ttl_days
                        ),
                    ))
                }
            }
        }
        Ok(req)
    }

    /// Who holds the row's code on its domain: `None` when free (or a
    /// free pre-generated row), [`Outcome::Existing`] when it is this
    /// app's link to the same URL already, else `code_unavailable`.
    async fn holder(&self, req: &CreateRequest) -> Result<Option<Outcome>, LinkError> {
        let code = req.code.as_deref().unwrap_or_default();
        let domain = req
            .domain
            .as_deref()
            .unwrap_or(&self.links.cfg.default_domain);
        let Some(row) = self.links.store.find(&LinkKey::new(code, domain)).await? else {
            return Ok(None);
        };
        if row.state == RowState::Free {
            return Ok(None);
        }
        let same = row.app.as_deref() == Some(self.caller.app.as_str())
            && row.url.as_deref() == Some(req.url.as_str());
        Ok(Some(if same {
            Outcome::Existing
        } else {
            Outcome::Refused {
                kind: "code_unavailable".into(),
                message: format!("the code {code:?} is taken on {domain}"),
            }
        }))
    }

    /// A refused custom code's outcome.
    async fn taken(&self, req: &CreateRequest) -> Result<Outcome, LinkError> {
        Ok(self.holder(req).await?.unwrap_or_else(|| Outcome::Refused {
            kind: "code_unavailable".into(),
            message: "the code is not available".into(),
        }))
    }

    /// A dry run's outcome of a valid row: its code's holder, else created.
    async fn would_be(&self, req: &CreateRequest) -> Result<Outcome, LinkError> {
        if req.code.is_none() {
            return Ok(Outcome::Created);
        }
        Ok(self.holder(req).await?.unwrap_or(Outcome::Created))
    }
}

fn unavailable(row: &Row, e: LinkError) -> ImportError {
    ImportError::Unavailable {
        line: row.line,
        message: ApiError::from(e).message,
    }
}
