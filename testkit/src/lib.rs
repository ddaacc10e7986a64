//! Real servers for the integration tests.
//!
//! Every test starts its own Redis and MariaDB on free loopback ports, from
//! the Debian binaries, in a private temp directory; it can stop and restart
//! them to inject faults. Children are spawned from one long-lived supervisor
//! thread with `PR_SET_PDEATHSIG`, so nothing outlives the test process even
//! when a test panics or is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failure here is a test failure

mod proc;
pub mod servers;
pub mod wait;

pub use proc::{spawn, workspace_bin, Proc};
pub use servers::{MariaDb, Redis};
pub use wait::{wait_for, wait_for_tcp};

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("local addr").port()
}

/// A fresh private directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/shorturl-test-<pid>-<n>-<tag>`.
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("shorturl-test-{}-{n}-{tag}", std::process::id()));
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
