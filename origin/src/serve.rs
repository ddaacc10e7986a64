//! `shorturl-origin serve`: wires the components and runs the HTTP server
//! until SIGTERM/SIGINT. Then it **drains** for `drain_secs`: it keeps
//! accepting and serving while `/healthz` says `draining` (edges stop
//! choosing it within a health-check interval, so nothing is sent to a
//! closed socket during a rolling restart); then it stops accepting and
//! finishes in-flight requests for at most `shutdown_grace` (closing MySQL
//! included): a request still running then is cut off, so a stuck client or
//! a stuck dependency cannot hold a deploy.

use crate::auth::Auth;
use crate::background::{Background, Stop};
use crate::cache::Cache;
use crate::claim::Claimer;
use crate::clicks::retention::Retention;
use crate::clicks::{ClickMetrics, Consumer};
use crate::config::{Config, CounterBackend};
use crate::conn::{ConnMetrics, Drain, Listener};
use crate::health::MysqlHealth;
use crate::http::{router, AppState};
use crate::issuer::counter;
use crate::issuer::Issuer;
use crate::lifecycle::{holder_id, Reaper};
use crate::links::{Links, Parts};
use crate::metrics::Metrics;
use crate::store::{is_permanent, meta, ShardMap, Store};
use crate::webhooks::Webhooks;
use crate::whitelist::Whitelist;
use crate::{apollo, db, schema};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Why the origin could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("mysql.url: {0}")]
    MysqlUrl(#[source] mysql_async::Error),
    #[error("redis.url: {0}")]
    RedisUrl(#[source] redis::RedisError),
    #[error("reading the issuer floor from MySQL: {0}")]
    IssuerFloor(#[source] mysql_async::Error),
    /// Unreachable from a validated config (the loader requires the section).
    #[error("issuer.backend is zookeeper but issuer.zookeeper is missing")]
    NoZooKeeper,
    #[error("listen {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the compiled-in docs/openapi.yaml does not parse: {0}")]
    OpenApi(#[source] serde_yaml::Error),
    #[error(transparent)]
    Screening(#[from] crate::screening::ScreeningError),
    #[error(transparent)]
    Webhooks(#[from] crate::webhooks::WebhooksError),
    #[error(transparent)]
    Sso(#[from] crate::admin::sso::SsoError),
}

/// Starts the origin; returns when it has shut down.
pub async fn run(cfg: Config) -> Result<(), ServeError> {
    // SIGTERM is caught from here on: registered lazily (when the shutdown
    // wait is first polled), a SIGTERM arriving just after the server
    // started answering would kill the process without the grace.
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let app = build(cfg).await?;
    serve(app, shutdown_signal(term)).await
}

/// A built origin, ready to serve: its listener bound, its background work
/// running.
pub struct App {
    cfg: Arc<Config>,
    pool: mysql_async::Pool,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    drain: Arc<Drain>,
    conn_metrics: ConnMetrics,
    /// Stopped when draining ends: none of it is needed to finish the
    /// requests in flight (what it leaves is taken over by another origin
    /// or done after the restart).
    work: Background,
    /// Stopped once the requests in flight are finished: what a request
    /// may still rely on (the permanent-redirect mark).
    serving: Background,
}

/// What creating and managing links needs, wired from `cfg`, and what the
/// server's own background work reads besides (`serve`, and commands that
/// create links, such as `import`, share it).
pub struct Core {
    pub links: Arc<Links>,
    pub pool: mysql_async::Pool,
    pub shards: Arc<ShardMap>,
    pub issuer: Arc<Issuer>,
    pub screening: Arc<crate::screening::Screening>,
    pub click_metrics: Arc<ClickMetrics>,
    /// Pre-generated codes at start.
    pub capacity: u64,
}

/// Wires the link service: waits for MySQL (migrations, the code pool),
/// connects Redis, opens the issuer's counter; the Apollo feed (merchant
/// domains) runs on `work`.
pub async fn assemble(cfg: Arc<Config>, work: &mut Background) -> Result<Core, ServeError> {
    let metrics = Arc::new(Metrics::new()?);
    let click_metrics = Arc::new(ClickMetrics::register(&metrics.registry)?);
    let live = Arc::new(crate::clicks::live::Live::new(
        cfg.clicks.live_max_links,
        crate::clicks::live::LiveMetrics::register(&metrics.registry)?,
    ));
    let pool = db::pool(&cfg.mysql).map_err(ServeError::MysqlUrl)?;
    // Migrations and the permutation key are needed before anything can be
    // issued; wait for MySQL at start rather than serve errors.
    // The permutation key is only checked here (a missing one means
    // `migrate` did not finish): claims read each row's code.
    let (shards, cursor, capacity) = loop {
        let attempt = async {
            schema::migrate(&pool).await?;
            let perm = meta::load_permutation(&pool).await?;
            let counter =
                (cfg.issuer.backend == CounterBackend::Mysql).then(|| cfg.issuer.name.clone());
            let shards = ShardMap::open(&cfg.mysql, &pool, perm, counter)?;
            shards.migrate().await;
            let capacity = shards.capacity().await?;
            Ok::<_, mysql_async::Error>((shards, meta::load_cursor_key(&pool).await?, capacity))
        };
        match tokio::time::timeout(Duration::from_secs(10), attempt).await {
            Ok(Ok(v)) => break v,
            Ok(Err(e)) => tracing::error!(error = %e, "mysql not ready at start; retrying"),
            Err(_) => tracing::error!("mysql not ready at start (timeout); retrying"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    shards.find_issuing().await;
    let shards = Arc::new(shards);
    if capacity == 0 {
        tracing::warn!(
            "no pre-generated codes: run `shorturl-origin pregen --count N`; creations answer 503"
        );
    }
    let cache =
        Cache::new(cfg.redis.clone(), Arc::clone(&metrics)).map_err(ServeError::RedisUrl)?;
    tracing::info!(redis = %cfg.redis.topology.describe(), "redis");
    // The Redis and ZooKeeper counters start above every id already used.
    let floor = match cfg.issuer.backend {
        CounterBackend::Mysql => 0,
        _ => shards
            .highest_used_id()
            .await
            .map_err(ServeError::IssuerFloor)?,
    };
    let counter = counter::open(
        cfg.issuer.backend,
        &cfg.issuer,
        &cfg.issuer.name,
        &pool,
        cache.connection(),
        floor,
    )
    .ok_or(ServeError::NoZooKeeper)?;
    tracing::info!(backend = counter.kind(), floor, "issuer counter");
    let issuer = Issuer::with_boundaries(
        counter,
        cfg.issuer.block,
        cfg.issuer.low_water,
        capacity,
        shards.boundaries(),
        Arc::clone(&metrics),
    );
    let store = Store::sharded(
        pool.clone(),
        Arc::clone(&shards),
        cfg.mysql.timeout,
        Arc::clone(&metrics),
    );
    // Before the first change: which apps' changes write webhook events
    // (re-read every second by the webhook dispatcher).
    if let Err(e) = store.refresh_subscriptions().await {
        tracing::warn!(error = %e, "webhook endpoints not read yet");
    }
    let claimer = Claimer::start(
        store.clone(),
        cfg.mysql.claim_workers,
        cfg.mysql.claim_batch,
        metrics.claim_queued.clone(),
    );
    let whitelist = Arc::new(
        Whitelist::new(
            cfg.default_domain.clone(),
            cfg.links.allowed_domains.clone(),
        )
        .with_merchant_domains(&cfg.links.merchant_domains),
    );
    apollo::register_metrics(&metrics.registry, Arc::clone(&whitelist))?;
    if let Some(a) = cfg.apollo.clone() {
        if let Some(feed) = apollo::start(a, Arc::clone(&whitelist)).await {
            work.spawn("apollo feed", |stop| stop.cancels(feed));
        }
    }
    let screening = Arc::new(crate::screening::Screening::new(
        cfg.screening.clone(),
        Arc::clone(&metrics),
    )?);
    // The managed entries before the first creation (MySQL answered above).
    if let Err(e) = screening.refresh(&store).await {
        tracing::warn!(error = %e, "screening entries not read yet; the lists alone are in force");
    }
    let links = Links::new(Parts {
        cfg: Arc::clone(&cfg),
        store,
        cache,
        issuer: Arc::clone(&issuer),
        claimer,
        whitelist,
        metrics,
        cursor,
        screening: Arc::clone(&screening),
        live,
    });
    Ok(Core {
        links,
        pool,
        shards,
        issuer,
        screening,
        click_metrics,
        capacity,
    })
}

/// Wires the components from `cfg`: waits for MySQL (migrations, the code
/// pool), connects Redis, starts the background work and binds the listener.
pub async fn build(cfg: Config) -> Result<App, ServeError> {
    let cfg = Arc::new(cfg);
    let mut work = Background::default();
    let mut serving = Background::default();
    let Core {
        links,
        pool,
        shards,
        issuer,
        screening,
        click_metrics,
        capacity,
    } = assemble(Arc::clone(&cfg), &mut work).await?;
    {
        let links = Arc::clone(&links);
        work.spawn("screening", |stop| {
            crate::screening::pass::run(links, screening, stop)
        });
    }
    let refresh = CapacityRefresh {
        pool: pool.clone(),
        shards: Arc::clone(&shards),
        issuer: Arc::clone(&issuer),
        metrics: Arc::clone(&links.metrics),
    };
    work.spawn("capacity refresh", |stop| refresh.run(stop));
    if is_permanent(cfg.redirect.status) {
        // Before the first redirect, and then ahead of every one: recycling
        // keeps every link created up to this mark (architecture, "Recycling").
        mark_permanent(&pool).await;
        let pool = pool.clone();
        serving.spawn("permanent-redirect mark", |stop| async move {
            let pool = &pool;
            let every = Duration::from_secs(PERMANENT_AHEAD_SECS / 3);
            stop.every(every, move || mark_permanent(pool)).await
        });
    }
    // Every origin drains the outbox (rows are taken with SKIP LOCKED).
    let outbox = Arc::clone(&links.outbox);
    work.spawn("outbox drainer", |stop| stop.cancels(outbox.run_drainer()));
    // Every origin dispatches webhook events and sends deliveries (leases
    // keep two origins off the same delivery).
    let webhooks = Webhooks::new(
        Arc::clone(&cfg),
        links.store.clone(),
        Arc::clone(&links.whitelist),
        &links.metrics.registry,
    )?;
    {
        let w = Arc::clone(&webhooks);
        work.spawn("webhook dispatcher", |stop| {
            stop.cancels(w.run_dispatcher())
        });
        let w = Arc::clone(&webhooks);
        work.spawn("webhook sender", |stop| async move {
            stop.cancels(Arc::clone(&w).run_sender()).await;
            // Bounded: a MySQL that does not answer leaves the leases to run out.
            let _ = tokio::time::timeout(Duration::from_secs(1), w.release()).await;
        });
        let w = Arc::clone(&webhooks);
        work.spawn("webhook recorder", |stop| stop.cancels(w.run_recorder()));
    }
    // Every origin runs a reaper; the one holding the lease reaps. At the
    // stop, the lease is given up so another origin takes over at once.
    if cfg.lifecycle.enabled {
        let retention = Retention::new(
            links.store.clone(),
            cfg.clicks.clone(),
            cfg.redis.topology.clone(),
            Arc::clone(&click_metrics),
        );
        let reaper = Arc::new(
            Reaper::new(
                links.store.clone(),
                cfg.lifecycle.clone(),
                Arc::clone(&links.metrics),
                holder_id("serve"),
            )
            .with_retention(Arc::new(retention)),
        );
        work.spawn("reaper", |stop| async move {
            stop.cancels(Arc::clone(&reaper).run()).await;
            // Bounded: a MySQL that does not answer leaves the lease to run
            // out by itself.
            let _ = tokio::time::timeout(Duration::from_secs(1), reaper.release()).await;
        });
    }
    // Every origin consumes click batches too (one consumer group). Stopping
    // loses nothing: an entry read and not acknowledged is claimed by
    // another origin (or by this one after its restart).
    // Every origin follows the stream for the live view (each needs every
    // batch, so not as one of the group).
    if cfg.clicks.live_max_links > 0 {
        let tail = crate::clicks::live::tail(
            Arc::clone(&links.live),
            cfg.redis.topology.clone(),
            links.store.clone(),
        );
        work.spawn("click live view", |stop| stop.cancels(tail));
    }
    if cfg.clicks.consume {
        let c = Consumer::new(
            cfg.redis.topology.clone(),
            links.store.clone(),
            cfg.clicks.clone(),
            click_metrics,
        );
        tracing::info!(consumer = c.name(), "click consumer starting");
        work.spawn("click consumer", |stop| stop.cancels(c.run()));
    }
    let sso = cfg
        .admin
        .oidc
        .clone()
        .map(crate::admin::sso::Sso::new)
        .transpose()?;
    let admin = Arc::new(crate::admin::Admin::new(
        cfg.admin.clone(),
        sso,
        links.cursor.derive("admin sign-in form"),
        &links.metrics.registry,
    )?);
    // The console's overview keeps past days in memory (admin/days.rs):
    // only when someone can sign in to see it.
    if !cfg.admin.users.is_empty() || cfg.admin.oidc.is_some() {
        let days = Arc::clone(&admin.past_days);
        let store = links.store.clone();
        work.spawn("console past days", |stop| stop.cancels(days.keep(store)));
    }
    let mysql = MysqlHealth::new();
    let (probe, store) = (Arc::clone(&mysql), links.store.clone());
    serving.spawn("mysql health probe", |stop| probe.probe(store, stop));

    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: cfg.listen,
            source,
        })?;
    tracing::info!(listen = %cfg.listen, capacity, backend = ?cfg.issuer.backend, "origin serving");
    if cfg.internal.token_sha256.is_none() {
        tracing::warn!(
            "internal.token_sha256 is not set: /internal/* and /metrics answer loopback peers only"
        );
    }
    let conn_metrics = ConnMetrics::register(&links.metrics.registry)?;
    let drain = Arc::new(Drain::default());
    let contract = crate::http::openapi::parsed().map_err(ServeError::OpenApi)?;
    let router = router(AppState {
        links,
        auth: Arc::new(Auth::new(&cfg.apps)),
        openapi: crate::http::openapi::json(&contract),
        reference: crate::http::reference::render(&contract, crate::admin::stylesheet()).into(),
        admin,
        drain: Arc::clone(&drain),
        mysql,
        webhooks,
    });
    Ok(App {
        cfg,
        pool,
        listener,
        router,
        drain,
        conn_metrics,
        work,
        serving,
    })
}

/// Serves `app` until `stop` resolves, then drains and shuts down within
/// `drain_secs` + `shutdown_grace` (module docs).
pub async fn serve(
    app: App,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let (cfg, drain) = (Arc::clone(&app.cfg), Arc::clone(&app.drain));
    let server = Listener::start(
        app.listener,
        app.router,
        &cfg.limits,
        app.conn_metrics,
        Arc::clone(&drain),
    );
    stop.await;
    // Drain: keep serving while the edges' health checks see `draining`
    // and stop choosing this origin; only then stop accepting.
    drain.start();
    tracing::info!(drain = ?cfg.drain, "draining: /healthz says draining; still serving");
    tokio::time::sleep(cfg.drain).await;
    let deadline = Instant::now() + cfg.shutdown_grace;
    tracing::info!("stopped accepting; finishing the requests in flight");
    // Rows it leaves are applied by another origin or after the restart;
    // the reaper's lease is released within a second.
    app.work.shutdown(Duration::from_secs(2)).await;
    if !server.close(deadline).await {
        tracing::warn!(grace = ?cfg.shutdown_grace,
            "shutdown grace elapsed; closing the requests still in flight");
    }
    app.serving.shutdown(Duration::from_millis(100)).await;
    if tokio::time::timeout_at(deadline, app.pool.disconnect())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace elapsed while closing MySQL connections");
    }
    Ok(())
}

/// Re-reads the pool every few seconds, so `pregen` and recycling extend a
/// running system, and the `pool` status and metrics follow.
struct CapacityRefresh {
    pool: mysql_async::Pool,
    shards: Arc<ShardMap>,
    issuer: Arc<Issuer>,
    metrics: Arc<Metrics>,
}

impl CapacityRefresh {
    async fn run(self, stop: Stop) {
        let this = &self;
        stop.every(Duration::from_secs(5), move || this.refresh())
            .await;
    }

    async fn refresh(&self) {
        let stats = self.shards.pool_stats(&self.pool);
        if let Ok(Ok(p)) = tokio::time::timeout(Duration::from_secs(2), stats).await {
            self.issuer.set_capacity(p.size);
            let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            self.metrics.pool_size.set(g(p.size));
            self.metrics.pool_issued.set(g(p.issued));
            self.metrics
                .pool_free
                .set(g(p.size.saturating_sub(p.issued)));
            self.metrics.pool_recycled.set(g(p.recycled));
        }
    }
}

/// How far ahead of now an origin serving permanent redirects moves
/// `meta.permanent_redirect_until`: three refreshes, so the mark is always
/// later than any redirect this origin has served, even if it dies now.
const PERMANENT_AHEAD_SECS: u64 = 15;

/// Moves the permanent-redirect mark to now + [`PERMANENT_AHEAD_SECS`].
async fn mark_permanent(pool: &mysql_async::Pool) {
    let until = shorturl_common::time::now_unix() + PERMANENT_AHEAD_SECS;
    match tokio::time::timeout(
        Duration::from_secs(2),
        meta::mark_permanent_until(pool, until),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "could not record the permanent redirect policy"),
        Err(_) => tracing::warn!("could not record the permanent redirect policy (timeout)"),
    }
}

/// Waits for SIGTERM (on `term`, registered by the caller) or SIGINT.
async fn shutdown_signal(term: Option<tokio::signal::unix::Signal>) {
    let term = async {
        match term {
            Some(mut s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!("shutting down");
}
