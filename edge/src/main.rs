//! `shorturl-edge -c conf/edge.yaml [--test] [-u] [-d]`
//!
//! `--test` validates the configuration and exits; `-u` takes the listening
//! sockets over from a running edge (graceful upgrade: then `SIGQUIT` the
//! old one); `-d` daemonises (and writes `server.pid_file`).

use clap::Parser;
use pingora::proxy::http_proxy_service_with_name;
use pingora::server::configuration::Opt;
use pingora::server::Server;
use pingora::services::background::background_service;
use shorturl_edge::access_log::{AccessLog, AccessLogWriter};
use shorturl_edge::config;
use shorturl_edge::limits::Limits;
use shorturl_edge::lookup::Resolver;
use shorturl_edge::metrics::Metrics;
use shorturl_edge::origin::{build_balancer, OriginPool};
use shorturl_edge::proxy::Edge;
use shorturl_edge::redis_store::RedisStore;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
    let loaded = match shorturl_edge::legacy_lua::load_either(&cli.conf, legacy) {
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
    match run(cli, loaded) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("shorturl-edge: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli, loaded: config::Loaded) -> Result<(), String> {
    let edge_cfg = Arc::new(loaded.edge);
    let opt = Opt {
        upgrade: cli.upgrade,
        daemon: cli.daemon,
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(opt, loaded.server);
    server.bootstrap();

    let metrics = Arc::new(Metrics::new().map_err(|e| format!("metrics: {e}"))?);
    let lb = build_balancer(&edge_cfg.origin, &edge_cfg.default_domain)?;
    let lb_service = background_service("origin health check", lb);
    let origin = Arc::new(OriginPool::new(
        lb_service.task(),
        edge_cfg.origin.clone(),
        edge_cfg.default_domain.clone(),
    ));
    let redis = RedisStore::new(edge_cfg.redis.clone()).map_err(|e| format!("redis: {e}"))?;
    let resolver = Arc::new(Resolver::new(
        edge_cfg.cache.clone(),
        redis,
        Arc::clone(&origin),
        Arc::clone(&metrics),
    ));
    let log = AccessLog::new(&edge_cfg.access_log);
    let log_writer = background_service(
        "access log",
        AccessLogWriter::new(Arc::clone(&log), edge_cfg.access_log.clone()),
    );

    let app = Edge {
        resolver,
        origin,
        metrics,
        limits: Limits::new(&edge_cfg.limits),
        log,
        cfg: Arc::clone(&edge_cfg),
    };
    let mut proxy = http_proxy_service_with_name(&server.configuration, app, "shorturl-edge");
    for addr in &edge_cfg.listen {
        proxy.add_tcp(addr);
    }
    server.add_service(proxy);
    server.add_service(lb_service);
    server.add_service(log_writer);
    if let Some(addr) = &edge_cfg.metrics_listen {
        let mut prom = pingora_prometheus::prometheus_http_service();
        prom.add_tcp(addr);
        prom.threads = Some(1);
        server.add_service(prom);
    }
    tracing::info!(listen = ?edge_cfg.listen, origins = ?edge_cfg.origin.servers, "shorturl-edge starting");
    server.run_forever()
}
