//! Code recycling (issue 11, item 2; opt-in with `lifecycle.recycle`).
//!
//! After its reap passes, the reaper (under its lease) examines tombstones
//! whose quarantine is over and appends the reusable codes to the pool
//! again ([`Store::recycle_batch`]), in bounded batches at the reaper's
//! rate. A code is reusable only when every condition of [`reusable`]
//! holds; the first that fails names why it is kept (a label of
//! `shorturl_lifecycle_recycle_kept_total`).

use super::{ReapError, Reaper};
use crate::schema::CUSTOM_ID_BASE;
use crate::store::recycle::Candidate;
use crate::store::{is_permanent, RowState};
use shorturl_common::time::now_unix;
use std::time::Duration;
use tokio::time::Instant;

/// Why a code is kept out of the pool (the metric label).
pub mod kept {
    /// A custom code (id from `CUSTOM_ID_BASE`): people chose it and remember it.
    pub const CUSTOM: &str = "custom";
    /// Not deleted or expired (a row that lives again; never expected here).
    pub const LIVE: &str = "live";
    /// Ended less than the quarantine ago.
    pub const QUARANTINE: &str = "quarantine";
    /// A click was counted at or after its end: some cache still served it.
    pub const CLICKED: &str = "clicked";
    /// Served with 301/308, which browsers may cache for good.
    pub const PERMANENT: &str = "permanent";
    /// Served before the redirect status was recorded: unknown, so kept.
    pub const UNKNOWN_REDIRECT: &str = "unknown_redirect";
}

/// Whether `c` may go back to the pool at `now` after `quarantine`: a
/// pre-generated code, of a link deleted or expired at least `quarantine`
/// ago, with no click since it ended, never served with a permanent
/// redirect (nor with an unknown one), and created after the last moment
/// any origin served permanent redirects. `Err` names the first failed
/// condition (see [`kept`]).
pub fn reusable(c: &Candidate, now: u64, quarantine: Duration) -> Result<(), &'static str> {
    if c.id >= CUSTOM_ID_BASE {
        return Err(kept::CUSTOM);
    }
    if !matches!(c.row.state, RowState::Deleted | RowState::Expired) {
        return Err(kept::LIVE);
    }
    if c.ended_at.saturating_add(quarantine.as_secs()) > now {
        return Err(kept::QUARANTINE);
    }
    // A rollup row (hour or day) that starts at or after the end: some
    // cache still served the link. (Clicks later in the hour or day of the
    // end share a row with the clicks before it and cannot be told apart.)
    if c.last_click.is_some_and(|start| start >= c.ended_at) {
        return Err(kept::CLICKED);
    }
    match c.redirect_status {
        None => return Err(kept::UNKNOWN_REDIRECT),
        Some(s) if is_permanent(s) => return Err(kept::PERMANENT),
        Some(_) => {}
    }
    // Some origin served 301/308 while this link may have been live (its
    // own record says what the origin serving it at creation or at its
    // last change did, not what every origin did since).
    if c.permanent_until
        .is_some_and(|until| c.row.created_at.is_none_or(|at| at <= until))
    {
        return Err(kept::PERMANENT);
    }
    Ok(())
}

impl Reaper {
    /// Recycles until no tombstone past its quarantine is left to examine,
    /// at most `reap_rate_per_sec` rows examined per second, renewing the
    /// lease between batches. Returns how many codes went back to the pool.
    pub(super) async fn recycle_pass(&self, renewed: &mut Instant) -> Result<u64, ReapError> {
        let rate = f64::from(self.cfg.reap_rate_per_sec);
        let quarantine = self.cfg.quarantine;
        let mut total = 0u64;
        loop {
            self.renew_if_due(renewed).await?;
            let start = Instant::now();
            let now = now_unix();
            let cutoff = now.saturating_sub(quarantine.as_secs());
            let b = self
                .store
                .recycle_batch(now, cutoff, self.cfg.reap_batch, |c| {
                    reusable(c, now, quarantine)
                })
                .await?;
            total += b.recycled as u64;
            self.metrics.lifecycle_recycled.inc_by(b.recycled as u64);
            for why in &b.kept {
                self.metrics
                    .lifecycle_recycle_kept
                    .with_label_values(&[*why])
                    .inc();
            }
            if b.examined < self.cfg.reap_batch {
                break;
            }
            tokio::time::sleep_until(start + Duration::from_secs_f64(b.examined as f64 / rate))
                .await;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LinkRow;

    const Q: Duration = Duration::from_secs(180 * 86_400);
    const NOW: u64 = 1_800_000_000;

    fn reusable_one() -> Candidate {
        let ended_at = NOW - Q.as_secs() - 1;
        Candidate {
            id: 7,
            ended_at,
            redirect_status: Some(302),
            last_click: Some(ended_at - 1),
            permanent_until: Some(0),
            row: LinkRow {
                code: "abcdef".into(),
                state: RowState::Deleted,
                url: Some("https://a/".into()),
                domain: Some("sho.rt".into()),
                app: Some("demo".into()),
                client_app: None,
                client_version: None,
                kdt_id: None,
                created_at: Some(1),
                updated_at: Some(ended_at),
                expires_at: Some(NOW),
                version: 2,
                reaped_at: None,
                options: None,
                tags: None,
            },
        }
    }

    #[test]
    fn each_condition_keeps_a_code_on_its_own() {
        assert_eq!(reusable(&reusable_one(), NOW, Q), Ok(()));
        let mut c = reusable_one();
        c.row.state = RowState::Expired;
        assert_eq!(reusable(&c, NOW, Q), Ok(()));
        type Breaks = fn(&mut Candidate);
        let cases: [(Breaks, &str); 9] = [
            (|c| c.id = CUSTOM_ID_BASE, kept::CUSTOM),
            (|c| c.row.state = RowState::Disabled, kept::LIVE),
            (|c| c.ended_at += 2, kept::QUARANTINE),
            (|c| c.last_click = Some(c.ended_at), kept::CLICKED),
            (|c| c.redirect_status = Some(301), kept::PERMANENT),
            (|c| c.redirect_status = Some(308), kept::PERMANENT),
            (|c| c.redirect_status = None, kept::UNKNOWN_REDIRECT),
            (|c| c.permanent_until = Some(1), kept::PERMANENT),
            (|c| c.row.created_at = None, kept::PERMANENT),
        ];
        for (change, why) in cases {
            let mut c = reusable_one();
            change(&mut c);
            assert_eq!(reusable(&c, NOW, Q), Err(why));
        }
    }
}
