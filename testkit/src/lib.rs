//! Real servers for the integration tests.
//!
//! Every test starts its own Redis and MariaDB on free loopback ports, from
//! the Debian binaries, in a private temp directory; it can stop and restart
//! them to inject faults. Children are spawned from one long-lived supervisor
//! thread with `PR_SET_PDEATHSIG`, so nothing outlives the test process even
//! when a test panics or is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failure here is a test failure

pub mod apollo;
pub mod browser;
pub mod http;
pub mod load;
pub mod metrics;
pub mod mmdb;
pub mod oidc;
pub mod origin;
pub mod pebble;
pub mod peer;
mod ports;
mod proc;
pub mod qr;
pub mod redis_topology;
pub mod servers;
pub mod tls;
pub mod wait;

pub use proc::{spawn, workspace_bin, Proc};
pub use redis_topology::{RedisCluster, RedisSentinel};
pub use servers::{MariaDb, Redis, ZooKeeper, ZooKeeperEnsemble};
pub use wait::{wait_for, wait_for_or, wait_for_tcp};

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A loopback port reserved for this test process: no other test, in this
/// process or a concurrent one, is given it, and the kernel never hands it
/// out as an ephemeral port (see `ports.rs`), so a child can bind it later.
pub fn free_port() -> u16 {
    ports::reserve_port()
}

/// The country database `scripts/deps.sh` installs (the link rules'
/// `country` condition): ip-location-db's CC0 MMDB, a pinned version.
pub fn country_mmdb() -> PathBuf {
    let p = PathBuf::from("/usr/local/share/shorturl/country.mmdb");
    assert!(
        p.exists(),
        "{} is missing: run `make deps` (scripts/deps.sh fetches it)",
        p.display()
    );
    p
}

/// A fresh private directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/shorturl-test-<pid>-<n>-<tag>`.
    pub fn new(tag: &str) -> TempDir {
        TempDir::under(&std::env::temp_dir(), tag)
    }

    /// Like [`TempDir::new`], but in memory (`/dev/shm`, where there is
    /// one): for bulk writes that must not queue other tests' fsyncs
    /// behind them on the disk.
    pub fn in_memory(tag: &str) -> TempDir {
        match memory_dir() {
            Some(base) => TempDir::under(&base, tag),
            None => TempDir::new(tag),
        }
    }

    fn under(base: &std::path::Path, tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(sweep_stale_dirs);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = base.join(format!("shorturl-test-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("SHORTURL_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `/dev/shm` when it is a writable directory (a tmpfs on Linux).
fn memory_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let p = PathBuf::from("/dev/shm");
        let probe = p.join(format!(".shorturl-probe-{}", std::process::id()));
        std::fs::create_dir(&probe).ok()?;
        let _ = std::fs::remove_dir(&probe);
        Some(p)
    })
    .clone()
}

/// Removes directories left by test processes that no longer exist (a
/// shared server held in a `static` is never dropped, so its directory is
/// cleaned by the next run instead).
fn sweep_stale_dirs() {
    let bases = std::iter::once(std::env::temp_dir()).chain(memory_dir());
    for e in bases
        .filter_map(|b| std::fs::read_dir(b).ok())
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("shorturl-test-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
