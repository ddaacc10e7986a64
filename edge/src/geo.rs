//! The visitor's country for the link rules (protocol 3.1.1): a header a
//! trusted proxy or CDN sets, else an MMDB country database; and, from a
//! city database, the city of a click (protocol 3.9, `clicks.city`). The database
//! is read whole into memory (a few MB) and swapped atomically when its
//! file changes ([`GeoReloader`], a background service), so a lookup never
//! waits and a bad new file keeps the last good one (logged, counted).

use crate::config::GeoConfig;
use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use maxminddb::Reader;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use serde::Deserialize;
use shorturl_common::clicks::dims::city_value;
use shorturl_common::status::GeoDim;
use shorturl_common::time::rfc3339;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// Why a database could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    #[error("geo database {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("geo database {path}: {source}")]
    Format {
        path: PathBuf,
        #[source]
        source: maxminddb::MaxMindDbError,
    },
}

/// One loaded database and what identifies its file.
struct Db {
    reader: Reader<Vec<u8>>,
    /// The file's modification time and length when read.
    stamp: (Option<SystemTime>, u64),
    /// The country of each data record seen, by its offset: a country
    /// database stores one record per country and every network points at
    /// one of them, so after the first lookups a request pays the tree
    /// walk and one atomic load instead of decoding the record (issue 25,
    /// item 8). Direct-mapped, one word a slot (`memo_word`), so readers
    /// and writers never lock and a collision only costs a decode.
    memo: Box<[AtomicU64]>,
    /// Distinguishes loads, so a per-thread answer of an older file is
    /// never taken for this one's ([`Geo::lookup`]).
    generation: u64,
}

/// The generation of the next load.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// A lookup's answer: the load's generation, the address, the country.
type Answered = (u64, IpAddr, Option<[u8; 2]>);

/// A city lookup's answer: the load's generation, the address, the value.
type CityAnswered = (u64, IpAddr, Option<Arc<str>>);

/// Records whose city a thread remembers before it forgets them all.
const CITY_MEMO_RECORDS: usize = 4096;

/// A thread's city values by record offset, for one load (its generation).
type CityMemo = (u64, std::collections::HashMap<usize, Option<Arc<str>>>);

thread_local! {
    /// The last city lookup of this thread (as [`LAST`]).
    static LAST_CITY: std::cell::RefCell<Option<CityAnswered>> = const { std::cell::RefCell::new(None) };
    /// The city value of each record this thread decoded, by offset, for
    /// one load (its generation): a city database has a record per city,
    /// too many for [`Db::memo`]'s words, and the visitors of a link come
    /// from few.
    static CITY_MEMO: std::cell::RefCell<CityMemo> =
        std::cell::RefCell::new((0, std::collections::HashMap::new()));
    /// The last lookup of this thread. The requests of a connection come
    /// from one visitor, and behind a proxy from few, so a repeat skips
    /// the tree walk.
    static LAST: std::cell::Cell<Option<Answered>> = const { std::cell::Cell::new(None) };
}

/// Slots of [`Db::memo`]: more than the countries of the world.
const MEMO_SLOTS: usize = 1024;

/// A memo slot's word: the record's offset + 1 (0 marks an empty slot) in
/// the high 48 bits, the country's two letters (0, 0 for none) in the low 16.
fn memo_word(offset: usize, country: Option<[u8; 2]>) -> Option<u64> {
    let key = u64::try_from(offset).ok()?.checked_add(1)?;
    if key >> 48 != 0 {
        return None;
    }
    let [a, b] = country.unwrap_or([0, 0]);
    Some(key << 16 | u64::from(a) << 8 | u64::from(b))
}

impl Db {
    /// The country of the record at `offset`, decoded once per record.
    fn country_at(
        &self,
        offset: usize,
        decode: impl FnOnce() -> Option<[u8; 2]>,
    ) -> Option<[u8; 2]> {
        let slot = &self.memo[offset % MEMO_SLOTS];
        let word = slot.load(Ordering::Relaxed);
        if word != 0 && Some(word >> 16) == memo_word(offset, None).map(|w| w >> 16) {
            let [.., a, b] = word.to_be_bytes();
            return (a != 0).then_some([a, b]);
        }
        let country = decode();
        if let Some(w) = memo_word(offset, country) {
            slot.store(w, Ordering::Relaxed);
        }
        country
    }
}

/// What a country database record may hold: ip-location-db's
/// `country_code` or GeoLite2's `country.iso_code`.
#[derive(Deserialize)]
struct CountryRecord<'a> {
    #[serde(borrow, default)]
    country_code: Option<&'a str>,
    #[serde(borrow, default)]
    country: Option<IsoCode<'a>>,
}

#[derive(Deserialize)]
struct IsoCode<'a> {
    #[serde(borrow, default)]
    iso_code: Option<&'a str>,
}

/// The country sources of one edge.
pub struct Geo {
    header: Option<String>,
    path: Option<PathBuf>,
    db: ArcSwapOption<Db>,
    /// Successful loads (the first included) and refused files.
    pub loads: AtomicU64,
    pub load_failures: AtomicU64,
}

fn stamp(path: &Path) -> (Option<SystemTime>, u64) {
    std::fs::metadata(path).map_or((None, 0), |m| (m.modified().ok(), m.len()))
}

fn two_letters(s: &[u8]) -> Option<[u8; 2]> {
    match s {
        [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
            Some([a.to_ascii_uppercase(), b.to_ascii_uppercase()])
        }
        _ => None,
    }
}

impl Geo {
    /// The sources of `cfg`; the database, when configured, must load.
    pub fn new(cfg: &GeoConfig) -> Result<Geo, GeoError> {
        let geo = Geo {
            header: cfg.country_header.clone(),
            path: cfg.mmdb_path.clone(),
            db: ArcSwapOption::empty(),
            loads: AtomicU64::new(0),
            load_failures: AtomicU64::new(0),
        };
        if let Some(p) = &geo.path {
            geo.db.store(Some(Arc::new(load(p)?)));
            geo.loads.fetch_add(1, Ordering::Relaxed);
        }
        Ok(geo)
    }

    /// The header a trusted proxy sets (lower case), if configured.
    pub fn header(&self) -> Option<&str> {
        self.header.as_deref()
    }

    /// The country of a request: the header's value when the peer is a
    /// trusted proxy (`trusted_value`), else the database's for `client`.
    pub fn country(&self, trusted_value: Option<&[u8]>, client: Option<IpAddr>) -> Option<[u8; 2]> {
        if let Some(c) = trusted_value.and_then(two_letters) {
            return Some(c);
        }
        self.lookup(client?)
    }

    /// The database's country for `ip`.
    pub fn lookup(&self, ip: IpAddr) -> Option<[u8; 2]> {
        let db = self.db.load();
        let db = db.as_ref()?;
        if let Some((g, last, answer)) = LAST.get() {
            if g == db.generation && last == ip {
                return answer;
            }
        }
        let answer = db.reader.lookup(ip).ok().and_then(|found| {
            db.country_at(found.offset()?, || {
                let rec: CountryRecord<'_> = found.decode().ok()??;
                let code = rec.country_code.or(rec.country.and_then(|c| c.iso_code))?;
                two_letters(code.as_bytes())
            })
        });
        LAST.set(Some((db.generation, ip, answer)));
        answer
    }

    /// The `city` value of a click from `ip` (protocol 3.9): the
    /// database's city and country ([`city_value`]); the trusted country
    /// header has no city, so it does not apply.
    pub fn city(&self, ip: Option<IpAddr>) -> Option<Arc<str>> {
        let ip = ip?;
        let db = self.db.load();
        let db = db.as_ref()?;
        let last = LAST_CITY.with_borrow(|last| match last {
            Some((g, a, v)) if *g == db.generation && *a == ip => Some(v.clone()),
            _ => None,
        });
        if let Some(v) = last {
            return v;
        }
        let value = db.reader.lookup(ip).ok().and_then(|found| {
            let offset = found.offset()?;
            CITY_MEMO.with_borrow_mut(|(generation, memo)| {
                if *generation != db.generation || memo.len() >= CITY_MEMO_RECORDS {
                    *generation = db.generation;
                    memo.clear();
                }
                memo.entry(offset)
                    .or_insert_with(|| city_of(&found))
                    .clone()
            })
        });
        LAST_CITY.set(Some((db.generation, ip, value.clone())));
        value
    }

    /// Loads the file again if it changed since it was read; a file that
    /// does not load keeps the last good database.
    pub fn reload_if_changed(&self) -> Result<bool, GeoError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let now = stamp(path);
        if self.db.load().as_ref().is_some_and(|d| d.stamp == now) {
            return Ok(false);
        }
        match load(path) {
            Ok(db) => {
                self.db.store(Some(Arc::new(db)));
                self.loads.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.load_failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The loaded database, for the status (`None`: not configured).
    pub fn status(&self) -> Option<GeoDim> {
        let path = self.path.as_ref()?;
        let db = self.db.load();
        let meta = db.as_ref().map(|d| d.reader.metadata());
        let build_epoch = meta.map_or(0, |m| m.build_epoch);
        Some(GeoDim {
            path: path.display().to_string(),
            database_type: meta.map(|m| m.database_type.clone()).unwrap_or_default(),
            build_epoch,
            build_date: rfc3339(build_epoch).chars().take(10).collect(),
            loads: self.loads.load(Ordering::Relaxed),
            load_failures: self.load_failures.load(Ordering::Relaxed),
        })
    }
}

/// A record's `city` value: the name of ip-location-db's `city` or
/// GeoLite2's `city.names.en`, the country of `country_code` or
/// `country.iso_code`.
fn city_of<S: AsRef<[u8]>>(found: &maxminddb::LookupResult<'_, S>) -> Option<Arc<str>> {
    let text = |p: &[maxminddb::PathElement<'_>]| found.decode_path::<&str>(p).ok().flatten();
    let name = text(&maxminddb::path!["city"])
        .or_else(|| text(&maxminddb::path!["city", "names", "en"]))?;
    let country = text(&maxminddb::path!["country_code"])
        .or_else(|| text(&maxminddb::path!["country", "iso_code"]))?;
    city_value(country, name)
}

fn load(path: &Path) -> Result<Db, GeoError> {
    let before = stamp(path);
    let bytes = std::fs::read(path).map_err(|source| GeoError::Read {
        path: path.to_owned(),
        source,
    })?;
    let reader = Reader::from_source(bytes).map_err(|source| GeoError::Format {
        path: path.to_owned(),
        source,
    })?;
    Ok(Db {
        reader,
        stamp: before,
        memo: (0..MEMO_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
    })
}

/// Checks the database file every `interval` and swaps in a changed one.
pub struct GeoReloader {
    pub geo: Arc<Geo>,
    pub interval: std::time::Duration,
}

#[async_trait]
impl BackgroundService for GeoReloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if self.geo.path.is_none() {
            return;
        }
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let geo = Arc::clone(&self.geo);
            match tokio::task::spawn_blocking(move || geo.reload_if_changed()).await {
                Ok(Ok(true)) => tracing::info!("geo database reloaded"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "geo database not reloaded; keeping the last good one")
                }
                Err(e) => tracing::warn!(error = %e, "geo reload task failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_two_letters() {
        assert_eq!(two_letters(b"cn"), Some(*b"CN"));
        assert_eq!(two_letters(b"USA"), None);
        assert_eq!(two_letters(b"1A"), None);
        let geo = Geo::new(&GeoConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(geo.country(Some(b"de"), None), Some(*b"DE"));
        assert_eq!(
            geo.country(Some(b"xx1"), Some(IpAddr::from([8, 8, 8, 8]))),
            None
        );
        assert!(geo.status().is_none());
    }

    #[test]
    fn a_record_is_decoded_once_then_read_from_the_memo() {
        let db = load(&testkit::country_mmdb()).unwrap_or_else(|e| panic!("{e}"));
        let found = db
            .reader
            .lookup(IpAddr::from([8, 8, 8, 8]))
            .unwrap_or_else(|e| panic!("{e}"));
        let offset = found
            .offset()
            .unwrap_or_else(|| panic!("8.8.8.8 has a record"));
        let decodes = std::cell::Cell::new(0);
        let decode = || {
            decodes.set(decodes.get() + 1);
            Some(*b"US")
        };
        assert_eq!(db.country_at(offset, decode), Some(*b"US"));
        assert_eq!(db.country_at(offset, decode), Some(*b"US"));
        assert_eq!(decodes.get(), 1);
        // Another record in the same slot replaces it; none is remembered too.
        let other = offset + MEMO_SLOTS;
        assert_eq!(db.country_at(other, || None), None);
        assert_eq!(db.country_at(other, || Some(*b"ZZ")), None, "remembered");
        assert_eq!(db.country_at(offset, decode), Some(*b"US"));
        assert_eq!(decodes.get(), 2);
        assert_eq!(
            memo_word(usize::MAX, None),
            None,
            "no room: never remembered"
        );
        // Through the whole lookup: the database's answer, twice alike.
        let geo = Geo::new(&GeoConfig {
            mmdb_path: Some(testkit::country_mmdb()),
            ..GeoConfig::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let us = geo.lookup(IpAddr::from([8, 8, 8, 8]));
        assert_eq!(us, Some(*b"US"));
        assert_eq!(geo.lookup(IpAddr::from([8, 8, 4, 4])), us);
    }

    #[test]
    fn a_city_database_answers_each_network_its_value() {
        let dir = testkit::TempDir::new("geo-city");
        let path = dir.path().join("city.mmdb");
        std::fs::write(&path, testkit::mmdb::city_test_db()).unwrap_or_else(|e| panic!("{e}"));
        let geo = Geo::new(&GeoConfig {
            mmdb_path: Some(path),
            ..GeoConfig::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..2 {
            for (ip, want) in testkit::mmdb::CITY_TEST_NETWORKS {
                let ip: IpAddr = ip.parse().unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(geo.city(Some(ip)).as_deref(), want, "{ip}");
            }
        }
        // The country of the same records, for the country dimension.
        assert_eq!(geo.lookup(IpAddr::from([81, 2, 69, 5])), Some(*b"GB"));
        assert_eq!(geo.lookup(IpAddr::from([2, 125, 160, 1])), Some(*b"BR"));
        assert_eq!(geo.lookup(IpAddr::from([67, 43, 156, 7])), Some(*b"US"));
        assert_eq!(geo.city(Some(IpAddr::from([10, 0, 0, 1]))), None);
        assert_eq!(geo.city(None), None);
        // No database: no city.
        let none = Geo::new(&GeoConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(none.city(Some(IpAddr::from([81, 2, 69, 5]))), None);
    }

    #[test]
    fn the_last_answer_is_never_taken_from_another_load() {
        // The thread's last answer is one file's: a new load (another
        // generation) asks its own database, even for the same address.
        let a = load(&testkit::country_mmdb()).unwrap_or_else(|e| panic!("{e}"));
        let b = load(&testkit::country_mmdb()).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(a.generation, b.generation);
        let ip = IpAddr::from([8, 8, 8, 8]);
        LAST.set(Some((a.generation, ip, Some(*b"ZZ"))));
        let geo = Geo::new(&GeoConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        geo.db.store(Some(Arc::new(b)));
        assert_eq!(geo.lookup(ip), Some(*b"US"), "not the other load's answer");
        // Its own generation's last answer is reused (seen by planting one).
        let g = geo.db.load().as_ref().map_or(0, |d| d.generation);
        LAST.set(Some((g, ip, Some(*b"ZZ"))));
        assert_eq!(geo.lookup(ip), Some(*b"ZZ"));
        LAST.set(None);
    }
}
