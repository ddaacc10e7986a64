//! Builds a ready-to-run edge from its loaded configuration: the Pingora
//! server with the proxy behind the fast path and the connection guard, on
//! the plain and TLS listeners, and every background service (origin health
//! checks, invalidation, click flushing, access log, heartbeat, TLS).
//! `main.rs` only parses the command line, loads the config and runs this.

use crate::access_log::{AccessLog, AccessLogWriter};
use crate::clicks::flush::{last_flush_budget, ClickFlusher};
use crate::clicks::{boot_nonce, Clicks, ClicksMetrics, InvalidEdgeName};
use crate::config::Loaded;
use crate::conn::{caps_config, ConnCaps, ConnMetrics, Guarded};
use crate::fast_path::{AnswerError, FastPath};
use crate::inval::subscriber::Subscriber;
use crate::limits::Limits;
use crate::lookup::Resolver;
use crate::metrics::Metrics;
use crate::origin::{build_balancer, BalancerError, OriginPool};
use crate::pages::PageCache;
use crate::proxy::Edge;
use crate::redis_store::RedisStore;
use crate::state::EdgeState;
use crate::status::StatusSource;
use crate::tls::{TlsRuntime, TlsStartError, TlsView};
use pingora::apps::HttpServerOptions;
use pingora::proxy::http_proxy;
use pingora::server::configuration::Opt;
use pingora::server::Server;
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use std::sync::Arc;

/// Why the edge could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("metrics: {0}")]
    Metrics(#[from] pingora_prometheus::prometheus::Error),
    #[error(transparent)]
    Origin(#[from] BalancerError),
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error(transparent)]
    Tls(#[from] TlsStartError),
    #[error(transparent)]
    Clicks(#[from] InvalidEdgeName),
    #[error(transparent)]
    FastPath(#[from] AnswerError),
    #[error(transparent)]
    Geo(#[from] crate::geo::GeoError),
}

/// The edge for `loaded`, bootstrapped (with `opt`: upgrade, daemon) and
/// ready for [`Server::run_forever`].
pub fn build(opt: Opt, loaded: Loaded) -> Result<Server, StartError> {
    let edge_cfg = Arc::new(loaded.edge);
    huge_pages(edge_cfg.cache.transparent_huge_pages);
    let mut server = Server::new_with_opt_and_conf(opt, loaded.server);
    server.bootstrap();

    let metrics = Arc::new(Metrics::new()?);
    let lb = build_balancer(&edge_cfg.origin, &edge_cfg.default_domain)?;
    let lb_service = background_service("origin health check", lb);
    let origin = Arc::new(OriginPool::new(
        lb_service.task(),
        edge_cfg.origin.clone(),
        edge_cfg.default_domain.clone(),
    ));
    let redis = RedisStore::new(edge_cfg.redis.clone()).map_err(StartError::Redis)?;
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
    if let Err(e) = resolver.register_metrics() {
        tracing::warn!(error = %e, "lookup metrics not exported");
    }
    let pages = PageCache::leak(&edge_cfg.pages_cache)?;
    let tls = TlsRuntime::build(
        &edge_cfg.tls,
        server.configuration.threads,
        &edge_cfg.redis,
        &origin,
    )?;
    let subscriber = background_service(
        "invalidation subscriber",
        Subscriber::new(
            Arc::clone(&resolver),
            pages.store,
            Arc::clone(&metrics),
            &edge_cfg.redis,
            &edge_cfg.cache,
        )
        .map_err(StartError::Redis)?,
    );
    let log = AccessLog::new(&edge_cfg.access_log);
    let log_writer = background_service(
        "access log",
        AccessLogWriter::new(Arc::clone(&log), edge_cfg.access_log.clone()),
    );

    // The User-Agent automatons (bot list, device and in-app tokens), built
    // now rather than on the first click or the first link with rules,
    // which would stall its worker for the build.
    shorturl_common::link_rules::warm_up();
    let clicks = Arc::new(Clicks::new(
        &edge_cfg.clicks,
        &boot_nonce(),
        ClicksMetrics::new()?,
    )?);
    clicks.count_on(&resolver.cache);
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
        .map_err(StartError::Redis)?,
    );

    let heartbeat = background_service(
        "status heartbeat",
        crate::heartbeat::HeartbeatSender {
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
    let geo = Arc::new(crate::geo::Geo::new(&edge_cfg.geo)?);
    let geo_reloader = background_service(
        "geo database",
        crate::geo::GeoReloader {
            geo: Arc::clone(&geo),
            interval: edge_cfg.geo.reload_interval,
        },
    );
    let state = Arc::new(EdgeState {
        resolver,
        metrics: Arc::clone(&metrics),
        limits,
        log,
        clicks,
        cfg: Arc::clone(&edge_cfg),
        tls: tls_view,
        geo,
    });
    let app = Edge {
        state: Arc::clone(&state),
        status: StatusSource::new(Arc::clone(&origin)),
        origin,
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
    let fast = FastPath::new(Arc::new(proxy_app), state)?;
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
    server.add_service(geo_reloader);
    if let Some(addr) = &edge_cfg.metrics_listen {
        let mut prom = pingora_prometheus::prometheus_http_service();
        prom.add_tcp(addr);
        prom.threads = Some(1);
        server.add_service(prom);
    }
    tracing::info!(listen = ?edge_cfg.listen, tls_listen = ?edge_cfg.tls.tls.as_ref().map(|t| &t.listen), origins = ?edge_cfg.origin.servers, "shorturl-edge starting");
    Ok(server)
}

/// Opts the process out of transparent huge pages unless `allowed`
/// (`edge.cache.transparent_huge_pages`). The kernel then backs no
/// mapping with them, even one advised `MADV_HUGEPAGE` (mimalloc's arena
/// is), so a 2 MiB region is not made resident for one touched page.
/// Before the pools and caches are allocated; inherited by a daemon's child.
pub fn huge_pages(allowed: bool) {
    if allowed {
        return;
    }
    // SAFETY: PR_SET_THP_DISABLE takes one integer argument and touches no
    // memory of ours; the unused arguments must be zero.
    let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if r != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "transparent huge pages not turned off"
        );
    }
}
