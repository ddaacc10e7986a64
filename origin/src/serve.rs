//! `shorturl-origin serve`: wires the components and runs the HTTP server
//! until SIGTERM/SIGINT, then drains in-flight requests.

use crate::auth::Auth;
use crate::cache::Cache;
use crate::claim::Claimer;
use crate::config::{Config, CounterBackend};
use crate::http::{router, AppState};
use crate::issuer::counter::{highest_used_id, Counter, MysqlCounter, RedisCounter};
use crate::issuer::Issuer;
use crate::links::Links;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::whitelist::Whitelist;
use crate::{apollo, db};
use std::sync::Arc;
use std::time::Duration;

/// Starts the origin; returns when it has shut down.
pub async fn run(cfg: Config) -> Result<(), String> {
    let cfg = Arc::new(cfg);
    let metrics = Arc::new(Metrics::new().map_err(|e| format!("metrics: {e}"))?);
    let pool = db::pool(&cfg.mysql).map_err(|e| format!("mysql.url: {e}"))?;
    // Migrations and the permutation key are needed before anything can be
    // issued; wait for MySQL at start rather than serve errors.
    let (perm, capacity) = loop {
        let attempt = async {
            db::migrate(&pool).await?;
            Ok::<_, mysql_async::Error>((
                db::load_permutation(&pool).await?,
                db::capacity(&pool).await?,
            ))
        };
        match tokio::time::timeout(Duration::from_secs(10), attempt).await {
            Ok(Ok(v)) => break v,
            Ok(Err(e)) => tracing::error!(error = %e, "mysql not ready at start; retrying"),
            Err(_) => tracing::error!("mysql not ready at start (timeout); retrying"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if capacity == 0 {
        tracing::warn!(
            "no pre-generated codes: run `shorturl-origin pregen --count N`; creations answer 503"
        );
    }
    let cache = Cache::new(cfg.redis.clone(), Arc::clone(&metrics))
        .map_err(|e| format!("redis.url: {e}"))?;
    let counter: Box<dyn Counter> = match cfg.issuer.backend {
        CounterBackend::Mysql => Box::new(MysqlCounter::new(pool.clone(), cfg.issuer.name.clone())),
        CounterBackend::Redis => {
            let floor = highest_used_id(&pool)
                .await
                .map_err(|e| format!("reading the issuer floor: {e}"))?;
            Box::new(RedisCounter::new(
                cache.connection(),
                &cfg.issuer.name,
                floor,
            ))
        }
    };
    let issuer = Issuer::new(
        counter,
        cfg.issuer.block,
        cfg.issuer.low_water,
        capacity,
        Arc::clone(&metrics),
    );
    let store = Store::new(pool.clone(), cfg.mysql.timeout, Arc::clone(&metrics));
    let claimer = Claimer::start(
        store.clone(),
        cfg.mysql.claim_workers,
        cfg.mysql.claim_batch,
    );
    let whitelist = Arc::new(Whitelist::new(
        cfg.default_domain.clone(),
        cfg.links.allowed_domains.clone(),
    ));
    apollo::register_metrics(&metrics.registry, Arc::clone(&whitelist))
        .map_err(|e| format!("metrics: {e}"))?;
    let apollo_task = match cfg.apollo.clone() {
        Some(a) => apollo::start(a, Arc::clone(&whitelist)).await,
        None => None,
    };
    let links = Links::new(
        Arc::clone(&cfg),
        store,
        cache,
        Arc::clone(&issuer),
        claimer,
        perm,
        whitelist,
        metrics,
    );
    spawn_capacity_refresh(pool.clone(), Arc::clone(&issuer));

    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| format!("listen {}: {e}", cfg.listen))?;
    tracing::info!(listen = %cfg.listen, capacity, backend = ?cfg.issuer.backend, "origin serving");
    let app = router(AppState {
        links,
        auth: Arc::new(Auth::new(&cfg.apps)),
    });
    let grace = cfg.shutdown_grace;
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown_signal());
    let result = server.await.map_err(|e| format!("server: {e}"));
    if let Some(t) = apollo_task {
        t.abort();
    }
    let _ = tokio::time::timeout(grace, pool.disconnect()).await;
    result
}

/// Re-reads the table size so `pregen` can extend a running system.
fn spawn_capacity_refresh(pool: mysql_async::Pool, issuer: Arc<Issuer>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            if let Ok(Ok(c)) =
                tokio::time::timeout(Duration::from_secs(2), db::capacity(&pool)).await
            {
                issuer.set_capacity(c);
            }
        }
    });
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!("shutting down: draining in-flight requests");
}
