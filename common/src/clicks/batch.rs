//! The click batch: what an edge appends to the stream and an origin
//! applies, in one text format the Lua edge is to write too (`docs/protocol.md`,
//! "Click batches").
//!
//! The decoder is strict on purpose: a batch is applied whole or not at
//! all, so one it cannot read completely is rejected whole (the origin
//! counts, logs and acknowledges it) rather than half-applied.

use super::dims::{Dim, TOP_VALUES};
use super::referrer::is_valid_host_field;
use super::uniq::Sketch;
use super::{
    Device, BATCH_VERSION, BATCH_VERSION_DESTINATIONS, BATCH_VERSION_DIMS, BATCH_VERSION_IMPLIED,
    BATCH_VERSION_KEYS, NO_REFERRER, OTHER_REFERRER, TOP_REFERRERS,
};
use crate::code::{is_valid_code, split_link_key};
use crate::link_rules::Destination;
use std::collections::BTreeMap;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// Largest body a batch may have; an edge splits bigger flushes.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Most lines in one batch.
pub const MAX_LINES: usize = 100_000;
/// Largest count on one line (far above any real flush; keeps sums in range).
pub const MAX_COUNT: u64 = 1_000_000_000_000;
/// Latest hour or day start accepted (2106-02-07, the last day start the
/// rollups' `INT UNSIGNED` columns hold).
const MAX_TIME: u64 = 4_294_944_000;

/// `h <code> <hour_start_unix> <human> <bot>`: clicks on a link in one hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourLine {
    pub code: String,
    pub hour: u64,
    pub human: u64,
    pub bot: u64,
}

/// `r <code> <day_start_unix> <host> <n>`: clicks from one referrer host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferrerLine {
    pub code: String,
    pub day: u64,
    pub host: String,
    pub n: u64,
}

/// `d <code> <day_start_unix> <class> <n>`: clicks of one device class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLine {
    pub code: String,
    pub day: u64,
    pub device: Device,
    pub n: u64,
}

impl ReferrerLine {
    /// The clicks without a referrer: not written in a version 5 body.
    pub fn is_implied(&self) -> bool {
        self.host == NO_REFERRER
    }
}

impl DeviceLine {
    /// The bot clicks: not written in a version 5 body.
    pub fn is_implied(&self) -> bool {
        self.device == Device::Bot
    }
}

/// `t <code> <day_start_unix> <destination> <n>`: human clicks on a link
/// with options (rules or an expiry fallback) that one destination
/// answered (`link`, `r<rule>`, `r<rule>v<variant>`, `expired`): the A/B
/// result, without the bots a split also answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationLine {
    pub code: String,
    pub day: u64,
    pub destination: Destination,
    pub n: u64,
}

/// `x <code> <day_start_unix> <dim>:<value> <n>`: human clicks on a link
/// that day with that value of one dimension (version 4; a dimension's
/// default is never a line: the day's other human clicks have it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimLine {
    pub code: String,
    pub day: u64,
    pub dim: Dim,
    pub value: String,
    pub n: u64,
}

/// `u <code> <day_start_unix> <sketch>`: the distinct visitors among a
/// link-day's human clicks in the batch (version 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqLine {
    pub code: String,
    pub day: u64,
    pub sketch: Sketch,
}

/// One batch: its unique id (`<edge-name>:<boot-nonce>:<seq>`) and lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub id: String,
    pub hours: Vec<HourLine>,
    pub referrers: Vec<ReferrerLine>,
    pub devices: Vec<DeviceLine>,
    /// Only for links whose record carries options; a batch with any is
    /// format version 2 ([`Batch::version`]).
    pub destinations: Vec<DestinationLine>,
    /// Dimension lines; a batch with any is format version 4.
    pub dims: Vec<DimLine>,
    /// Unique visitors per link-day (version 4).
    pub uniques: Vec<UniqLine>,
    /// Its human clicks were counted by dimension (version 4, with or
    /// without `x` lines): a link-day's clicks on no line of a dimension
    /// have its default. Such a batch is written as version 5, without
    /// its implied lines ([`Batch::is_implied`]); it holds them all the
    /// same (the decoder derives them), so the origin applies every kind.
    pub counted_dims: bool,
}

/// Why a batch was rejected (whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The stream entry lacks one of `id`, `v`, `b`, or it is not UTF-8.
    #[error("entry field {0} is missing or not UTF-8")]
    MissingField(&'static str),
    /// `v` is not a version this build reads.
    #[error("unsupported batch version {0:?}")]
    Version(String),
    /// The id is not `<edge-name>:<boot-nonce>:<seq>`.
    #[error("invalid batch id {0:?}")]
    Id(String),
    /// No line at all.
    #[error("the batch has no lines")]
    Empty,
    /// Over [`MAX_BODY_BYTES`] or [`MAX_LINES`].
    #[error("the batch is over {MAX_BODY_BYTES} bytes or {MAX_LINES} lines")]
    TooLarge,
    /// One line is malformed (1-based line number).
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: &'static str },
    /// A link-day's lines do not add up: its `r` counts and its `d` counts
    /// must each sum to its hours' human + bot, and its `d ... bot` count
    /// must equal their bot clicks (every click is on one line of each
    /// kind, and the class `bot` is exactly the bot clicks); its `t`
    /// counts, when it has any, must sum to its human clicks, and each
    /// dimension's `x` counts to at most its human clicks.
    #[error("the counts of {code} on day {day} do not add up")]
    Inconsistent { code: String, day: u64 },
}

/// Whether `id` is `<edge-name>:<boot-nonce>:<seq>`: name and nonce 1-64 of
/// `[A-Za-z0-9._-]`, seq 1-20 digits.
pub fn is_valid_batch_id(id: &str) -> bool {
    let word = |s: &str| {
        (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    let mut parts = id.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(edge), Some(nonce), Some(seq), None) => {
            word(edge)
                && word(nonce)
                && (1..=20).contains(&seq.len())
                && seq.bytes().all(|b| b.is_ascii_digit())
        }
        _ => false,
    }
}

fn count(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 13 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|n| *n <= MAX_COUNT)
}

fn time(s: &str, step: u64) -> Option<u64> {
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse()
        .ok()
        .filter(|t: &u64| t.is_multiple_of(step) && *t <= MAX_TIME)
}

impl Batch {
    /// An empty batch with this id.
    pub fn new(id: impl Into<String>) -> Batch {
        Batch {
            id: id.into(),
            ..Batch::default()
        }
    }

    /// Number of lines.
    pub fn lines(&self) -> usize {
        self.hours.len()
            + self.referrers.len()
            + self.devices.len()
            + self.destinations.len()
            + self.dims.len()
            + self.uniques.len()
    }

    /// Lines its body has: [`Batch::lines`] but the implied ones.
    pub fn wire_lines(&self) -> usize {
        if !self.counted_dims {
            return self.lines();
        }
        self.lines()
            - self.referrers.iter().filter(|r| r.is_implied()).count()
            - self.devices.iter().filter(|d| d.is_implied()).count()
    }

    /// Per hour line: its link-day, its clicks (human + bot), its bots.
    fn hour_days(&self) -> impl Iterator<Item = ((&str, u64), u64, u64)> {
        self.hours.iter().map(|h| {
            let day = (h.code.as_str(), super::day_start(h.hour));
            (day, h.human + h.bot, h.bot)
        })
    }

    /// The format version of the entry (`v`): `5` when its human clicks
    /// were counted by dimension, else `4` when it has dimension or
    /// visitor lines, `3` when a line names a per-domain link key, `2`
    /// when the batch has destination lines, else `1`, which origins of
    /// every version read (an edge counting only plain links of fleet codes
    /// needs no upgraded origin).
    pub fn version(&self) -> &'static str {
        if self.counted_dims {
            BATCH_VERSION_IMPLIED
        } else if !self.dims.is_empty() || !self.uniques.is_empty() {
            BATCH_VERSION_DIMS
        } else if self.codes().any(|c| c.contains('/')) {
            BATCH_VERSION_KEYS
        } else if self.destinations.is_empty() {
            BATCH_VERSION
        } else {
            BATCH_VERSION_DESTINATIONS
        }
    }

    /// Moves `other`'s lines after this batch's, kind by kind (the id stays).
    pub fn append(&mut self, other: Batch) {
        self.hours.extend(other.hours);
        self.referrers.extend(other.referrers);
        self.devices.extend(other.devices);
        self.destinations.extend(other.destinations);
        self.dims.extend(other.dims);
        self.uniques.extend(other.uniques);
    }

    /// Every code the batch names (with repeats).
    pub fn codes(&self) -> impl Iterator<Item = &str> {
        let hours = self.hours.iter().map(|l| l.code.as_str());
        let refs = self.referrers.iter().map(|l| l.code.as_str());
        let devs = self.devices.iter().map(|l| l.code.as_str());
        let dests = self.destinations.iter().map(|l| l.code.as_str());
        let dims = self.dims.iter().map(|l| l.code.as_str());
        let uniques = self.uniques.iter().map(|l| l.code.as_str());
        hours
            .chain(refs)
            .chain(devs)
            .chain(dests)
            .chain(dims)
            .chain(uniques)
    }

    /// Human and bot clicks in the batch (its hour lines).
    pub fn totals(&self) -> (u64, u64) {
        self.hours
            .iter()
            .fold((0, 0), |(h, b), l| (h + l.human, b + l.bot))
    }

    /// The body (`b` field): one line per count, each ending in `\n`; of
    /// a version 5 batch, without its implied lines.
    pub fn encode_body(&self) -> String {
        let mut out = String::with_capacity(self.lines() * 40);
        let implied = self.counted_dims;
        for l in &self.hours {
            let _ = writeln!(out, "h {} {} {} {}", l.code, l.hour, l.human, l.bot);
        }
        for l in self
            .referrers
            .iter()
            .filter(|l| !(implied && l.is_implied()))
        {
            let _ = writeln!(out, "r {} {} {} {}", l.code, l.day, l.host, l.n);
        }
        for l in self.devices.iter().filter(|l| !(implied && l.is_implied())) {
            let _ = writeln!(out, "d {} {} {} {}", l.code, l.day, l.device.as_str(), l.n);
        }
        for l in &self.destinations {
            let _ = writeln!(out, "t {} {} {} {}", l.code, l.day, l.destination, l.n);
        }
        for l in &self.dims {
            let _ = writeln!(
                out,
                "x {} {} {}:{} {}",
                l.code,
                l.day,
                l.dim.as_str(),
                l.value,
                l.n
            );
        }
        for l in &self.uniques {
            let _ = write!(out, "u {} {} ", l.code, l.day);
            l.sketch.encode(&mut out);
            out.push('\n');
        }
        out
    }

    /// Decodes a stream entry's fields, strictly: any defect rejects the
    /// whole batch. Lines may come in any order; a key repeated within the
    /// batch, a zero count, a time not on its hour or day, a link-day with
    /// more than [`TOP_REFERRERS`] named hosts are defects.
    pub fn decode(id: &str, version: &str, body: &str) -> Result<Batch, BatchError> {
        let (destinations_allowed, keys_allowed, dims_allowed, implied) = match version {
            BATCH_VERSION => (false, false, false, false),
            BATCH_VERSION_DESTINATIONS => (true, false, false, false),
            BATCH_VERSION_KEYS => (true, true, false, false),
            BATCH_VERSION_DIMS => (true, true, true, false),
            BATCH_VERSION_IMPLIED => (true, true, true, true),
            _ => return Err(BatchError::Version(version.chars().take(16).collect())),
        };
        if !is_valid_batch_id(id) {
            return Err(BatchError::Id(id.chars().take(80).collect()));
        }
        if body.len() > MAX_BODY_BYTES {
            return Err(BatchError::TooLarge);
        }
        let body = body.strip_suffix('\n').unwrap_or(body);
        if body.is_empty() {
            return Err(BatchError::Empty);
        }
        let mut b = Batch::new(id);
        b.counted_dims = dims_allowed;
        let mut hour_keys = HashSet::new();
        let mut ref_keys = HashSet::new();
        let mut dev_keys = HashSet::new();
        let mut dest_keys = HashSet::new();
        let mut dim_keys = HashSet::new();
        let mut uniq_keys = HashSet::new();
        let mut dim_named: HashMap<(String, u64, Dim), usize> = HashMap::new();
        let mut named: HashMap<(String, u64), usize> = HashMap::new();
        for (i, line) in body.split('\n').enumerate() {
            let bad = |reason| BatchError::Line {
                line: i + 1,
                reason,
            };
            if i >= MAX_LINES {
                return Err(BatchError::TooLarge);
            }
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 5 {
                return Err(bad("not 5 fields separated by single spaces"));
            }
            // Up to version 2 a line names a bare code; from 3 a link key
            // (a bare fleet code, or `<domain>/<code>`).
            let names_link = if keys_allowed {
                split_link_key(f[1]).is_some()
            } else {
                is_valid_code(f[1])
            };
            if !names_link {
                return Err(bad("invalid code"));
            }
            let code = f[1].to_owned();
            match f[0] {
                "h" => {
                    let hour = time(f[2], 3600).ok_or_else(|| bad("invalid hour start"))?;
                    let human = count(f[3]).ok_or_else(|| bad("invalid human count"))?;
                    let bot = count(f[4]).ok_or_else(|| bad("invalid bot count"))?;
                    if human == 0 && bot == 0 {
                        return Err(bad("counts nothing"));
                    }
                    if !hour_keys.insert((code.clone(), hour)) {
                        return Err(bad("repeated link-hour"));
                    }
                    b.hours.push(HourLine {
                        code,
                        hour,
                        human,
                        bot,
                    });
                }
                "r" => {
                    let day = time(f[2], 86_400).ok_or_else(|| bad("invalid day start"))?;
                    if !is_valid_host_field(f[3]) {
                        return Err(bad("invalid referrer host"));
                    }
                    if implied && f[3] == NO_REFERRER {
                        return Err(bad("an implied line (version 5)"));
                    }
                    let n = count(f[4])
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("invalid count"))?;
                    if !ref_keys.insert((code.clone(), day, f[3].to_owned())) {
                        return Err(bad("repeated link-day referrer"));
                    }
                    if f[3] != OTHER_REFERRER {
                        let k = named.entry((code.clone(), day)).or_default();
                        *k += 1;
                        if *k > TOP_REFERRERS {
                            return Err(bad("more than 20 referrer hosts for a link-day"));
                        }
                    }
                    b.referrers.push(ReferrerLine {
                        code,
                        day,
                        host: f[3].to_owned(),
                        n,
                    });
                }
                "d" => {
                    let day = time(f[2], 86_400).ok_or_else(|| bad("invalid day start"))?;
                    let device = Device::parse(f[3]).ok_or_else(|| bad("invalid device class"))?;
                    if implied && device == Device::Bot {
                        return Err(bad("an implied line (version 5)"));
                    }
                    let n = count(f[4])
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("invalid count"))?;
                    if !dev_keys.insert((code.clone(), day, device)) {
                        return Err(bad("repeated link-day device"));
                    }
                    b.devices.push(DeviceLine {
                        code,
                        day,
                        device,
                        n,
                    });
                }
                "t" if destinations_allowed => {
                    let day = time(f[2], 86_400).ok_or_else(|| bad("invalid day start"))?;
                    let destination =
                        Destination::parse(f[3]).ok_or_else(|| bad("invalid destination"))?;
                    let n = count(f[4])
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("invalid count"))?;
                    if !dest_keys.insert((code.clone(), day, destination)) {
                        return Err(bad("repeated link-day destination"));
                    }
                    b.destinations.push(DestinationLine {
                        code,
                        day,
                        destination,
                        n,
                    });
                }
                "x" if dims_allowed => {
                    let day = time(f[2], 86_400).ok_or_else(|| bad("invalid day start"))?;
                    let (dim, value) = f[3]
                        .split_once(':')
                        .and_then(|(d, v)| Some((Dim::parse(d)?, v)))
                        .ok_or_else(|| bad("invalid dimension"))?;
                    if !dim.is_valid_value(value) {
                        return Err(bad("invalid dimension value"));
                    }
                    let n = count(f[4])
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("invalid count"))?;
                    if !dim_keys.insert((code.clone(), day, dim, value.to_owned())) {
                        return Err(bad("repeated link-day dimension value"));
                    }
                    if value != OTHER_REFERRER {
                        let k = dim_named.entry((code.clone(), day, dim)).or_default();
                        *k += 1;
                        if *k > TOP_VALUES {
                            return Err(bad("more than 20 values of a dimension for a link-day"));
                        }
                    }
                    b.dims.push(DimLine {
                        code,
                        day,
                        dim,
                        value: value.to_owned(),
                        n,
                    });
                }
                "u" if dims_allowed => {
                    let day = time(f[2], 86_400).ok_or_else(|| bad("invalid day start"))?;
                    let sketch = match f[3] {
                        "s" | "d" => Sketch::decode_parts(f[3], f[4]),
                        _ => None,
                    }
                    .ok_or_else(|| bad("invalid sketch"))?;
                    if !uniq_keys.insert((code.clone(), day)) {
                        return Err(bad("repeated link-day sketch"));
                    }
                    b.uniques.push(UniqLine { code, day, sketch });
                }
                _ => return Err(bad("unknown line kind")),
            }
        }
        if implied {
            b.add_implied()?;
        }
        b.check_sums()?;
        Ok(b)
    }

    /// A version 5 batch's implied lines, derived: per link-day of its
    /// hours, the clicks on no referrer line are `-`, the bot clicks
    /// `bot` (appended, link-days in key order). A link-day whose referrer
    /// lines name more clicks than its hours have is inconsistent.
    fn add_implied(&mut self) -> Result<(), BatchError> {
        // (code, day) → [clicks, bots, named referrer clicks]
        let mut days: BTreeMap<(&str, u64), [u64; 3]> = BTreeMap::new();
        for (day, clicks, bots) in self.hour_days() {
            let s = days.entry(day).or_default();
            s[0] += clicks;
            s[1] += bots;
        }
        for r in &self.referrers {
            if let Some(s) = days.get_mut(&(r.code.as_str(), r.day)) {
                s[2] += r.n;
            }
        }
        let mut referrers = Vec::new();
        let mut devices = Vec::new();
        for ((code, day), [clicks, bots, named]) in days {
            let none = clicks
                .checked_sub(named)
                .ok_or_else(|| BatchError::Inconsistent {
                    code: code.to_owned(),
                    day,
                })?;
            if none > 0 {
                referrers.push(ReferrerLine {
                    code: code.to_owned(),
                    day,
                    host: NO_REFERRER.to_owned(),
                    n: none,
                });
            }
            if bots > 0 {
                devices.push(DeviceLine {
                    code: code.to_owned(),
                    day,
                    device: Device::Bot,
                    n: bots,
                });
            }
        }
        self.referrers.extend(referrers);
        self.devices.extend(devices);
        Ok(())
    }

    /// Per link-day: Σ h (human + bot) = Σ r = Σ d, and d `bot` = Σ h bot;
    /// Σ t = Σ h human where the link-day has `t` lines.
    /// What makes the daily rollups exact on their own (the hourly rows
    /// are pruned after their retention, the daily ones are not).
    fn check_sums(&self) -> Result<(), BatchError> {
        // (code, day) → [hour clicks, hour bots, referrer clicks, device
        // clicks, device bots, destination clicks, destination lines]
        let mut sums: HashMap<(&str, u64), [u64; 7]> = HashMap::new();
        for (day, clicks, bots) in self.hour_days() {
            let s = sums.entry(day).or_default();
            s[0] += clicks;
            s[1] += bots;
        }
        for r in &self.referrers {
            sums.entry((&r.code, r.day)).or_default()[2] += r.n;
        }
        for d in &self.devices {
            let s = sums.entry((&d.code, d.day)).or_default();
            s[3] += d.n;
            if d.device == Device::Bot {
                s[4] += d.n;
            }
        }
        for t in &self.destinations {
            let s = sums.entry((&t.code, t.day)).or_default();
            s[5] += t.n;
            s[6] += 1;
        }
        // A sketch counts some of the link-day's human clicks' visitors.
        if let Some(u) = self.uniques.iter().find(|u| {
            sums.get(&(u.code.as_str(), u.day)).is_none_or(|s| {
                let human = s[0] - s[1];
                human == 0 || u.sketch.sparse_len().is_some_and(|n| n as u64 > human)
            })
        }) {
            return Err(BatchError::Inconsistent {
                code: u.code.clone(),
                day: u.day,
            });
        }
        // (code, day, dimension) → human clicks named
        let mut dims: HashMap<(&str, u64, Dim), u64> = HashMap::new();
        for x in &self.dims {
            *dims.entry((&x.code, x.day, x.dim)).or_default() += x.n;
        }
        if let Some(((code, day, _), _)) = dims
            .iter()
            .find(|((code, day, _), n)| sums.get(&(*code, *day)).is_none_or(|s| **n > s[0] - s[1]))
        {
            return Err(BatchError::Inconsistent {
                code: (*code).to_owned(),
                day: *day,
            });
        }
        match sums.into_iter().find(|(_, s)| {
            s[0] != s[2] || s[0] != s[3] || s[1] != s[4] || (s[6] > 0 && s[0] - s[1] != s[5])
        }) {
            Some(((code, day), _)) => Err(BatchError::Inconsistent {
                code: code.to_owned(),
                day,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Batch {
        Batch {
            id: "edge-1:a1b2c3:7".into(),
            hours: vec![HourLine {
                code: "aB3xYz".into(),
                hour: 3600 * 500_000,
                human: 3,
                bot: 1,
            }],
            referrers: vec![
                ReferrerLine {
                    code: "aB3xYz".into(),
                    day: 1_799_971_200,
                    host: "news.site.cn".into(),
                    n: 3,
                },
                ReferrerLine {
                    code: "aB3xYz".into(),
                    day: 1_799_971_200,
                    host: "-".into(),
                    n: 1,
                },
            ],
            devices: vec![
                DeviceLine {
                    code: "aB3xYz".into(),
                    day: 1_799_971_200,
                    device: Device::Mobile,
                    n: 3,
                },
                DeviceLine {
                    code: "aB3xYz".into(),
                    day: 1_799_971_200,
                    device: Device::Bot,
                    n: 1,
                },
            ],
            destinations: Vec::new(),
            dims: Vec::new(),
            counted_dims: false,
            uniques: Vec::new(),
        }
    }

    #[test]
    fn round_trip() {
        let b = sample();
        let body = b.encode_body();
        assert_eq!(
            body,
            "h aB3xYz 1800000000 3 1\nr aB3xYz 1799971200 news.site.cn 3\n\
             r aB3xYz 1799971200 - 1\nd aB3xYz 1799971200 mobile 3\n\
             d aB3xYz 1799971200 bot 1\n"
        );
        assert_eq!(Batch::decode(&b.id, "1", &body), Ok(b.clone()));
        assert_eq!(b.totals(), (3, 1));
        // Without the final newline too.
        assert!(Batch::decode(&b.id, "1", body.trim_end()).is_ok());
    }

    #[test]
    fn ids() {
        for ok in ["e:n:0", "edge-1.dc_2:AbC-9:18446744073709551615"] {
            assert!(is_valid_batch_id(ok), "{ok}");
        }
        for bad in [
            "", "e:n", "e:n:1:2", "e::1", ":n:1", "e:n:x", "e n:n:1", "e:n:",
        ] {
            assert!(!is_valid_batch_id(bad), "{bad}");
        }
    }

    #[test]
    fn version_5_implies_the_no_referrer_and_bot_lines() {
        let id = "e:n:1";
        // Two hours of one day, a named referrer, a link-day of bots only.
        let body = "h abcdef 3600 3 1\nh abcdef 7200 1 2\nh k1mnop 3600 0 2\n\
                    r abcdef 0 news.example 2\nd abcdef 0 desktop 4\n\
                    x abcdef 0 browser:chrome 4\n";
        let b = Batch::decode(id, "5", body).unwrap_or_else(|e| panic!("{e}"));
        let refs: Vec<(&str, &str, u64)> = b
            .referrers
            .iter()
            .map(|r| (r.code.as_str(), r.host.as_str(), r.n))
            .collect();
        assert_eq!(
            refs,
            [
                ("abcdef", "news.example", 2),
                ("abcdef", "-", 5),
                ("k1mnop", "-", 2)
            ]
        );
        let devs: Vec<(&str, Device, u64)> = b
            .devices
            .iter()
            .map(|d| (d.code.as_str(), d.device, d.n))
            .collect();
        assert_eq!(
            devs,
            [
                ("abcdef", Device::Desktop, 4),
                ("abcdef", Device::Bot, 3),
                ("k1mnop", Device::Bot, 2)
            ]
        );
        assert_eq!((b.lines(), b.wire_lines()), (10, 6));
        assert_eq!(b.encode_body(), body);
        // The implied lines are never written; referrers naming more
        // clicks than the day has do not add up.
        let h = "h abcdef 3600 1 1\n";
        for x in ["r abcdef 0 - 2", "d abcdef 0 bot 1"] {
            let r = Batch::decode(id, "5", &format!("{h}{x}\n"));
            assert!(matches!(r, Err(BatchError::Line { .. })), "{x}: {r:?}");
        }
        let r = Batch::decode(id, "5", &format!("{h}r abcdef 0 a.example 3\n"));
        assert!(matches!(r, Err(BatchError::Inconsistent { .. })), "{r:?}");
        // The non-bot devices must still add up to the day's humans.
        let r = Batch::decode(id, "5", &format!("{h}d abcdef 0 mobile 2\n"));
        assert!(matches!(r, Err(BatchError::Inconsistent { .. })), "{r:?}");
    }

    #[test]
    fn version_4_carries_dimension_lines() {
        let id = "e:n:1";
        let h = "h abcdef 3600 3 1\nr abcdef 0 - 4\nd abcdef 0 desktop 3\nd abcdef 0 bot 1\n";
        let body = format!(
            "{h}x abcdef 0 country:CN 2\nx abcdef 0 country:~other 1\nx abcdef 0 browser:chrome 3\nx abcdef 0 utm_source:mail 1\n"
        );
        let b = Batch::decode(id, "4", &body).unwrap_or_else(|e| panic!("{e}"));
        assert!(b.counted_dims);
        assert_eq!(b.dims.len(), 4);
        assert_eq!(b.dims[0].dim, Dim::Country);
        // Written again, it is version 5: the same lines but the implied.
        assert_eq!(b.version(), "5");
        let v5 = body
            .replace("r abcdef 0 - 4\n", "")
            .replace("d abcdef 0 bot 1\n", "");
        assert_eq!(b.encode_body(), v5);
        assert_eq!(Batch::decode(id, "5", &v5), Ok(b.clone()));
        // Version 4 without any x line: counted by dimension all the same.
        let plain = Batch::decode(id, "4", h).unwrap_or_else(|e| panic!("{e}"));
        assert!(plain.counted_dims && plain.dims.is_empty());
        assert_eq!(plain.version(), "5");
        // x lines only from version 4.
        assert!(Batch::decode(id, "3", &body).is_err());
        let bad = |x: &str| Batch::decode(id, "4", &format!("{h}{x}\n"));
        for x in [
            "x abcdef 0 country:unknown 1",
            "x abcdef 0 country:cn 1",
            "x abcdef 0 browser:other 1",
            "x abcdef 0 lang:- 1",
            "x abcdef 0 source:link 1",
            "x abcdef 0 utm_source:- 1",
            "x abcdef 0 utm_source:a,b 1",
            "x abcdef 0 city:Paris 1",
            "x abcdef 0 country 1",
            "x abcdef 3600 country:CN 1",
            "x abcdef 0 country:CN 0",
        ] {
            assert!(matches!(bad(x), Err(BatchError::Line { .. })), "{x}");
        }
        // Repeated, more than the day's human clicks, or without its hours.
        assert!(bad("x abcdef 0 os:ios 1\nx abcdef 0 os:ios 1").is_err());
        assert!(matches!(
            bad("x abcdef 0 os:ios 4"),
            Err(BatchError::Inconsistent { .. })
        ));
        assert!(matches!(
            bad("x abcdef 86400 os:ios 1"),
            Err(BatchError::Inconsistent { .. })
        ));
        // At most 20 named values and `~other` per link-day-dimension.
        let many = |k: usize| {
            let mut b = String::from("h abcdef 3600 30 0\nr abcdef 0 - 30\nd abcdef 0 mobile 30\n");
            for i in 0..k {
                b.push_str(&format!("x abcdef 0 utm_campaign:c{i} 1\n"));
            }
            b.push_str("x abcdef 0 utm_campaign:~other 1\n");
            Batch::decode(id, "4", &b)
        };
        assert!(many(20).is_ok());
        assert!(matches!(many(21), Err(BatchError::Line { .. })));
        // Unique visitors: one sketch per link-day with human clicks.
        let u = |x: &str| Batch::decode(id, "4", &format!("{h}{x}\n"));
        let ok =
            u("u abcdef 0 s 00000000000000010000000000000002").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.uniques[0].sketch.estimate(), 2);
        assert!(ok
            .encode_body()
            .ends_with("u abcdef 0 s 00000000000000010000000000000002\n"));
        let dense = format!("u abcdef 0 d {}", "A".repeat(super::super::uniq::REGISTERS));
        assert!(u(&dense).is_ok());
        for bad in [
            "u abcdef 0 s 0000000000000002000000000000000100000000000000030000000000000004",
            "u abcdef 0 s 00000000000000010000000000000001",
            "u abcdef 0 x 0000000000000001",
            "u abcdef 0 d AAAA",
            "u abcdef 86400 s 0000000000000001",
            "u abcdef 0 s 0000000000000001\nu abcdef 0 s 0000000000000002",
        ] {
            assert!(u(bad).is_err(), "{bad}");
        }
        // More visitors than human clicks: inconsistent.
        assert!(matches!(
            u("u abcdef 0 s 0000000000000001000000000000000200000000000000030000000000000004"),
            Err(BatchError::Inconsistent { .. })
        ));
        assert!(Batch::decode(id, "3", &format!("{h}u abcdef 0 s 0000000000000001\n")).is_err());
    }

    #[test]
    fn rejects_whole_batches() {
        let id = "e:n:1";
        let ok = "h abcdef 3600 1 0\nr abcdef 0 - 1\nd abcdef 0 desktop 1\n";
        assert!(Batch::decode(id, "1", ok).is_ok());
        assert!(matches!(
            Batch::decode(id, "6", ok),
            Err(BatchError::Version(_))
        ));
        // Version 3 names links by key: a per-domain code with its domain,
        // never bare; versions 1 and 2 by bare code only.
        let keyed = "h s.shop55.com/sale 3600 1 0\nr s.shop55.com/sale 0 - 1\nd s.shop55.com/sale 0 desktop 1\n";
        let bare = "h sale 3600 1 0\nr sale 0 - 1\nd sale 0 desktop 1\n";
        assert!(Batch::decode(id, "3", keyed).is_ok());
        assert!(
            Batch::decode(id, "3", ok).is_ok(),
            "a fleet code is its own key"
        );
        for (v, body) in [("1", keyed), ("2", keyed), ("3", bare)] {
            assert!(
                matches!(Batch::decode(id, v, body), Err(BatchError::Line { .. })),
                "v{v}: {body}"
            );
        }
        assert!(Batch::decode(id, "1", bare).is_ok());
        let fleet_with_domain = "h s.shop55.com/abcdef 3600 1 0\nr s.shop55.com/abcdef 0 - 1\nd s.shop55.com/abcdef 0 desktop 1\n";
        assert!(Batch::decode(id, "3", fleet_with_domain).is_err());
        let mut b = Batch::decode(id, "3", keyed).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.version(), "3");
        b = Batch::decode(id, "1", bare).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.version(), "1");
        assert!(matches!(
            Batch::decode("x", "1", ok),
            Err(BatchError::Id(_))
        ));
        assert_eq!(Batch::decode(id, "1", ""), Err(BatchError::Empty));
        assert_eq!(Batch::decode(id, "1", "\n"), Err(BatchError::Empty));
        let line4 = |l: &str| match Batch::decode(id, "1", &format!("{ok}{l}\n")) {
            Err(BatchError::Line { line: 4, reason }) => reason,
            other => panic!("{l:?}: {other:?}"),
        };
        for bad in [
            "h abcdef 3600 1",
            "h abcdef 3600 1 0 9",
            "h  abcdef 3600 1 0",
            "h abcdef 3601 1 0",
            "h abcdef 3600 0 0",
            "h abcdef 3600 +1 0",
            "h abcdef 3600 -1 0",
            "h abcdef 3600 1 0\r",
            "h ab 3600 1 0",
            "h abcdef 3600 1 0",
            "h abcdef 7200 1000000000001 0",
            "h abcdef 4294947600 1 0",
            "r abcdef 3600 a.b 1",
            "r abcdef 86400 A.B 1",
            "r abcdef 86400 a.b 0",
            "d abcdef 86400 phone 1",
            "d abcdef 86400 mobile 0",
            "x abcdef 86400 mobile 1",
            "",
        ] {
            line4(bad);
        }
        let mut many = String::new();
        for i in 0..=TOP_REFERRERS {
            many.push_str(&format!("r abcdef 86400 h{i}.com 1\n"));
        }
        many.push_str("r abcdef 86400 ~other 5\n");
        assert!(matches!(
            Batch::decode(id, "1", &many),
            Err(BatchError::Line { line: 21, .. })
        ));
    }

    #[test]
    fn link_days_must_add_up() {
        let id = "e:n:1";
        // Two hours of one day, 5 clicks of which 2 bots.
        let hours = "h abcdef 3600 2 1\nh abcdef 7200 1 1\n";
        let ok = format!(
            "{hours}r abcdef 0 - 4\nr abcdef 0 a.cn 1\nd abcdef 0 bot 2\nd abcdef 0 mobile 3\n"
        );
        assert!(Batch::decode(id, "1", &ok).is_ok());
        for bad in [
            // referrers sum to 4, devices to 5
            format!("{hours}r abcdef 0 - 4\nd abcdef 0 bot 2\nd abcdef 0 mobile 3\n"),
            // devices sum to 4
            format!("{hours}r abcdef 0 - 5\nd abcdef 0 bot 2\nd abcdef 0 mobile 2\n"),
            // the bot class is not the bot clicks
            format!("{hours}r abcdef 0 - 5\nd abcdef 0 bot 1\nd abcdef 0 mobile 4\n"),
            // hours alone
            hours.to_owned(),
            // a day with no hour
            format!("{ok}r abcdef 86400 - 1\nd abcdef 86400 other 1\n"),
        ] {
            assert_eq!(
                Batch::decode(id, "1", &bad),
                Err(BatchError::Inconsistent {
                    code: "abcdef".into(),
                    day: if bad.contains("86400") { 86_400 } else { 0 }
                }),
                "{bad}"
            );
        }
    }
}
