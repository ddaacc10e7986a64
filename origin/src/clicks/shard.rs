//! Click rollups sharded like the links (issue 16): a batch is split by the
//! shard of each line's link, and each part is applied on that shard in one
//! transaction with the batch id (so a redelivered batch is a duplicate on
//! every shard that applied its part, and applied where it was not yet:
//! each shard's counts stay exact across crashes and redelivery). The
//! rollups sit next to `short_code`, which the statistics join.

use super::apply::{apply, Applied};
use crate::store::{DbError, Store};
use mysql_async::prelude::*;
use shorturl_common::clicks::Batch;
use shorturl_common::code::is_fleet_code;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The shard of every code of `codes`: the directory's answer if it has
/// one (one read for all), else the code's home range; 0 for neither.
async fn shards_of(
    store: &Store,
    codes: &BTreeSet<&str>,
) -> Result<HashMap<String, usize>, DbError> {
    // A per-domain link filed before protocol 3.6 is under its bare code.
    let mut asked: BTreeSet<&str> = codes.clone();
    asked.extend(
        codes
            .iter()
            .filter_map(|c| c.split_once('/').map(|(_, code)| code)),
    );
    let marks = vec!["?"; asked.len()].join(",");
    let params: Vec<mysql_async::Value> = asked.iter().map(|c| (*c).into()).collect();
    let filed: Vec<(String, String)> = store
        .bounded(async {
            let mut conn = store.meta.get_conn().await?;
            Ok(conn
                .exec(
                    format!("SELECT code, shard FROM custom_code_dir WHERE code IN ({marks})"),
                    params,
                )
                .await?)
        })
        .await?;
    let filed: HashMap<String, usize> = filed
        .into_iter()
        .filter_map(|(c, s)| Some((c, store.shards.index_of_name(&s)?)))
        .collect();
    Ok(codes
        .iter()
        .map(|c| {
            let bare = c.split_once('/').map(|(_, code)| code);
            let i = filed
                .get(*c)
                .or_else(|| filed.get(bare?))
                .copied()
                .or_else(|| store.shards.home_of_code(c))
                .unwrap_or(0);
            ((*c).to_owned(), i)
        })
        .collect())
}

/// `batch` split into one part per shard, each with the batch's id.
async fn split(store: &Store, batch: &Batch) -> Result<BTreeMap<usize, Batch>, DbError> {
    let codes: BTreeSet<&str> = batch.codes().collect();
    let mut parts: BTreeMap<usize, Batch> = BTreeMap::new();
    if codes.is_empty() {
        parts.insert(0, batch.clone());
        return Ok(parts);
    }
    let of = shards_of(store, &codes).await?;
    let mut to = Parts {
        parts,
        id: &batch.id,
        shard: |code: &str| of.get(code).copied().unwrap_or(0),
    };
    to.file(&batch.hours, |l| &l.code, |b| &mut b.hours);
    to.file(&batch.referrers, |l| &l.code, |b| &mut b.referrers);
    to.file(&batch.devices, |l| &l.code, |b| &mut b.devices);
    to.file(&batch.destinations, |l| &l.code, |b| &mut b.destinations);
    to.file(&batch.dims, |l| &l.code, |b| &mut b.dims);
    to.file(&batch.uniques, |l| &l.code, |b| &mut b.uniques);
    // Each part counts its link-days' dimensions as the batch does (the
    // defaults of a version 4 batch are computed per part).
    let mut parts = to.parts;
    for p in parts.values_mut() {
        p.counted_dims = batch.counted_dims;
    }
    Ok(parts)
}

/// The parts being filled, by shard.
struct Parts<'a, F> {
    parts: BTreeMap<usize, Batch>,
    id: &'a str,
    shard: F,
}

impl<F: Fn(&str) -> usize> Parts<'_, F> {
    /// Files each of `lines` (one kind) in the part of its code's shard.
    fn file<T: Clone>(
        &mut self,
        lines: &[T],
        code: impl Fn(&T) -> &String,
        kind: impl Fn(&mut Batch) -> &mut Vec<T>,
    ) {
        for l in lines {
            let part = self
                .parts
                .entry((self.shard)(code(l)))
                .or_insert_with(|| Batch::new(self.id));
            kind(part).push(l.clone());
        }
    }
}

/// Applies `batch` at `now`: unsharded as one transaction; sharded, each
/// shard's part on its shard. `Applied` with the part that was added
/// (`None`: every part was already there); the first failure stops and
/// fails the batch (it stays pending and is redelivered whole: parts
/// already applied are then duplicates).
pub async fn apply_sharded(
    store: &Store,
    batch: &Batch,
    now: u64,
    referrers_per_day: usize,
    unattributed: &prometheus::IntCounter,
) -> Result<Option<Batch>, DbError> {
    let digest = store.subscriptions().click_digest_secs();
    let renamed = name_bare_codes(store, batch, unattributed).await?;
    let batch = renamed.as_ref().unwrap_or(batch);
    if !store.shards.sharded {
        return Ok(
            match apply(&store.pool, batch, now, referrers_per_day, digest).await? {
                Applied::Applied => Some(batch.clone()),
                Applied::Duplicate => None,
            },
        );
    }
    let mut added: Option<Batch> = None;
    for (i, part) in split(store, batch).await? {
        let Some(shard) = store.shards.shards.get(i) else {
            continue;
        };
        if apply(&shard.pool, &part, now, referrers_per_day, digest).await? == Applied::Applied {
            added
                .get_or_insert_with(|| Batch::new(batch.id.clone()))
                .append(part);
        }
    }
    Ok(added)
}

/// A batch of an edge older than protocol 3.6 names a per-domain link by
/// its bare code; the rollups name it by its link key. Each such code is
/// renamed to the key of its only link; a code held on several domains
/// (possible only once per-domain codes were created, after every edge
/// should count by key) cannot be told apart and stays bare, logged.
/// `None` when nothing needed renaming.
async fn name_bare_codes(
    store: &Store,
    batch: &Batch,
    unattributed: &prometheus::IntCounter,
) -> Result<Option<Batch>, DbError> {
    let bare: BTreeSet<&str> = batch
        .codes()
        .filter(|c| !c.contains('/') && !is_fleet_code(c))
        .collect();
    if bare.is_empty() {
        return Ok(None);
    }
    let mut names: HashMap<String, String> = HashMap::new();
    for code in bare {
        match store.domains_of_code(code, 2).await?.as_slice() {
            [only] => {
                names.insert(code.to_owned(), only.key().name());
            }
            rows => {
                unattributed.inc();
                tracing::warn!(code, links = rows.len(), batch = %batch.id,
                    "click batch names a per-domain code without its domain; counted under the bare code");
            }
        }
    }
    let mut out = batch.clone();
    let rename = |c: &mut String| {
        if let Some(n) = names.get(c.as_str()) {
            c.clone_from(n);
        }
    };
    out.hours.iter_mut().for_each(|l| rename(&mut l.code));
    out.referrers.iter_mut().for_each(|l| rename(&mut l.code));
    out.devices.iter_mut().for_each(|l| rename(&mut l.code));
    out.destinations
        .iter_mut()
        .for_each(|l| rename(&mut l.code));
    out.dims.iter_mut().for_each(|l| rename(&mut l.code));
    out.uniques.iter_mut().for_each(|l| rename(&mut l.code));
    Ok(Some(out))
}
