//! Click counting (issue 12, protocol section 3.4): every redirect the edge
//! answers is a click, counted per link-hour (human, bot) and per link-day
//! (referrer host, device class), and appended as batches to the stream
//! `su:1:clicks` that the origins apply exactly once.
//!
//! * [`record`]: the redirect path classifies the click and pushes a
//!   fixed-size event into its thread's lock-free queue (no allocation or
//!   I/O); every [`LOCAL_STEP`]th click the thread moves its queue into the
//!   counts itself (one lock, [`Clicks::record_parts`]).
//! * [`Clicks`]: what the flusher does with them: drain what the queues
//!   still hold into an `Accumulator` ([`Clicks::drain`]), cut batches every flush interval
//!   into the bounded [`pending`] buffer ([`Clicks::cut`]), send the oldest
//!   first ([`Clicks::send_next`]).
//! * [`flush`]: the background service running those in short stints
//!   ([`pace`]), and the last flush when the process ends (graceful
//!   shutdown and upgrade).

pub mod config;
pub mod flush;
pub mod metrics;
pub mod pace;
pub mod pending;
pub mod record;
pub mod salts;
pub mod tally;

pub use config::ClicksConfig;
pub use metrics::ClicksMetrics;

use crate::cache::{Entry, LocalCache};
use pending::{Pending, Unsent};
use record::Registry;
use shorturl_common::clicks::{Accumulator, BatchIds, Device, STREAM_KEY, STREAM_MAXLEN};
use shorturl_common::status::ClicksDim;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Lines per batch: far under the decoder's 100,000 lines and, at ~320
/// bytes for the longest line, under its 8 MiB. Some hundreds of KiB: a
/// batch is copied and written to Redis in one piece, work the flusher
/// cannot cut into steps ([`pace`]), so its size bounds how long the
/// flusher holds a core shared with requests (20,000 lines, ~1.6 MiB with
/// dimensions, held it for milliseconds).
pub const MAX_BATCH_LINES: usize = 5_000;
/// Clicks a request thread lets its queue hold before it counts them
/// itself, in the same step: they are still in its cache, where counting
/// them costs a fraction of what the flusher pays for them later, cold,
/// and the flusher is left to encode and send (issue 27's "aggregate on
/// the request thread").
pub const LOCAL_STEP: usize = 64;
/// How long a request thread pauses per click while the edge is behind.
pub const BACKPRESSURE_PAUSE: Duration = Duration::from_micros(200);
/// Clicks the flusher moves per hold of the lock (and per step of its
/// [`pace`]).
pub const DRAIN_CHUNK: usize = 256;
/// Links whose tallies the flusher counts per hold of the lock (and per
/// step of its [`pace`]).
pub const HARVEST_CHUNK: usize = 64;
/// Tables freed by an idle interval worth asking the allocator to purge.
pub const GIVE_BACK_BYTES: usize = 1 << 20;
/// Budget of one `XADD` (connection included).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a batch was not appended (it stays buffered).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

struct State {
    acc: Accumulator,
    /// Counts cut (at `max_links`) and not encoded yet: a drain only moves
    /// them here; [`Clicks::cut`] encodes them outside the lock.
    cut: Vec<Accumulator>,
    /// The last counts [`Clicks::cut`] encoded, emptied with their map's
    /// capacity: the next counts' (`Accumulator::take_into`).
    spare: Option<Accumulator>,
    pending: Pending,
    /// Bots' clicks taken from tallies and not sent yet (an upper bound:
    /// lowered by every batch sent or dropped): a few lines per link for
    /// any number of clicks, so the pauses leave them out
    /// ([`Clicks::update_gauge`]); at 200,000 tallied redirects a second a
    /// harvest is a million of them, and counted as clicks it paused every
    /// request until sent (p99 9x edge-hot's, session 27).
    harvested: u64,
}

impl State {
    /// Every click counted and not sent, but those [`Clicks::cut`] is
    /// encoding (see [`Clicks::unsent`]).
    fn buffered(&self) -> u64 {
        self.acc.clicks()
            + self.cut.iter().map(Accumulator::clicks).sum::<u64>()
            + self.pending.clicks()
    }
}

/// The process's click counting: queues, counts, unsent batches, figures.
pub struct Clicks {
    enabled: bool,
    /// Each human click's dimensions are read (protocol 3.7).
    dimensions: bool,
    /// Each human click's city is read too (protocol 3.9).
    city: bool,
    /// The days' salts of unique visitors (fetched by the flusher).
    pub salts: salts::Salts,
    registry: Registry,
    pub metrics: ClicksMetrics,
    ids: BatchIds,
    state: Mutex<State>,
    sent: AtomicU64,
    /// Unix seconds; 0: never.
    last_flush: AtomicU64,
    /// `clicks.max_links`: the counts are cut when they reach it.
    max_links: usize,
    /// A drain cut batches early: send them without waiting for the flush.
    cut_early: AtomicBool,
    /// Clicks [`Clicks::cut`] is encoding (outside the lock): still buffered.
    encoding: AtomicU64,
    /// `clicks.backpressure`.
    backpressure: bool,
    /// The last attempt to append a batch succeeded (Redis is taking them).
    sending: AtomicBool,
    /// How far behind the flusher is while Redis takes batches
    /// ([`pause_level`]; 0: not behind): the request threads yield to it
    /// ([`Clicks::yield_to_flusher`]).
    behind: AtomicU8,
    /// The cache whose entries hold [`tally`]s (set when the fast path
    /// counts on them; weak: the cache's sink refers back to us).
    tallies: std::sync::OnceLock<std::sync::Weak<LocalCache>>,
    /// Clicks in tallies, not harvested yet (counted, not sent). Written
    /// at every tallied click: on a line of its own, away from `behind`,
    /// which every click reads.
    tallied: OwnLine<AtomicU64>,
    /// `clicks.tally_bots`.
    tally_bots: bool,
}

/// A value on a cache line of its own.
#[repr(align(64))]
#[derive(Debug, Default)]
struct OwnLine<T>(T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Which tallies a cut takes first ([`Clicks::cut_paced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harvest {
    /// None (a cut early: the counts reached `max_links`; a walk of the
    /// cache there would be paid at every early cut).
    None,
    /// Those of shards tallied on since the last harvest (every flush).
    Tallied,
    /// Every entry's (the last flush, tests).
    All,
}

/// Where the tally of an entry leaving the cache goes.
struct Spill(std::sync::Weak<Clicks>);

impl tally::TallySink for Spill {
    fn spill(&self, code: &str, domain: &str, hour: u64, clicks: u64) {
        if let Some(c) = self.0.upgrade() {
            c.absorb_tallies(std::iter::once((code, domain, hour, clicks)), true);
        }
    }
}

/// How often request threads pause for the flusher with `unsent` of
/// `max` clicks (or bytes) unsent: 0 (never) under half; then a pause every
/// 64th click (level 7), 16th (5), 4th (3), and at every click (1) past 7/8.
pub fn pause_level(unsent: u64, max: u64) -> u8 {
    let eighths = unsent.saturating_mul(8) / max.max(1);
    match eighths {
        0..=3 => 0,
        4 => 7,
        5 => 5,
        6 => 3,
        _ => 1,
    }
}

/// A nonce new at every start: 16 hex digits from the process id, the
/// clock and the standard library's random hasher keys.
pub fn boot_nonce() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(shorturl_common::time::now_unix_ms());
    format!("{:016x}", h.finish())
}

/// `edge.clicks.edge_name` cannot be part of a batch id.
#[derive(Debug, thiserror::Error)]
#[error("edge.clicks.edge_name {0:?} is not a valid id part")]
pub struct InvalidEdgeName(pub String);

impl Clicks {
    /// Counting as `cfg` says, batch ids `<edge_name>:<nonce>:<seq>`.
    pub fn new(
        cfg: &ClicksConfig,
        nonce: &str,
        metrics: ClicksMetrics,
    ) -> Result<Clicks, InvalidEdgeName> {
        let ids = BatchIds::new(&cfg.edge_name, nonce)
            .ok_or_else(|| InvalidEdgeName(cfg.edge_name.clone()))?;
        Ok(Clicks {
            enabled: cfg.enabled,
            dimensions: cfg.dimensions,
            city: cfg.city,
            salts: salts::Salts::default(),
            registry: Registry::new(cfg.queue_per_thread),
            metrics,
            ids,
            state: Mutex::new(State {
                acc: if cfg.dimensions {
                    Accumulator::with_dimensions()
                } else {
                    Accumulator::new()
                },
                cut: Vec::new(),
                spare: None,
                pending: Pending::new(cfg.max_buffered_clicks, cfg.max_buffered_bytes),
                harvested: 0,
            }),
            sent: AtomicU64::new(0),
            last_flush: AtomicU64::new(0),
            max_links: cfg.max_links.max(1),
            cut_early: AtomicBool::new(false),
            encoding: AtomicU64::new(0),
            backpressure: cfg.backpressure,
            sending: AtomicBool::new(false),
            behind: AtomicU8::new(0),
            tallies: std::sync::OnceLock::new(),
            tallied: OwnLine(AtomicU64::new(0)),
            tally_bots: cfg.tally_bots,
        })
    }

    /// Lets the fast path count bots' clicks on `cache`'s entries
    /// ([`tally`]): harvested at every flush interval, spilled here when
    /// an entry leaves the cache. Once, before serving, with counting on.
    pub fn count_on(self: &Arc<Self>, cache: &Arc<LocalCache>) {
        if self.enabled && self.tally_bots && self.tallies.set(Arc::downgrade(cache)).is_ok() {
            cache.set_tally_sink(Arc::new(Spill(Arc::downgrade(self))));
        }
    }

    /// The fast path's click on `entry`, found in `cache`: a bot's click
    /// without a referrer on a plain link is a [`tally`] on the entry;
    /// every other click is queued as [`Clicks::record_parts`] queues it.
    #[inline]
    pub fn record_hit(
        &self,
        parts: record::ClickParts<'_>,
        (cache, entry): (&LocalCache, &Entry),
        at_unix: u64,
    ) {
        if !self.enabled {
            return;
        }
        let class = record::classify_parts(parts.head, parts.user_agent);
        if class.device == Device::Bot
            && parts.referer.is_none()
            && parts.destination.is_none()
            && self.tallies.get().is_some()
            && cache.tally(entry, tally::hour_of(at_unix))
        {
            self.tallied.fetch_add(1, Ordering::Relaxed);
            self.queued(Ok(0));
            return;
        }
        self.record_class(class, parts, (entry.code(), entry.domain()), at_unix);
    }

    /// Whether counting is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether a click's dimensions are read: the caller then fills
    /// [`record::ClickParts`]' dimension inputs (the client asked lazily).
    #[inline]
    pub fn dimensions(&self) -> bool {
        self.enabled && self.dimensions
    }

    /// The redirect path: counts one redirect answered for `link` (code,
    /// domain) at `at_unix` (nothing but a flag test when counting is off).
    #[inline]
    pub fn record_parts(&self, parts: record::ClickParts<'_>, link: (&str, &str), at_unix: u64) {
        if self.enabled {
            let class = record::classify_parts(parts.head, parts.user_agent);
            self.record_class(class, parts, link, at_unix);
        }
    }

    /// [`Clicks::record_parts`] with the user agent classified.
    #[inline]
    fn record_class(
        &self,
        class: record::UaClass,
        parts: record::ClickParts<'_>,
        link: (&str, &str),
        at_unix: u64,
    ) {
        let dims = self.dimensions.then_some(record::DimsCtx {
            salts: &self.salts,
            unsalted: &self.metrics.unsalted,
            city: self.city,
        });
        self.queued(record::record_class(
            &self.registry,
            class,
            parts,
            link,
            at_unix,
            dims,
        ));
    }

    /// After a click was queued (or handed back by a full queue): what the
    /// request owes the counting, usually nothing but one atomic load.
    #[inline]
    fn queued(&self, pushed: Result<usize, Box<record::Event>>) {
        match pushed {
            Ok(n) if n >= LOCAL_STEP => self.count_local(),
            Ok(_) => {}
            Err(e) => self.queue_full(&e),
        }
        let behind = self.behind.load(Ordering::Relaxed);
        if behind > 0 {
            self.yield_to_flusher(behind);
        }
    }

    /// The edge holds half of `max_buffered_clicks` unsent while Redis takes
    /// batches: the flusher (in short stints, on cores the requests
    /// saturate) cannot keep up. The request thread pauses
    /// [`BACKPRESSURE_PAUSE`] at every `2^(behind - 1)`th click of its own
    /// ([`pause_level`]: the nearer the bound, the more often), giving the
    /// flusher the core: answers slow down instead of the oldest counts
    /// being dropped at the bound, which is kept for a Redis that does not
    /// answer (issue 27).
    #[cold]
    #[inline(never)]
    fn yield_to_flusher(&self, behind: u8) {
        thread_local! {
            static CLICKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        let n = CLICKS.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n
        });
        if n & ((1u64 << (behind - 1)) - 1) == 0 {
            self.metrics.backpressure.inc();
            std::thread::sleep(BACKPRESSURE_PAUSE);
        }
    }

    /// Counts the calling thread's queued clicks ([`LOCAL_STEP`]).
    #[inline(never)]
    fn count_local(&self) {
        self.absorb(|add| record::drain_local(&self.registry, LOCAL_STEP, add));
    }

    /// The calling thread's queue is full (only a `queue_per_thread` under
    /// [`LOCAL_STEP`] lets it fill): the request counts its click and its
    /// queue itself. Never a lost click (issue 27).
    #[cold]
    #[inline(never)]
    fn queue_full(&self, e: &record::Event) {
        self.metrics.queue_full.inc();
        self.absorb(|add| {
            add(e);
            1 + record::drain_local(&self.registry, LOCAL_STEP, add)
        });
    }

    fn state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        }
    }

    /// Every click counted and not sent yet, but those in tallies.
    fn unsent_counts(&self, st: &State) -> u64 {
        st.buffered() + self.encoding.load(Ordering::Relaxed)
    }

    /// Every click counted and not sent yet.
    fn unsent(&self, st: &State) -> u64 {
        self.unsent_counts(st) + self.tallied.load(Ordering::Relaxed)
    }

    fn update_gauge(&self, st: &State) {
        // Tallies are not behind: they are harvested at the next flush
        // whatever their number (a flush interval's worth of clicks).
        let behind = if self.backpressure && self.sending.load(Ordering::Relaxed) {
            st.pending
                .pause_level(self.unsent_counts(st).saturating_sub(st.harvested))
        } else {
            0
        };
        let n = self.unsent(st);
        let bytes = st.pending.bytes();
        if behind != self.behind.load(Ordering::Relaxed) {
            self.behind.store(behind, Ordering::Relaxed);
        }
        self.metrics
            .buffered
            .set(i64::try_from(n).unwrap_or(i64::MAX));
        self.metrics
            .links_held
            .set(i64::try_from(st.acc.links()).unwrap_or(i64::MAX));
        self.metrics
            .buffered_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        let tables = st.acc.table_bytes()
            + st.spare.as_ref().map_or(0, Accumulator::table_bytes)
            + st.cut.iter().map(Accumulator::table_bytes).sum::<usize>();
        self.metrics
            .table_bytes
            .set(i64::try_from(tables).unwrap_or(i64::MAX));
    }

    /// Moves every queued click into the accumulator. Returns how many.
    /// Counts that reach `clicks.max_links` distinct links are cut into
    /// batches at once (see [`Clicks::take_early_cut`]): their memory is
    /// bounded by configuration, not by how many links a flush interval
    /// happens to see.
    ///
    /// The lock is taken per [`DRAIN_CHUNK`] clicks, not for the whole
    /// backlog: a request whose queue is full waits for a chunk at most.
    pub fn drain(&self) -> u64 {
        self.drain_paced(&mut || {})
    }

    /// [`Clicks::drain`], calling `pace` after every chunk (the flusher
    /// gives its core back there, [`pace`]).
    pub fn drain_paced(&self, pace: &mut dyn FnMut()) -> u64 {
        let mut n = 0;
        for q in self.registry.queues() {
            // At most what is there now: a busy thread cannot keep us here.
            let mut left = q.len();
            while left > 0 {
                let step = left.min(DRAIN_CHUNK);
                let got = self.absorb(|add| record::pop_up_to(&q, step, add));
                n += got;
                pace();
                if got < step as u64 {
                    break;
                }
                left -= step;
            }
        }
        n
    }

    /// Counts, under the state's lock, the clicks `source` hands to the
    /// function it is given; returns what `source` returns (how many).
    fn absorb(&self, source: impl FnOnce(&mut dyn FnMut(&record::Event)) -> u64) -> u64 {
        let mut st = self.state();
        let (mut human, mut bot) = (0, 0);
        let mut key = String::new();
        let mut add = |e: &record::Event| {
            if st.acc.add_classified(
                e.key(&mut key),
                e.at_unix,
                e.device,
                e.host.as_str(),
                e.destination,
                e.dims.as_ref(),
            ) {
                if e.device == Device::Bot {
                    bot += 1;
                } else {
                    human += 1;
                }
            }
            self.cut_if_full(&mut st);
        };
        let n = source(&mut add);
        self.metrics.human.inc_by(human);
        self.metrics.bot.inc_by(bot);
        self.update_gauge(&st);
        n
    }

    /// Counts that reach `clicks.max_links` links are cut (encoded by the
    /// next [`Clicks::cut`], which the flusher runs at once).
    fn cut_if_full(&self, st: &mut State) {
        if st.acc.links() >= self.max_links {
            let spare = st.spare.take();
            let full = st.acc.take_into(spare);
            st.cut.push(full);
            self.metrics.early_cuts.inc();
            self.cut_early.store(true, Ordering::Relaxed);
        }
    }

    /// Counts tallies taken whole: `(code, domain, hour, clicks)`;
    /// `spilled`: from an entry leaving the cache (else a harvest).
    fn absorb_tallies<'a>(
        &self,
        taken: impl Iterator<Item = (&'a str, &'a str, u64, u64)>,
        spilled: bool,
    ) {
        let mut st = self.state();
        let (mut bots, mut total) = (0, 0);
        let mut key = String::new();
        for (code, domain, hour, n) in taken {
            total += n;
            let key = record::link_key(code, domain, &mut key);
            if st.acc.add_bots(key, hour.saturating_mul(3600), n) {
                bots += n;
            }
            self.cut_if_full(&mut st);
        }
        self.tallied.fetch_sub(total, Ordering::Relaxed);
        st.harvested += bots;
        self.metrics.bot.inc_by(bots);
        if spilled {
            self.metrics.tallies_spilled.inc_by(total);
        } else {
            self.metrics.tallies_harvested.inc_by(total);
        }
        self.update_gauge(&st);
    }

    /// Takes the cache's tallies into the counts (`all`: every shard's,
    /// not only those tallied on since the last harvest), the counts'
    /// lock taken per [`HARVEST_CHUNK`] links, `pace` called after each.
    fn harvest(&self, all: bool, pace: &mut dyn FnMut()) {
        let Some(cache) = self.tallies.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        cache.harvest_tallies(all, &mut |taken| {
            for chunk in taken.chunks(HARVEST_CHUNK) {
                self.absorb_tallies(
                    chunk
                        .iter()
                        .map(|(e, hour, n)| (e.code(), e.domain(), *hour, *n)),
                    false,
                );
                pace();
            }
        });
    }

    /// True once after a drain cut batches early: the flusher sends them
    /// then, not at the next flush interval.
    pub fn take_early_cut(&self) -> bool {
        self.cut_early.swap(false, Ordering::Relaxed)
    }

    /// Cuts what the accumulator holds (and what drains cut early) into
    /// batches at the end of the unsent buffer (dropping its oldest past
    /// the bound). The batches are encoded outside the lock — the work
    /// grows with the links counted, and a request whose queue is full
    /// must not wait for it.
    pub fn cut(&self) {
        self.cut_paced(Harvest::All, &mut || {})
    }

    /// [`Clicks::cut`], encoding in steps with `pace` between them; the
    /// tallies taken as `harvest` says.
    pub fn cut_paced(&self, harvest: Harvest, pace: &mut dyn FnMut()) {
        match harvest {
            Harvest::None => {}
            Harvest::Tallied => self.harvest(false, pace),
            Harvest::All => self.harvest(true, pace),
        }
        let mut idle = None;
        let (counts, clicks) = {
            let mut st = self.state();
            let spare = st.spare.take();
            let acc = st.acc.take_into(spare);
            if !acc.is_empty() {
                st.cut.push(acc);
            } else if st.cut.is_empty() {
                // Nothing counted for a whole interval: an idle edge gives
                // the tables back (freed below, outside the lock); a busy
                // one grows them again in its first interval.
                idle = Some((acc, st.acc.take()));
            }
            let counts = std::mem::take(&mut st.cut);
            let clicks: u64 = counts.iter().map(Accumulator::clicks).sum();
            self.encoding.fetch_add(clicks, Ordering::Relaxed);
            (counts, clicks)
        };
        if let Some((a, b)) = idle {
            let bytes = a.table_bytes() + b.table_bytes();
            drop((a, b));
            // Worth a purge (a walk of the allocator's free pages) only
            // after a burst, not for the few slots of a quiet edge's links.
            if bytes >= GIVE_BACK_BYTES {
                crate::alloc::give_back_freed();
            }
        }
        let mut unsent = Vec::new();
        let mut spare = None;
        for mut acc in counts {
            for b in acc.take_encoded_paced(&self.ids, MAX_BATCH_LINES, pace) {
                unsent.push(Unsent {
                    version: b.version,
                    body: b.body.into(),
                    id: b.id,
                    clicks: b.human + b.bot,
                });
            }
            spare = Some(acc);
        }
        let mut st = self.state();
        self.encoding.fetch_sub(clicks, Ordering::Relaxed);
        if st.spare.is_none() {
            st.spare = spare;
        }
        let answering = self.sending.load(Ordering::Relaxed);
        for u in unsent {
            let dropped = st.pending.push(u, answering);
            if dropped > 0 {
                st.harvested = st.harvested.saturating_sub(dropped);
                self.metrics.dropped_buffer_full.inc_by(dropped);
                tracing::warn!(
                    dropped,
                    clicks = st.pending.clicks(),
                    bytes = st.pending.bytes(),
                    "click buffer full: oldest unsent batches dropped"
                );
            }
        }
        self.update_gauge(&st);
    }

    /// Appends the oldest unsent batch to the stream. `Ok(false)`: nothing
    /// was waiting (and the flush time is recorded).
    pub async fn send_next<C>(&self, conn: &mut C) -> Result<bool, SendError>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let Some(b) = self.state().pending.front().cloned() else {
            self.last_flush
                .store(shorturl_common::time::now_unix(), Ordering::Relaxed);
            return Ok(false);
        };
        let mut pipe = redis::pipe();
        pipe.cmd("XADD")
            .arg(STREAM_KEY)
            .arg("MAXLEN")
            .arg("~")
            .arg(STREAM_MAXLEN)
            .arg("*")
            .arg("id")
            .arg(&b.id)
            .arg("v")
            .arg(b.version)
            .arg("b")
            .arg(&b.body[..])
            .cmd("XLEN")
            .arg(STREAM_KEY);
        let res = match tokio::time::timeout(SEND_TIMEOUT, pipe.query_async::<(String, u64)>(conn))
            .await
        {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(SendError::Redis(e)),
            Err(_) => Err(SendError::Timeout(SEND_TIMEOUT)),
        };
        match res {
            Ok((_, len)) => {
                let mut st = self.state();
                if st.pending.pop_sent(&b.id).is_some() {
                    st.harvested = st.harvested.saturating_sub(b.clicks);
                    self.sent.fetch_add(b.clicks, Ordering::Relaxed);
                    self.sending.store(true, Ordering::Relaxed);
                    self.metrics.batches_sent.inc();
                    if len >= STREAM_MAXLEN {
                        self.metrics.dropped_stream_full.inc_by(b.clicks);
                    }
                }
                self.update_gauge(&st);
                Ok(true)
            }
            Err(e) => {
                self.metrics.batches_retried.inc();
                // Redis is not taking batches: no request waits for it
                // (the buffer's bound drops the oldest instead).
                self.sending.store(false, Ordering::Relaxed);
                let st = self.state();
                self.update_gauge(&st);
                Err(e)
            }
        }
    }

    /// Nothing counted is left unsent.
    pub fn is_idle(&self) -> bool {
        self.unsent(&self.state()) == 0
    }

    /// The `clicks` dimension of the status (protocol section 6).
    pub fn status(&self) -> ClicksDim {
        let st = self.state();
        let last = self.last_flush.load(Ordering::Relaxed);
        ClicksDim {
            enabled: self.enabled,
            counted: self.metrics.human.get()
                + self.metrics.bot.get()
                + self.tallied.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            buffered: self.unsent(&st),
            dropped: self.metrics.dropped(),
            last_flush_unix: (last > 0).then_some(last),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::record::ClickParts;
    use super::*;

    /// A counter with these settings, its metrics unregistered.
    fn clicks_with(file: config::ClicksFile) -> Clicks {
        let cfg = config::from_file(file).unwrap_or_else(|e| panic!("{e}"));
        let metrics = ClicksMetrics::unregistered().unwrap_or_else(|e| panic!("{e}"));
        Clicks::new(&cfg, "n0nce", metrics).unwrap_or_else(|e| panic!("{e}"))
    }

    fn parts() -> ClickParts<'static> {
        ClickParts {
            head: false,
            user_agent: Some(b"Mozilla/5.0 (Windows NT 10.0) Chrome/126.0"),
            referer: None,
            destination: None,
            ..ClickParts::default()
        }
    }

    /// A client in Germany without an address (no unique visitor).
    struct German;

    impl super::record::Client for German {
        fn country(&self) -> Option<[u8; 2]> {
            Some(*b"DE")
        }
        fn address(&self) -> Option<std::net::IpAddr> {
            None
        }
    }

    #[test]
    fn a_human_clicks_dimensions_are_counted_and_a_bots_are_not() {
        let now = 86_400 * 20_000 + 7200;
        let day = 86_400 * 20_000;
        let with_dims = |on: bool| {
            let c = clicks_with(config::ClicksFile {
                dimensions: on,
                ..Default::default()
            });
            let human = ClickParts {
                accept_language: Some(b"de-DE,de;q=0.9"),
                client: Some(&German),
                query: Some(b"x=1&qr=1"),
                location: Some("https://shop.example/p?utm_source=mail&utm_campaign=x%20y"),
                ..parts()
            };
            c.record_parts(human, ("abcdef", "s.example"), now);
            let bot = ClickParts {
                user_agent: Some(b"curl/8"),
                ..human
            };
            c.record_parts(bot, ("abcdef", "s.example"), now);
            assert_eq!(c.drain(), 2);
            c.cut();
            let st = c.state();
            let b = st
                .pending
                .front()
                .map(|u| (u.version, String::from_utf8_lossy(&u.body).into_owned()));
            b.unwrap_or_else(|| panic!("no batch"))
        };
        let x = |l: &str| format!("x abcdef {day} {l} 1\n");
        let (v, body) = with_dims(true);
        assert_eq!(v, "5");
        let want: String = [
            "country:DE",
            "browser:chrome",
            "os:windows",
            "lang:de",
            "source:qr",
            "utm_source:mail",
            "utm_campaign:x%20y",
        ]
        .iter()
        .map(|l| x(l))
        .collect();
        assert!(body.ends_with(&want), "{body}");
        let (v, body) = with_dims(false);
        assert_eq!(v, "1");
        assert!(!body.contains("\nx "), "{body}");
    }

    /// Bots' clicks tallied on cache entries: harvested by a cut, spilled
    /// when an entry leaves the cache, in the same batches as queued
    /// clicks would be, none lost or counted twice.
    #[test]
    fn tallied_clicks_are_harvested_or_spilled_once() {
        use crate::cache::{Answer, Key};
        use shorturl_common::record::Record;
        let c = Arc::new(clicks_with(config::ClicksFile::default()));
        let cache = Arc::new(LocalCache::new(1 << 20));
        c.count_on(&cache);
        // A tally is read back at the time of its take: clicks of now.
        let now = shorturl_common::time::now_unix() / 3600 * 3600 + 5;
        let put = |code: &str, domain: &str| {
            let rec = Record {
                version: 1,
                expires_at: u64::MAX,
                domain: domain.into(),
                url: "https://d.example/".into(),
                options: None,
            };
            cache.put(
                Key { domain, code },
                Answer::Found(Arc::new(rec)),
                std::time::Duration::from_secs(600),
            );
        };
        put("tlly01", "s.example");
        put("sale", "shop.example");
        let bot = ClickParts {
            user_agent: Some(b"curl/8"),
            ..parts()
        };
        let hit = |code: &str, domain: &str, p: ClickParts<'_>, at: u64| {
            let key = Key { domain, code };
            let e = cache.get(key, std::time::Instant::now());
            let e = e.unwrap_or_else(|| panic!("{code} not cached"));
            c.record_hit(p, (&cache, &e), at);
        };
        for _ in 0..5 {
            hit("tlly01", "s.example", bot, now);
        }
        hit(
            "sale",
            "shop.example",
            ClickParts {
                head: true,
                ..parts()
            },
            now,
        );
        // Another hour while the tally holds this one, a referrer, a
        // human: queued.
        hit("tlly01", "s.example", bot, now + 3600);
        let referred = ClickParts {
            referer: Some(b"https://news.example/"),
            ..bot
        };
        hit("tlly01", "s.example", referred, now);
        hit("tlly01", "s.example", parts(), now);
        assert_eq!(c.tallied.load(Ordering::Relaxed), 6);
        // (Queued clicks are counted when drained.)
        let d = c.status();
        assert_eq!((d.counted, d.buffered), (6, 6));
        assert_eq!(c.drain(), 3);
        assert_eq!(c.status().counted, 9);
        c.cut();
        assert_eq!(c.tallied.load(Ordering::Relaxed), 0);
        assert_eq!(c.metrics.bot.get(), 8);
        assert_eq!(c.metrics.tallies_harvested.get(), 6);
        let body = |c: &Clicks| {
            let st = c.state();
            let b: Vec<String> = st
                .pending
                .iter()
                .map(|u| String::from_utf8_lossy(&u.body).into_owned())
                .collect();
            b.concat()
        };
        let hour = now - 5;
        let all = body(&c);
        assert!(all.contains(&format!("h tlly01 {hour} 1 6\n")), "{all}");
        assert!(
            all.contains(&format!("h tlly01 {} 0 1\n", hour + 3600)),
            "{all}"
        );
        assert!(
            all.contains(&format!("h shop.example/sale {hour} 0 1\n")),
            "{all}"
        );
        assert_eq!(c.status().buffered, 9);

        // Tallied, then the entry leaves the cache: what it held is
        // spilled at once, and a reader still holding it queues its click.
        let c2 = Arc::new(clicks_with(config::ClicksFile::default()));
        let cache2 = Arc::new(LocalCache::new(1 << 20));
        c2.count_on(&cache2);
        let rec = Record {
            version: 1,
            expires_at: u64::MAX,
            domain: "s.example".into(),
            url: "https://d.example/".into(),
            options: None,
        };
        let key = Key {
            domain: "s.example",
            code: "gone01",
        };
        cache2.put(
            key,
            Answer::Found(Arc::new(rec)),
            std::time::Duration::from_secs(600),
        );
        {
            let e = cache2.get(key, std::time::Instant::now());
            let e = e.unwrap_or_else(|| panic!("not cached"));
            c2.record_hit(bot, (&cache2, &e), now);
            c2.record_hit(bot, (&cache2, &e), now);
            assert_eq!(c2.tallied.load(Ordering::Relaxed), 2);
            assert!(cache2.remove(key));
            assert_eq!(c2.tallied.load(Ordering::Relaxed), 0);
            assert_eq!(c2.metrics.tallies_spilled.get(), 2);
            c2.record_hit(bot, (&cache2, &e), now);
            assert_eq!(c2.tallied.load(Ordering::Relaxed), 0);
        }
        assert_eq!(c2.drain(), 1);
        c2.cut();
        assert_eq!(c2.metrics.bot.get(), 3);
        assert!(
            body(&c2).contains(&format!("h gone01 {hour} 0 3\n")),
            "{}",
            body(&c2)
        );
    }

    #[test]
    fn the_counts_are_cut_when_they_reach_max_links_and_nothing_is_lost() {
        let c = clicks_with(config::ClicksFile {
            max_links: 100,
            ..Default::default()
        });
        let now = shorturl_common::time::now_unix();
        // 250 distinct links, the first one clicked twice.
        for i in 0..250 {
            c.record_parts(parts(), (&format!("lnk{i:04}"), "s.example"), now);
        }
        c.record_parts(parts(), ("lnk0000", "s.example"), now);
        // The requests counted three steps of their own, the drain the rest.
        assert_eq!(c.drain(), 251 - 3 * LOCAL_STEP as u64);
        // Cut at 100 and at 200 links; 50 left in the counts, and the
        // first link again (its first click went out with the first cut).
        assert_eq!(c.metrics.early_cuts.get(), 2);
        assert_eq!(c.metrics.links_held.get(), 51);
        assert!(c.take_early_cut());
        assert!(!c.take_early_cut(), "reported once");
        c.cut();
        assert_eq!(c.metrics.links_held.get(), 0);
        // Every click is in some batch, exactly once.
        let st = c.state();
        assert_eq!(st.pending.clicks(), 251);
        assert_eq!(c.metrics.human.get(), 251);
    }

    #[test]
    fn unsent_batches_are_bounded_in_bytes_and_the_gauges_show_the_memory() {
        let max = config::MIN_MAX_BUFFERED_BYTES;
        let c = clicks_with(config::ClicksFile {
            max_buffered_bytes: max,
            max_links: 1_000,
            ..Default::default()
        });
        let now = shorturl_common::time::now_unix();
        // Redis down (nothing sent): links of their own, each click a few
        // lines, cut every 1,000 links, until well past 4 MiB of batches.
        let mut n = 0u64;
        while c.metrics.dropped_buffer_full.get() == 0 {
            let link = format!("by{n:06}");
            c.record_parts(parts(), (&link, "s.example"), now);
            n += 1;
            if n.is_multiple_of(1_000) {
                c.drain();
                c.cut();
            }
            assert!(n < 1_000_000, "4 MiB of batches never reached");
        }
        // The loop ends at a cut: every click is in a batch.
        let st = c.state();
        let (clicks, bytes) = (st.pending.clicks(), st.pending.bytes());
        drop(st);
        assert!(bytes <= max && bytes > max / 2, "{bytes} bytes held");
        // Nothing lost uncounted: held plus dropped is every click.
        assert_eq!(clicks + c.metrics.dropped(), n);
        assert_eq!(c.metrics.buffered.get(), clicks as i64);
        assert_eq!(c.metrics.buffered_bytes.get(), bytes as i64);
        // The counts' tables: the current one and the one kept for reuse,
        // each sized for max_links (1,024 or more slots of ~120 bytes).
        let tables = c.metrics.table_bytes.get();
        assert!((200_000..4_000_000).contains(&tables), "{tables}");
    }

    #[test]
    fn an_idle_interval_gives_the_counts_tables_back() {
        let c = clicks_with(config::ClicksFile::default());
        let now = shorturl_common::time::now_unix();
        let busy = |c: &Clicks| {
            for i in 0..300 {
                c.record_parts(parts(), (&format!("idl{i:04}"), "s.example"), now);
            }
            c.drain();
            c.cut();
        };
        busy(&c);
        // Busy: the next counts' table and the one kept for reuse.
        let tables = c.metrics.table_bytes.get();
        assert!(tables > 2 * 300 * 100, "{tables}");
        // A whole interval without a click: both given back.
        c.cut();
        assert_eq!(c.metrics.table_bytes.get(), 0);
        assert_eq!(c.state().pending.clicks(), 300);
        // Busy again: counted as before.
        busy(&c);
        assert!(c.metrics.table_bytes.get() > 0);
        assert_eq!(c.state().pending.clicks(), 600);
    }

    #[test]
    fn a_full_queue_slows_its_request_and_loses_no_click() {
        let c = clicks_with(config::ClicksFile {
            queue_per_thread: 4,
            ..Default::default()
        });
        let now = shorturl_common::time::now_unix();
        // No flusher: every fifth click finds the queue full and drains it.
        for i in 0..23 {
            c.record_parts(parts(), (&format!("lnk{:04}", i % 7), "s.example"), now);
        }
        assert_eq!(c.metrics.queue_full.get(), 4);
        assert_eq!(c.metrics.human.get(), 20, "counted by the requests' drains");
        assert_eq!(c.drain(), 3);
        c.cut();
        assert_eq!(c.state().pending.clicks(), 23);
        assert_eq!(c.metrics.dropped(), 0);
    }

    #[test]
    fn a_request_thread_counts_its_own_clicks_every_local_step() {
        let c = clicks_with(config::ClicksFile {
            queue_per_thread: 1000,
            ..Default::default()
        });
        let now = shorturl_common::time::now_unix();
        for _ in 0..1001 {
            c.record_parts(parts(), ("lnk0001", "s.example"), now);
        }
        // No flusher: the requests counted 15 steps of LOCAL_STEP; the
        // queue never filled and holds the rest.
        assert_eq!(c.metrics.queue_full.get(), 0);
        assert_eq!(c.metrics.human.get(), 15 * LOCAL_STEP as u64);
        assert_eq!(c.drain(), 1001 - 15 * LOCAL_STEP as u64);
        assert_eq!(c.metrics.human.get(), 1001);
    }

    #[test]
    fn pauses_grow_more_frequent_toward_the_bound() {
        let levels: Vec<u8> = [0, 4, 5, 6, 7, 8, 20]
            .iter()
            .map(|e| pause_level(e * 125, 1000))
            .collect();
        assert_eq!(levels, [0, 7, 5, 3, 1, 1, 1]);
        assert_eq!(pause_level(499, 1000), 0);
        assert_eq!(pause_level(5, 0), 1);
    }

    #[test]
    fn harvested_tallies_do_not_pause_requests() {
        let c = clicks_with(config::ClicksFile {
            max_buffered_clicks: 10,
            ..Default::default()
        });
        let now = shorturl_common::time::now_unix();
        c.sending.store(true, Ordering::Relaxed);
        // A harvest of a thousand bots' clicks: a line for any number.
        c.tallied.fetch_add(1000, Ordering::Relaxed);
        c.absorb_tallies(
            [("lnk0001", "s.example", now / 3600, 1000)].into_iter(),
            false,
        );
        assert_eq!(
            c.behind.load(Ordering::Relaxed),
            0,
            "counted, not paused for"
        );
        c.cut();
        assert_eq!(
            c.behind.load(Ordering::Relaxed),
            0,
            "encoded, not paused for"
        );
        assert_eq!(c.metrics.dropped(), 0, "Redis takes batches: none dropped");
        // Queued clicks still are: 7 of 10 unsent.
        for _ in 0..7 {
            c.record_parts(parts(), ("lnk0002", "s.example"), now);
        }
        c.drain();
        assert_eq!(c.behind.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn requests_yield_while_half_the_buffer_is_unsent_and_redis_takes_batches() {
        let c = clicks_with(config::ClicksFile {
            max_buffered_clicks: 10,
            ..Default::default()
        });
        let now = shorturl_common::time::now_unix();
        for _ in 0..7 {
            c.record_parts(parts(), ("lnk0001", "s.example"), now);
        }
        c.drain();
        // Redis has not taken a batch yet (it may be down): no pause.
        assert_eq!(c.behind.load(Ordering::Relaxed), 0);
        c.sending.store(true, Ordering::Relaxed);
        c.cut();
        assert_eq!(c.behind.load(Ordering::Relaxed), 5, "7 of 10 unsent");
        for _ in 0..32 {
            c.record_parts(parts(), ("lnk0001", "s.example"), now);
        }
        assert_eq!(c.metrics.backpressure.get(), 2, "one click in 16");
        // Sent (or Redis gone): the requests go on at full speed.
        c.sending.store(false, Ordering::Relaxed);
        c.cut();
        assert_eq!(c.behind.load(Ordering::Relaxed), 0);
        c.record_parts(parts(), ("lnk0001", "s.example"), now);
        assert_eq!(c.metrics.backpressure.get(), 2);
        assert_eq!(c.metrics.dropped(), 0);
        // Turned off: never.
        let c = clicks_with(config::ClicksFile {
            max_buffered_clicks: 10,
            backpressure: false,
            ..Default::default()
        });
        c.sending.store(true, Ordering::Relaxed);
        for _ in 0..20 {
            c.record_parts(parts(), ("lnk0001", "s.example"), now);
        }
        c.drain();
        assert_eq!(c.behind.load(Ordering::Relaxed), 0);
    }
}
