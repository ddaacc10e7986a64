//! Waiting for conditions (never for fixed durations).

use std::time::{Duration, Instant};

/// Polls `cond` every few milliseconds until it returns true; panics with
/// `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    wait_for_or(what, timeout, cond, String::new)
}

/// [`wait_for`], whose panic also carries `context()` (the logs of the
/// processes involved, say): a timeout seen once in CI is explained by its
/// own message.
pub fn wait_for_or(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
    context: impl FnOnce() -> String,
) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        if cond() {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                context()
            );
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
pub fn wait_for_tcp(port: u16, timeout: Duration) {
    wait_for(&format!("127.0.0.1:{port} to accept"), timeout, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}
