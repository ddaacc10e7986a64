//! `shorturl-origin import`: a file into links, chunk by chunk, with a
//! progress bar, a report of the rows not imported, and a state file that
//! lets an interrupted run resume after its last whole chunk.

use super::format::{rows, FileError, Format};
use super::row::Row;
use super::run::{ImportError, Importer, Refusal, Summary};
use crate::background::Background;
use crate::config::Config;
use crate::serve::{assemble, ServeError};
use futures::stream::{FuturesOrdered, StreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// What to import (`shorturl-origin import`'s arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The file (CSV; YOURLS also an SQL dump).
    pub file: PathBuf,
    #[arg(long, value_enum, default_value = "csv")]
    pub format: Format,
    /// The configured app (`apps[].name`) that owns the links.
    #[arg(long)]
    pub app: String,
    /// Every link's short domain (default: the row's, for this service's
    /// CSV; else `default_domain`).
    #[arg(long)]
    pub domain: Option<String>,
    /// Check every row (and whether its code is free); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Continue an interrupted import of this file.
    #[arg(long)]
    pub resume: bool,
    /// Rows per batch (1-1000).
    #[arg(long, default_value_t = 1000)]
    pub chunk: usize,
    /// Batches whose creations run at once (1-8; 1 is gentler on a busy
    /// MySQL).
    #[arg(long, default_value_t = 2)]
    pub in_flight: usize,
    /// Where the rows not imported go (default `<file>.import-report.csv`).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Why the command failed.
#[derive(Debug, Error)]
pub enum CliError {
    #[error("no app {0:?} in the configuration's apps")]
    UnknownApp(String),
    #[error("{0}: an earlier import of this file did not finish; give --resume to continue it (or delete the file to start over)")]
    Unfinished(PathBuf),
    #[error("{path}: {what}")]
    State { path: PathBuf, what: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Start(#[from] ServeError),
}

/// Where an import is: written after every whole chunk, removed at the end.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct State {
    format: String,
    app: String,
    domain: Option<String>,
    /// Rows of the file done (imported or reported).
    rows_done: u64,
    summary: Summary,
}

/// The command's answer (printed as JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub summary: Summary,
    pub dry_run: bool,
    /// Rows skipped because an earlier run did them (`--resume`).
    pub resumed_after: u64,
    pub seconds: f64,
    pub rows_per_sec: f64,
    pub report: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |source| CliError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The file with `suffix` appended to its name.
fn beside(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Counts the bytes read, for the progress bar.
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

pub async fn run(mut cfg: Config, a: Args) -> Result<Report, CliError> {
    let app = cfg
        .apps
        .iter()
        .find(|x| x.name == a.app)
        .ok_or_else(|| CliError::UnknownApp(a.app.clone()))?;
    let caller = crate::auth::caller_of(app);
    let state_path = beside(&a.file, ".import-state");
    let report_path = a
        .report
        .clone()
        .unwrap_or_else(|| beside(&a.file, ".import-report.csv"));
    let mut state = State {
        format: a.format.name().to_owned(),
        app: a.app.clone(),
        domain: a.domain.clone(),
        rows_done: 0,
        summary: Summary::default(),
    };
    if !a.dry_run {
        match std::fs::read(&state_path) {
            Ok(bytes) if a.resume => {
                let was: State = serde_json::from_slice(&bytes).map_err(|e| CliError::State {
                    path: state_path.clone(),
                    what: format!("not an import state: {e}"),
                })?;
                if (&was.format, &was.app, &was.domain)
                    != (&state.format, &state.app, &state.domain)
                {
                    return Err(CliError::State {
                        path: state_path,
                        what: format!(
                            "that import was --format {} --app {} --domain {:?}: resume it with the same",
                            was.format, was.app, was.domain
                        ),
                    });
                }
                state = was;
            }
            Ok(_) => return Err(CliError::Unfinished(state_path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&state_path)(e)),
        }
    }
    let resumed_after = state.rows_done;
    let file = std::fs::File::open(&a.file).map_err(io(&a.file))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let read = Arc::new(AtomicU64::new(0));
    let mut input = rows(
        a.format,
        Counted {
            inner: file,
            read: Arc::clone(&read),
        },
    )?;
    let mut report = std::io::BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(resumed_after > 0)
            .write(true)
            .truncate(resumed_after == 0)
            .open(&report_path)
            .map_err(io(&report_path))?,
    );
    if resumed_after == 0 {
        writeln!(report, "line,code,kind,message").map_err(io(&report_path))?;
    }

    // An operator's import: conflicts are expected, not a probe to meter.
    cfg.links.custom_code_refusals_per_min = 0;
    let mut work = Background::default();
    let core = assemble(Arc::new(cfg), &mut work).await?;
    let importer = Importer {
        links: core.links,
        caller,
        format: a.format,
        domain: a.domain.clone(),
        dry_run: a.dry_run,
    };
    let bar = if !a.quiet {
        ProgressBar::new(size)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("import {bar:40} {bytes}/{total_bytes}  {msg}  eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut skip = resumed_after;
    let chunk_size = a.chunk.clamp(1, crate::links::MAX_BATCH_ITEMS);
    // Chunks in flight, finished in file order: the next chunk's creations
    // start while the last of this one's finish (one chunk at a time left
    // the claim workers idle at every chunk's tail).
    let mut flight = FuturesOrdered::new();
    let mut eof = false;
    loop {
        while !eof && flight.len() < a.in_flight.clamp(1, 8) {
            let mut chunk: Vec<Row> = Vec::with_capacity(chunk_size);
            while chunk.len() < chunk_size {
                match input.next() {
                    None => {
                        eof = true;
                        break;
                    }
                    Some(row) => {
                        let row = row?;
                        if skip > 0 {
                            skip -= 1;
                        } else {
                            chunk.push(row);
                        }
                    }
                }
            }
            if chunk.is_empty() {
                break;
            }
            let importer = &importer;
            flight.push_back(async move {
                let outcomes = importer.chunk(&chunk).await;
                (chunk, outcomes)
            });
        }
        let Some((chunk, outcomes)) = flight.next().await else {
            break;
        };
        let outcomes = outcomes?;
        for (row, o) in chunk.iter().zip(outcomes) {
            if let Some(r) = state.summary.count(row, o) {
                write_refusal(&mut report, &r).map_err(io(&report_path))?;
            }
        }
        // Every chunk before this one is done too (file order): a crash
        // repeats at most the chunks in flight.
        state.rows_done += chunk.len() as u64;
        if !a.dry_run {
            report.flush().map_err(io(&report_path))?;
            save(&state_path, &state)?;
        }
        bar.set_position(read.load(Ordering::Relaxed));
        bar.set_message(format!(
            "{} rows, {} created, {} refused",
            state.summary.rows, state.summary.created, state.summary.refused
        ));
    }
    bar.finish_and_clear();
    report.flush().map_err(io(&report_path))?;
    if !a.dry_run {
        std::fs::remove_file(&state_path).map_err(io(&state_path))?;
    }
    work.shutdown(Duration::from_secs(2)).await;
    let seconds = started.elapsed().as_secs_f64();
    let this_run = state.rows_done - resumed_after;
    Ok(Report {
        summary: state.summary,
        dry_run: a.dry_run,
        resumed_after,
        seconds,
        rows_per_sec: this_run as f64 / seconds.max(1e-9),
        report: report_path,
    })
}

/// Writes the state beside the file atomically (a crash leaves the old
/// one or the new one).
fn save(path: &Path, state: &State) -> Result<(), CliError> {
    let tmp = beside(path, ".tmp");
    let bytes = serde_json::to_vec(state).unwrap_or_default();
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// One report record (the export's CSV rules: a file's text may start
/// like a formula).
fn write_refusal(out: &mut impl Write, r: &Refusal) -> std::io::Result<()> {
    let mut line = r.line.to_string();
    for f in [r.code.as_deref().unwrap_or(""), &r.kind, &r.message] {
        line.push(',');
        crate::links::export::csv_field(&mut line, f);
    }
    writeln!(out, "{line}")
}
