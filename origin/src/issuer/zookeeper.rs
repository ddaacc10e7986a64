//! The ZooKeeper counter: one znode (`<root>/<name>`) holding the last id
//! handed out, in decimal. A block is taken by compare-and-set on the
//! znode's version (read value and version, write value + n with that
//! version, read again on a conflict), so two origins never get
//! overlapping ranges however their calls interleave, without a database in
//! the loop. As with the Redis counter, the value is first raised to the
//! highest id MySQL knows to be used (the floor), so a counter that is
//! behind (a new ensemble, a deleted znode) never walks back over issued
//! ids.
//!
//! Faults: a call fails (and the issuer answers `503 issuer_unavailable`
//! once its held block is spent) while no member answers; the client
//! reconnects by itself, and a session that expired is replaced on the next
//! call. A write whose answer was lost (the connection dropped after the
//! ensemble applied it) is never retried blindly: the next call reads the
//! new value, so that block is skipped, never handed out twice.

use super::counter::{Counter, CounterError};
use crate::config::ZooKeeperConfig;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use zookeeper_client as zk;

/// Compare-and-set attempts per call before it fails (each conflict means
/// another origin took a block meanwhile: progress, just not ours).
const MAX_ATTEMPTS: u32 = 64;

/// A counter in ZooKeeper; connects on first use.
pub struct ZooKeeperCounter {
    cfg: ZooKeeperConfig,
    path: String,
    floor: AtomicU64,
    client: tokio::sync::Mutex<Option<zk::Client>>,
}

impl ZooKeeperCounter {
    /// Counter `<root>/<name>`; `floor` is the highest used id known now.
    pub fn new(cfg: ZooKeeperConfig, name: &str, floor: u64) -> Self {
        ZooKeeperCounter {
            path: format!("{}/{name}", cfg.root),
            cfg,
            floor: floor.into(),
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// The session's client, connecting (again) when there is none.
    async fn client(&self) -> Result<zk::Client, CounterError> {
        let mut held = self.client.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let mut connector = zk::Client::connector();
        connector.session_timeout(self.cfg.session_timeout);
        let c = tokio::time::timeout(self.cfg.session_timeout, connector.connect(&self.cfg.hosts))
            .await
            .map_err(|_| CounterError::ZooKeeper(zk::Error::ConnectionLoss))??;
        *held = Some(c.clone());
        Ok(c)
    }

    /// Forgets a client whose session is over (expired or closed): the
    /// next call starts a new one. Connection losses are the client's own
    /// to recover from.
    async fn drop_if_over(&self, e: &zk::Error) {
        if matches!(
            e,
            zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::NoHosts
        ) {
            *self.client.lock().await = None;
        }
    }

    async fn advance_once(&self, c: &zk::Client, n: u64) -> Result<u64, CounterError> {
        for _ in 0..MAX_ATTEMPTS {
            let (data, stat) = match c.get_data(&self.path).await {
                Ok(v) => v,
                Err(zk::Error::NoNode) => {
                    self.create(c).await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let value = std::str::from_utf8(&data)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| CounterError::ZooKeeperValue(self.path.clone()))?;
            let next = value.max(self.floor.load(Ordering::Relaxed)) + n;
            match c
                .set_data(&self.path, next.to_string().as_bytes(), Some(stat.version))
                .await
            {
                Ok(_) => {
                    self.floor.fetch_max(next, Ordering::Relaxed);
                    return Ok(next);
                }
                Err(zk::Error::BadVersion) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CounterError::ZooKeeperContended(MAX_ATTEMPTS))
    }

    /// Creates the counter at `0` (and its parents); one that another
    /// origin created first is fine.
    async fn create(&self, c: &zk::Client) -> Result<(), CounterError> {
        let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        if let Err(e) = c.mkdir(&self.cfg.root, &opts).await {
            if e != zk::Error::NodeExists {
                return Err(e.into());
            }
        }
        match c.create(&self.path, b"0", &opts).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Counter for ZooKeeperCounter {
    fn advance(&self, n: u64) -> BoxFuture<'_, Result<u64, CounterError>> {
        Box::pin(async move {
            let c = self.client().await?;
            // Bounded: requests wait while the client reconnects.
            let r = tokio::time::timeout(self.cfg.session_timeout, self.advance_once(&c, n))
                .await
                .unwrap_or(Err(CounterError::ZooKeeper(zk::Error::ConnectionLoss)));
            if let Err(CounterError::ZooKeeper(e)) = &r {
                self.drop_if_over(e).await;
            }
            r
        })
    }

    fn kind(&self) -> &'static str {
        "zookeeper"
    }
}
