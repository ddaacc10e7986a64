//! [`RedisConn`]: one clonable connection over a single server, a Cluster or
//! a Sentinel-managed master. It implements `redis::aio::ConnectionLike`,
//! so `cmd.query_async(&mut conn)`, `Script::invoke_async` and pipelines
//! work unchanged whatever the mode.
//!
//! Nothing connects at construction (no Tokio runtime may exist yet, and a
//! process must start while Redis is down): each mode connects on first use
//! and recovers by itself.
//! - single: a `ConnectionManager` (reconnects after a restart);
//! - cluster: a `cluster_async::ClusterConnection` (slot discovery,
//!   MOVED/ASK, reconnection and slot refresh after a failover); while no
//!   cluster connection could be made, a new attempt is made at most every
//!   [`RETRY_AFTER`], calls in between fail at once;
//! - sentinel: see [`super::sentinel`].

use super::config::{node_info, ConnOptions, RedisTopology};
use super::manager::{manager_config, setup_error};
use super::sentinel::SentinelMaster;
use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Minimum pause between two attempts to open a cluster connection.
pub(crate) const RETRY_AFTER: Duration = Duration::from_millis(200);

/// A Redis connection in any mode (see the module documentation).
#[derive(Clone)]
pub struct RedisConn {
    inner: Arc<Inner>,
}

enum Inner {
    Single {
        client: redis::Client,
        opts: ConnOptions,
        manager: OnceLock<Result<ConnectionManager, String>>,
    },
    Cluster(Box<ClusterLazy>),
    Sentinel(SentinelMaster),
}

/// A cluster connection opened on first use.
pub(crate) struct ClusterLazy {
    client: ClusterClient,
    nodes: Vec<redis::ConnectionInfo>,
    opts: ConnOptions,
    conn: Arc<ArcSwapOption<ClusterConnection>>,
    connecting: tokio::sync::Mutex<Option<Instant>>,
}

impl RedisConn {
    /// Checks the addresses; connects on first use.
    pub fn new(topology: &RedisTopology, opts: ConnOptions) -> RedisResult<RedisConn> {
        let inner = match topology {
            RedisTopology::Single { url } => Inner::Single {
                client: redis::Client::open(url.as_str())?,
                opts,
                manager: OnceLock::new(),
            },
            RedisTopology::Cluster { nodes, url } => {
                let infos = nodes
                    .iter()
                    .map(|n| node_info(n, url.as_deref()))
                    .collect::<RedisResult<Vec<_>>>()?;
                let client = ClusterClient::builder(infos.clone())
                    .connection_timeout(opts.connect_timeout)
                    .response_timeout(opts.response_timeout)
                    .retries(2)
                    .min_retry_wait(10)
                    .max_retry_wait(200)
                    .build()?;
                Inner::Cluster(Box::new(ClusterLazy {
                    client,
                    nodes: infos,
                    opts,
                    conn: Arc::new(ArcSwapOption::empty()),
                    connecting: tokio::sync::Mutex::new(None),
                }))
            }
            RedisTopology::Sentinel {
                sentinels,
                master_name,
                url,
            } => Inner::Sentinel(SentinelMaster::new(
                sentinels,
                master_name,
                url.as_deref(),
                opts,
            )?),
        };
        Ok(RedisConn {
            inner: Arc::new(inner),
        })
    }

    /// Where a new pub/sub connection goes (its address and credentials:
    /// the edge's subscriber speaks the protocol itself). `attempt` counts
    /// the caller's consecutive failures: on a cluster it rotates through
    /// the seed nodes (PUBLISH is broadcast to every node, so any one
    /// serves); on Sentinel the master is resolved afresh; a single server
    /// is always the same.
    pub async fn pubsub_info(&self, attempt: usize) -> RedisResult<redis::ConnectionInfo> {
        match &*self.inner {
            Inner::Single { client, .. } => Ok(client.get_connection_info().clone()),
            Inner::Cluster(c) => match c.nodes.get(attempt % c.nodes.len().max(1)) {
                Some(node) => Ok(node.clone()),
                None => Err(setup_error("no cluster node".into())),
            },
            Inner::Sentinel(s) => s.pubsub_info().await,
        }
    }

    /// The mode's name (`single`, `cluster`, `sentinel`).
    pub fn mode(&self) -> &'static str {
        match &*self.inner {
            Inner::Single { .. } => "single",
            Inner::Cluster(_) => "cluster",
            Inner::Sentinel(_) => "sentinel",
        }
    }

    fn single(
        client: &redis::Client,
        opts: ConnOptions,
        manager: &OnceLock<Result<ConnectionManager, String>>,
    ) -> RedisResult<ConnectionManager> {
        let m = manager.get_or_init(|| {
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config(opts))
                .map_err(|e| e.to_string())
        });
        match m {
            Ok(m) => Ok(m.clone()),
            Err(e) => Err(setup_error(e.clone())),
        }
    }
}

impl ClusterLazy {
    async fn get(&self) -> RedisResult<ClusterConnection> {
        if let Some(c) = self.conn.load_full() {
            return Ok((*c).clone());
        }
        let mut last = self.connecting.lock().await;
        if let Some(c) = self.conn.load_full() {
            return Ok((*c).clone());
        }
        if last.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            return Err(setup_error("cluster unreachable (retrying)".into()));
        }
        *last = Some(Instant::now());
        let cfg = ClusterConfig::new()
            .set_connection_timeout(self.opts.connect_timeout)
            .set_response_timeout(self.opts.response_timeout);
        // In a task of its own: a caller's timeout (tens of milliseconds on
        // the edge) must not cancel a connection that takes longer to set up
        // (every node, then the slot map); the next caller finds it made.
        let client = self.client.clone();
        let slot = Arc::clone(&self.conn);
        let task = tokio::spawn(async move {
            let c = client.get_async_connection_with_config(cfg).await?;
            slot.store(Some(Arc::new(c.clone())));
            Ok::<_, RedisError>(c)
        });
        match task.await {
            Ok(r) => r,
            Err(e) => Err(setup_error(format!("cluster connect task: {e}"))),
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match &*self.inner {
                Inner::Single {
                    client,
                    opts,
                    manager,
                } => {
                    let mut m = RedisConn::single(client, *opts, manager)?;
                    m.req_packed_command(cmd).await
                }
                Inner::Cluster(c) => {
                    let mut conn = c.get().await?;
                    conn.req_packed_command(cmd).await
                }
                Inner::Sentinel(s) => s.command(cmd).await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match &*self.inner {
                Inner::Single {
                    client,
                    opts,
                    manager,
                } => {
                    let mut m = RedisConn::single(client, *opts, manager)?;
                    m.req_packed_commands(pipeline, offset, count).await
                }
                Inner::Cluster(c) => {
                    let mut conn = c.get().await?;
                    conn.req_packed_commands(pipeline, offset, count).await
                }
                Inner::Sentinel(s) => s.pipeline(pipeline, offset, count).await,
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &*self.inner {
            Inner::Single { client, .. } => client.get_connection_info().redis_settings().db(),
            Inner::Cluster(_) => 0,
            Inner::Sentinel(s) => s.db(),
        }
    }
}
