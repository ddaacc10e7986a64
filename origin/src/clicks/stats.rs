//! The statistics the API reads from the rollups: one link's (totals,
//! series, referrers, devices, and with `group_by` its human clicks per
//! value of a dimension), a tenant's (totals and top links, and with
//! `group_by` the same over its links), and the total human clicks of a
//! page of links.
//!
//! Tenancy is the links API's: a link the caller may not see is answered
//! exactly like an unknown code, and a tenant filter naming links the
//! caller can never see answers zero, as a filter matching nothing does.

use crate::links::{tenant, LinkError, LinkRef, Links};
use crate::store::key::JOIN_BY_NAME;
use crate::store::search::Tenant;
use crate::store::{DbError, LinkKey, LinkRow, RowState, Settings, Store};
use crate::tenancy::{Caller, Scope};
use mysql_async::prelude::*;
use mysql_async::Value;
use serde::Serialize;
use shorturl_common::clicks::{day_start, hour_start, Device, Dim, OTHER_REFERRER, TOP_REFERRERS};
use shorturl_common::link_rules::Destination;
use shorturl_common::time::rfc3339;
use std::collections::HashMap;

/// The series' step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Hour,
    Day,
}

impl Interval {
    /// The step in seconds.
    pub fn secs(self) -> u64 {
        match self {
            Interval::Hour => 3600,
            Interval::Day => 86_400,
        }
    }

    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Interval::Hour => "hour",
            Interval::Day => "day",
        }
    }
}

/// A validated range: `[from, to)`, `from` on an interval boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsRange {
    pub from: u64,
    pub to: u64,
    pub interval: Interval,
}

/// Whose links a tenant query is about (one of the three).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantFilter {
    App(String),
    KdtId(u64),
    Domain(String),
}

/// A tenant query (`GET /api/v1/stats`): whose links, narrowed to one
/// tag if given, over which whole days, how many top links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantQuery {
    pub filter: TenantFilter,
    /// Only the links carrying this tag (`links::tags`).
    pub tag: Option<String>,
    pub range: StatsRange,
    pub limit: u32,
    /// Also the human clicks per value of this dimension.
    pub group_by: Option<GroupBy>,
    /// Answer the groups alone, as CSV (`format=csv`, with `group_by`).
    pub csv: bool,
}

/// A link query (`GET /api/v1/links/{code}/stats`): the range, and the
/// dimension whose values group the human clicks (`group_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkQuery {
    pub range: StatsRange,
    pub group_by: Option<GroupBy>,
    /// Answer the groups alone, as CSV (`format=csv`, with `group_by`).
    pub csv: bool,
}

/// What `group_by` groups human clicks by: a dimension of the click
/// batches (protocol 3.7), or a link's destinations (protocol 3.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Dim(Dim),
    Destination,
}

impl GroupBy {
    /// Every grouping, in the API's order: the dimensions, then `destination`.
    pub fn all() -> impl Iterator<Item = GroupBy> {
        Dim::ALL
            .into_iter()
            .map(GroupBy::Dim)
            .chain([GroupBy::Destination])
    }

    /// The API spelling: the dimension's name in the batches, but
    /// `language` for `lang`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Destination => "destination",
            GroupBy::Dim(d) => match d.as_str() {
                "lang" => "language",
                name => name,
            },
        }
    }

    /// The API spelling's grouping.
    pub fn parse(s: &str) -> Option<GroupBy> {
        GroupBy::all().find(|g| g.as_str() == s)
    }
}

/// Most values in a `groups` answer; the rest are summed into `~other`.
pub const MAX_GROUPS: usize = 100;

/// Human clicks of one value of the grouping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupCount {
    pub value: String,
    pub human: u64,
}

/// Human and bot clicks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub human: u64,
    pub bot: u64,
}

/// One step of a series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Point {
    /// The step's start (RFC 3339 UTC).
    pub start: String,
    pub human: u64,
    pub bot: u64,
}

/// Clicks from one referrer host (`-`: none; `~other`: past the top 20).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostCount {
    pub host: String,
    pub n: u64,
}

/// Clicks per device class (bots, HEAD requests included, are `bot`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Devices {
    pub mobile: u64,
    pub desktop: u64,
    pub tablet: u64,
    pub bot: u64,
    pub other: u64,
}

/// Human clicks one destination of a link with options answered (the A/B
/// result; protocol section 3.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DestinationClicks {
    /// `link`, `r<rule>`, `r<rule>v<variant>` or `expired`.
    pub destination: String,
    /// Where it points now (`None`: an edit removed it since).
    pub url: Option<String>,
    pub human: u64,
}

/// `GET /api/v1/links/{code}/stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    pub code: String,
    /// The link's domain (a per-domain code names a link only with it).
    pub domain: String,
    pub from: String,
    pub to: String,
    pub interval: &'static str,
    pub totals: Totals,
    /// Distinct visitors over the range's whole days (protocol 3.7: their
    /// sketches merged; exact up to 256, else within about 2%). Clicks
    /// counted without dimensions (edges older than 3.7) are in none.
    pub uniques: u64,
    /// Every step of the range, in order (zero where nothing was counted).
    pub series: Vec<Point>,
    /// Top hosts over the range's days, most clicks first, then `~other`.
    pub referrers: Vec<HostCount>,
    pub devices: Devices,
    /// Per destination, in the link's order (its URL, its rules, the
    /// fallback); empty for a link that never had options.
    pub destinations: Vec<DestinationClicks>,
    /// The grouping asked for (`group_by`), by its API name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_by: Option<&'static str>,
    /// Its values over the range's days ([`groups`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<GroupCount>>,
}

/// Clicks on one link of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkClicks {
    pub code: String,
    /// The link's domain (a per-domain code names a link only with it).
    pub domain: String,
    pub human: u64,
    pub bot: u64,
}

/// `GET /api/v1/stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantStats {
    pub from: String,
    pub to: String,
    pub totals: Totals,
    /// The tenant's links with the most human clicks in the range.
    pub links: Vec<LinkClicks>,
    /// The grouping asked for (`group_by`), by its API name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_by: Option<&'static str>,
    /// Its values over the tenant's links and the range's days ([`groups`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<GroupCount>>,
}

/// A tenant's clicks per day and its human clicks per value of every
/// dimension (the console's merchant and app pages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantDetails {
    /// Every day of the range, in order (zero where nothing was counted).
    pub series: Vec<Point>,
    /// In the order of [`Dim::ALL`], each as [`groups`] answers it.
    pub dims: Vec<(GroupBy, Vec<GroupCount>)>,
}

/// The answer to a `group_by` from `(value, human)` sums (a value may
/// repeat: they add up): most human clicks first, ties by value, at most
/// [`MAX_GROUPS`] values, then `~other` with the rest (and what the
/// rollup already kept as `~other`); zeros left out.
pub fn groups(rows: impl IntoIterator<Item = (String, u64)>) -> Vec<GroupCount> {
    let mut sums: HashMap<String, u64> = HashMap::new();
    for (value, n) in rows {
        *sums.entry(value).or_default() += n;
    }
    let mut other = sums.remove(OTHER_REFERRER).unwrap_or(0);
    let mut rows: Vec<(String, u64)> = sums.into_iter().filter(|(_, n)| *n > 0).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut out = Vec::new();
    for (value, human) in rows {
        if out.len() < MAX_GROUPS {
            out.push(GroupCount { value, human });
        } else {
            other += human;
        }
    }
    if other > 0 {
        out.push(GroupCount {
            value: OTHER_REFERRER.to_owned(),
            human: other,
        });
    }
    out
}

/// `groups` as CSV: the header `value,human`, then a record per value
/// (RFC 4180 lines; a value a spreadsheet would run as a formula is
/// defused as the export does).
pub fn groups_csv(groups: &[GroupCount]) -> String {
    let mut out = String::from("value,human\r\n");
    for g in groups {
        crate::links::export::csv_field(&mut out, &g.value);
        out.push(',');
        out.push_str(&g.human.to_string());
        out.push_str("\r\n");
    }
    out
}

/// The dense series of `range` from `(hour, human, bot)` rows.
fn series(range: &StatsRange, rows: &[(u64, u64, u64)]) -> Vec<Point> {
    let step = range.interval.secs();
    let n = range.to.saturating_sub(range.from).div_ceil(step) as usize;
    let mut out: Vec<Point> = (0..n)
        .map(|i| Point {
            start: rfc3339(range.from + i as u64 * step),
            human: 0,
            bot: 0,
        })
        .collect();
    for (hour, human, bot) in rows {
        let i = (hour.saturating_sub(range.from) / step) as usize;
        if let Some(p) = out.get_mut(i) {
            p.human += human;
            p.bot += bot;
        }
    }
    out
}

/// Top [`TOP_REFERRERS`] hosts, the rest (and stored `~other`) summed last.
fn top_referrers(mut rows: Vec<(String, u64)>) -> Vec<HostCount> {
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut out = Vec::new();
    let mut other = 0;
    for (host, n) in rows {
        if host != OTHER_REFERRER && out.len() < TOP_REFERRERS {
            out.push(HostCount { host, n });
        } else {
            other += n;
        }
    }
    if other > 0 {
        out.push(HostCount {
            host: OTHER_REFERRER.to_owned(),
            n: other,
        });
    }
    out
}

fn devices(rows: &[(String, u64)]) -> Devices {
    let mut d = Devices::default();
    for (class, n) in rows {
        match Device::parse(class) {
            Some(Device::Mobile) => d.mobile += n,
            Some(Device::Desktop) => d.desktop += n,
            Some(Device::Tablet) => d.tablet += n,
            Some(Device::Bot) => d.bot += n,
            Some(Device::Other) | None => d.other += n,
        }
    }
    d
}

/// The destination sums of `row` in the link's order, each with the URL it
/// names now (labels are positions: an edit that reorders the rules
/// changes what a label's earlier clicks mean, as `docs/protocol.md` says).
fn destinations(row: Option<&LinkRow>, rows: Vec<(String, u64)>) -> Vec<DestinationClicks> {
    let settings = Settings::from_column(row.and_then(|r| r.options.as_deref()));
    let url = row.and_then(|r| r.url.as_deref()).unwrap_or("");
    let mut out: Vec<(Destination, u64)> = rows
        .into_iter()
        .filter_map(|(label, n)| Some((Destination::parse(&label)?, n)))
        .filter(|(_, n)| *n > 0)
        .collect();
    out.sort();
    out.into_iter()
        .map(|(d, human)| DestinationClicks {
            destination: d.label(),
            url: settings.o.url_of(d, url).map(str::to_owned),
            human,
        })
        .collect()
}

/// Hour rows, referrer sums, device sums, destination sums, sums per
/// value of the dimension asked for, of one link.
type Rows = (
    Vec<(u64, u64, u64)>,
    Vec<(String, u64)>,
    Vec<(String, u64)>,
    Vec<(String, u64)>,
    Vec<(String, u64)>,
    Vec<String>,
);
/// The distinct visitors of stored day sketches, merged (an unreadable one
/// is skipped: never written so).
fn uniques(sketches: &[String]) -> u64 {
    let mut all = shorturl_common::clicks::uniq::Sketch::default();
    for s in sketches {
        if let Some(d) = shorturl_common::clicks::uniq::Sketch::decode(s) {
            all.merge(&d);
        }
    }
    all.estimate()
}

/// A tenant's totals, top links and sums per value of the dimension asked
/// for.
type TenantRows = (Option<(u64, u64)>, Vec<TopRow>, Vec<(String, u64)>);

/// A tenant's `(day, human, bot)` rows and `(dim, value, human)` sums.
type DetailRows = (Vec<(u64, u64, u64)>, Vec<(String, String, u64)>);

/// One of a tenant's top links: its name in the rollups, code, domain,
/// human and bot clicks.
type TopRow = (String, String, Option<String>, u64, u64);

/// `(dim, value, human)` sums (a pair may repeat: shards add up) as the
/// groups of every dimension, in the order of [`Dim::ALL`].
fn per_dimension(rows: Vec<(String, String, u64)>) -> Vec<(GroupBy, Vec<GroupCount>)> {
    let mut per: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for (dim, value, n) in rows {
        per.entry(dim).or_default().push((value, n));
    }
    Dim::ALL
        .into_iter()
        .map(|d| {
            let rows = per.remove(d.as_str()).unwrap_or_default();
            (GroupBy::Dim(d), groups(rows))
        })
        .collect()
}

/// Human clicks of `click_day_device` rows aliased `h` (every class but `bot`).
const DAY_HUMAN: &str = "CAST(COALESCE(SUM(IF(h.class = 'bot', 0, h.n)), 0) AS UNSIGNED)";
/// Daily rows (`h`) from the day the link (`s`) was created: a recycled
/// code's rows also hold its earlier link's clicks, all older than that.
const SINCE_CREATION: &str = "h.day >= s.created_at - MOD(s.created_at, 86400)";
/// Bot clicks of `click_day_device` rows aliased `h`.
const DAY_BOT: &str = "CAST(COALESCE(SUM(IF(h.class = 'bot', h.n, 0)), 0) AS UNSIGNED)";

/// The `WHERE` conditions (over the rollup `h` joined to its link `s`)
/// and their parameters that pick the tenant's links and the range's days
/// of `q`, narrowed to what `caller` may see; `None`: it may see none of
/// them. One place, so the tenant's totals, top links, series and
/// dimensions always count the same clicks.
fn tenant_where(caller: &Caller, q: &TenantQuery) -> Option<(Vec<String>, Vec<Value>)> {
    let (kdt, app) = match &q.filter {
        TenantFilter::KdtId(k) => (Some(*k), None),
        TenantFilter::App(a) => (None, Some(a.as_str())),
        TenantFilter::Domain(_) => (None, None),
    };
    let t = tenant(caller, kdt, app)?;
    // Whole UTC days from the daily rows (kept for ever; hourly rows
    // are pruned after the retention).
    let mut w = vec![
        "h.day >= ? AND h.day < ?".to_owned(),
        SINCE_CREATION.to_owned(),
        "s.state IN (?, ?, ?)".to_owned(),
    ];
    let mut p: Vec<Value> = vec![
        day_start(q.range.from).into(),
        q.range.to.into(),
        RowState::Active.into(),
        RowState::Disabled.into(),
        RowState::Deleted.into(),
    ];
    let (cond, value): (&str, Value) = match &q.filter {
        TenantFilter::App(a) => ("s.app = ?", a.as_str().into()),
        TenantFilter::KdtId(k) => ("s.kdt_id = ?", (*k).into()),
        TenantFilter::Domain(d) => ("s.domain = ?", d.as_str().into()),
    };
    w.push(cond.to_owned());
    p.push(value);
    if let Some(tag) = &q.tag {
        w.push("FIND_IN_SET(?, s.tags) > 0".into());
        p.push(tag.as_str().into());
    }
    match &t {
        Tenant::All => {}
        Tenant::App(a) => {
            w.push("s.app = ?".into());
            p.push(a.as_str().into());
        }
        Tenant::Merchants(m) => {
            w.push(format!("s.kdt_id IN ({})", vec!["?"; m.len()].join(", ")));
            p.extend(m.iter().map(|k| Value::from(*k)));
        }
    }
    Some((w, p))
}

impl Links {
    /// A link the caller may see (`stats:read`), its row, the first day
    /// its rollups count from (a recycled code's rows also hold its earlier
    /// link's clicks, all from before its quarantine: counted only from
    /// this link's creation) and the shard holding its rollups.
    async fn rollups_of(
        &self,
        caller: &Caller,
        r: &LinkRef,
    ) -> Result<(LinkKey, LinkRow, Store), LinkError> {
        caller.require(Scope::StatsRead)?;
        let (key, row) = self.find_visible(caller, r).await?;
        let here = match self.store.shard_of_key(&key).await? {
            Some(i) => self.store.on(i),
            None => self.store.clone(),
        };
        Ok((key, row, here))
    }

    /// One link's statistics over `range` (`stats:read`, visible link),
    /// with `group_by` its human clicks per value of that grouping.
    pub async fn link_stats(
        &self,
        caller: &Caller,
        r: &LinkRef,
        range: &StatsRange,
        group_by: Option<GroupBy>,
    ) -> Result<LinkStats, LinkError> {
        let (key, row, here) = self.rollups_of(caller, r).await?;
        let row = Some(row);
        // The rollups name the link by its key (protocol 3.6).
        let name = key.name();
        let code = name.as_str();
        let since = row.as_ref().and_then(|r| r.created_at).unwrap_or(0);
        let day_from = day_start(range.from).max(day_start(since));
        let from = match range.interval {
            Interval::Hour => range.from.max(hour_start(since)),
            Interval::Day => range.from.max(day_start(since)),
        };
        let (hours, refs, devs, dests, dim, sketches): Rows = here
            .bounded(async {
                let mut c = here.pool.get_conn().await?;
                // Hourly rows are pruned after `clicks.retention_hours_days`;
                // daily series come from the daily device rows, which are
                // kept (their `bot` class is exactly the bot clicks).
                let hours = match range.interval {
                    Interval::Hour => {
                        c.exec(
                            "SELECT hour, human, bot FROM click_hour \
                             WHERE code = ? AND hour >= ? AND hour < ? ORDER BY hour",
                            (code, from, range.to),
                        )
                        .await?
                    }
                    Interval::Day => {
                        c.exec(
                            format!(
                                "SELECT day, {DAY_HUMAN}, {DAY_BOT} FROM click_day_device h \
                                 WHERE code = ? AND day >= ? AND day < ? GROUP BY day ORDER BY day"
                            ),
                            (code, from, range.to),
                        )
                        .await?
                    }
                };
                // The daily rollups, each summed per key over the range's days.
                let days = (code, day_from, range.to);
                let sql = |table: &str, key: &str| {
                    format!(
                        "SELECT {key}, CAST(SUM(n) AS UNSIGNED) FROM {table} \
                         WHERE code = ? AND day >= ? AND day < ? GROUP BY {key}"
                    )
                };
                let refs = c.exec(sql("click_day_referrer", "host"), days).await?;
                let devs = c.exec(sql("click_day_device", "class"), days).await?;
                let dests = c.exec(sql("click_day_destination", "dest"), days).await?;
                let dim = match group_by {
                    Some(GroupBy::Dim(d)) => {
                        c.exec(
                            "SELECT value, CAST(SUM(n) AS UNSIGNED) FROM click_day_dim \
                             WHERE code = ? AND day >= ? AND day < ? AND dim = ? GROUP BY value",
                            (code, day_from, range.to, d.as_str()),
                        )
                        .await?
                    }
                    _ => Vec::new(),
                };
                let sketches = c
                    .exec(
                        "SELECT sketch FROM click_day_uniques WHERE code = ? AND day >= ? AND day < ?",
                        days,
                    )
                    .await?;
                Ok::<_, DbError>((hours, refs, devs, dests, dim, sketches))
            })
            .await?;
        let groups = group_by.map(|g| match g {
            GroupBy::Dim(_) => groups(dim),
            GroupBy::Destination => groups(dests.iter().cloned()),
        });
        let totals = hours.iter().fold(Totals::default(), |t, (_, h, b)| Totals {
            human: t.human + h,
            bot: t.bot + b,
        });
        Ok(LinkStats {
            code: key.code().to_owned(),
            domain: row
                .as_ref()
                .and_then(|r| r.domain.clone())
                .unwrap_or_default(),
            from: rfc3339(range.from),
            to: rfc3339(range.to),
            interval: range.interval.as_str(),
            totals,
            uniques: uniques(&sketches),
            series: series(range, &hours),
            referrers: top_referrers(refs),
            devices: devices(&devs),
            destinations: destinations(row.as_ref(), dests),
            group_by: group_by.map(GroupBy::as_str),
            groups,
        })
    }

    /// One link's human clicks per value of every dimension over the days
    /// of `range` (`stats:read`, visible link), in the order of
    /// [`Dim::ALL`], each as [`groups`] answers it (the console's tables).
    pub async fn link_dimensions(
        &self,
        caller: &Caller,
        r: &LinkRef,
        range: &StatsRange,
    ) -> Result<Vec<(GroupBy, Vec<GroupCount>)>, LinkError> {
        let (key, row, here) = self.rollups_of(caller, r).await?;
        let name = key.name();
        let day_from = day_start(range.from).max(day_start(row.created_at.unwrap_or(0)));
        let rows: Vec<(String, String, u64)> = here
            .bounded(async {
                let mut c = here.pool.get_conn().await?;
                Ok::<_, DbError>(
                    c.exec(
                        "SELECT dim, value, CAST(SUM(n) AS UNSIGNED) FROM click_day_dim \
                         WHERE code = ? AND day >= ? AND day < ? GROUP BY dim, value",
                        (name.as_str(), day_from, range.to),
                    )
                    .await?,
                )
            })
            .await?;
        Ok(per_dimension(rows))
    }

    /// A tenant's totals and its `limit` links with the most human clicks
    /// (`stats:read`; narrowed to what the caller may see).
    pub async fn tenant_stats(
        &self,
        caller: &Caller,
        q: &TenantQuery,
    ) -> Result<TenantStats, LinkError> {
        let (range, limit) = (&q.range, q.limit);
        caller.require(Scope::StatsRead)?;
        let mut out = TenantStats {
            from: rfc3339(range.from),
            to: rfc3339(range.to),
            totals: Totals::default(),
            links: Vec::new(),
            group_by: q.group_by.map(GroupBy::as_str),
            groups: q.group_by.map(|_| Vec::new()),
        };
        let Some((w, p)) = tenant_where(caller, q) else {
            return Ok(out);
        };
        let from = format!(
            "FROM click_day_device h JOIN short_code s ON {JOIN_BY_NAME} WHERE {}",
            w.join(" AND ")
        );
        let totals_sql = format!("SELECT {DAY_HUMAN}, {DAY_BOT} {from}");
        // Per value of the dimension asked for, over the same links and days
        // (`destination` is refused by the query's validation: a label
        // means another URL on every link).
        let dim = match q.group_by {
            Some(GroupBy::Dim(d)) => Some(d),
            _ => None,
        };
        let dim_sql = format!(
            "SELECT h.value, CAST(COALESCE(SUM(h.n), 0) AS UNSIGNED) \
             FROM click_day_dim h JOIN short_code s ON {JOIN_BY_NAME} \
             WHERE h.dim = ? AND {} GROUP BY h.value",
            w.join(" AND ")
        );
        let mut dim_rows: Vec<(String, u64)> = Vec::new();
        let top_sql = format!(
            "SELECT h.code, MAX(s.code), MAX(s.domain), {DAY_HUMAN} AS hu, {DAY_BOT} AS bo \
             {from} GROUP BY h.code ORDER BY hu DESC, bo DESC, h.code LIMIT {limit}"
        );
        // Every shard's totals and top links (the rollups are next to their
        // links): totals add up, the top `limit` of the union is the top of
        // the shards' tops (a link is on one shard).
        let (mut human, mut bot) = (0, 0);
        let mut top: Vec<TopRow> = Vec::new();
        for shard in self.store.every_shard() {
            let (totals, part, by): TenantRows = shard
                .bounded(async {
                    let mut c = shard.pool.get_conn().await?;
                    let totals = c.exec_first(totals_sql.as_str(), p.clone()).await?;
                    let top = c.exec(top_sql.as_str(), p.clone()).await?;
                    let by = match dim {
                        Some(d) => {
                            let mut dp: Vec<Value> = vec![d.as_str().into()];
                            dp.extend(p.iter().cloned());
                            c.exec(dim_sql.as_str(), dp).await?
                        }
                        None => Vec::new(),
                    };
                    Ok::<_, DbError>((totals, top, by))
                })
                .await?;
            dim_rows.extend(by);
            let (h, b) = totals.unwrap_or((0, 0));
            human += h;
            bot += b;
            top.extend(part);
        }
        top.sort_by(|a, b| b.3.cmp(&a.3).then(b.4.cmp(&a.4)).then(a.0.cmp(&b.0)));
        top.truncate(limit as usize);
        out.totals = Totals { human, bot };
        if dim.is_some() {
            out.groups = Some(groups(dim_rows));
        }
        out.links = top
            .into_iter()
            .map(|(_, code, domain, human, bot)| LinkClicks {
                code,
                domain: domain.unwrap_or_default(),
                human,
                bot,
            })
            .collect();
        Ok(out)
    }

    /// A tenant's clicks per day over the days of `q.range` and its human
    /// clicks per value of every dimension (`stats:read`; narrowed to what
    /// the caller may see, as [`Links::tenant_stats`]: the same links and
    /// days). `q`'s limit, grouping and format play no part.
    pub async fn tenant_details(
        &self,
        caller: &Caller,
        q: &TenantQuery,
    ) -> Result<TenantDetails, LinkError> {
        caller.require(Scope::StatsRead)?;
        let range = StatsRange {
            from: day_start(q.range.from),
            interval: Interval::Day,
            ..q.range
        };
        let Some((w, p)) = tenant_where(caller, q) else {
            return Ok(TenantDetails {
                series: series(&range, &[]),
                dims: per_dimension(Vec::new()),
            });
        };
        let w = w.join(" AND ");
        let days_sql = format!(
            "SELECT h.day, {DAY_HUMAN}, {DAY_BOT} \
             FROM click_day_device h JOIN short_code s ON {JOIN_BY_NAME} WHERE {w} GROUP BY h.day"
        );
        let dims_sql = format!(
            "SELECT h.dim, h.value, CAST(COALESCE(SUM(h.n), 0) AS UNSIGNED) \
             FROM click_day_dim h JOIN short_code s ON {JOIN_BY_NAME} WHERE {w} GROUP BY h.dim, h.value"
        );
        // Every shard's rows (the rollups are next to their links) add up.
        let (mut days, mut dims) = (Vec::new(), Vec::new());
        for shard in self.store.every_shard() {
            let (d, by): DetailRows = shard
                .bounded(async {
                    let mut c = shard.pool.get_conn().await?;
                    let d = c.exec(days_sql.as_str(), p.clone()).await?;
                    let by = c.exec(dims_sql.as_str(), p.clone()).await?;
                    Ok::<_, DbError>((d, by))
                })
                .await?;
            days.extend(d);
            dims.extend(by);
        }
        Ok(TenantDetails {
            series: series(&range, &days),
            dims: per_dimension(dims),
        })
    }

    /// Total human clicks of each of `codes` (absent: none counted).
    pub async fn human_clicks(&self, codes: &[String]) -> Result<HashMap<String, u64>, LinkError> {
        if codes.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT h.code, {DAY_HUMAN} FROM click_day_device h \
             JOIN short_code s ON {JOIN_BY_NAME} \
             WHERE h.code IN ({}) AND {SINCE_CREATION} GROUP BY h.code",
            vec!["?"; codes.len()].join(", ")
        );
        let params: Vec<Value> = codes.iter().map(|c| c.as_str().into()).collect();
        // Each shard counts the codes it holds.
        let mut out = HashMap::new();
        for shard in self.store.every_shard() {
            let rows: Vec<(String, u64)> = shard
                .bounded(async {
                    let mut c = shard.pool.get_conn().await?;
                    Ok::<_, DbError>(c.exec(sql.as_str(), params.clone()).await?)
                })
                .await?;
            out.extend(rows);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_series() {
        let r = StatsRange {
            from: 86_400,
            to: 86_400 * 3 + 1,
            interval: Interval::Day,
        };
        let s = series(
            &r,
            &[
                (86_400 + 3600, 2, 1),
                (86_400 * 2, 1, 0),
                (86_400 + 7200, 1, 0),
            ],
        );
        let got: Vec<(u64, u64)> = s.iter().map(|p| (p.human, p.bot)).collect();
        assert_eq!(got, vec![(3, 1), (1, 0), (0, 0)]);
        assert_eq!(s[0].start, "1970-01-02T00:00:00Z");
    }

    #[test]
    fn groups_are_sorted_capped_and_sum_other_last() {
        let mut rows: Vec<(String, u64)> = (0..MAX_GROUPS + 3)
            .map(|i| (format!("v{i:03}"), 1000 - i as u64))
            .collect();
        rows.push(("~other".into(), 5));
        rows.push(("v000".into(), 1));
        rows.push(("zero".into(), 0));
        let g = groups(rows);
        assert_eq!(g.len(), MAX_GROUPS + 1);
        assert_eq!((g[0].value.as_str(), g[0].human), ("v000", 1001));
        let last = &g[MAX_GROUPS];
        let cut: u64 = (MAX_GROUPS..MAX_GROUPS + 3).map(|i| 1000 - i as u64).sum();
        assert_eq!((last.value.as_str(), last.human), ("~other", 5 + cut));
        // Ties by value; CSV with formulas defused, a lone `-` kept.
        let g = groups([("b".into(), 2), ("-".into(), 2), ("+1".into(), 1)]);
        assert_eq!(groups_csv(&g), "value,human\r\n-,2\r\nb,2\r\n\"'+1\",1\r\n");
    }

    #[test]
    fn group_by_names() {
        for g in GroupBy::all() {
            assert_eq!(GroupBy::parse(g.as_str()), Some(g));
        }
        assert_eq!(GroupBy::parse("lang"), None);
        assert_eq!(GroupBy::parse("language"), Some(GroupBy::Dim(Dim::Lang)));
    }

    #[test]
    fn referrers_are_capped() {
        let mut rows: Vec<(String, u64)> = (0..25).map(|i| (format!("h{i:02}"), 100 - i)).collect();
        rows.push(("~other".into(), 7));
        let top = top_referrers(rows);
        assert_eq!(top.len(), TOP_REFERRERS + 1);
        assert_eq!(top[0].host, "h00");
        assert_eq!(top[TOP_REFERRERS].n, 7 + 80 + 79 + 78 + 77 + 76);
        assert_eq!(devices(&[("bot".into(), 2), ("tablet".into(), 1)]).bot, 2);
    }
}
