//! Clicks to batches, in memory: what an edge does between two flushes,
//! and what the tests use to produce exactly the batches an edge would.
//!
//! Counts are kept per link-hour (human, bot) and per link-day (referrer
//! host, device class, and for links with options the destination that
//! answered). Every click lands in each, so for every link-day the
//! referrer counts, the device counts and any destination counts each sum
//! to the human plus bot clicks of that day's hours.

use super::batch::{
    is_valid_batch_id, Batch, DestinationLine, DeviceLine, DimLine, HourLine, ReferrerLine,
    UniqLine,
};
use super::dims::{DayDims, Dim, Dims, DimsInput};
use super::uniq::Sketch;
use super::{day_start, device_class, hour_start, referrer_host, Device};
use super::{BATCH_VERSION, BATCH_VERSION_DESTINATIONS, BATCH_VERSION_IMPLIED, BATCH_VERSION_KEYS};
use super::{NO_REFERRER, OTHER_REFERRER, TOP_REFERRERS};
use crate::code::{is_valid_code, split_link_key};
use crate::link_rules::Destination;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::fmt::Write;

/// Maps the flusher updates on every click: a fast non-cryptographic hash
/// (the keys are codes and hosts an edge has already validated).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::atomic::{AtomicU64, Ordering};

/// One redirect answered by an edge (404s are not clicks: not counted).
#[derive(Debug, Clone, Copy)]
pub struct Click<'a> {
    pub code: &'a str,
    /// When (Unix seconds).
    pub at_unix: u64,
    /// A `HEAD` request: always a bot click, whatever its user agent.
    pub head: bool,
    pub user_agent: Option<&'a str>,
    pub referer: Option<&'a str>,
    /// The destination that answered, for a link whose record carries
    /// options (`None` for a plain link: no destination lines).
    pub destination: Option<Destination>,
    /// The dimensions' inputs besides the user agent (protocol 3.7): read
    /// only by an accumulator [`Accumulator::with_dimensions`].
    pub accept_language: Option<&'a str>,
    /// The client's country (ISO alpha-2, upper case).
    pub country: Option<[u8; 2]>,
    /// The request's query (after `?`).
    pub query: Option<&'a str>,
    /// The redirect's `Location`.
    pub location: Option<&'a str>,
    /// The client's `city` value (`dims::city_value`; protocol 3.9).
    pub city: Option<&'a str>,
    /// The visitor (`uniq::visitor`: the caller holds the day's salt).
    pub visitor: Option<u64>,
}

impl<'a> Click<'a> {
    /// A `GET` click on `code` at `at_unix` with nothing else known.
    pub fn new(code: &'a str, at_unix: u64) -> Click<'a> {
        Click {
            code,
            at_unix,
            head: false,
            user_agent: None,
            referer: None,
            destination: None,
            accept_language: None,
            country: None,
            query: None,
            location: None,
            city: None,
            visitor: None,
        }
    }
}

#[derive(Debug, Default)]
struct DayCounts {
    /// Clicks without a referrer (`-`, the most common host by far): a
    /// counter, not a map entry.
    no_referrer: u64,
    /// Every other host (allocated at the first such click).
    referrers: FastMap<String, u64>,
    devices: [u64; 5],
    /// Every human click's destination, sent only when `routed`: some
    /// click that day was on a link with options, so the lines sum to the
    /// day's human clicks across an edit. `link` (every plain link's click)
    /// is a counter: a link counted once allocates nothing for it.
    to_link: u64,
    destinations: Vec<(Destination, u64)>,
    routed: bool,
    /// The human clicks' dimensions (version 4).
    dims: DayDims,
    /// The human clicks' distinct visitors (version 4).
    visitors: Option<Sketch>,
}

/// A link's counts between two takes: a flush interval sees one or two
/// hours and days, so small vectors in time order (searched from the
/// newest) cost less than ordered maps on every click.
#[derive(Debug, Default)]
struct LinkCounts {
    /// (hour start, (human, bot)), by hour.
    hours: SmallVec<[(u64, (u64, u64)); 2]>,
    /// (day start, counts), by day. Boxed, one allocation per link-day:
    /// a day's counts (232 bytes) out of the map's slot make the slot 120
    /// bytes instead of 344, so the table a busy edge keeps between cuts
    /// (two of `clicks.max_links` links) is a third of the size, and a link
    /// new to the counts writes two cache lines of it, not six (issue 27:
    /// p99 0.75× with bots' clicks, `edge/bench/counting.sh`).
    days: SmallVec<[(u64, Box<DayCounts>); 1]>,
}

/// A link's key as the counts hold it: inline up to [`INLINE_KEY`] bytes
/// (every fleet code), so counting a link new since the last take does not
/// allocate for it; hashed and compared as the `str` it is, so the map is
/// searched by `&str`.
#[derive(Debug, Clone)]
enum Key {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Box<str>),
}

const INLINE_KEY: usize = 22;

impl Key {
    fn new(s: &str) -> Key {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= INLINE_KEY => {
                let mut bytes = [0u8; INLINE_KEY];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                Key::Inline { len, bytes }
            }
            _ => Key::Heap(s.into()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // SAFETY: the bytes were copied whole from a `str` by `Key::new`
            // (a valid prefix of UTF-8 ending on its end is UTF-8). Checked
            // again here it would be on every hash and every compare of the
            // sort, the flusher's hottest loop.
            Key::Inline { len, bytes } => unsafe {
                std::str::from_utf8_unchecked(&bytes[..usize::from(*len)])
            },
            Key::Heap(s) => s,
        }
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

impl std::borrow::Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl LinkCounts {
    /// One click of this link.
    fn count(
        &mut self,
        at_unix: u64,
        device: Device,
        host: &str,
        destination: Option<Destination>,
        dims: Option<&Dims>,
    ) {
        let h = slot(&mut self.hours, hour_start(at_unix), || (0, 0));
        if device == Device::Bot {
            h.1 += 1;
        } else {
            h.0 += 1;
        }
        let day = slot(
            &mut self.days,
            day_start(at_unix),
            Box::<DayCounts>::default,
        );
        day.devices[device.index()] += 1;
        if host == NO_REFERRER {
            day.no_referrer += 1;
        } else {
            match day.referrers.get_mut(host) {
                Some(n) => *n += 1,
                None => {
                    day.referrers.insert(host.to_owned(), 1);
                }
            }
        }
        day.routed |= destination.is_some();
        if device != Device::Bot {
            if let Some(d) = dims {
                if let Some(v) = d.visitor {
                    day.visitors.get_or_insert_with(Sketch::default).insert(v);
                }
                if d.has_values() {
                    day.dims.count(d);
                }
            }
            match destination.filter(|d| *d != Destination::Link) {
                None => day.to_link += 1,
                Some(dest) => match day.destinations.iter_mut().find(|(d, _)| *d == dest) {
                    Some((_, n)) => *n += 1,
                    None => day.destinations.push((dest, 1)),
                },
            }
        }
    }
}

impl LinkCounts {
    /// `n` bot clicks without a referrer at `at_unix`: what `n` calls of
    /// [`LinkCounts::count`] with `Device::Bot`, `NO_REFERRER`, no
    /// destination and no dimensions count.
    fn count_bots(&mut self, at_unix: u64, n: u64) {
        slot(&mut self.hours, hour_start(at_unix), || (0, 0)).1 += n;
        let day = slot(
            &mut self.days,
            day_start(at_unix),
            Box::<DayCounts>::default,
        );
        day.devices[Device::Bot.index()] += n;
        day.no_referrer += n;
    }
}

/// The entry of `key` in `v` (sorted by key), inserted in place if missing.
fn slot<T, const N: usize>(
    v: &mut SmallVec<[(u64, T); N]>,
    key: u64,
    new: impl FnOnce() -> T,
) -> &mut T
where
    [(u64, T); N]: smallvec::Array<Item = (u64, T)>,
{
    let i = match v.iter().rposition(|(k, _)| *k <= key) {
        Some(i) if v[i].0 == key => i,
        Some(i) => {
            v.insert(i + 1, (key, new()));
            i + 1
        }
        None => {
            v.insert(0, (key, new()));
            0
        }
    };
    &mut v[i].1
}

/// Counts clicks until they are taken as batches.
#[derive(Debug, Default)]
pub struct Accumulator {
    links: FastMap<Key, LinkCounts>,
    clicks: u64,
    /// Whether [`Accumulator::add`] reads the clicks' dimensions.
    dimensions: bool,
}

/// Hands out batch ids `<edge-name>:<boot-nonce>:<seq>`: the nonce is new
/// at every start of the edge, so ids never repeat across restarts, and
/// the sequence orders one run's batches.
#[derive(Debug)]
pub struct BatchIds {
    prefix: String,
    seq: AtomicU64,
}

impl BatchIds {
    /// `None` when the name or nonce is not 1-64 of `[A-Za-z0-9._-]`.
    pub fn new(edge: &str, nonce: &str) -> Option<BatchIds> {
        let prefix = format!("{edge}:{nonce}:");
        is_valid_batch_id(&format!("{prefix}0")).then_some(BatchIds {
            prefix,
            seq: AtomicU64::new(0),
        })
    }

    /// The next id.
    pub fn next_id(&self) -> String {
        format!(
            "{}{}",
            self.prefix,
            self.seq.fetch_add(1, Ordering::Relaxed)
        )
    }
}

impl Accumulator {
    /// An empty accumulator.
    pub fn new() -> Accumulator {
        Accumulator::default()
    }

    /// An empty accumulator whose [`Accumulator::add`] reads each human
    /// click's dimensions (an edge with `clicks.dimensions` on).
    pub fn with_dimensions() -> Accumulator {
        Accumulator {
            dimensions: true,
            ..Accumulator::default()
        }
    }

    /// Counts one click (classifying its user agent and referrer). Returns
    /// false, counting nothing, for a code that is neither a valid code nor
    /// a link key (`code::link_key`; edges count per-domain codes so).
    pub fn add(&mut self, c: &Click<'_>) -> bool {
        let device = if c.head {
            Device::Bot
        } else {
            device_class(c.user_agent.unwrap_or(""))
        };
        let dims = (self.dimensions && device != Device::Bot).then(|| {
            Dims::read(&DimsInput {
                user_agent: c.user_agent.map(str::as_bytes),
                accept_language: c.accept_language.map(str::as_bytes),
                country: c.country,
                query: c.query.map(str::as_bytes),
                location: c.location,
                city: c.city,
                visitor: c.visitor,
            })
        });
        self.add_classified(
            c.code,
            c.at_unix,
            device,
            &referrer_host(c.referer),
            c.destination,
            dims.as_ref(),
        )
    }

    /// Counts one click already classified (`device` is [`Device::Bot`] for
    /// a bot click; `host` is a [`referrer_host`] value; `destination` as in
    /// [`Click`]; `dims` a human click's dimensions, ignored unless the
    /// accumulator counts them).
    pub fn add_classified(
        &mut self,
        code: &str,
        at_unix: u64,
        device: Device,
        host: &str,
        destination: Option<Destination>,
        dims: Option<&Dims>,
    ) -> bool {
        if !is_valid_code(code) && split_link_key(code).is_none() {
            return false;
        }
        let dims = dims.filter(|_| self.dimensions);
        // One lookup for a link already counted since the last take; a
        // new one is inserted (its key allocated only past `INLINE_KEY`).
        match self.links.get_mut(code) {
            Some(link) => link.count(at_unix, device, host, destination, dims),
            None => {
                let mut link = LinkCounts::default();
                link.count(at_unix, device, host, destination, dims);
                self.links.insert(Key::new(code), link);
            }
        }
        self.clicks += 1;
        true
    }

    /// Counts `n` bot clicks without a referrer on a plain link at
    /// `at_unix` (an edge's tally of them, taken whole): the same counts
    /// as `n` such clicks added one by one. False, counting nothing, for
    /// a key [`Accumulator::add_classified`] refuses.
    pub fn add_bots(&mut self, code: &str, at_unix: u64, n: u64) -> bool {
        if n == 0 || (!is_valid_code(code) && split_link_key(code).is_none()) {
            return false;
        }
        match self.links.get_mut(code) {
            Some(link) => link.count_bots(at_unix, n),
            None => {
                let mut link = LinkCounts::default();
                link.count_bots(at_unix, n);
                self.links.insert(Key::new(code), link);
            }
        }
        self.clicks += n;
        true
    }

    /// Moves the counts out, leaving this accumulator empty with its
    /// settings (whether it reads dimensions).
    ///
    /// The empty map is sized for as many links as were taken: a busy
    /// edge's next flush interval sees about as many, and growing a map of
    /// 100,000 links doubling by doubling rehashes them all in one go, a
    /// stall of milliseconds on the flusher (issue 27).
    pub fn take(&mut self) -> Accumulator {
        let empty = Accumulator {
            dimensions: self.dimensions,
            links: FastMap::with_capacity_and_hasher(self.links.len(), Default::default()),
            ..Accumulator::default()
        };
        std::mem::replace(self, empty)
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Clicks counted since the last take.
    pub fn clicks(&self) -> u64 {
        self.clicks
    }

    /// Links counted since the last take (what its memory grows with).
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Takes everything counted as batches of at most `max_lines` lines
    /// (a link's lines are never split across batches), ids from `ids`.
    pub fn take_batches(&mut self, ids: &BatchIds, max_lines: usize) -> Vec<Batch> {
        // In code order, so batches are reproducible (tests, the Lua twin).
        let mut links: Vec<(Key, LinkCounts)> =
            std::mem::take(&mut self.links).into_iter().collect();
        links.sort_unstable_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        self.clicks = 0;
        let mut out = Vec::new();
        let new_batch = |ids: &BatchIds| Batch {
            counted_dims: self.dimensions,
            ..Batch::new(ids.next_id())
        };
        let mut cur = new_batch(ids);
        for (code, counts) in links {
            let part = link_lines(code.as_str(), &counts, self.dimensions);
            if cur.lines() > 0 && cur.wire_lines() + part.wire_lines() > max_lines {
                let next = new_batch(ids);
                out.push(std::mem::replace(&mut cur, next));
            }
            cur.append(part);
        }
        if cur.lines() > 0 {
            out.push(cur);
        }
        out
    }
}

/// A batch as an edge sends it: id, format version, body, and the human
/// and bot clicks in it ([`Accumulator::take_encoded`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub id: String,
    pub version: &'static str,
    pub body: String,
    pub human: u64,
    pub bot: u64,
}

/// The decimal text of the last time written (a day's lines share it).
#[derive(Default)]
struct TimeText {
    time: Option<u64>,
    buf: itoa::Buffer,
    text: String,
}

impl TimeText {
    fn of(&mut self, time: u64) -> &str {
        if self.time != Some(time) {
            self.text.clear();
            self.text.push_str(self.buf.format(time));
            self.time = Some(time);
        }
        &self.text
    }
}

/// A [`Writer`]'s size at one point.
struct Mark {
    ends: [usize; 6],
    lines: usize,
    human: u64,
    bot: u64,
    keys: bool,
}

/// One batch being written: its lines by kind (the body's order), in
/// buffers reused from link to link.
#[derive(Default)]
struct Writer {
    kinds: [String; 6],
    lines: usize,
    human: u64,
    bot: u64,
    keys: bool,
    /// The accumulator counts dimensions: every batch is version 4.
    counted_dims: bool,
    time_text: TimeText,
}

impl Writer {
    /// Empties the lines (the version rule stays).
    fn clear(&mut self) {
        for k in &mut self.kinds {
            k.clear();
        }
        self.lines = 0;
        self.human = 0;
        self.bot = 0;
        self.keys = false;
    }

    /// Writes `code`'s lines ([`each_line`]); numbers by `itoa`, not the
    /// formatting machinery (the flusher writes every counted link).
    fn link<'a>(&mut self, code: &str, counts: &'a LinkCounts, ranked: &mut Vec<(&'a str, u64)>) {
        self.keys |= code.contains('/');
        let [hours, referrers, devices, destinations, dims, uniques] = &mut self.kinds;
        let (lines, human_sum, bot_sum) = (&mut self.lines, &mut self.human, &mut self.bot);
        let time_text = &mut self.time_text;
        let mut num = itoa::Buffer::new();
        // A day's lines share its start: written once, copied after.
        let implied = self.counted_dims;
        each_line(counts, ranked, implied, |l| {
            if implied && l.is_implied() {
                return;
            }
            *lines += 1;
            let (out, kind, time) = match &l {
                Line::Hour(hour, ..) => (&mut *hours, "h ", *hour),
                Line::Referrer(day, ..) => (&mut *referrers, "r ", *day),
                Line::Device(day, ..) => (&mut *devices, "d ", *day),
                Line::Destination(day, ..) => (&mut *destinations, "t ", *day),
                Line::Dim(day, ..) => (&mut *dims, "x ", *day),
                Line::Uniq(day, _) => (&mut *uniques, "u ", *day),
            };
            out.push_str(kind);
            out.push_str(code);
            out.push(' ');
            out.push_str(time_text.of(time));
            out.push(' ');
            match l {
                Line::Hour(_, human, bot) => {
                    *human_sum += human;
                    *bot_sum += bot;
                    out.push_str(num.format(human));
                    out.push(' ');
                    out.push_str(num.format(bot));
                }
                Line::Referrer(_, host, n) => {
                    out.push_str(host);
                    out.push(' ');
                    out.push_str(num.format(n));
                }
                Line::Device(_, device, n) => {
                    out.push_str(device.as_str());
                    out.push(' ');
                    out.push_str(num.format(n));
                }
                Line::Destination(_, destination, n) => {
                    let _ = write!(out, "{destination}");
                    out.push(' ');
                    out.push_str(num.format(n));
                }
                Line::Dim(_, dim, value, n) => {
                    out.push_str(dim.as_str());
                    out.push(':');
                    out.push_str(value);
                    out.push(' ');
                    out.push_str(num.format(n));
                }
                Line::Uniq(_, sketch) => sketch.encode(out),
            }
            out.push('\n');
        });
    }

    /// Moves `other`'s lines after this batch's, kind by kind.
    fn append(&mut self, other: &Writer) {
        for (k, o) in self.kinds.iter_mut().zip(&other.kinds) {
            k.push_str(o);
        }
        self.lines += other.lines;
        self.human += other.human;
        self.bot += other.bot;
        self.keys |= other.keys;
    }

    /// Where the batch ends now: [`Writer::split_off`] moves what is
    /// written after it to a batch of its own.
    fn mark(&self) -> Mark {
        Mark {
            ends: std::array::from_fn(|i| self.kinds[i].len()),
            lines: self.lines,
            human: self.human,
            bot: self.bot,
            keys: self.keys,
        }
    }

    /// The lines written after `m`, moved out (a link's lines that would
    /// take this batch past its size: written in place, since a batch is
    /// full only once in thousands of links).
    fn split_off(&mut self, m: &Mark) -> Writer {
        let mut next = Writer {
            lines: self.lines - m.lines,
            human: self.human - m.human,
            bot: self.bot - m.bot,
            keys: self.keys,
            ..Writer::default()
        };
        for ((k, n), end) in self.kinds.iter_mut().zip(&mut next.kinds).zip(m.ends) {
            n.push_str(&k[end..]);
            k.truncate(end);
        }
        self.lines = m.lines;
        self.human = m.human;
        self.bot = m.bot;
        self.keys = m.keys;
        next
    }

    fn finish(&mut self, id: String) -> Encoded {
        let version = if self.counted_dims {
            BATCH_VERSION_IMPLIED
        } else if self.keys {
            BATCH_VERSION_KEYS
        } else if self.kinds[3].is_empty() {
            BATCH_VERSION
        } else {
            BATCH_VERSION_DESTINATIONS
        };
        let mut body = String::with_capacity(self.kinds.iter().map(String::len).sum());
        for k in &self.kinds {
            body.push_str(k);
        }
        let e = Encoded {
            id,
            version,
            body,
            human: self.human,
            bot: self.bot,
        };
        self.clear();
        e
    }
}

impl Accumulator {
    /// What [`Accumulator::take_batches`] then `encode_body` give, byte for
    /// byte, written straight from the counts into buffers reused from link
    /// to link (no line structs, no owned code per line): the flusher's
    /// work per link on a busy edge.
    pub fn take_encoded(&mut self, ids: &BatchIds, max_lines: usize) -> Vec<Encoded> {
        self.take_encoded_paced(ids, max_lines, &mut || {})
    }

    /// [`Accumulator::take_encoded`] in small steps, calling `pace` between
    /// them (every [`PACE_LINKS`] links): an edge's flusher gives its core
    /// back to the request threads there. No step grows with the links
    /// counted: the code order is made by [`order_paced`] over references
    /// (a few bytes a link, not the counts moved), and the counts are
    /// emptied in place afterwards, the map keeping its capacity: an
    /// accumulator encoded so can count the next interval's links without
    /// allocating them again ([`Accumulator::take_into`]).
    pub fn take_encoded_paced(
        &mut self,
        ids: &BatchIds,
        max_lines: usize,
        pace: &mut dyn FnMut(),
    ) -> Vec<Encoded> {
        let mut out = Vec::new();
        {
            let mut all: Vec<Ordered<'_>> = Vec::with_capacity(self.links.len());
            for (i, (code, counts)) in self.links.iter().enumerate() {
                all.push((0, code.as_str(), counts));
                if i % PACE_LINKS == PACE_LINKS - 1 {
                    pace();
                }
            }
            let mut groups = Vec::new();
            order_paced(all, 0, &mut groups, pace);
            let mut cur = Writer {
                counted_dims: self.dimensions,
                ..Writer::default()
            };
            let mut refs = Vec::new();
            for links in &groups {
                for (i, (_, code, counts)) in links.iter().enumerate() {
                    let before = cur.mark();
                    cur.link(code, counts, &mut refs);
                    if before.lines > 0 && cur.lines > max_lines {
                        // The link's lines start the next batch, in the
                        // buffers (and capacity) of this one.
                        let tail = cur.split_off(&before);
                        out.push(cur.finish(ids.next_id()));
                        cur.append(&tail);
                    }
                    if i % PACE_LINKS == PACE_LINKS - 1 {
                        pace();
                    }
                }
            }
            if cur.lines > 0 {
                out.push(cur.finish(ids.next_id()));
            }
        }
        // Freed in steps too, the map's capacity kept.
        for (i, _) in self.links.drain().enumerate() {
            if i % PACE_LINKS == PACE_LINKS - 1 {
                pace();
            }
        }
        self.clicks = 0;
        out
    }

    /// Bytes of the counts' hash table (its slots, whatever they hold now):
    /// what an emptied map kept for reuse still occupies. Not what the
    /// entries point to (referrer maps, dimension lists: freed at the cut).
    pub fn table_bytes(&self) -> usize {
        let cap = self.links.capacity();
        if cap == 0 {
            return 0;
        }
        // hashbrown: a power of two of slots, at most 7/8 of them used
        // (every slot but one below 8), one control byte per slot plus a
        // group's width.
        let slots = if cap < 8 { cap + 1 } else { cap * 8 / 7 }.next_power_of_two();
        slots * (size_of::<(Key, LinkCounts)>() + 1) + 16
    }

    /// Moves the counts out like [`Accumulator::take`], leaving `spare` in
    /// their place: an accumulator already encoded (empty, with the
    /// capacity of the links it counted), so a busy edge reuses its maps
    /// instead of allocating and freeing megabytes every interval (each
    /// free of which the allocator returns to the system in one long
    /// call). A `spare` that is not empty, or counts otherwise, is not
    /// used.
    pub fn take_into(&mut self, spare: Option<Accumulator>) -> Accumulator {
        match spare {
            Some(s) if s.is_empty() && s.dimensions == self.dimensions => {
                std::mem::replace(self, s)
            }
            _ => self.take(),
        }
    }
}

/// Links written between two calls of the pace of
/// [`Accumulator::take_encoded_paced`] (a few tens of microseconds).
pub const PACE_LINKS: usize = 64;

/// Most keys [`order_paced`] sorts in one step.
const SORT_STEP: usize = 2048;

/// A link to be written: its sort word ([`sort_word`], filled in just
/// before its group is sorted), its key and its counts.
type Ordered<'a> = (u64, &'a str, &'a LinkCounts);

/// The eight bytes of `key` from `at` as a big-endian number, zero-padded:
/// two keys' words compare as their bytes from `at` do, or are equal. Made
/// once per key before a sort, so the sort's comparisons are mostly one
/// integer compare instead of a byte-slice compare (a `memcmp` call each):
/// the code order was a quarter of the flusher's work per link (issue 27).
fn sort_word(key: &str, at: usize) -> u64 {
    let rest = key.as_bytes().get(at..).unwrap_or_default();
    let n = rest.len().min(8);
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(b)
}

/// Appends `links` to `groups` in key (byte) order, in steps with `pace`
/// between them: the order one sort of them all gives, but a group of more
/// than [`SORT_STEP`] keys is first split on the byte after the prefix its
/// keys share (every code of one custom domain starts `domain/`), so no
/// single sort is longer. Keys are distinct: a split always makes smaller
/// groups. `depth`: bytes every key of `links` is known to share.
fn order_paced<'a>(
    mut links: Vec<Ordered<'a>>,
    depth: usize,
    groups: &mut Vec<Vec<Ordered<'a>>>,
    pace: &mut dyn FnMut(),
) {
    if links.len() <= SORT_STEP {
        for l in &mut links {
            l.0 = sort_word(l.1, depth);
        }
        // Equal words: the keys' first eight bytes from `depth` are equal
        // (or differ only by trailing zero bytes), the rest decides. Every
        // key is at least `depth` long; `get` only keeps a flusher from
        // ever panicking on a slice.
        let rest = |k: &'a str| k.as_bytes().get(depth..).unwrap_or_default();
        links.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| rest(a.1).cmp(rest(b.1))));
        pace();
        groups.push(links);
        return;
    }
    let first = links[0].1.as_bytes();
    let mut shared = first.len();
    for (i, (_, k, _)) in links.iter().enumerate().skip(1) {
        shared = first[..shared]
            .iter()
            .zip(k.as_bytes())
            .take_while(|(x, y)| x == y)
            .count();
        if i % PACE_LINKS == 0 {
            pace();
        }
    }
    // Part 0: the key that ends where the shared prefix does (it sorts
    // first); then one part per next byte.
    let mut parts: Vec<Vec<Ordered<'a>>> = (0..=256).map(|_| Vec::new()).collect();
    for (i, link) in links.into_iter().enumerate() {
        let at = link.1.as_bytes().get(shared);
        parts[at.map_or(0, |b| usize::from(*b) + 1)].push(link);
        if i % PACE_LINKS == PACE_LINKS - 1 {
            pace();
        }
    }
    for (i, part) in parts.into_iter().enumerate() {
        if !part.is_empty() {
            // Part 0's key ends at `shared`; the others share its next byte.
            let depth = if i == 0 { shared } else { shared + 1 };
            order_paced(part, depth, groups, pace);
        }
    }
}

/// One line of a link's counts (the code aside), borrowed from them.
enum Line<'a> {
    /// hour, human, bot
    Hour(u64, u64, u64),
    /// day, host, clicks
    Referrer(u64, &'a str, u64),
    Device(u64, Device, u64),
    Destination(u64, Destination, u64),
    /// day, dimension, value, human clicks
    Dim(u64, Dim, &'a str, u64),
    /// day, distinct visitors
    Uniq(u64, &'a Sketch),
}

impl Line<'_> {
    /// Not written in a version 5 body: the `-` referrer and the `bot`
    /// device, which the day's other lines imply.
    fn is_implied(&self) -> bool {
        matches!(
            self,
            Line::Referrer(_, NO_REFERRER, _) | Line::Device(_, Device::Bot, _)
        )
    }
}

/// Every line of a link's counts, each kind in the order the body lists
/// it: hours by time; per day the top referrers by clicks then host (the
/// rest summed as `~other`: every edge, the Lua one too, keeps the same 20
/// for the same counts), the devices, and for a routed day the
/// destinations by label. `ranked`: a buffer reused from call to call.
/// `implied`: the lines of a version 5 batch, whose `-` referrer is not in
/// the ranking (the 20 named are hosts) and comes after the named ones;
/// the caller writing a body leaves out what [`Line::is_implied`].
fn each_line<'a>(
    counts: &'a LinkCounts,
    ranked: &mut Vec<(&'a str, u64)>,
    implied: bool,
    mut f: impl FnMut(Line<'a>),
) {
    for &(hour, (human, bot)) in &counts.hours {
        f(Line::Hour(hour, human, bot));
    }
    for (day, d) in &counts.days {
        let day = *day;
        ranked.clear();
        if d.no_referrer > 0 && !implied {
            ranked.push((NO_REFERRER, d.no_referrer));
        }
        ranked.extend(d.referrers.iter().map(|(h, n)| (h.as_str(), *n)));
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut other = 0;
        for (i, (host, n)) in ranked.iter().enumerate() {
            if i < TOP_REFERRERS && *host != OTHER_REFERRER {
                f(Line::Referrer(day, host, *n));
            } else {
                other += n;
            }
        }
        if other > 0 {
            f(Line::Referrer(day, OTHER_REFERRER, other));
        }
        if implied && d.no_referrer > 0 {
            f(Line::Referrer(day, NO_REFERRER, d.no_referrer));
        }
        for device in Device::ALL {
            let n = d.devices[device.index()];
            if n > 0 {
                f(Line::Device(day, device, n));
            }
        }
        if d.routed {
            let link = (d.to_link > 0).then_some((Destination::Link, d.to_link));
            let mut dests: Vec<(String, Destination, u64)> = link
                .iter()
                .chain(&d.destinations)
                .map(|(dest, n)| (dest.label(), *dest, *n))
                .collect();
            dests.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            for (_, destination, n) in dests {
                f(Line::Destination(day, destination, n));
            }
        }
        d.dims
            .each_line(ranked, |dim, value, n| f(Line::Dim(day, dim, value, n)));
        if let Some(v) = d.visitors.as_ref().filter(|v| !v.is_empty()) {
            f(Line::Uniq(day, v));
        }
    }
}

/// The lines of one link as a batch's line structs.
fn link_lines(code: &str, counts: &LinkCounts, implied: bool) -> Batch {
    let mut b = Batch {
        counted_dims: implied,
        ..Batch::default()
    };
    each_line(counts, &mut Vec::new(), implied, |l| match l {
        Line::Hour(hour, human, bot) => b.hours.push(HourLine {
            code: code.to_owned(),
            hour,
            human,
            bot,
        }),
        Line::Referrer(day, host, n) => b.referrers.push(ReferrerLine {
            code: code.to_owned(),
            day,
            host: host.to_owned(),
            n,
        }),
        Line::Device(day, device, n) => b.devices.push(DeviceLine {
            code: code.to_owned(),
            day,
            device,
            n,
        }),
        Line::Destination(day, destination, n) => b.destinations.push(DestinationLine {
            code: code.to_owned(),
            day,
            destination,
            n,
        }),
        Line::Dim(day, dim, value, n) => b.dims.push(DimLine {
            code: code.to_owned(),
            day,
            dim,
            value: value.to_owned(),
            n,
        }),
        Line::Uniq(day, sketch) => b.uniques.push(UniqLine {
            code: code.to_owned(),
            day,
            sketch: sketch.clone(),
        }),
    });
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";

    fn click<'a>(code: &'a str, at: u64, head: bool, ua: &'a str, r: Option<&'a str>) -> Click<'a> {
        Click {
            head,
            user_agent: Some(ua),
            referer: r,
            ..Click::new(code, at)
        }
    }

    /// A mix of everything a batch holds: fleet codes and per-domain
    /// keys, hours and days, more than the top referrers, bots, and
    /// destinations of links with options.
    fn filled(dimensions: bool) -> Accumulator {
        let mut a = if dimensions {
            Accumulator::with_dimensions()
        } else {
            Accumulator::new()
        };
        let t = 86_400 * 20_000 + 3600 * 5;
        for i in 0..400u64 {
            let code = if i % 7 == 0 {
                format!("s.example/promo{i}")
            } else {
                format!("c{i:05}")
            };
            for j in 0..(1 + i % 30) {
                let referer = format!("https://h{}.example/", (i + j) % 27);
                let destination = (i % 5 == 0).then(|| {
                    if j % 3 == 0 {
                        Destination::Link
                    } else {
                        Destination::Rule {
                            rule: (j % 2) as u8,
                            variant: (j % 4 == 1).then_some(1),
                        }
                    }
                });
                let ua = [CHROME_UA, "curl/8", IPHONE_UA, CHROME_UA][(j % 4) as usize];
                let location = format!(
                    "https://dest.example/?utm_campaign=c{}&utm_source=s",
                    j % 23
                );
                a.add(&Click {
                    head: j % 9 == 0,
                    user_agent: Some(ua),
                    referer: (j % 5 != 0).then_some(referer.as_str()),
                    destination,
                    accept_language: (j % 3 != 0).then_some("zh-CN,zh;q=0.9"),
                    country: [None, Some(*b"CN"), Some(*b"US")][(j % 3) as usize],
                    query: (j % 6 == 1).then_some("qr=1"),
                    location: (i % 2 == 0).then_some(location.as_str()),
                    visitor: (j % 5 != 4).then_some((j % 7).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                    ..Click::new(&code, t + (j % 3) * 3600 + (j % 2) * 86_400)
                });
            }
        }
        a
    }

    const CHROME_UA: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    const IPHONE_UA: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1";

    #[test]
    fn bots_added_whole_are_those_bots_added_one_by_one() {
        let t = 86_400 * 20_000 + 3600 * 23 + 59;
        let ids = || BatchIds::new("e", "n").unwrap();
        for dims in [false, true] {
            let (mut whole, mut one_by_one) = (filled(dims), filled(dims));
            for (code, at, n) in [
                ("c00001", t, 3),
                ("c00001", t + 1, 2),
                ("s.example/promo14", t, 5),
                ("tally1", t + 3600, 4),
                ("tally1", t, 1),
            ] {
                assert!(whole.add_bots(code, at, n), "{code}");
                for _ in 0..n {
                    assert!(one_by_one.add_classified(
                        code,
                        at,
                        Device::Bot,
                        NO_REFERRER,
                        None,
                        None
                    ));
                }
            }
            assert!(!whole.add_bots("no/such/key", t, 1));
            assert!(!whole.add_bots("tally2", t, 0));
            assert_eq!(whole.clicks(), one_by_one.clicks());
            let bodies = |a: &mut Accumulator| -> Vec<String> {
                a.take_batches(&ids(), 1000)
                    .iter()
                    .map(|b| b.encode_body())
                    .collect()
            };
            assert_eq!(bodies(&mut whole), bodies(&mut one_by_one));
        }
    }

    #[test]
    fn paced_encoding_is_in_steps_and_in_the_whole_sorts_order() {
        // Keys of every first byte a code or a domain can start with.
        let alphabet = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let fill = || {
            let mut a = Accumulator::with_dimensions();
            for (i, c) in alphabet.iter().cycle().take(6000).enumerate() {
                // Many keys of one custom domain: a group split past
                // their shared prefix.
                let code = match i % 5 {
                    0 => format!("{}.example/p{i}", char::from(*c)),
                    1 | 2 => format!("s.example/q{i}"),
                    _ => format!("{}{i:05}", char::from(*c)),
                };
                a.add(&Click {
                    user_agent: Some(CHROME_UA),
                    country: Some(*b"DE"),
                    ..Click::new(&code, 86_400 * 20_000)
                });
            }
            a
        };
        let ids = || BatchIds::new("e", "n").unwrap();
        let whole: Vec<String> = fill()
            .take_batches(&ids(), 5000)
            .iter()
            .map(|b| b.encode_body())
            .collect();
        let mut steps = 0;
        let paced: Vec<String> = fill()
            .take_encoded_paced(&ids(), 5000, &mut || steps += 1)
            .into_iter()
            .map(|e| e.body)
            .collect();
        assert_eq!(paced, whole);
        // Bucketing, writing and freeing, each in steps of PACE_LINKS.
        assert!(steps >= 3 * 6000 / PACE_LINKS, "{steps} steps");
    }

    #[test]
    fn the_paced_order_is_byte_order_for_keys_sharing_long_prefixes() {
        // Keys of 1 to 20 bytes over three letters: many share their first
        // eight bytes, are prefixes of each other or differ only past the
        // word; twice SORT_STEP of them, so the top group is split too.
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut keys = std::collections::BTreeSet::new();
        while keys.len() < 2 * SORT_STEP + 7 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1 + (x % 20) as usize;
            let key: String = (0..len)
                .map(|i| char::from(b"ab/"[((x >> (3 + 2 * i)) % 3) as usize]))
                .collect();
            keys.insert(format!("p{key}"));
        }
        let counts = LinkCounts::default();
        let links: Vec<Ordered<'_>> = keys.iter().map(|k| (0, k.as_str(), &counts)).collect();
        let mut groups = Vec::new();
        order_paced(links, 0, &mut groups, &mut || {});
        let got: Vec<&str> = groups.iter().flatten().map(|l| l.1).collect();
        let want: Vec<&str> = keys.iter().map(String::as_str).collect();
        assert!(groups.len() > 1);
        assert_eq!(got, want);
        assert!(sort_word("abc", 0) < sort_word("abcd", 0));
        assert_eq!(sort_word("xabcdefghZ", 1), sort_word("abcdefghY", 0));
        assert_eq!(sort_word("ab", 5), 0);
    }

    #[test]
    fn encoded_batches_are_the_batches_encoded_byte_for_byte() {
        for (max_lines, dims) in [1, 50, 1000, 100_000]
            .into_iter()
            .flat_map(|m| [(m, false), (m, true)])
        {
            let (mut a, mut b) = (filled(dims), filled(dims));
            let total = a.clicks();
            let want: Vec<Encoded> = a
                .take_batches(&BatchIds::new("e", "n").unwrap(), max_lines)
                .into_iter()
                .map(|b| {
                    let (human, bot) = b.totals();
                    Encoded {
                        version: b.version(),
                        body: b.encode_body(),
                        id: b.id,
                        human,
                        bot,
                    }
                })
                .collect();
            let got = b.take_encoded(&BatchIds::new("e", "n").unwrap(), max_lines);
            assert!(b.is_empty() && b.clicks() == 0);
            assert!(want.len() > 1 || max_lines == 100_000, "{max_lines}");
            assert_eq!(got, want, "max_lines {max_lines}");
            let versions: Vec<&str> = got.iter().map(|e| e.version).collect();
            let want_version = if dims {
                BATCH_VERSION_IMPLIED
            } else {
                BATCH_VERSION_KEYS
            };
            assert!(versions.contains(&want_version), "{versions:?}");
            assert_eq!(got.iter().map(|e| e.human + e.bot).sum::<u64>(), total);
            // Every batch decodes strictly (sums, top 20, grammar).
            for e in &got {
                let d = Batch::decode(&e.id, e.version, &e.body);
                assert!(d.is_ok(), "{d:?}");
                assert!(dims || !e.body.contains("\nx "), "{}", e.version);
            }
        }
    }

    #[test]
    fn hours_and_days_come_out_in_time_order_whatever_the_clicks_order() {
        let t = 86_400 * 20_000;
        let mut a = Accumulator::new();
        for at in [
            t + 7200,
            t,
            t + 3600,
            t + 2 * 86_400,
            t - 86_400,
            t + 7201,
            t,
        ] {
            assert!(a.add_classified("abcdef", at, Device::Desktop, "-", None, None));
        }
        let b = a.take_encoded(&BatchIds::new("e", "n").unwrap(), 1000);
        let hours: Vec<&str> = b[0].body.lines().filter(|l| l.starts_with("h ")).collect();
        let want: Vec<String> = [
            (t - 86_400, 1),
            (t, 2),
            (t + 3600, 1),
            (t + 7200, 2),
            (t + 2 * 86_400, 1),
        ]
        .iter()
        .map(|(h, n)| format!("h abcdef {h} {n} 0"))
        .collect();
        assert_eq!(hours, want);
        let days: Vec<&str> = b[0].body.lines().filter(|l| l.starts_with("d ")).collect();
        let want: Vec<String> = [(t - 86_400, 1), (t, 5), (t + 2 * 86_400, 1)]
            .iter()
            .map(|(d, n)| format!("d abcdef {d} desktop {n}"))
            .collect();
        assert_eq!(days, want);
    }

    #[test]
    fn counts_and_batches() {
        let ids = BatchIds::new("edge-a", "n1").unwrap();
        let mut a = Accumulator::new();
        let t = 86_400 * 20_000 + 3600 * 5 + 10;
        assert!(a.add(&click("abcdef", t, false, CHROME, Some("https://x.com/a"))));
        assert!(a.add(&click(
            "abcdef",
            t + 1,
            true,
            CHROME,
            Some("https://x.com/b")
        )));
        assert!(a.add(&click("abcdef", t + 3600, false, "curl/8", None)));
        assert!(!a.add(&click("ab", t, false, CHROME, None)));
        assert_eq!(a.clicks(), 3);
        let batches = a.take_batches(&ids, 1000);
        assert!(a.is_empty() && a.clicks() == 0);
        assert_eq!(batches.len(), 1);
        let b = &batches[0];
        assert_eq!(b.id, "edge-a:n1:0");
        assert_eq!(
            b.encode_body(),
            "h abcdef 1728018000 1 1\nh abcdef 1728021600 0 1\n\
             r abcdef 1728000000 x.com 2\nr abcdef 1728000000 - 1\n\
             d abcdef 1728000000 desktop 1\nd abcdef 1728000000 bot 2\n"
        );
        assert_eq!(Batch::decode(&b.id, "1", &b.encode_body()).as_ref(), Ok(b));
        assert!(a.take_batches(&ids, 1000).is_empty());
    }

    #[test]
    fn top_referrers_and_splitting() {
        let ids = BatchIds::new("e", "n").unwrap();
        let mut a = Accumulator::new();
        let t = 86_400 * 20_000;
        for i in 0..25u64 {
            let r = format!("https://h{i:02}.com/");
            for _ in 0..(30 - i) {
                a.add(&click("abcdef", t, false, CHROME, Some(&r)));
            }
        }
        a.add(&click("ghijkl", t, false, CHROME, None));
        let batches = a.take_batches(&ids, 10);
        assert_eq!(batches.len(), 2, "{batches:?}");
        let refs = &batches[0].referrers;
        assert_eq!(refs.len(), TOP_REFERRERS + 1);
        assert_eq!((refs[0].host.as_str(), refs[0].n), ("h00.com", 30));
        let other = &refs[TOP_REFERRERS];
        assert_eq!(
            (other.host.as_str(), other.n),
            ("~other", 10 + 9 + 8 + 7 + 6)
        );
        for b in &batches {
            assert!(Batch::decode(&b.id, "1", &b.encode_body()).is_ok());
        }
        assert_eq!(batches[1].id, "e:n:1");
        assert!(BatchIds::new("a:b", "n").is_none());
    }

    #[test]
    fn destinations_of_links_with_options() {
        let ids = BatchIds::new("e", "n").unwrap();
        let mut a = Accumulator::new();
        let t = 86_400 * 20_000;
        let r1v2 = Destination::Rule {
            rule: 0,
            variant: Some(1),
        };
        for (dest, n) in [
            (Some(r1v2), 3),
            (Some(Destination::Link), 2),
            (Some(Destination::Expired), 1),
            // A click before the link had options (the same day): `link`.
            (None, 1),
        ] {
            for _ in 0..n {
                a.add(&Click {
                    destination: dest,
                    ..click("abcdef", t, false, CHROME, None)
                });
            }
        }
        // A bot is in the day's clicks, not in a destination's.
        a.add(&Click {
            destination: Some(r1v2),
            ..click("abcdef", t, true, CHROME, None)
        });
        // A plain link has no destination lines, and its batch stays v1.
        a.add(&click("plainx", t, false, CHROME, None));
        let batches = a.take_batches(&ids, 1000);
        let b = &batches[0];
        let body = b.encode_body();
        assert!(
            body.ends_with(
                "t abcdef 1728000000 expired 1\nt abcdef 1728000000 link 3\n\
                 t abcdef 1728000000 r1v2 3\n"
            ),
            "{body}"
        );
        assert!(!body.contains("t plainx"));
        assert_eq!(b.version(), "2");
        assert_eq!(Batch::decode(&b.id, "2", &body).as_ref(), Ok(b));
        // Strict: not in a version 1 batch, sums checked, labels checked.
        assert!(Batch::decode(&b.id, "1", &body).is_err());
        let short = body.replace("link 3", "link 2");
        assert!(matches!(
            Batch::decode(&b.id, "2", &short),
            Err(super::super::BatchError::Inconsistent { .. })
        ));
        let bad = body.replace("r1v2", "r0v2");
        assert!(Batch::decode(&b.id, "2", &bad).is_err());
        a.add(&click("plainx", t, false, CHROME, None));
        assert_eq!(a.take_batches(&ids, 1000)[0].version(), "1");
    }
}
