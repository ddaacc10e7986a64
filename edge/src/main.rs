//! `shorturl-edge -c conf/edge.yaml [--test] [-u] [-d]`
//!
//! `--test` validates the configuration and exits; `-u` takes the listening
//! sockets over from a running edge (graceful upgrade: then `SIGQUIT` the
//! old one); `-d` daemonises (and writes `server.pid_file`).

use clap::Parser;
use pingora::server::configuration::Opt;
use shorturl_edge::start;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc: Pingora allocates and frees per request (headers, buffers);
/// profiling showed glibc malloc/free near 10% of the hot path.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line (Pingora's own flags, plus the config path being ours).
#[derive(Parser, Debug)]
#[command(name = "shorturl-edge", version, about = "Short-link edge on Pingora")]
struct Cli {
    /// Configuration file (Pingora `server:` section + `edge:` section).
    #[arg(short = 'c', long = "conf", default_value = "conf/edge.yaml")]
    conf: PathBuf,
    /// Validate the configuration and exit (0 when valid).
    #[arg(short = 't', long = "test")]
    test: bool,
    /// Take over the sockets of a running edge (graceful upgrade).
    #[arg(short = 'u', long = "upgrade")]
    upgrade: bool,
    /// Run in the background.
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Read a legacy OpenResty `config.lua` instead of `--conf` (lua-compat/README.md).
    #[arg(long = "lua-config", value_name = "CONFIG_LUA")]
    lua_config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let legacy = cli.lua_config.take().map(|p| cli.conf = p).is_some();
    let loaded = match shorturl_edge::config::legacy_lua::load_either(&cli.conf, legacy) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("shorturl-edge: {}: {e}", cli.conf.display());
            return ExitCode::from(2);
        }
    };
    if cli.test {
        println!(
            "shorturl-edge: configuration {} is valid",
            cli.conf.display()
        );
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let opt = Opt {
        upgrade: cli.upgrade,
        daemon: cli.daemon,
        ..Default::default()
    };
    match start::build(opt, loaded) {
        Ok(server) => server.run_forever(),
        Err(e) => {
            tracing::error!(error = %e, "shorturl-edge could not start");
            eprintln!("shorturl-edge: {e}");
            ExitCode::from(1)
        }
    }
}
