//! Loopback ports for private servers, reserved so that no other test (in
//! this process or another one) can be handed the same port between our
//! choosing it and the child binding it.
//!
//! Ports come from 20000–32767, below Linux's ephemeral range (32768–60999),
//! so the kernel never gives them to outgoing connections or to `bind(0)`.
//! Each chosen port is claimed with an exclusive `flock` on
//! `$TMPDIR/shorturl-ports/<port>` held until the process exits, and is
//! checked free with a test bind before it is returned.

use std::collections::HashMap;
use std::fs::File;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, OnceLock};

const FIRST: u16 = 20_000;
const LAST: u16 = 32_767;

fn held() -> &'static Mutex<HashMap<u16, File>> {
    static H: OnceLock<Mutex<HashMap<u16, File>>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(HashMap::new()))
}

fn try_claim(port: u16) -> Option<File> {
    let dir = std::env::temp_dir().join("shorturl-ports");
    std::fs::create_dir_all(&dir).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
        .ok()?;
    // SAFETY: flock(2) on a descriptor we own.
    let locked = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        return None;
    }
    // Still free on every loopback address we use?
    TcpListener::bind(("127.0.0.1", port)).ok()?;
    Some(f)
}

/// A loopback port no other test will be given while this process lives.
pub fn reserve_port() -> u16 {
    let span = u32::from(LAST - FIRST) + 1;
    // Start at a per-process offset so concurrent test binaries rarely probe
    // the same ports.
    let seed = std::process::id().wrapping_mul(2_654_435_761) % span;
    let mut map = held().lock().unwrap_or_else(|p| p.into_inner());
    for i in 0..span {
        let port = FIRST + ((seed + i) % span) as u16;
        if map.contains_key(&port) {
            continue;
        }
        if let Some(f) = try_claim(port) {
            map.insert(port, f);
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..={LAST}");
}

#[cfg(test)]
mod tests {
    use super::reserve_port;
    use std::collections::HashSet;

    #[test]
    fn ports_are_distinct_and_bindable() {
        let ports: Vec<u16> = (0..50).map(|_| reserve_port()).collect();
        let set: HashSet<_> = ports.iter().collect();
        assert_eq!(set.len(), ports.len());
        for p in ports {
            assert!((20_000..32_768).contains(&p));
            std::net::TcpListener::bind(("127.0.0.1", p)).expect("bindable");
        }
    }
}
