//! The `Date` header value, from a clock that ticks once per second.
//!
//! A background thread (started on first use, so after Pingora's `-d`
//! fork) formats the time once per second into a 29-byte buffer published
//! through a sequence lock; a request copies the buffer (four atomic loads
//! and two of the sequence) instead of reading the system clock and
//! formatting a date.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `Sun, 06 Nov 1994 08:49:37 GMT`: the IMF-fixdate is always 29 bytes.
pub const DATE_LEN: usize = 29;

/// The published date: `seq` is odd while the writer changes `words`.
struct Clock {
    seq: AtomicU64,
    words: [AtomicU64; 4],
    /// The ticking thread runs (if it could not be started, every read
    /// formats the time itself).
    ticking: AtomicBool,
}

static CLOCK: OnceLock<Clock> = OnceLock::new();

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Clock {
    fn store(&self, date: &[u8; DATE_LEN]) {
        let mut padded = [0u8; 32];
        padded[..DATE_LEN].copy_from_slice(date);
        self.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (w, chunk) in self.words.iter().zip(padded.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        self.seq.fetch_add(1, Ordering::Release);
    }

    fn load(&self) -> [u8; DATE_LEN] {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            let mut padded = [0u8; 32];
            for (w, chunk) in self.words.iter().zip(padded.chunks_exact_mut(8)) {
                chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
            }
            fence(Ordering::Acquire);
            if before.is_multiple_of(2) && self.seq.load(Ordering::Relaxed) == before {
                let mut out = [0u8; DATE_LEN];
                out.copy_from_slice(&padded[..DATE_LEN]);
                return out;
            }
            std::hint::spin_loop();
        }
    }
}

fn start() -> Clock {
    let c = Clock {
        seq: AtomicU64::new(0),
        words: Default::default(),
        ticking: AtomicBool::new(false),
    };
    c.store(&format(now_secs()));
    let spawned = std::thread::Builder::new()
        .name("date-clock".into())
        .spawn(|| loop {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            // Wake just after the next second starts.
            let to_next = Duration::from_secs(1)
                .saturating_sub(Duration::from_nanos(u64::from(now.subsec_nanos())));
            std::thread::sleep(to_next + Duration::from_millis(1));
            if let Some(c) = CLOCK.get() {
                c.store(&format(now_secs()));
            }
        });
    match spawned {
        Ok(_) => c.ticking.store(true, Ordering::Relaxed),
        Err(e) => {
            tracing::warn!(error = %e, "date clock thread not started; formatting per request")
        }
    }
    c
}

/// The current `Date` value (at most about a second old).
pub fn date() -> [u8; DATE_LEN] {
    let c = CLOCK.get_or_init(start);
    if c.ticking.load(Ordering::Relaxed) {
        c.load()
    } else {
        format(now_secs())
    }
}

/// Formats Unix seconds as an IMF-fixdate (RFC 9110 section 5.6.7).
pub fn format(secs: u64) -> [u8; DATE_LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (y, m, d) = shorturl_common::time::civil_from_days(days as i64);
    let (year, month, day) = ((y.max(0) as u64).min(9999), m as u64, d as u64);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    let put2 = |o: &mut [u8; DATE_LEN], at: usize, v: u64| {
        o[at] = b'0' + (v / 10 % 10) as u8;
        o[at + 1] = b'0' + (v % 10) as u8;
    };
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    put2(&mut out, 5, day);
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize % 12]);
    put2(&mut out, 12, year / 100);
    put2(&mut out, 14, year % 100);
    put2(&mut out, 17, hh);
    put2(&mut out, 20, mm);
    put2(&mut out, 23, ss);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_imf_fixdates() {
        assert_eq!(&format(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&format(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&format(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&format(1_795_633_546), b"Wed, 25 Nov 2026 19:05:46 GMT");
    }

    #[test]
    fn the_clock_reads_like_pingoras_date() {
        // The same second as Pingora's own `Date` (retried across a tick).
        let mut same = false;
        for _ in 0..5 {
            let theirs = pingora::protocols::http::date::get_cached_date();
            if date()[..] == *theirs.as_bytes() {
                same = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        assert!(same);
    }
}
