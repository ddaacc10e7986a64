//! Imports through the API (`POST /api/v1/imports`): the file is checked
//! (its header, or a YOURLS dump whole) before the answer, then imported by
//! a task of the origin that took it, at the app's creation rate, chunk by
//! chunk, its progress in `import_jobs` (meta database) where any origin
//! reads it. One job runs per app at a time (MySQL's unique key decides);
//! a job whose origin stopped reads `interrupted` once its progress is
//! [`STALE_MS`] old, and posting the file again finishes it (codes already
//! imported count as `existing`).

use super::format::{rows, FileError, Format};
use super::row::Row;
use super::run::{ImportError, Importer, Refusal, Summary};
use crate::error::ApiError;
use crate::links::{LinkError, Links, MAX_BATCH_ITEMS};
use crate::store::imports::{JobRow, Started};
use crate::tenancy::{Caller, Scope};
use bytes::Bytes;
use serde::Serialize;
use shorturl_common::time::{now_unix_ms, rfc3339_ms};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Files an origin holds at once (each job keeps its file in memory while
/// it runs, up to `links.max_import_body_bytes`): a slot is taken before
/// the body is read and given back when the job ends, so many keys posting
/// at once cannot make an origin hold more than this many files.
pub const MAX_FILES_IN_MEMORY: usize = 2;

/// The origin's slots for files ([`MAX_FILES_IN_MEMORY`]).
pub static FILE_SLOTS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(MAX_FILES_IN_MEMORY);

/// A slot for one file, held until its job ends (`None` when every slot
/// is taken).
pub fn file_slot() -> Option<tokio::sync::SemaphorePermit<'static>> {
    FILE_SLOTS.try_acquire().ok()
}

/// A running job's progress older than this: its origin stopped.
pub const STALE_MS: u64 = 60_000;
/// Refused rows a finished job keeps (with the counts of all of them).
pub const MAX_REFUSALS: usize = 1000;

/// A job to start.
pub struct NewJob {
    pub format: Format,
    pub domain: Option<String>,
    pub dry_run: bool,
    pub body: Bytes,
}

/// Takes up to `n` creation tokens of the caller's app: `Ok(granted)`, or
/// the 429 (with its `Retry-After`) to wait for.
pub type Pace = Box<dyn Fn(u32) -> Result<u32, ApiError> + Send + Sync>;

/// Why a job was not started.
#[derive(Debug, Error)]
pub enum JobError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("an import of this app is running: {0}")]
    Running(String),
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub id: String,
    pub app: String,
    pub format: String,
    pub dry_run: bool,
    /// `running`, `done`, `failed`, `interrupted`.
    pub state: String,
    #[serde(flatten)]
    pub summary: Summary,
    /// The first [`MAX_REFUSALS`] refused rows, once the job has ended.
    pub refusals: Vec<Refusal>,
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
}

impl JobView {
    fn of(r: JobRow, now_ms: u64) -> JobView {
        let state = if r.state == "running" && r.updated_at_ms + STALE_MS < now_ms {
            "interrupted".to_owned()
        } else {
            r.state
        };
        JobView {
            id: r.public_id,
            app: r.app,
            format: r.format,
            dry_run: r.dry_run,
            state,
            summary: serde_json::from_str(&r.summary).unwrap_or_default(),
            refusals: r
                .refusals
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default(),
            error: r.error,
            created_at: rfc3339_ms(r.created_at_ms),
            updated_at: rfc3339_ms(r.updated_at_ms),
            finished_at: r.finished_at_ms.map(rfc3339_ms),
        }
    }
}

/// Starts a job of `caller`'s (`links:create`): answers once the file's
/// header is read and the job recorded.
pub async fn start(
    links: Arc<Links>,
    caller: Arc<Caller>,
    pace: Pace,
    job: NewJob,
    slot: tokio::sync::SemaphorePermit<'static>,
) -> Result<JobView, JobError> {
    caller
        .require(Scope::LinksCreate)
        .map_err(LinkError::from)?;
    let input = rows(job.format, std::io::Cursor::new(job.body))?;
    let now = now_unix_ms();
    let row = JobRow {
        public_id: hex::encode(rand::random::<[u8; 12]>()),
        app: caller.app.clone(),
        format: job.format.name().to_owned(),
        dry_run: job.dry_run,
        state: "running".into(),
        summary: serde_json::to_string(&Summary::default()).unwrap_or_default(),
        refusals: None,
        error: None,
        created_at_ms: now,
        updated_at_ms: now,
        finished_at_ms: None,
    };
    match links
        .store
        .start_import(&row, now.saturating_sub(STALE_MS))
        .await
        .map_err(LinkError::from)?
    {
        Started::Busy(id) => return Err(JobError::Running(id)),
        Started::Started => {}
    }
    let view = JobView::of(row.clone(), now);
    let importer = Importer {
        links: Arc::clone(&links),
        caller: (*caller).clone(),
        format: job.format,
        domain: job.domain,
        dry_run: job.dry_run,
    };
    tokio::spawn(async move {
        // The file's slot is the task's: given back when the job ends.
        let _slot = slot;
        let id = row.public_id;
        let mut summary = Summary::default();
        let mut refusals = Vec::new();
        let ended = run(&importer, input, &pace, &id, &mut summary, &mut refusals).await;
        let (state, error) = match &ended {
            Ok(()) => ("done", None),
            Err(e) => ("failed", Some(e.clone())),
        };
        let json = serde_json::to_string(&summary).unwrap_or_default();
        let refused = serde_json::to_string(&refusals).unwrap_or_default();
        let store = &importer.links.store;
        let finished = store
            .finish_import(&id, state, &json, &refused, error.as_deref(), now_unix_ms())
            .await;
        match finished {
            Ok(()) => {
                tracing::info!(job = %id, state, rows = summary.rows, created = summary.created, "import finished")
            }
            // It reads `interrupted` once stale; posting the file again finishes it.
            Err(e) => tracing::warn!(job = %id, error = %e, "import finished but not recorded"),
        }
    });
    Ok(view)
}

/// The job's rows, chunk by chunk at the app's creation rate; `Err` is the
/// message a failed job shows.
async fn run(
    importer: &Importer,
    mut input: Box<dyn Iterator<Item = Result<Row, FileError>> + Send>,
    pace: &Pace,
    id: &str,
    summary: &mut Summary,
    refusals: &mut Vec<Refusal>,
) -> Result<(), String> {
    loop {
        let n = if importer.dry_run {
            MAX_BATCH_ITEMS as u32
        } else {
            take(pace).await?
        };
        let mut chunk = Vec::with_capacity(n as usize);
        for row in input.by_ref().take(n as usize) {
            chunk.push(row.map_err(|e| e.to_string())?);
        }
        if chunk.is_empty() {
            return Ok(());
        }
        let outcomes = importer.chunk(&chunk).await.map_err(
            |ImportError::Unavailable { line, message }| {
                format!("line {line}: {message}; post the file again to finish it")
            },
        )?;
        for (row, o) in chunk.iter().zip(outcomes) {
            if let Some(r) = summary.count(row, o) {
                if refusals.len() < MAX_REFUSALS {
                    refusals.push(r);
                }
            }
        }
        let json = serde_json::to_string(&summary).unwrap_or_default();
        if let Err(e) = importer
            .links
            .store
            .update_import(id, &json, now_unix_ms())
            .await
        {
            tracing::warn!(job = %id, error = %e, "import progress not recorded");
        }
    }
}

/// Up to a chunk of creation tokens, waiting while the app has none.
async fn take(pace: &Pace) -> Result<u32, String> {
    loop {
        match pace(MAX_BATCH_ITEMS as u32) {
            Ok(n) => return Ok(n.max(1)),
            Err(e) if e.status == http::StatusCode::TOO_MANY_REQUESTS => {
                let wait = e.retry_after.unwrap_or(1).clamp(1, 60);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            Err(e) => return Err(e.message),
        }
    }
}

/// A job of `caller`'s (or any, for an admin key); `None` for an unknown
/// id and another app's job alike.
pub async fn view(links: &Links, caller: &Caller, id: &str) -> Result<Option<JobView>, LinkError> {
    if id.len() != 24 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let row = links.store.import_job(id).await?;
    Ok(row
        .filter(|r| caller.is_admin() || r.app == caller.app)
        .map(|r| JobView::of(r, now_unix_ms())))
}
