//! `shorturl-origin`: serve, migrate, pregen, reap, import, migrate-keys, issuer
//! migrate, check.

use clap::{Parser, Subcommand};
use shorturl_origin::config::{Config, CounterBackend};
use shorturl_origin::import;
use shorturl_origin::{bench, db, issuer, lifecycle, pregen, rekey, schema, serve};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// mimalloc: a creation allocates and frees across hyper, axum, serde,
/// mysql_async and redis; under 64 concurrent creations glibc's
/// malloc/free (`_int_malloc`, `unlink_chunk`, `malloc_consolidate`) were
/// a fifth of the origin's CPU (perf, issue 30), as they were near a tenth
/// of the edge's hot path.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "shorturl-origin",
    version,
    about = "Short-link origin: creation API and miss resolution"
)]
struct Cli {
    /// Configuration file (YAML).
    #[arg(short = 'c', long, global = true, default_value = "conf/origin.yaml")]
    config: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the HTTP service (applies pending migrations first).
    Serve,
    /// Apply pending schema migrations and exit.
    Migrate,
    /// Extend the pre-generated code table to COUNT codes (resumable).
    /// With `mysql.shards`: fill the shard named by --shard, or every
    /// shard's range, each up to its last id (or COUNT, if lower).
    Pregen {
        /// Ids 1..=COUNT (required unless `mysql.shards` is configured).
        #[arg(long)]
        count: Option<u64>,
        /// Only this shard (`mysql.shards[].name`).
        #[arg(long)]
        shard: Option<String>,
        /// Rows per INSERT/commit.
        #[arg(long, default_value_t = 20_000)]
        chunk: u64,
        /// Hide the progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Mark links past their expiry `expired` now (one pass under the
    /// reaper lease), then apply them to Redis; prints what it did.
    Reap {
        /// Rows per second at most (default: lifecycle.reap_rate_per_sec).
        #[arg(long)]
        rate: Option<u32>,
        /// Hide the progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Write what Redis caches under the records' pre-protocol-3.5 keys
    /// under their (domain, code) keys, from MySQL (the upgrade step
    /// between origins and edges; resumable, safe beside serving origins);
    /// prints what it did as JSON.
    MigrateKeys {
        /// Every link bound to a domain, cached or not.
        #[arg(long)]
        all: bool,
        /// Hide the progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Import links from a file (docs/integrations.md): each row a creation
    /// of APP's, its code kept on its domain when free; rows not imported
    /// are written to a report; resumable; prints a summary as JSON.
    Import(import::cli::Args),
    /// The issuer's durable counter.
    Issuer {
        #[command(subcommand)]
        cmd: IssuerCmd,
    },
    /// Validate the configuration and exit.
    Check,
    /// Read a password from stdin (one line) and print its argon2id PHC
    /// string, for `admin.users[].password_hash`. Needs no configuration.
    HashPassword,
    /// Measure issuer ids/s, MariaDB's raw durable-claim capacity or
    /// click-rollup rows/s (prints JSON).
    Bench {
        /// issuer | raw-claims | rollups
        what: String,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
    },
}

#[derive(Subcommand)]
enum IssuerCmd {
    /// Move the counter (`issuer.name`) from one backend to another, with
    /// every origin stopped: the destination is raised to the source's
    /// value (and to the highest id MySQL knows to be used), never lowered.
    /// Then set `issuer.backend` to the destination and start the origins.
    Migrate {
        #[arg(long, value_enum)]
        from: CounterBackend,
        #[arg(long, value_enum)]
        to: CounterBackend,
    },
}

/// Why a command failed (printed as `error: …`).
#[derive(Debug, thiserror::Error)]
enum CmdError {
    #[error(transparent)]
    Serve(#[from] serve::ServeError),
    #[error(transparent)]
    Mysql(#[from] mysql_async::Error),
    #[error(transparent)]
    Pregen(#[from] pregen::PregenError),
    #[error(transparent)]
    Reap(#[from] lifecycle::cli::ReapRunError),
    #[error(transparent)]
    Bench(#[from] bench::BenchError),
    #[error(transparent)]
    IssuerMigrate(#[from] issuer::migrate::MigrateError),
    #[error(transparent)]
    Rekey(#[from] rekey::RekeyError),
    #[error(transparent)]
    Import(#[from] import::cli::CliError),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Log files get plain text; colours only on a terminal.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    if let Cmd::HashPassword = cli.cmd {
        return hash_password();
    }
    let cfg = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("invalid configuration {}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    if let Cmd::Check = cli.cmd {
        println!("{}: ok", cli.config.display());
        return ExitCode::SUCCESS;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        let r: Result<(), CmdError> = match cli.cmd {
            Cmd::Serve => serve::run(cfg).await.map_err(Into::into),
            Cmd::Migrate => {
                let pool = db::pool(&cfg.mysql)?;
                let applied = schema::migrate(&pool).await?;
                println!("migrations applied: {applied:?}");
                Ok(())
            }
            Cmd::Pregen {
                count,
                shard,
                chunk,
                quiet,
            } => pregen::cli(&cfg.mysql, count, shard.as_deref(), chunk.max(1), !quiet)
                .await
                .map_err(Into::into),
            Cmd::Reap { rate, quiet } => {
                let r = lifecycle::cli::run(&cfg, rate, !quiet).await?;
                println!(
                    "reap: {} links marked expired in {:.2} s ({:.0}/s); {} outbox rows applied to Redis in {:.2} s; {} codes recycled",
                    r.reaped,
                    r.reap_secs,
                    r.reaped as f64 / r.reap_secs.max(1e-9),
                    r.applied,
                    r.apply_secs,
                    r.recycled
                );
                Ok(())
            }
            Cmd::Import(args) => {
                let r = import::cli::run(cfg, args).await?;
                println!("{}", serde_json::json!({ "import": r }));
                Ok(())
            }
            Cmd::MigrateKeys { all, quiet } => {
                let r = rekey::run(&cfg, all, !quiet).await?;
                println!("{}", serde_json::json!({ "migrate_keys": r }));
                Ok(())
            }
            Cmd::Bench {
                what,
                concurrency,
                seconds,
            } => bench::run(&cfg, &what, concurrency.max(1), seconds)
                .await
                .map_err(Into::into),
            Cmd::Issuer {
                cmd: IssuerCmd::Migrate { from, to },
            } => {
                let m = issuer::migrate::run(&cfg, from, to).await?;
                println!(
                    "issuer counter {:?}: {from:?} read {}, highest used id {}; {to:?} was {}, now {}",
                    cfg.issuer.name, m.source, m.floor, m.before, m.after
                );
                Ok(())
            }
            Cmd::Check | Cmd::HashPassword => Ok(()),
        };
        r
    });
    // Tasks still running (claim workers, refresh loops) are cancelled; the
    // shutdown grace was already spent by `serve`.
    rt.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `hash-password`: one line from stdin (without its line end) → PHC string.
fn hash_password() -> ExitCode {
    let mut line = String::new();
    if let Err(e) = std::io::stdin().read_line(&mut line) {
        eprintln!("cannot read the password from stdin: {e}");
        return ExitCode::FAILURE;
    }
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        eprintln!("empty password: give one line on stdin");
        return ExitCode::from(2);
    }
    match shorturl_origin::passwords::hash_password(password) {
        Ok(h) => {
            println!("{h}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
