//! The overview's per-day counts of the days before today, kept in memory:
//! counting 30 days of creations reads every link created in them (an index
//! range, but ~half a second at 1M links, over a second on a cold buffer
//! pool), and those days no longer change (creations are always "now"; a
//! late click batch moves yesterday's clicks for a few seconds after
//! midnight). A background task ([`PastDays::keep`]) reads them when the
//! origin starts, every [`REFRESH`], and just after each midnight, so a
//! page load counts only today; a load finds nothing kept only while that
//! first read runs (it then counts for itself).

use crate::store::console::DayRows;
use crate::store::{DbError, Store};
use shorturl_common::clicks::day_start;
use shorturl_common::time::now_unix;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long past days are kept before they are read again.
pub const REFRESH: Duration = Duration::from_secs(600);
/// Days the overview shows, today included.
pub const DAYS: u64 = 30;
/// Read again this long after midnight (late click batches have landed).
const AFTER_MIDNIGHT_SECS: u64 = 30;

/// The overview's window at `now`: `(from, today)`, both day starts.
pub fn window(now: u64) -> (u64, u64) {
    let today = day_start(now);
    (today - (DAYS - 1) * 86_400, today)
}

struct Cached {
    today: u64,
    from: u64,
    at: Instant,
    created: DayRows,
    clicks: DayRows,
}

/// Past days' creations and clicks.
#[derive(Default)]
pub struct PastDays {
    cached: Mutex<Option<Cached>>,
}

impl PastDays {
    /// Creations and clicks per day in `[from, today)`: the kept copy when
    /// it is for this window and younger than twice [`REFRESH`] (the
    /// keeper renews it every `REFRESH`), otherwise read now.
    pub async fn get(
        &self,
        store: &Store,
        from: u64,
        today: u64,
    ) -> Result<(DayRows, DayRows), DbError> {
        if let Ok(c) = self.cached.lock() {
            if let Some(c) = c
                .as_ref()
                .filter(|c| c.today == today && c.from == from && c.at.elapsed() < 2 * REFRESH)
            {
                return Ok((c.created.clone(), c.clicks.clone()));
            }
        }
        self.read(store, from, today).await
    }

    async fn read(
        &self,
        store: &Store,
        from: u64,
        today: u64,
    ) -> Result<(DayRows, DayRows), DbError> {
        let (created, clicks) = tokio::try_join!(
            store.created_per_day(from, today),
            store.clicks_per_day(from, today)
        )?;
        if let Ok(mut c) = self.cached.lock() {
            *c = Some(Cached {
                today,
                from,
                at: Instant::now(),
                created: created.clone(),
                clicks: clicks.clone(),
            });
        }
        Ok((created, clicks))
    }

    /// Keeps the copy current until the task is dropped: reads at once,
    /// then every [`REFRESH`] and shortly after each midnight (UTC). A
    /// failed read is retried at the next turn (loads read for themselves
    /// meanwhile).
    pub async fn keep(self: std::sync::Arc<Self>, store: Store) {
        loop {
            let now = now_unix();
            let (from, today) = window(now);
            if let Err(e) = self.read(&store, from, today).await {
                tracing::debug!(error = %e, "admin overview: reading past days failed");
            }
            let to_midnight = (today + 86_400 + AFTER_MIDNIGHT_SECS).saturating_sub(now_unix());
            tokio::time::sleep(REFRESH.min(Duration::from_secs(to_midnight.max(1)))).await;
        }
    }
}
