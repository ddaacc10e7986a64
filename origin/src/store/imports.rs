//! The statements of import jobs (`POST /api/v1/imports`; migration 17),
//! on the meta database.

use super::{DbError, Store};
use mysql_async::prelude::*;

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub public_id: String,
    pub app: String,
    pub format: String,
    pub dry_run: bool,
    /// `running`, `done`, `failed`, `interrupted`.
    pub state: String,
    /// JSON of `import::run::Summary`.
    pub summary: String,
    /// JSON array of `import::run::Refusal` (the first ones).
    pub refusals: Option<String>,
    pub error: Option<String>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub finished_at_ms: Option<u64>,
}

/// `public_id, app, format, dry_run, state, summary, refusals, error,
/// created_at_ms, updated_at_ms, finished_at_ms`.
type JobCols = (
    String,
    String,
    String,
    u8,
    String,
    String,
    Option<String>,
    Option<String>,
    u64,
    u64,
    Option<u64>,
);

/// A new job's answer: its row, or the app's job that is still running.
pub enum Started {
    Started,
    /// The app's running job (its public id).
    Busy(String),
}

impl Store {
    /// Records a new running job of `app`, unless one of its jobs runs: a
    /// running job not updated since `stale_before_ms` is marked
    /// `interrupted` first (its origin stopped).
    pub async fn start_import(
        &self,
        job: &JobRow,
        stale_before_ms: u64,
    ) -> Result<Started, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "UPDATE import_jobs SET state = 'interrupted', running_app = NULL, finished_at_ms = ? \
                 WHERE running_app = ? AND updated_at_ms < ?",
                (job.created_at_ms, job.app.as_str(), stale_before_ms),
            )
            .await?;
            let inserted = conn
                .exec_drop(
                    "INSERT INTO import_jobs (public_id, app, running_app, format, dry_run, state, summary, \
                     created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                    (
                        job.public_id.as_str(),
                        job.app.as_str(),
                        job.app.as_str(),
                        job.format.as_str(),
                        u8::from(job.dry_run),
                        job.summary.as_str(),
                        job.created_at_ms,
                        job.created_at_ms,
                    ),
                )
                .await;
            match inserted {
                Ok(()) => Ok(Started::Started),
                Err(mysql_async::Error::Server(s))
                    if s.code == 1062 && s.message.contains("uk_running") =>
                {
                    let running: Option<String> = conn
                        .exec_first(
                            "SELECT public_id FROM import_jobs WHERE running_app = ?",
                            (job.app.as_str(),),
                        )
                        .await?;
                    Ok(Started::Busy(running.unwrap_or_default()))
                }
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    /// A running job's progress (its heartbeat too).
    pub async fn update_import(
        &self,
        public_id: &str,
        summary: &str,
        now_ms: u64,
    ) -> Result<(), DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "UPDATE import_jobs SET summary = ?, updated_at_ms = ? \
                 WHERE public_id = ? AND state = 'running'",
                (summary, now_ms, public_id),
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// A job's end: `state` `done` or `failed`, its app free to start another.
    pub async fn finish_import(
        &self,
        public_id: &str,
        state: &str,
        summary: &str,
        refusals: &str,
        error: Option<&str>,
        now_ms: u64,
    ) -> Result<(), DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            conn.exec_drop(
                "UPDATE import_jobs SET state = ?, running_app = NULL, summary = ?, refusals = ?, \
                 error = ?, updated_at_ms = ?, finished_at_ms = ? WHERE public_id = ? AND state = 'running'",
                (state, summary, refusals, error, now_ms, now_ms, public_id),
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// A job by its public id.
    pub async fn import_job(&self, public_id: &str) -> Result<Option<JobRow>, DbError> {
        self.bounded(async {
            let mut conn = self.meta.get_conn().await?;
            let row: Option<JobCols> = conn
                .exec_first(
                    "SELECT public_id, app, format, dry_run, state, summary, refusals, error, \
                     created_at_ms, updated_at_ms, finished_at_ms FROM import_jobs WHERE public_id = ?",
                    (public_id,),
                )
                .await?;
            Ok(row.map(|r| JobRow {
                public_id: r.0,
                app: r.1,
                format: r.2,
                dry_run: r.3 != 0,
                state: r.4,
                summary: r.5,
                refusals: r.6,
                error: r.7,
                created_at_ms: r.8,
                updated_at_ms: r.9,
                finished_at_ms: r.10,
            }))
        })
        .await
    }
}
