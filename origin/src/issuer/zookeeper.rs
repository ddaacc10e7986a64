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
//! Faults: a call fails (and the issuer answers 503 `unavailable` once its
//! held block is spent) while no member answers; the client reconnects by
//! itself, and a session that expired is replaced on the next call. A write
//! whose answer was lost (the connection dropped around it) is read back:
//! each write carries a tag of its own after the value, so the znode still
//! at the old version means not written (retried), holding exactly this
//! write means ours (kept). Only when another write followed it is the
//! outcome unknown: the call fails and the next one reads the new value,
//! so that block may be skipped, never handed out twice.

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
    /// This process's tag in the values it writes (random), and its writes
    /// so far: together unique to each write.
    writer: u64,
    writes: AtomicU64,
}

/// Whether a compare-and-set whose answer was lost was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    Yes,
    No,
    /// Another write came after it or instead of it: if it was ours, that
    /// block is skipped (never handed out twice).
    Unknown,
}

/// From a read after the lost answer of a write of `written` expecting
/// `version`: the znode still at `version` was not written; holding
/// exactly `written` (a value no other write carries) it was ours.
fn applied(written: &[u8], version: i32, now: &[u8], now_version: i32) -> Applied {
    if now_version == version {
        Applied::No
    } else if now == written {
        Applied::Yes
    } else {
        Applied::Unknown
    }
}

/// The counter's value: the number before the writer's tag (or alone, as a
/// new counter and older writers keep it).
fn value_of(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl ZooKeeperCounter {
    /// Counter `<root>/<name>`; `floor` is the highest used id known now.
    pub fn new(cfg: ZooKeeperConfig, name: &str, floor: u64) -> Self {
        ZooKeeperCounter {
            path: format!("{}/{name}", cfg.root),
            cfg,
            floor: floor.into(),
            client: tokio::sync::Mutex::new(None),
            writer: rand::random(),
            writes: AtomicU64::new(0),
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
            let value =
                value_of(&data).ok_or_else(|| CounterError::ZooKeeperValue(self.path.clone()))?;
            let next = value.max(self.floor.load(Ordering::Relaxed)) + n;
            // The value, then a tag no other write carries: a write whose
            // answer is lost can be recognised when read back.
            let written = format!(
                "{next} {}-{}",
                self.writer,
                self.writes.fetch_add(1, Ordering::Relaxed)
            );
            let outcome = match c
                .set_data(&self.path, written.as_bytes(), Some(stat.version))
                .await
            {
                Ok(_) => Applied::Yes,
                Err(zk::Error::BadVersion) => Applied::No,
                Err(e) => match c.get_data(&self.path).await {
                    // The answer was lost: read what is there now.
                    Ok((now, now_stat)) => {
                        match applied(written.as_bytes(), stat.version, &now, now_stat.version) {
                            Applied::Unknown => return Err(e.into()),
                            known => known,
                        }
                    }
                    Err(_) => return Err(e.into()),
                },
            };
            match outcome {
                Applied::Yes => {
                    self.floor.fetch_max(next, Ordering::Relaxed);
                    return Ok(next);
                }
                // Nothing written: read again and retry.
                Applied::No | Applied::Unknown => continue,
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

#[cfg(test)]
mod tests {
    use super::{applied, value_of, Applied};

    #[test]
    fn a_lost_answer_is_settled_by_reading_back() {
        let ours = b"1200 7-3";
        // Still at the version the write expected: it was not applied.
        assert_eq!(applied(ours, 5, b"1100 9-1", 5), Applied::No);
        // The write itself is there: it was applied.
        assert_eq!(applied(ours, 5, ours, 6), Applied::Yes);
        // Another write after (or instead of) it: not known.
        assert_eq!(applied(ours, 5, b"1300 9-2", 7), Applied::Unknown);
        assert_eq!(applied(ours, 5, b"1200 9-2", 6), Applied::Unknown);
    }

    #[test]
    fn values_are_read_with_or_without_a_tag() {
        assert_eq!(value_of(b"0"), Some(0));
        assert_eq!(value_of(b"1200 7-3"), Some(1200));
        assert_eq!(value_of(b" 42\n"), Some(42));
        assert_eq!(value_of(b"x 7-3"), None);
        assert_eq!(value_of(b""), None);
    }
}
