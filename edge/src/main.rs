//! `shorturl-edge -c conf/edge.yaml [--test] [-u] [-d]`
//!
//! `--test` validates the configuration and exits; `-u` takes the listening
//! sockets over from a running edge (graceful upgrade: then `SIGQUIT` the
//! old one); `-d` daemonises (and writes `server.pid_file`).

use clap::Parser;
use pingora::apps::HttpServerOptions;
use pingora::proxy::http_proxy;
use pingora::server::configuration::Opt;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use shorturl_edge::access_log::{AccessLog, AccessLogWriter};
use shorturl_edge::clicks::flush::{last_flush_budget, ClickFlusher};
use shorturl_edge::clicks::{boot_nonce, Clicks, ClicksMetrics};
use shorturl_edge::config;
use shorturl_edge::conn::{caps_config, ConnCaps, ConnMetrics, Guarded};
use shorturl_edge::fast_path::{FastPath, Shared};
use shorturl_edge::inval::subscriber::Subscriber;
use shorturl_edge::limits::Limits;
use shorturl_edge::lookup::Resolver;
use shorturl_edge::metrics::Metrics;
use shorturl_edge::origin::{build_balancer, OriginPool};
use shorturl_edge::pages::PageCache;
use shorturl_edge::proxy::Edge;
use shorturl_edge::redis_store::RedisStore;
use shorturl_edge::status::StatusSource;
use shorturl_edge::tls::{TlsRuntime, TlsView};
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
    tracing::info!(redis = %edge_cfg.redis.topology.describe(), "redis");
    let resolver = Arc::new(Resolver::new(
        edge_cfg.cache.clone(),
        redis,
        Arc::clone(&origin),
        Arc::clone(&metrics),
    ));
    if let Err(e) = resolver.cache.register_metrics() {
        tracing::warn!(error = %e, "cache metrics not exported");
    }
    let pages = PageCache::leak(&edge_cfg.pages_cache).map_err(|e| format!("metrics: {e}"))?;
    let tls = TlsRuntime::build(&edge_cfg.tls, &edge_cfg.redis, &origin)?;
    let subscriber = background_service(
        "invalidation subscriber",
        Subscriber::new(
            Arc::clone(&resolver),
            pages.store,
            Arc::clone(&metrics),
            &edge_cfg.redis,
            &edge_cfg.cache,
        )
        .map_err(|e| format!("redis: {e}"))?,
    );
    let log = AccessLog::new(&edge_cfg.access_log);
    let log_writer = background_service(
        "access log",
        AccessLogWriter::new(Arc::clone(&log), edge_cfg.access_log.clone()),
    );

    if edge_cfg.clicks.enabled {
        // The bot list's automaton, built now rather than on the first click.
        shorturl_common::clicks::ua::warm_up();
    }
    let clicks = Arc::new(Clicks::new(
        &edge_cfg.clicks,
        &boot_nonce(),
        ClicksMetrics::new().map_err(|e| format!("metrics: {e}"))?,
    )?);
    let shutdown_timeout = std::time::Duration::from_secs(
        server
            .configuration
            .graceful_shutdown_timeout_seconds
            .unwrap_or(5),
    );
    let flusher = background_service(
        "click flusher",
        ClickFlusher::new(
            Arc::clone(&clicks),
            &edge_cfg.redis,
            edge_cfg.clicks.flush_interval,
            last_flush_budget(shutdown_timeout),
        )
        .map_err(|e| format!("redis: {e}"))?,
    );

    let heartbeat = background_service(
        "status heartbeat",
        shorturl_edge::heartbeat::HeartbeatSender {
            node: format!(
                "{}@{}",
                edge_cfg.clicks.edge_name,
                edge_cfg.listen.first().map(String::as_str).unwrap_or("")
            ),
            interval: edge_cfg.heartbeat_interval,
            origin: Arc::clone(&origin),
            status: StatusSource::new(Arc::clone(&origin)),
            metrics: Arc::clone(&metrics),
            clicks: Arc::clone(&clicks),
        },
    );

    let caps = ConnCaps::new(
        caps_config(&edge_cfg.limits, edge_cfg.trusted_proxies.clone()),
        metrics.conn_open.clone(),
    );
    let conn_metrics = ConnMetrics::from(&metrics);
    let limits = Arc::new(Limits::new(
        &edge_cfg.limits,
        metrics.limits_evictions.clone(),
    ));
    let tls_view = Arc::new(TlsView::of(&tls, edge_cfg.tls.https.clone()));
    let shared = Shared {
        resolver: Arc::clone(&resolver),
        metrics: Arc::clone(&metrics),
        limits: Arc::clone(&limits),
        log: Arc::clone(&log),
        clicks: Arc::clone(&clicks),
        cfg: Arc::clone(&edge_cfg),
        tls: Arc::clone(&tls_view),
    };
    let app = Edge {
        resolver,
        status: StatusSource::new(Arc::clone(&origin)),
        origin,
        limits,
        metrics,
        log,
        cfg: Arc::clone(&edge_cfg),
        tls: tls_view,
        clicks,
        pages,
    };
    // One proxy (one set of limits) behind the fast path, the connection
    // caps and the request-head deadline, on the plain and the TLS listeners.
    let mut proxy_app = http_proxy(&server.configuration, app);
    let mut server_options = HttpServerOptions::default();
    server_options.h2_idle_timeout = Some(std::time::Duration::from_secs(
        edge_cfg.limits.keepalive_timeout_secs,
    ));
    proxy_app.server_options = Some(server_options);
    let fast = FastPath::new(Arc::new(proxy_app), shared).map_err(|e| e.to_string())?;
    let proxy_app = Arc::new(fast);
    let guarded = Guarded::shared(
        Arc::clone(&proxy_app),
        Arc::clone(&caps),
        edge_cfg.limits.header_timeout,
        conn_metrics.clone(),
    );
    let mut proxy = Service::new("shorturl-edge".to_owned(), guarded);
    for addr in &edge_cfg.listen {
        proxy.add_tcp(addr);
    }
    server.add_service(proxy);
    if let (Some(t), Some(term)) = (&edge_cfg.tls.tls, tls.terminator.clone()) {
        let guarded = Guarded::shared(
            proxy_app,
            caps,
            edge_cfg.limits.header_timeout,
            conn_metrics,
        )
        .with_handshake(term);
        let mut svc = Service::new("shorturl-edge-tls".to_owned(), guarded);
        for addr in &t.listen {
            svc.add_tcp(addr);
        }
        server.add_service(svc);
    }
    if let Some(r) = tls.refresher {
        server.add_service(background_service("certificate store", r));
    }
    if let Some(i) = tls.issuer {
        server.add_service(background_service("acme issuer", i));
    }
    server.add_service(lb_service);
    server.add_service(log_writer);
    server.add_service(subscriber);
    server.add_service(flusher);
    server.add_service(heartbeat);
    if let Some(addr) = &edge_cfg.metrics_listen {
        let mut prom = pingora_prometheus::prometheus_http_service();
        prom.add_tcp(addr);
        prom.threads = Some(1);
        server.add_service(prom);
    }
    tracing::info!(listen = ?edge_cfg.listen, tls_listen = ?edge_cfg.tls.tls.as_ref().map(|t| &t.listen), origins = ?edge_cfg.origin.servers, "shorturl-edge starting");
    server.run_forever()
}
