//! The live view (issue 27 item 3): clicks per minute over the last 60
//! minutes, per link and per tenant, from the edges' batches as they reach
//! Redis — without waiting for MySQL.
//!
//! Every origin tails the click stream itself (`XREAD`, not the consumer
//! group: each needs every batch), starting an hour back, so a restarted
//! origin rebuilds the hour from what the stream still holds and every
//! origin of the fleet answers the same. A batch's clicks are counted in
//! the minute it reached Redis (its stream id's time): an edge flushes at
//! least every 5 s, so a click shows at most that late and at most one
//! minute off. Each entry is read once, in stream order: nothing counts
//! twice. A link's owner (app, merchant, domain) is read from MySQL once,
//! when the link first shows up, for the tenant view; until then its clicks
//! are in its own series only.
//!
//! [`Live`] is the state, free of I/O (times passed in); [`tail`] feeds it.

use super::stream;
use crate::store::{DbError, Store};
use prometheus::{IntCounter, IntGauge, Registry};
use redis::Value;
use serde::Serialize;
use shorturl_common::clicks::STREAM_KEY;
use shorturl_common::redis::{ConnOptions, RedisConn, RedisTopology};
use shorturl_common::time::rfc3339;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Minutes in the view, the current one included.
pub const MINUTES: u64 = 60;

/// Longest link key a line may name (a domain, `/`, a code).
const MAX_KEY_LEN: usize = 253 + 1 + 64;

/// The followed links (a fast hash: the keys come from the edges' batches,
/// which only the fleet writes).
type Links = HashMap<String, Followed, foldhash::fast::RandomState>;

/// Who a link belongs to, for the tenant view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub code: String,
    pub domain: String,
    pub app: String,
    pub kdt_id: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    /// Not read from MySQL yet.
    Pending,
    Owner(Owner),
    /// No such link (deleted for good, or a key no link has).
    Gone,
}

#[derive(Debug)]
struct Followed {
    owner: Known,
    /// `(minute start, human, bot)`, oldest first, minutes with clicks only.
    minutes: VecDeque<(u64, u64, u64)>,
}

/// Clicks in one minute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteClicks {
    pub start: String,
    pub human: u64,
    pub bot: u64,
}

/// Human and bot clicks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LiveTotals {
    pub human: u64,
    pub bot: u64,
}

/// The last [`MINUTES`] minutes, every minute (zeros included), oldest
/// first, the current (partial) minute last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveSeries {
    pub from: String,
    pub to: String,
    pub totals: LiveTotals,
    pub minutes: Vec<MinuteClicks>,
}

/// A link's clicks in the tenant view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveLink {
    pub code: String,
    pub domain: String,
    pub human: u64,
    pub bot: u64,
}

/// The live view's counters (`shorturl_clicks_live_*`).
pub struct LiveMetrics {
    /// Links followed now.
    pub links: IntGauge,
    /// Clicks left out because `clicks.live_max_links` links were followed.
    pub untracked: IntCounter,
    /// Batches read from the stream.
    pub batches: IntCounter,
}

impl LiveMetrics {
    pub fn register(reg: &Registry) -> Result<LiveMetrics, prometheus::Error> {
        let m = LiveMetrics {
            links: IntGauge::new("clicks_live_links", "Links the live view follows now")?,
            untracked: IntCounter::new(
                "clicks_live_untracked_total",
                "Clicks left out of the live view: clicks.live_max_links links were followed",
            )?,
            batches: IntCounter::new(
                "clicks_live_batches_total",
                "Click batches the live view read from the stream",
            )?,
        };
        reg.register(Box::new(m.links.clone()))?;
        reg.register(Box::new(m.untracked.clone()))?;
        reg.register(Box::new(m.batches.clone()))?;
        Ok(m)
    }
}

/// The followed links, and those whose owner is still to be read (in the
/// order they showed up: the tail takes them from here, never by a scan
/// of every link).
#[derive(Default)]
struct State {
    links: Links,
    unresolved: Vec<String>,
}

/// The live view of one origin.
pub struct Live {
    max_links: usize,
    state: Mutex<State>,
    pub metrics: LiveMetrics,
}

fn minute(unix: u64) -> u64 {
    unix - unix % 60
}

/// The first minute start of the view at `now`.
fn first(now: u64) -> u64 {
    minute(now).saturating_sub((MINUTES - 1) * 60)
}

impl Live {
    pub fn new(max_links: usize, metrics: LiveMetrics) -> Live {
        Live {
            max_links,
            state: Mutex::new(State::default()),
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it cannot leave the counts inconsistent
        // beyond one batch: keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the `h` lines of a batch body (protocol 3.4) that reached
    /// Redis at `at` (Unix seconds), if that is within the view at `now`.
    /// Only those lines are read, and not strictly: every
    /// origin reads every batch here, so the full decode is left to the
    /// consumer (which applies a batch once for the fleet). A line that
    /// does not read as `h <key> <hour> <human> <bot>` is skipped.
    pub fn add_body(&self, at: u64, body: &str, now: u64) {
        let hours = body.split('\n').filter_map(|l| {
            let mut f = l.strip_prefix("h ")?.split(' ');
            let (key, _hour, human, bot) = (f.next()?, f.next()?, f.next()?, f.next()?);
            if f.next().is_some() || key.is_empty() || key.len() > MAX_KEY_LEN {
                return None;
            }
            Some((key, human.parse().ok()?, bot.parse().ok()?))
        });
        self.add_hours(at, hours, now);
    }

    fn add_hours<'a>(&self, at: u64, hours: impl Iterator<Item = (&'a str, u64, u64)>, now: u64) {
        self.metrics.batches.inc();
        if at < first(now) {
            return;
        }
        let m = minute(at);
        let mut st = self.lock();
        let State { links, unresolved } = &mut *st;
        for (code, human, bot) in hours {
            if !links.contains_key(code) {
                if links.len() >= self.max_links {
                    self.metrics.untracked.inc_by(human + bot);
                    continue;
                }
                links.insert(
                    code.to_owned(),
                    Followed {
                        owner: Known::Pending,
                        minutes: VecDeque::new(),
                    },
                );
                unresolved.push(code.to_owned());
            }
            let Some(f) = links.get_mut(code) else {
                continue;
            };
            // Entries come in stream order, so `m` is the latest or a new
            // one; a stream whose clock went back is put in place.
            match f.minutes.iter().rposition(|(s, ..)| *s <= m) {
                Some(i) if f.minutes[i].0 == m => {
                    f.minutes[i].1 += human;
                    f.minutes[i].2 += bot;
                }
                Some(i) => f.minutes.insert(i + 1, (m, human, bot)),
                None => f.minutes.push_front((m, human, bot)),
            }
        }
        self.metrics.links.set(links.len() as i64);
    }

    /// Forgets minutes before the view at `now`, and links left without any.
    pub fn prune(&self, now: u64) {
        let from = first(now);
        let mut st = self.lock();
        let links = &mut st.links;
        links.retain(|_, f| {
            while f.minutes.front().is_some_and(|(s, ..)| *s < from) {
                f.minutes.pop_front();
            }
            !f.minutes.is_empty()
        });
        self.metrics.links.set(links.len() as i64);
    }

    /// Takes up to `max` of the followed links whose owner is not read
    /// yet (the oldest first); give them to [`Live::resolve`], or back to
    /// [`Live::unresolved_again`] when they could not be read.
    pub fn take_unresolved(&self, max: usize) -> Vec<String> {
        let mut st = self.lock();
        let n = st.unresolved.len().min(max);
        let taken: Vec<String> = st.unresolved.drain(..n).collect();
        // A link pruned since it showed up needs no owner any more.
        taken
            .into_iter()
            .filter(|k| st.links.get(k).is_some_and(|f| f.owner == Known::Pending))
            .collect()
    }

    /// Puts back links whose owners could not be read (MySQL failed).
    pub fn unresolved_again(&self, keys: Vec<String>) {
        self.lock().unresolved.extend(keys);
    }

    /// Records the owners read for `asked` (a key missing from `found` has
    /// no link).
    pub fn resolve(&self, asked: &[String], mut found: HashMap<String, Owner>) {
        let mut st = self.lock();
        for k in asked {
            if let Some(f) = st.links.get_mut(k) {
                f.owner = found.remove(k).map_or(Known::Gone, Known::Owner);
            }
        }
    }

    fn series(now: u64, per_minute: &HashMap<u64, (u64, u64)>) -> LiveSeries {
        let from = first(now);
        let mut totals = LiveTotals::default();
        let minutes = (0..MINUTES)
            .map(|i| {
                let s = from + i * 60;
                let (human, bot) = per_minute.get(&s).copied().unwrap_or((0, 0));
                totals.human += human;
                totals.bot += bot;
                MinuteClicks {
                    start: rfc3339(s),
                    human,
                    bot,
                }
            })
            .collect();
        LiveSeries {
            from: rfc3339(from),
            to: rfc3339(minute(now) + 60),
            totals,
            minutes,
        }
    }

    /// The link named `key`'s last hour at `now`.
    pub fn link(&self, key: &str, now: u64) -> LiveSeries {
        let from = first(now);
        let mut per = HashMap::new();
        if let Some(f) = self.lock().links.get(key) {
            for &(s, h, b) in f.minutes.iter().filter(|(s, ..)| *s >= from) {
                per.insert(s, (h, b));
            }
        }
        Live::series(now, &per)
    }

    /// The last hour at `now` of the links whose owner `keep` accepts, and
    /// the `limit` of them with the most human clicks (then bot clicks,
    /// then by key).
    pub fn tenant(
        &self,
        keep: impl Fn(&Owner) -> bool,
        now: u64,
        limit: usize,
    ) -> (LiveSeries, Vec<LiveLink>) {
        let from = first(now);
        let mut per: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut top: Vec<(LiveLink, &str)> = Vec::new();
        let st = self.lock();
        for (key, f) in st.links.iter() {
            let Known::Owner(o) = &f.owner else {
                continue;
            };
            if !keep(o) {
                continue;
            }
            let (mut human, mut bot) = (0, 0);
            for &(s, h, b) in f.minutes.iter().filter(|(s, ..)| *s >= from) {
                let e = per.entry(s).or_default();
                e.0 += h;
                e.1 += b;
                human += h;
                bot += b;
            }
            if human + bot > 0 {
                top.push((
                    LiveLink {
                        code: o.code.clone(),
                        domain: o.domain.clone(),
                        human,
                        bot,
                    },
                    key.as_str(),
                ));
            }
        }
        top.sort_by(|(a, ka), (b, kb)| {
            b.human
                .cmp(&a.human)
                .then(b.bot.cmp(&a.bot))
                .then(ka.cmp(kb))
        });
        let top = top.into_iter().take(limit).map(|(l, _)| l).collect();
        (Live::series(now, &per), top)
    }
}

/// Reads the stream into `live` for ever (an hour back at the start),
/// reading owners from `store`; reconnects after a Redis failure where it
/// left off.
pub async fn tail(live: Arc<Live>, redis: RedisTopology, store: Store) {
    let now_ms = shorturl_common::time::now_unix() * 1000;
    let mut cursor = format!("{}-0", now_ms.saturating_sub((MINUTES + 1) * 60_000));
    let mut backoff = Duration::from_millis(100);
    loop {
        let started = std::time::Instant::now();
        if let Err(e) = session(&live, &redis, &store, &mut cursor).await {
            tracing::warn!(error = %e, "click live view: redis failed; reconnecting");
        }
        if started.elapsed() > Duration::from_secs(10) {
            backoff = Duration::from_millis(100);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Why a tail session ended.
#[derive(Debug, thiserror::Error)]
enum TailError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Reply(#[from] stream::ReplyError),
}

/// The Unix second of a stream id (`<ms>-<seq>`).
fn id_secs(id: &str) -> Option<u64> {
    stream::id_ms(id).map(|ms| ms / 1000)
}

async fn session(
    live: &Live,
    redis: &RedisTopology,
    store: &Store,
    cursor: &mut String,
) -> Result<(), TailError> {
    let block = Duration::from_secs(1);
    let mut conn = RedisConn::new(
        redis,
        ConnOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: block + Duration::from_secs(5),
        },
    )?;
    let mut last_prune = 0;
    loop {
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(256)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(STREAM_KEY)
            .arg(cursor.as_str())
            .query_async(&mut conn)
            .await?;
        let now = shorturl_common::time::now_unix();
        for e in stream::read_group(&reply)? {
            if let (Some(at), Some(body)) = (id_secs(&e.id), e.field("b")) {
                live.add_body(at, body, now);
            }
            *cursor = e.id;
        }
        if now != last_prune {
            live.prune(now);
            last_prune = now;
        }
        resolve(live, store).await;
    }
}

/// Reads the owners of links that showed up (at most 500 a round); MySQL
/// failing leaves them for the next round.
async fn resolve(live: &Live, store: &Store) {
    let keys = live.take_unresolved(500);
    if keys.is_empty() {
        return;
    }
    match owners(store, &keys).await {
        Ok(found) => live.resolve(&keys, found),
        Err(e) => {
            tracing::warn!(error = %e, "click live view: reading link owners failed");
            live.unresolved_again(keys);
        }
    }
}

/// The owners of the links named `keys` (bare codes or `<domain>/<code>`).
async fn owners(store: &Store, keys: &[String]) -> Result<HashMap<String, Owner>, DbError> {
    let mut out = HashMap::new();
    for (key, code, domain, app, kdt_id) in store.link_owners(keys).await? {
        out.insert(
            key,
            Owner {
                code,
                domain,
                app,
                kdt_id,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shorturl_common::clicks::{Batch, HourLine};

    const NOW: u64 = 1_800_000_030; // 30 s into a minute

    fn metrics() -> LiveMetrics {
        LiveMetrics::register(&Registry::new()).unwrap()
    }

    fn batch(lines: &[(&str, u64, u64)]) -> Batch {
        Batch {
            id: "e:n:1".into(),
            hours: lines
                .iter()
                .map(|&(code, human, bot)| HourLine {
                    code: code.into(),
                    hour: 1_799_996_400,
                    human,
                    bot,
                })
                .collect(),
            ..Batch::default()
        }
    }

    /// `b` as an edge appends it, reaching Redis at `at`.
    fn add(l: &Live, at: u64, b: &Batch, now: u64) {
        l.add_body(at, &b.encode_body(), now);
    }

    fn owner(code: &str, app: &str, kdt_id: u64) -> Owner {
        Owner {
            code: code.into(),
            domain: "s.example".into(),
            app: app.into(),
            kdt_id: Some(kdt_id),
        }
    }

    #[test]
    fn minutes_of_arrival_within_the_hour() {
        let l = Live::new(10, metrics());
        add(&l, NOW, &batch(&[("abcd", 2, 1)]), NOW);
        add(&l, NOW - 5, &batch(&[("abcd", 3, 0)]), NOW);
        add(&l, NOW - 61, &batch(&[("abcd", 4, 0)]), NOW);
        add(&l, NOW - 59 * 60, &batch(&[("abcd", 5, 0)]), NOW);
        add(&l, NOW - 60 * 60, &batch(&[("abcd", 100, 0)]), NOW); // before the view
        let s = l.link("abcd", NOW);
        assert_eq!(s.minutes.len(), 60);
        assert_eq!(s.minutes[59].human, 5);
        assert_eq!(s.minutes[59].bot, 1);
        assert_eq!(
            s.minutes[58].human, 4,
            "61 s back, 30 s into a minute: the one before"
        );
        assert_eq!(s.minutes[57].human, 0);
        assert_eq!(s.minutes[0].human, 5);
        assert_eq!(s.totals, LiveTotals { human: 14, bot: 1 });
        assert_eq!(s.minutes[59].start, rfc3339(NOW - 30));
        assert_eq!(s.to, rfc3339(NOW + 30));
        // A minute later the oldest minute has left the view.
        let s = l.link("abcd", NOW + 60);
        assert_eq!(s.totals.human, 9);
        l.prune(NOW + 3600);
        assert_eq!(l.metrics.links.get(), 0);
        assert_eq!(l.link("abcd", NOW).totals, LiveTotals::default());
    }

    #[test]
    fn tenants_see_resolved_links_only_and_the_bound_holds() {
        let l = Live::new(3, metrics());
        add(
            &l,
            NOW,
            &batch(&[("aaaa", 5, 0), ("bbbb", 7, 2), ("cccc", 1, 0)]),
            NOW,
        );
        add(&l, NOW, &batch(&[("dddd", 9, 0)]), NOW);
        assert_eq!(
            l.metrics.untracked.get(),
            9,
            "a fourth link is not followed"
        );
        let (s, top) = l.tenant(|_| true, NOW, 10);
        assert_eq!(s.totals, LiveTotals::default(), "no owner known yet");
        assert!(top.is_empty());
        let mut asked = l.take_unresolved(10);
        asked.sort();
        assert_eq!(asked, ["aaaa", "bbbb", "cccc"]);
        l.resolve(
            &asked,
            [
                ("aaaa".to_owned(), owner("aaaa", "shop", 55)),
                ("bbbb".to_owned(), owner("bbbb", "shop", 77)),
            ]
            .into(),
        );
        assert!(
            l.take_unresolved(10).is_empty(),
            "cccc has no link: not asked again"
        );
        let (s, top) = l.tenant(|o| o.app == "shop", NOW, 1);
        assert_eq!(s.totals, LiveTotals { human: 12, bot: 2 });
        assert_eq!(top.len(), 1);
        assert_eq!((top[0].code.as_str(), top[0].human), ("bbbb", 7));
        let (s, _) = l.tenant(|o| o.kdt_id == Some(55), NOW, 10);
        assert_eq!(s.totals.human, 5);
    }

    #[test]
    fn bodies_are_read_for_their_hour_lines_only() {
        let l = Live::new(10, metrics());
        let body = "h abcd 1799996400 2 1\nh s.example/sale 1799996400 4 0\n\
                    r abcd 1799971200 - 3\nd abcd 1799971200 bot 1\n\
                    h bad 1 2\nh x 1799996400 y 1\nh  1799996400 1 1\nh too 1 2 3 4\n";
        l.add_body(NOW, body, NOW);
        assert_eq!(l.link("abcd", NOW).totals, LiveTotals { human: 2, bot: 1 });
        assert_eq!(l.link("s.example/sale", NOW).totals.human, 4);
        assert_eq!(l.metrics.links.get(), 2, "malformed lines are skipped");
        // The body an edge writes reads as the batch it encodes.
        let mut b = batch(&[("abcd", 1, 1)]);
        b.id = "e:n:2".into();
        l.add_body(NOW, &b.encode_body(), NOW);
        assert_eq!(l.link("abcd", NOW).totals, LiveTotals { human: 3, bot: 2 });
    }

    #[test]
    fn stream_ids() {
        assert_eq!(id_secs("1800000030123-4"), Some(1_800_000_030));
        assert_eq!(id_secs("x-1"), None);
        assert_eq!(id_secs("17"), None);
    }
}
