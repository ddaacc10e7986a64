//! Retention of the click rollups: the oldest hourly rows, referrer rows
//! and applied batch ids are deleted in bounded batches (each statement
//! walks its time index, `0007_click_retention.sql`,
//! `0010_referrer_retention.sql`), so pruning never holds many locks.

use super::{DbError, Store};
use mysql_async::prelude::*;

/// The tables the pruning deletes from, each with its time column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pruned {
    /// `click_hour` by `hour` (the daily rows stay).
    ClickHour,
    /// `click_day_referrer` by `day` (the device rows stay).
    ClickDayReferrer,
    /// `click_batches` by `applied_at`.
    ClickBatches,
}

impl Pruned {
    /// The table's name (the metric's label).
    pub fn table(self) -> &'static str {
        match self {
            Pruned::ClickHour => "click_hour",
            Pruned::ClickDayReferrer => "click_day_referrer",
            Pruned::ClickBatches => "click_batches",
        }
    }

    fn statement(self) -> &'static str {
        match self {
            Pruned::ClickHour => "DELETE FROM click_hour WHERE hour < ? ORDER BY hour LIMIT ?",
            Pruned::ClickDayReferrer => {
                "DELETE FROM click_day_referrer WHERE day < ? ORDER BY day LIMIT ?"
            }
            Pruned::ClickBatches => {
                "DELETE FROM click_batches WHERE applied_at < ? ORDER BY applied_at LIMIT ?"
            }
        }
    }
}

impl Store {
    /// Deletes at most `limit` rows of `what` older than `before` (Unix
    /// seconds); returns how many went.
    pub(super) async fn prune_here(
        &self,
        what: Pruned,
        before: u64,
        limit: usize,
    ) -> Result<u64, DbError> {
        self.bounded(async {
            let mut conn = self.pool.get_conn().await?;
            conn.exec_drop(what.statement(), (before, limit)).await?;
            Ok(conn.affected_rows())
        })
        .await
    }
}
