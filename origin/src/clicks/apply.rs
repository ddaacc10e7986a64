//! One batch into the rollups, in one MySQL transaction with its id.
//!
//! The id goes in first: if it is already there the batch was applied
//! (by this or another origin, before a crash or a lost acknowledgement)
//! and nothing else is written. A concurrent application of the same batch
//! waits on that row's lock and then finds it. The counts are added with
//! `ON DUPLICATE KEY UPDATE n = n + VALUES(n)`, so rows of many batches
//! and edges sum up.
//!
//! Referrer lines are merged with the link-day's stored rows first, so
//! that it keeps at most N named hosts and `~other` ([`super::referrers`])
//! however many origins apply batches at once; dimension lines (version 4,
//! protocol 3.7) likewise per link-day-dimension, at most
//! [`TOP_VALUES`] named values and `~other` besides the
//! dimension's default, which is never folded (one rule, [`Bounded`], for
//! both rollups). Each group is locked by upserting its `~other` row (`n +
//! 0`; removed again at the end if it stays 0): every applier does that
//! first, so one at a time holds a group, and what it then reads (READ
//! COMMITTED: the latest committed rows, no gap locks) nobody else changes
//! before it commits. Every row is locked in one global order — the batch
//! id, hour rows, referrer locks, device rows, digest rows, destination
//! rows, dimension locks, then the defaults of the dimensions, each sorted
//! by key — so appliers wait for each other instead of deadlocking; a
//! lock race that remains (deadlock, lock wait timeout) rolls the
//! transaction back and the batch is applied again, a bounded number of
//! times.
//!
//! A version 4 batch counts every human click in every dimension and does
//! not send the defaults: per link-day and dimension, the day's human
//! clicks (its `h` lines) minus the named counts are added to the
//! default's row ([`dim_defaults`]).

use super::referrers::fold;
use crate::db::is_duplicate;
use crate::store::error::is_lock_conflict;
use crate::store::DbError;
use mysql_async::prelude::*;
use mysql_async::{IsolationLevel, Pool, Transaction, TxOpts, Value};
use shorturl_common::clicks::dims::TOP_VALUES;
use shorturl_common::clicks::uniq::Sketch;
use shorturl_common::clicks::{day_start, Batch, Dim, OTHER_REFERRER};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What applying a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The counts were added.
    Applied,
    /// The batch id was already recorded: nothing was added.
    Duplicate,
}

/// Rows per multi-row `INSERT` (bounds the statement and its placeholders).
const ROWS_PER_INSERT: usize = 500;

/// Link-days per locking read of stored referrer rows.
const LINK_DAYS_PER_READ: usize = 500;

/// Attempts at a batch that keeps losing lock races to other appliers.
const ATTEMPTS: u32 = 5;

/// Bound on one batch's transaction (a batch may hold 100,000 lines, far
/// more than one API statement, hence not `mysql.timeout_ms`).
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(60);

fn values(rows: usize, cols: usize) -> String {
    let one = format!("({})", vec!["?"; cols].join(", "));
    vec![one; rows].join(", ")
}

/// Adds `rows` to one rollup: a multi-row `head VALUES (...) tail` per
/// [`ROWS_PER_INSERT`] rows, each row's values (as many as `head` names)
/// from `values_of`.
async fn upsert<T, V: IntoIterator<Item = Value>>(
    tx: &mut Transaction<'_>,
    head: &str,
    tail: &str,
    rows: &[T],
    values_of: impl Fn(&T) -> V,
) -> Result<(), mysql_async::Error> {
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let p: Vec<Value> = chunk.iter().flat_map(&values_of).collect();
        let sql = format!(
            "{head} VALUES {} {tail}",
            values(chunk.len(), p.len() / chunk.len())
        );
        tx.exec_drop(sql, p).await?;
    }
    Ok(())
}

/// A daily rollup whose groups keep at most N named values and `~other`
/// ([`super::referrers`]): the link-days of `click_day_referrer` (hosts),
/// the link-day-dimensions of `click_day_dim` (values).
struct Bounded {
    table: &'static str,
    /// The column naming the dimension (`None`: a group is a link-day).
    dim: Option<&'static str>,
    /// The column of the value ranked.
    value: &'static str,
}

const REFERRERS: Bounded = Bounded {
    table: "click_day_referrer",
    dim: None,
    value: "host",
};

const DIMENSIONS: Bounded = Bounded {
    table: "click_day_dim",
    dim: Some("dim"),
    value: "value",
};

/// A group of a bounded rollup: `(code, day, dim)`, `dim` empty for one
/// without a dimension column.
type Group<'a> = (&'a str, u64, &'a str);

/// The writes of one batch to a bounded rollup after folding.
#[derive(Default)]
struct Folded<'a> {
    /// `(group, value, n)` to add.
    add: Vec<(Group<'a>, String, u64)>,
    /// Groups and their values whose rows go (folded into `~other`).
    delete: Vec<(Group<'a>, Vec<String>)>,
    /// Groups whose `~other` row only the lock created (it stays 0).
    unlock: Vec<Group<'a>>,
}

impl Bounded {
    /// `code, day[, dim]`.
    fn group_cols(&self) -> String {
        match self.dim {
            Some(d) => format!("code, day, {d}"),
            None => "code, day".to_owned(),
        }
    }

    /// `(code = ? AND day = ?[ AND dim = ?]) OR ...` over `groups`, and
    /// its parameters.
    fn groups_cond(&self, groups: &[Group<'_>]) -> (String, Vec<Value>) {
        let one = match self.dim {
            Some(d) => format!("(code = ? AND day = ? AND {d} = ?)"),
            None => "(code = ? AND day = ?)".to_owned(),
        };
        let cond = vec![one; groups.len()].join(" OR ");
        let p = groups.iter().flat_map(|g| self.group_values(g)).collect();
        (cond, p)
    }

    fn group_values(&self, &(code, day, dim): &Group<'_>) -> Vec<Value> {
        let mut v: Vec<Value> = vec![code.into(), day.into()];
        if self.dim.is_some() {
            v.push(dim.into());
        }
        v
    }

    /// Adds `rows` (`(group, value, n)`) to the rollup.
    async fn add<V: AsRef<str>>(
        &self,
        tx: &mut Transaction<'_>,
        rows: &[(Group<'_>, V, u64)],
    ) -> Result<(), mysql_async::Error> {
        upsert(
            tx,
            &format!(
                "INSERT INTO {} ({}, {}, n)",
                self.table,
                self.group_cols(),
                self.value
            ),
            "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
            rows,
            |(g, v, n)| {
                let mut p = self.group_values(g);
                p.push(Value::from(AsRef::<str>::as_ref(v)));
                p.push((*n).into());
                p
            },
        )
        .await
    }

    /// Locks every group of `lines` (its `~other` row), reads its stored
    /// rows (but those `keep` names, which are never folded) and folds the
    /// lines into them (at most `top` named values each).
    async fn fold<'a>(
        &self,
        tx: &mut Transaction<'_>,
        lines: impl Iterator<Item = (Group<'a>, &'a str, u64)>,
        top: usize,
        keep: impl Fn(&str, &str) -> bool,
    ) -> Result<Folded<'a>, mysql_async::Error> {
        // Sorted: every applier locks groups in the same order.
        let mut incoming: BTreeMap<Group<'a>, Vec<(String, u64)>> = BTreeMap::new();
        for (g, value, n) in lines {
            incoming.entry(g).or_default().push((value.to_owned(), n));
        }
        let groups: Vec<Group<'a>> = incoming.keys().copied().collect();
        let locks: Vec<(Group<'a>, &str, u64)> =
            groups.iter().map(|g| (*g, OTHER_REFERRER, 0)).collect();
        self.add(tx, &locks).await?;
        let mut stored: HashMap<(String, u64, String), Vec<(String, u64)>> = HashMap::new();
        for chunk in groups.chunks(LINK_DAYS_PER_READ) {
            let (cond, p) = self.groups_cond(chunk);
            let dim = self.dim.unwrap_or("''");
            let rows: Vec<(String, u64, String, String, u64)> = tx
                .exec(
                    format!(
                        "SELECT code, day, {dim}, {}, n FROM {} WHERE {cond}",
                        self.value, self.table
                    ),
                    p,
                )
                .await?;
            for (code, day, dim, value, n) in rows {
                if !keep(&dim, &value) {
                    stored.entry((code, day, dim)).or_default().push((value, n));
                }
            }
        }
        let mut out = Folded::default();
        for (g @ (code, day, dim), lines) in incoming {
            let here = stored
                .get(&(code.to_owned(), day, dim.to_owned()))
                .map_or(&[][..], Vec::as_slice);
            let f = fold(here, &lines, top);
            let other_stored: u64 = here
                .iter()
                .filter(|(v, _)| v == OTHER_REFERRER)
                .map(|(_, n)| n)
                .sum();
            if other_stored == 0 && !f.add.iter().any(|(v, _)| v == OTHER_REFERRER) {
                out.unlock.push(g);
            }
            out.add
                .extend(f.add.into_iter().map(|(value, n)| (g, value, n)));
            if !f.delete.is_empty() {
                out.delete.push((g, f.delete));
            }
        }
        Ok(out)
    }

    /// Writes what [`Bounded::fold`] decided: the counts, the folded rows
    /// gone, the locks that stayed 0 removed.
    async fn write(
        &self,
        tx: &mut Transaction<'_>,
        f: &Folded<'_>,
    ) -> Result<(), mysql_async::Error> {
        self.add(tx, &f.add).await?;
        for (g, values) in &f.delete {
            let (cond, mut p) = self.groups_cond(std::slice::from_ref(g));
            let marks = vec!["?"; values.len()].join(", ");
            p.extend(values.iter().map(|v| Value::from(v.as_str())));
            tx.exec_drop(
                format!(
                    "DELETE FROM {} WHERE {cond} AND {} IN ({marks})",
                    self.table, self.value
                ),
                p,
            )
            .await?;
        }
        for chunk in f.unlock.chunks(LINK_DAYS_PER_READ) {
            let (cond, mut p) = self.groups_cond(chunk);
            p.push(OTHER_REFERRER.into());
            tx.exec_drop(
                format!(
                    "DELETE FROM {} WHERE ({cond}) AND {} = ? AND n = 0",
                    self.table, self.value
                ),
                p,
            )
            .await?;
        }
        Ok(())
    }
}

/// The default rows of a batch of version 4 (protocol 3.7): per link-day
/// with human clicks and per dimension, the day's human clicks its `x`
/// lines leave out, with the dimension's default value; sorted by key.
/// None for an older batch (its clicks have no dimensions).
fn dim_defaults(batch: &Batch) -> Vec<(Group<'_>, &'static str, u64)> {
    if !batch.counted_dims {
        return Vec::new();
    }
    let mut human: BTreeMap<(&str, u64), u64> = BTreeMap::new();
    for l in &batch.hours {
        *human
            .entry((l.code.as_str(), day_start(l.hour)))
            .or_default() += l.human;
    }
    let mut named: HashMap<(&str, u64, Dim), u64> = HashMap::new();
    for l in &batch.dims {
        *named.entry((l.code.as_str(), l.day, l.dim)).or_default() += l.n;
    }
    let mut out = Vec::new();
    for ((code, day), h) in human {
        for dim in Dim::ALL {
            let rest = h.saturating_sub(named.get(&(code, day, dim)).copied().unwrap_or(0));
            if rest > 0 {
                out.push(((code, day, dim.as_str()), dim.default_value(), rest));
            }
        }
    }
    out.sort();
    out
}

/// Applies `batch` (already decoded and validated) at `now` (Unix seconds),
/// keeping at most `referrers_per_day` named referrer hosts per link-day;
/// with `digest` (a period in seconds, while some app wants `link.clicked`)
/// also adds each link's counts to its webhook click digest of the period.
pub async fn apply(
    pool: &Pool,
    batch: &Batch,
    now: u64,
    referrers_per_day: usize,
    digest: Option<u64>,
) -> Result<Applied, DbError> {
    let work = async {
        let mut attempt = 1;
        loop {
            match apply_once(pool, batch, now, referrers_per_day, digest).await {
                Err(e) if is_lock_conflict(&e) && attempt < ATTEMPTS => {
                    tracing::debug!(batch = %batch.id, attempt, error = %e, "click batch lost a lock race; applying it again");
                    tokio::time::sleep(Duration::from_millis(10 * u64::from(attempt))).await;
                    attempt += 1;
                }
                r => return r.map_err(DbError::from),
            }
        }
    };
    match tokio::time::timeout(APPLY_TIMEOUT, work).await {
        Ok(r) => r,
        Err(_) => Err(DbError::Timeout(APPLY_TIMEOUT)),
    }
}

/// One attempt at [`apply`], in one transaction (rolled back when it fails).
async fn apply_once(
    pool: &Pool,
    batch: &Batch,
    now: u64,
    referrers_per_day: usize,
    digest: Option<u64>,
) -> Result<Applied, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let mut opts = TxOpts::default();
    // Each read sees the latest committed rows (a link-day is read after
    // its lock is held), and searches take no gap locks.
    opts.with_isolation_level(IsolationLevel::ReadCommitted);
    let mut tx = conn.start_transaction(opts).await?;
    let first = tx
        .exec_drop(
            "INSERT INTO click_batches (id, applied_at) VALUES (?, ?)",
            (batch.id.as_str(), now),
        )
        .await;
    match first {
        Err(e) if is_duplicate(&e) => {
            tx.rollback().await?;
            return Ok(Applied::Duplicate);
        }
        r => r?,
    }
    let mut hours: Vec<_> = batch.hours.iter().collect();
    hours.sort_by(|a, b| (&a.code, a.hour).cmp(&(&b.code, b.hour)));
    upsert(
        &mut tx,
        "INSERT INTO click_hour (code, hour, human, bot)",
        "ON DUPLICATE KEY UPDATE human = human + VALUES(human), bot = bot + VALUES(bot)",
        &hours,
        |l| {
            [
                l.code.as_str().into(),
                l.hour.into(),
                l.human.into(),
                l.bot.into(),
            ]
        },
    )
    .await?;
    let refs = REFERRERS
        .fold(
            &mut tx,
            batch
                .referrers
                .iter()
                .map(|l| ((l.code.as_str(), l.day, ""), l.host.as_str(), l.n)),
            referrers_per_day,
            |_, _| false,
        )
        .await?;
    REFERRERS.write(&mut tx, &refs).await?;
    let mut devices: Vec<_> = batch.devices.iter().collect();
    devices.sort_by(|a, b| {
        (&a.code, a.day, a.device.as_str()).cmp(&(&b.code, b.day, b.device.as_str()))
    });
    upsert(
        &mut tx,
        "INSERT INTO click_day_device (code, day, class, n)",
        "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
        &devices,
        |l| {
            [
                l.code.as_str().into(),
                l.day.into(),
                l.device.as_str().into(),
                l.n.into(),
            ]
        },
    )
    .await?;
    let mut dests: Vec<(&str, u64, String, u64)> = batch
        .destinations
        .iter()
        .map(|l| (l.code.as_str(), l.day, l.destination.label(), l.n))
        .collect();
    dests.sort();
    if let Some(period) = digest.filter(|p| *p > 0) {
        // Per link (sorted: the global lock order), this batch's clicks.
        let mut per: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for l in &batch.hours {
            let e = per.entry(l.code.as_str()).or_default();
            e.0 += l.human;
            e.1 += l.bot;
        }
        let lines: Vec<(&str, u64, u64)> = per.into_iter().map(|(c, (h, b))| (c, h, b)).collect();
        upsert(
            &mut tx,
            "INSERT INTO webhook_click_digest (link, period, human, bot)",
            "ON DUPLICATE KEY UPDATE human = human + VALUES(human), bot = bot + VALUES(bot)",
            &lines,
            |(code, human, bot)| {
                [
                    (*code).into(),
                    (now / period).into(),
                    (*human).into(),
                    (*bot).into(),
                ]
            },
        )
        .await?;
    }
    upsert(
        &mut tx,
        "INSERT INTO click_day_destination (code, day, dest, n)",
        "ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
        &dests,
        |(code, day, dest, n)| {
            [
                (*code).into(),
                (*day).into(),
                dest.as_str().into(),
                (*n).into(),
            ]
        },
    )
    .await?;
    // Dimension values (version 4): the named ones folded like referrer
    // hosts, each link-day-dimension's default (never folded) after them.
    let dims = DIMENSIONS
        .fold(
            &mut tx,
            batch.dims.iter().map(|l| {
                (
                    (l.code.as_str(), l.day, l.dim.as_str()),
                    l.value.as_str(),
                    l.n,
                )
            }),
            TOP_VALUES,
            |dim, value| Dim::parse(dim).is_some_and(|d| d.default_value() == value),
        )
        .await?;
    DIMENSIONS.write(&mut tx, &dims).await?;
    DIMENSIONS.add(&mut tx, &dim_defaults(batch)).await?;
    merge_uniques(&mut tx, batch).await?;
    tx.commit().await?;
    Ok(Applied::Applied)
}

/// Merges the batch's sketches of unique visitors (version 4) into the
/// stored ones: each link-day's row locked first (in key order, as every
/// applier does), read, merged, written back.
async fn merge_uniques(tx: &mut Transaction<'_>, batch: &Batch) -> Result<(), mysql_async::Error> {
    let mut lines: Vec<_> = batch.uniques.iter().collect();
    lines.sort_by(|a, b| (&a.code, a.day).cmp(&(&b.code, b.day)));
    for chunk in lines.chunks(LINK_DAYS_PER_READ) {
        // The lock: a row that exists is locked by the update that changes
        // nothing; a new one is created empty.
        upsert(
            tx,
            "INSERT INTO click_day_uniques (code, day, sketch)",
            "ON DUPLICATE KEY UPDATE sketch = sketch",
            chunk,
            |l| [l.code.as_str().into(), l.day.into(), "s ".into()],
        )
        .await?;
        let cond = vec!["(code = ? AND day = ?)"; chunk.len()].join(" OR ");
        let p: Vec<Value> = chunk
            .iter()
            .flat_map(|l| [Value::from(l.code.as_str()), l.day.into()])
            .collect();
        let rows: Vec<(String, u64, String)> = tx
            .exec(
                format!("SELECT code, day, sketch FROM click_day_uniques WHERE {cond}"),
                p,
            )
            .await?;
        let stored: HashMap<(String, u64), String> =
            rows.into_iter().map(|(c, d, s)| ((c, d), s)).collect();
        let merged: Vec<(&str, u64, String)> = chunk
            .iter()
            .map(|l| {
                // An unreadable stored sketch (never written so) is replaced.
                let mut s = stored
                    .get(&(l.code.clone(), l.day))
                    .and_then(|t| Sketch::decode(t))
                    .unwrap_or_default();
                s.merge(&l.sketch);
                let mut text = String::new();
                s.encode(&mut text);
                (l.code.as_str(), l.day, text)
            })
            .collect();
        upsert(
            tx,
            "INSERT INTO click_day_uniques (code, day, sketch)",
            "ON DUPLICATE KEY UPDATE sketch = VALUES(sketch)",
            &merged,
            |(code, day, text)| [(*code).into(), (*day).into(), text.as_str().into()],
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shorturl_common::clicks::{DimLine, HourLine};

    #[test]
    fn placeholders() {
        assert_eq!(super::values(2, 3), "(?, ?, ?), (?, ?, ?)");
    }

    #[test]
    fn defaults_are_the_human_clicks_no_line_names() {
        let day = 86_400 * 3;
        let mut b = Batch::new("e:n:1");
        for (hour, human, bot) in [(day, 4, 1), (day + 3600, 2, 0), (day + 86_400, 0, 3)] {
            b.hours.push(HourLine {
                code: "abcdef".into(),
                hour,
                human,
                bot,
            });
        }
        for (dim, value, n) in [(Dim::Country, "DE", 5), (Dim::Country, "~other", 1)] {
            b.dims.push(DimLine {
                code: "abcdef".into(),
                day,
                dim,
                value: value.into(),
                n,
            });
        }
        // Not counted with dimensions (an older batch): none.
        assert!(dim_defaults(&b).is_empty());
        b.counted_dims = true;
        let d = dim_defaults(&b);
        // The country is all named; eight defaults of 6; the day of bots
        // only has none.
        let want: Vec<(Group<'_>, &str, u64)> = vec![
            (("abcdef", day, "browser"), "other", 6),
            (("abcdef", day, "city"), "unknown", 6),
            (("abcdef", day, "lang"), "-", 6),
            (("abcdef", day, "os"), "other", 6),
            (("abcdef", day, "source"), "link", 6),
            (("abcdef", day, "utm_campaign"), "-", 6),
            (("abcdef", day, "utm_medium"), "-", 6),
            (("abcdef", day, "utm_source"), "-", 6),
        ];
        assert_eq!(d, want);
    }
}
