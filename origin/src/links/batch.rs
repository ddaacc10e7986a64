//! Batch creation: many creations in one call, each answered on its own.
//!
//! Every item is an ordinary [`Links::create`] (same tenancy rules, dedup
//! and custom-code handling); they run concurrently, so their claims meet in
//! the group commit and share its transactions. Items identical for
//! deduplication (same domain, merchant, lifetime, URL and tags, no custom
//! code, no options) are created once: the first is the creation, the later ones answer that
//! link as deduplicated, exactly as if they had been sent one after the
//! other.

use super::{Creation, LinkError, Links};
use crate::tenancy::Caller;
use crate::validate::CreateRequest;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;

/// Most items of one batch.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// What makes two items of a batch the same creation for deduplication
/// (the caller is the same for all of them).
type DedupIdentity<'a> = (
    Option<&'a str>,
    Option<u64>,
    Option<u32>,
    &'a str,
    &'a [String],
);

/// `None` for an item no other can repeat: a custom code, or options (a
/// creation with options is never deduplicated, [`Links::create`]).
fn identity(r: &CreateRequest) -> Option<DedupIdentity<'_>> {
    if r.code.is_some() || r.password.is_some() || r.settings.to_column().is_some() {
        return None;
    }
    Some((
        r.domain.as_deref(),
        r.kdt_id,
        r.ttl_days,
        r.url.as_str(),
        r.tags.as_slice(),
    ))
}

impl Links {
    /// Creates every item for `caller`, answering each in order.
    pub async fn create_batch(
        self: &Arc<Self>,
        caller: &Caller,
        items: Vec<CreateRequest>,
    ) -> Vec<Result<Creation, LinkError>> {
        // Each item either leads (it is created) or repeats an earlier one.
        let mut first: HashMap<DedupIdentity<'_>, usize> = HashMap::new();
        let leader_of: Vec<Option<usize>> = items
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let id = identity(r)?;
                match first.get(&id) {
                    Some(&j) => Some(j),
                    None => {
                        first.insert(id, i);
                        None
                    }
                }
            })
            .collect();
        drop(first);
        // As many concurrent creations as the claim workers take in one
        // round of batches: enough to fill the group commit, few enough not
        // to queue a thousand futures on the pool.
        let parallel = (self.cfg.mysql.claim_workers * self.cfg.mysql.claim_batch).max(1);
        let leaders: Vec<CreateRequest> = items
            .into_iter()
            .zip(&leader_of)
            .filter(|(_, lead)| lead.is_none())
            .map(|(r, _)| r)
            .collect();
        // `buffered` answers in the order of its input.
        let created: Vec<Result<Creation, LinkError>> = futures::stream::iter(leaders)
            .map(|req| self.create(caller, req))
            .buffered(parallel)
            .collect()
            .await;
        let mut created = created.into_iter();
        let mut out: Vec<Result<Creation, LinkError>> = Vec::with_capacity(leader_of.len());
        for lead in &leader_of {
            let r = match lead {
                // The first item is earlier, so already in `out`.
                Some(j) => match &out[*j] {
                    Ok(Creation::New(l) | Creation::Deduplicated(l)) => {
                        Ok(Creation::Deduplicated(l.clone()))
                    }
                    Err(e) => Err(e.clone()),
                },
                None => match created.next() {
                    Some(r) => r,
                    None => break,
                },
            };
            out.push(r);
        }
        out
    }
}
