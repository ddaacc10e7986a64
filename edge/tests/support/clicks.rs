//! Click-test helpers: the stream `su:1:clicks` read back and summed.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use super::{record_line, redis_set, TIMEOUT};
use shorturl_common::clicks::{Batch, STREAM_KEY};
use std::collections::{BTreeMap, BTreeSet};
use testkit::{wait_for, Redis};

pub const DOMAIN: &str = "s.shop55.com";

/// What the stream holds, summed over its decoded batches.
#[derive(Debug, Default)]
pub struct Sums {
    pub human: u64,
    pub bot: u64,
    pub devices: BTreeMap<String, u64>,
    /// (code, host) → clicks.
    pub referrers: BTreeMap<(String, String), u64>,
    /// code → (human, bot).
    pub codes: BTreeMap<String, (u64, u64)>,
    pub entries: usize,
    pub ids: BTreeSet<String>,
    /// Entries whose batch id was already seen (a retry whose first
    /// `XADD` landed): the origin applies them once, so they are not
    /// summed; their bodies must equal the first copy's.
    pub duplicates: usize,
}

impl Sums {
    pub fn total(&self) -> u64 {
        self.human + self.bot
    }
}

/// Every batch in the stream, decoded strictly and summed once per id (as
/// the origin applies them).
pub fn stream_sums(redis: &Redis) -> Sums {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(STREAM_KEY)
        .arg("-")
        .arg("+")
        .query(&mut con)
        .unwrap();
    let mut s = Sums::default();
    let mut bodies = std::collections::HashMap::new();
    for (_, fields) in entries {
        if !fields.chunks(2).any(|kv| kv[0] == "id") {
            continue; // filler written by a test, not a batch
        }
        let field = |k: &str| {
            fields
                .chunks(2)
                .find(|kv| kv[0] == k)
                .map(|kv| kv[1].clone())
                .unwrap_or_else(|| panic!("entry without {k}: {fields:?}"))
        };
        let b = Batch::decode(&field("id"), &field("v"), &field("b"))
            .unwrap_or_else(|e| panic!("undecodable batch: {e}"));
        s.entries += 1;
        if let Some(first) = bodies.insert(b.id.clone(), field("b")) {
            assert_eq!(
                first,
                field("b"),
                "batch {} repeated with another body",
                b.id
            );
            s.duplicates += 1;
            continue;
        }
        s.ids.insert(b.id.clone());
        for h in &b.hours {
            s.human += h.human;
            s.bot += h.bot;
            let c = s.codes.entry(h.code.clone()).or_default();
            c.0 += h.human;
            c.1 += h.bot;
        }
        for r in &b.referrers {
            *s.referrers
                .entry((r.code.clone(), r.host.clone()))
                .or_default() += r.n;
        }
        for d in &b.devices {
            *s.devices.entry(d.device.as_str().to_owned()).or_default() += d.n;
        }
    }
    s
}

/// Waits until the stream holds `total` clicks and returns its sums.
pub fn wait_stream_total(redis: &Redis, total: u64) -> Sums {
    wait_for(&format!("{total} clicks in the stream"), TIMEOUT, || {
        stream_sums(redis).total() >= total
    });
    let s = stream_sums(redis);
    assert_eq!(s.total(), total, "{s:?}");
    s
}

/// Records for `codes` on [`DOMAIN`], valid for an hour.
pub fn links(redis: &Redis, codes: &[&str]) {
    for c in codes {
        redis_set(
            redis,
            &format!("su:1:link:{DOMAIN}/{c}"),
            &record_line(DOMAIN, "https://example.com/x", 3600),
        );
    }
}
