//! The screening pass: after a policy change, one origin at a time (the
//! `screening` lease) reads every active link, shard after shard in id
//! order, and rewrites the links whose screening the new policy changes
//! (a new version each, through the outbox: Redis, then every edge). The
//! fingerprint of the policy a finished pass applied is kept in MySQL, so
//! a pass cut short (the holder died, the lease moved) is run again by the
//! next holder, and origins that agree on the policy run none.

use super::{Policy, Screening};
use crate::background::Stop;
use crate::links::Links;
use crate::store::{AuditAction, Change, DbError, LinkKey, LinkRow, Modified, RowState};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

/// The lease's name in the `leases` table.
pub const LEASE_NAME: &str = "screening";

/// Why a pass stopped early.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("the screening lease was taken over by {0} during the pass")]
    LeaseLost(String),
    #[error("screening pass: {0}")]
    Database(#[from] DbError),
}

/// The background task: refresh, and run the pass when this origin holds
/// the lease and the policy in force is not the one last applied.
pub async fn run(links: Arc<Links>, screening: Arc<Screening>, stop: Stop) {
    let holder = crate::lifecycle::holder_id("screening");
    let period = screening.config().refresh;
    stop.every(period, || tick(&links, &screening, &holder))
        .await;
    let _ = links.store.lease_release(LEASE_NAME, &holder).await;
}

async fn tick(links: &Links, screening: &Screening, holder: &str) {
    if let Err(e) = screening.refresh(&links.store).await {
        tracing::warn!(error = %e, "screening refresh failed; the last good policy stays");
    }
    let ttl = screening.config().lease_ttl;
    match links.store.lease_acquire(LEASE_NAME, holder, ttl).await {
        Ok(h) if h == holder => {}
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(error = %e, "screening lease");
            return;
        }
    }
    let policy = screening.policy();
    let applied = match links.store.screen_applied().await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "screening: reading the applied policy");
            return;
        }
    };
    if applied.as_deref() == Some(policy.fingerprint()) {
        return;
    }
    // No pass ever ran and nothing is screened: no link can carry `w`.
    let skip = applied.is_none() && policy.is_empty();
    if !skip {
        let started = Instant::now();
        match pass(links, screening, &policy, holder).await {
            Ok(changed) => {
                let secs = started.elapsed().as_secs_f64();
                links.metrics.screening_pass_seconds.set(secs);
                tracing::info!(changed, secs, entries = policy.len(), "screening pass done");
            }
            Err(e) => {
                tracing::warn!(error = %e, "screening pass stopped; it runs again");
                return;
            }
        }
    }
    if let Err(e) = links.store.set_screen_applied(policy.fingerprint()).await {
        tracing::warn!(error = %e, "screening: recording the applied policy");
    }
}

/// Goes through every active link once under `policy`; returns how many
/// links it changed.
pub async fn pass(
    links: &Links,
    screening: &Screening,
    policy: &Policy,
    holder: &str,
) -> Result<u64, PassError> {
    let cfg = screening.config();
    let mut changed = 0;
    for shard in links.store.every_shard() {
        let mut after = 0;
        loop {
            let rows = shard.screen_scan(after, cfg.pass_batch).await?;
            let Some(last) = rows.last() else { break };
            after = last.id;
            for r in &rows {
                if policy.rescreen(&r.url, r.options.as_deref()).is_none() {
                    continue;
                }
                let key = LinkKey::new(&r.code, &r.domain);
                if rescreen(links, policy, &key).await? {
                    changed += 1;
                }
            }
            // Renewed per batch: a holder that stalls past its lease stops.
            let h = links
                .store
                .lease_acquire(LEASE_NAME, holder, cfg.lease_ttl)
                .await?;
            if h != holder {
                return Err(PassError::LeaseLost(h));
            }
        }
    }
    Ok(changed)
}

/// Rewrites one link's screening under `policy` (decided again on the
/// locked row); `true` when it changed.
async fn rescreen(links: &Links, policy: &Policy, key: &LinkKey) -> Result<bool, DbError> {
    let m = links
        .store
        .modify(key, "screening", links.cfg.redirect.status, |row| {
            Ok::<_, Infallible>(screened(policy, row))
        })
        .await?;
    match m {
        Ok(Modified::Changed {
            outbox_id, shard, ..
        }) => {
            links.metrics.screening_changed.inc();
            links.outbox.apply_now(shard, outbox_id).await;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The change `policy` makes to an active `row`'s screening, if any.
pub fn screened(policy: &Policy, row: &LinkRow) -> Option<Change> {
    if row.state != RowState::Active {
        return None;
    }
    let options = policy.rescreen(
        row.url.as_deref().unwrap_or_default(),
        row.options.as_deref(),
    )?;
    Some(Change {
        after: LinkRow {
            options,
            ..row.clone()
        },
        action: AuditAction::Edit,
    })
}
