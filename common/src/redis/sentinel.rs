//! A master found through Sentinels, followed across failovers.
//!
//! redis-rs does not follow Sentinel failover events, so this does it by
//! hand: the master's address comes from `SENTINEL get-master-addr-by-name`
//! (the Sentinels are asked in turn; the first answer wins) and commands go
//! through a `ConnectionManager` to that address. A command failing in a
//! way that means "not the master any more" — I/O error, refused or dropped
//! connection, timeout, `READONLY`, `LOADING`, `MASTERDOWN` — drops the
//! resolved master, and the next command resolves again. Resolutions are at
//! least [`MIN_RESOLVE_INTERVAL`] apart, so a dead master costs the
//! Sentinels ten queries a second at most, whatever the load.
//!
//! Pause after a failover: the Sentinels' own detection and election
//! (`down-after-milliseconds` + `failover-timeout` scale, typically 1–5 s),
//! plus at most [`MIN_RESOLVE_INTERVAL`] and one connect here. The failing
//! command itself is not retried: callers already treat a Redis error as a
//! miss (or retry it themselves).

use super::config::{node_info, ConnOptions};
use super::manager::{is_failover_error, manager_config, setup_error};
use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, ConnectionInfo, Pipeline, RedisResult, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Minimum time between two resolutions of the master.
pub(crate) const MIN_RESOLVE_INTERVAL: Duration = Duration::from_millis(100);

/// The master of one Sentinel-monitored group.
pub(crate) struct SentinelMaster {
    sentinels: Vec<ConnectionInfo>,
    master_name: String,
    /// Credentials and database for the master (from `redis.url`).
    template: Option<String>,
    opts: ConnOptions,
    current: ArcSwapOption<Resolved>,
    /// When the last resolution started (serialises resolutions).
    resolving: tokio::sync::Mutex<Option<Instant>>,
}

/// One resolution: the address and a connection to it.
struct Resolved {
    addr: String,
    at: Instant,
    manager: ConnectionManager,
}

impl SentinelMaster {
    pub(crate) fn new(
        sentinels: &[String],
        master_name: &str,
        template: Option<&str>,
        opts: ConnOptions,
    ) -> RedisResult<SentinelMaster> {
        let sentinels = sentinels
            .iter()
            .map(|s| node_info(s, None))
            .collect::<RedisResult<Vec<_>>>()?;
        if let Some(t) = template {
            node_info("127.0.0.1:1", Some(t))?;
        }
        Ok(SentinelMaster {
            sentinels,
            master_name: master_name.to_owned(),
            template: template.map(str::to_owned),
            opts,
            current: ArcSwapOption::empty(),
            resolving: tokio::sync::Mutex::new(None),
        })
    }

    /// The database commands run in.
    pub(crate) fn db(&self) -> i64 {
        self.template
            .as_deref()
            .and_then(|t| node_info("127.0.0.1:1", Some(t)).ok())
            .map_or(0, |i| i.redis_settings().db())
    }

    /// Runs one command on the master.
    pub(crate) async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let r = self.master().await?;
        let mut m = r.manager.clone();
        let out = m.req_packed_command(cmd).await;
        self.after(&r, out)
    }

    /// Runs one pipeline on the master.
    pub(crate) async fn pipeline(
        &self,
        p: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let r = self.master().await?;
        let mut m = r.manager.clone();
        let out = m.req_packed_commands(p, offset, count).await;
        self.after(&r, out)
    }

    /// Where a pub/sub connection goes: the master as the Sentinels name
    /// it now.
    pub(crate) async fn pubsub_info(&self) -> RedisResult<redis::ConnectionInfo> {
        let addr = self.ask_sentinels().await?;
        node_info(&addr, self.template.as_deref())
    }

    fn after<T>(&self, used: &Arc<Resolved>, out: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &out {
            if is_failover_error(e) && used.at.elapsed() >= MIN_RESOLVE_INTERVAL {
                let cur = self.current.load();
                if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, used)) {
                    tracing::info!(master = %used.addr, error = %e,
                        "redis sentinel: master unusable; resolving again");
                    self.current.store(None);
                }
            }
        }
        out
    }

    async fn master(&self) -> RedisResult<Arc<Resolved>> {
        if let Some(r) = self.current.load_full() {
            return Ok(r);
        }
        let mut last = self.resolving.lock().await;
        if let Some(r) = self.current.load_full() {
            return Ok(r);
        }
        if let Some(t) = *last {
            let wait = MIN_RESOLVE_INTERVAL.saturating_sub(t.elapsed());
            if !wait.is_zero() {
                return Err(setup_error("sentinel: master being resolved".into()));
            }
        }
        *last = Some(Instant::now());
        let addr = self.ask_sentinels().await?;
        let client = redis::Client::open(node_info(&addr, self.template.as_deref())?)?;
        let manager = ConnectionManager::new_lazy_with_config(client, manager_config(self.opts))?;
        tracing::debug!(master = %addr, name = %self.master_name, "redis sentinel: master resolved");
        let r = Arc::new(Resolved {
            addr,
            at: Instant::now(),
            manager,
        });
        self.current.store(Some(Arc::clone(&r)));
        Ok(r)
    }

    /// `host:port` of the master, from the first Sentinel that answers.
    async fn ask_sentinels(&self) -> RedisResult<String> {
        let mut last_err = None;
        for s in &self.sentinels {
            match self.ask(s).await {
                Ok(Some(addr)) => return Ok(addr),
                Ok(None) => {
                    last_err = Some(setup_error(format!(
                        "sentinel {}: no master named {:?}",
                        s.addr(),
                        self.master_name
                    )))
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| setup_error("no sentinel configured".into())))
    }

    async fn ask(&self, sentinel: &ConnectionInfo) -> RedisResult<Option<String>> {
        let client = redis::Client::open(sentinel.clone())?;
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.opts.connect_timeout))
            .set_response_timeout(Some(self.opts.connect_timeout));
        let mut c = client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query_async(&mut c)
            .await?;
        Ok(reply.map(|(h, p)| {
            if h.contains(':') {
                format!("[{h}]:{p}")
            } else {
                format!("{h}:{p}")
            }
        }))
    }
}
