//! Group commit for id claims.
//!
//! A durable single-row UPDATE costs one redo-log flush per commit, which
//! caps a 2-core MariaDB at about 10k commits/s. Creations instead hand their
//! claim to a few batching workers: each takes every claim waiting in the
//! queue (up to `claim_batch`) and commits them in one transaction, so the
//! flush is shared and throughput grows with concurrency while a lone
//! creation still commits at once.
//!
//! Batches are isolated: when a batch fails for a reason one item could have
//! caused (the server refused a statement), its items are claimed again one
//! by one, so only a bad item fails and the other callers get their links.
//! A lost connection or a timeout fails the whole batch (retrying each item
//! would only multiply the wait).

use crate::store::{ClaimItem, Claimed, DbError, LinkData, Store};
use prometheus::IntGauge;
use shorturl_common::failpoint;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};

type Reply = oneshot::Sender<Result<Option<Claimed>, DbError>>;

struct Claim {
    id: u64,
    data: Arc<LinkData>,
    reply: Reply,
}

/// Front of the claim queue.
#[derive(Clone)]
pub struct Claimer {
    tx: mpsc::Sender<Claim>,
    /// Claims sent and not yet taken by a worker (`shorturl_claim_queued`).
    queued: IntGauge,
}

impl Claimer {
    /// Starts `workers` batching tasks over `store`; `queued` counts the
    /// claims waiting for one.
    pub fn start(store: Store, workers: usize, batch: usize, queued: IntGauge) -> Claimer {
        let (tx, rx) = mpsc::channel::<Claim>(workers * batch * 4);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..workers {
            let rx = Arc::clone(&rx);
            let store = store.clone();
            let queued = queued.clone();
            tokio::spawn(async move {
                let mut buf: Vec<Claim> = Vec::with_capacity(batch);
                loop {
                    // Test failpoint `origin.claim.hold=*@<path>`: claims
                    // queue up while the file exists (batches made on purpose).
                    if let Some(path) = failpoint::hold_path("origin.claim.hold", "worker") {
                        failpoint::hold(path).await;
                    }
                    {
                        let mut rx = rx.lock().await;
                        match rx.recv().await {
                            Some(c) => buf.push(c),
                            None => return,
                        }
                        while buf.len() < batch {
                            match rx.try_recv() {
                                Ok(c) => buf.push(c),
                                Err(_) => break,
                            }
                        }
                    }
                    queued.sub(buf.len() as i64);
                    commit(
                        &store,
                        std::mem::replace(&mut buf, Vec::with_capacity(batch)),
                    )
                    .await;
                }
            });
        }
        Claimer { tx, queued }
    }

    /// Claims row `id` for `data`: its code and the link's version, or
    /// `Ok(None)` when the row is not free.
    pub async fn claim(&self, id: u64, data: Arc<LinkData>) -> Result<Option<Claimed>, DbError> {
        let (reply, rx) = oneshot::channel();
        let mut waiting = Waiting::new(&self.queued);
        self.tx
            .send(Claim { id, data, reply })
            .await
            .map_err(|_| DbError::ClaimQueueClosed)?;
        // Queued: the worker that takes it counts it out.
        waiting.sent = true;
        rx.await.map_err(|_| DbError::ClaimWorkerStopped)?
    }
}

/// Commits one batch and answers its callers; a batch that may have failed
/// because of one item is retried item by item.
async fn commit(store: &Store, claims: Vec<Claim>) {
    // Sharded, each shard's claims commit (or fail) on their own.
    let first = claims.first().and_then(|c| store.shard_of_id(c.id));
    if claims.iter().all(|c| store.shard_of_id(c.id) == first) {
        return commit_one_shard(store, claims).await;
    }
    let mut groups: std::collections::BTreeMap<Option<usize>, Vec<Claim>> = Default::default();
    for c in claims {
        groups.entry(store.shard_of_id(c.id)).or_default().push(c);
    }
    for (_, group) in groups {
        commit_one_shard(store, group).await;
    }
}

async fn commit_one_shard(store: &Store, claims: Vec<Claim>) {
    let items: Vec<ClaimItem> = claims.iter().map(|c| (c.id, Arc::clone(&c.data))).collect();
    match store.claim_batch(&items).await {
        Ok(claimed) => {
            for (c, ok) in claims.into_iter().zip(claimed) {
                let _ = c.reply.send(Ok(ok));
            }
        }
        Err(e) if claims.len() > 1 && e.may_be_item_specific() => {
            tracing::warn!(items = claims.len(), error = %e,
                "claim batch failed; retrying its items one by one");
            for (c, item) in claims.into_iter().zip(items) {
                let r = store
                    .claim_batch(std::slice::from_ref(&item))
                    .await
                    .map(|v| v.into_iter().next().flatten());
                if let Err(e) = &r {
                    tracing::error!(id = item.0, error = %e, "claim failed on its own");
                }
                let _ = c.reply.send(r);
            }
        }
        Err(e) => {
            for c in claims {
                let _ = c.reply.send(Err(e.clone()));
            }
        }
    }
}

/// A claim counted in `shorturl_claim_queued` from before its send, and
/// counted out again if the send fails or its caller goes away first.
struct Waiting<'a> {
    queued: &'a IntGauge,
    sent: bool,
}

impl<'a> Waiting<'a> {
    fn new(queued: &'a IntGauge) -> Waiting<'a> {
        queued.inc();
        Waiting {
            queued,
            sent: false,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.sent {
            self.queued.dec();
        }
    }
}
