//! The overview's per-day counts of the days before today, kept in memory:
//! counting 30 days of creations reads every link created in them (an index
//! range, but ~half a second at 1M links), and those days no longer change
//! (creations are always "now"; a late click batch moves yesterday's clicks
//! for a few seconds after midnight). So they are read once per day and
//! re-read at most every [`REFRESH`]; only today is counted on each load.

use crate::store::console::DayRows;
use crate::store::{DbError, Store};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long past days are kept before they are read again.
pub const REFRESH: Duration = Duration::from_secs(600);

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
    /// Creations and clicks per day in `[from, today)`.
    pub async fn get(
        &self,
        store: &Store,
        from: u64,
        today: u64,
    ) -> Result<(DayRows, DayRows), DbError> {
        if let Ok(c) = self.cached.lock() {
            if let Some(c) = c
                .as_ref()
                .filter(|c| c.today == today && c.from == from && c.at.elapsed() < REFRESH)
            {
                return Ok((c.created.clone(), c.clicks.clone()));
            }
        }
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
}
