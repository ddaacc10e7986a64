//! The overview's per-day counts of the days before today, kept in memory:
//! counting 30 days of creations reads every link created in them (an index
//! range, but ~half a second at 1M links, over a second on a cold buffer
//! pool), and those days no longer change (creations are always "now"; a
//! late click batch moves yesterday's clicks for a few seconds after
//! midnight). A background task ([`PastDays::keep`]) reads them when the
//! origin starts, every [`REFRESH`], and just after each midnight, so a
//! page load counts only today; a load finds nothing kept only while that
//! first read runs (it then counts for itself).
//!
//! The same days are the default range of the tenant pages, which take
//! another as `?days=N` ([`param`], [`range`]).

use super::Req;
use crate::clicks::{Interval, StatsRange};
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
    window_of(now, DAYS)
}

/// The `days` whole UTC days ending with today: `(from, today)`, both day
/// starts.
fn window_of(now: u64, days: u64) -> (u64, u64) {
    let today = day_start(now);
    (today.saturating_sub(days.saturating_sub(1) * 86_400), today)
}

/// The range of the clicks a console page shows: the `days` whole UTC
/// days ending with today (the API's tenant ranges are whole days too).
pub fn range(now: u64, days: u64) -> StatsRange {
    let (from, today) = window_of(now, days);
    StatsRange {
        from,
        to: today + 86_400,
        interval: Interval::Day,
    }
}

/// A page's `?days=` (default [`DAYS`]): a whole number from 1 to `max`
/// (the API's `clicks.max_day_points`, so a page never reads more than
/// the API would); else the message of a 400 page.
pub fn param(req: &Req, max: u64) -> Result<u64, String> {
    let Some(v) = req.param("days") else {
        return Ok(DAYS.min(max));
    };
    v.parse::<u64>()
        .ok()
        .filter(|d| (1..=max).contains(d) && v.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("days must be a whole number from 1 to {max}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(query: &str) -> Req {
        Req {
            method: http::Method::GET,
            path: "/admin/merchants/1".into(),
            query: Some(query.into()),
            headers: http::HeaderMap::new(),
            peer: None,
        }
    }

    #[test]
    fn days_and_their_range() {
        assert_eq!(param(&req(""), 366), Ok(DAYS));
        assert_eq!(param(&req("days=7"), 366), Ok(7));
        assert_eq!(param(&req("days=366"), 366), Ok(366));
        for bad in [
            "days=0", "days=367", "days=x", "days=+7", "days=", "days=-1",
        ] {
            assert!(param(&req(bad), 366).is_err(), "{bad}");
        }
        let now = 1_700_000_000;
        let r = range(now, 30);
        assert_eq!((r.to - r.from) / 86_400, 30);
        assert!(r.from <= now && now < r.to);
        assert_eq!(r.from % 86_400, 0);
        assert_eq!(window(now), window_of(now, DAYS));
        assert_eq!(range(now, 1).from, day_start(now));
    }
}
