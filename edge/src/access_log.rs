//! Access log: one line per request with the lookup outcome and the time
//! spent. Request handlers only append to an in-memory buffer (no syscall on
//! the hot path); a Pingora background service writes it out every
//! `flush_interval`. If the writer falls behind, lines beyond a bound are
//! dropped and counted rather than growing memory without limit.
//!
//! Format (space separated):
//! `<unix_ms> <client_ip> <method> <path> <status> <OUTCOME> <micros>us`
//!
//! With `access_log.truncate_addresses` the client is logged as its
//! network ([`truncated`]: IPv4 /24, IPv6 /48), the same text as the
//! OpenResty module's (`net.truncated`).

use crate::config::{AccessLogConfig, AccessLogTarget};
use crate::outcome::Outcome;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Buffered bytes beyond which new lines are dropped.
const MAX_BUFFER: usize = 8 << 20;

/// `ip` cut to its network: IPv4 (and IPv4-mapped IPv6) to /24, IPv6 to
/// /48, the rest zero.
pub fn truncated(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, 0))
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => truncated(IpAddr::V4(v4)),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
            }
        },
    }
}

/// The shared access-log buffer.
pub struct AccessLog {
    enabled: bool,
    truncate: bool,
    buf: Mutex<Vec<u8>>,
    dropped: AtomicU64,
}

/// One request, as logged.
pub struct LogLine<'a> {
    pub client: Option<std::net::IpAddr>,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub outcome: Outcome,
    pub took: Duration,
}

impl AccessLog {
    /// A log for `cfg`; with the target `Off`, `write` does nothing.
    pub fn new(cfg: &AccessLogConfig) -> Arc<Self> {
        Arc::new(AccessLog {
            enabled: !matches!(cfg.target, AccessLogTarget::Off),
            truncate: cfg.truncate_addresses,
            buf: Mutex::new(Vec::with_capacity(64 << 10)),
            dropped: AtomicU64::new(0),
        })
    }

    /// Appends one line.
    /// Whether lines are written: callers skip what only a line needs
    /// (the client behind the proxies is parsed from `X-Forwarded-For`).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn write(&self, l: &LogLine<'_>) {
        use std::fmt::Write as _;
        if !self.enabled {
            return;
        }
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let mut line = String::with_capacity(96 + l.path.len());
        let client = l.client.map(|c| {
            if self.truncate {
                truncated(c).to_string()
            } else {
                c.to_string()
            }
        });
        // Paths are logged up to 256 bytes, control characters escaped away.
        let path: String = l
            .path
            .chars()
            .take(256)
            .map(|c| if c.is_control() || c == ' ' { '?' } else { c })
            .collect();
        let _ = writeln!(
            line,
            "{ms} {} {} {path} {} {} {}us",
            client.as_deref().unwrap_or("-"),
            l.method,
            l.status,
            l.outcome.as_str(),
            l.took.as_micros()
        );
        let mut buf = match self.buf.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        if buf.len() + line.len() > MAX_BUFFER {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        buf.extend_from_slice(line.as_bytes());
    }

    fn take(&self) -> Vec<u8> {
        let mut buf = match self.buf.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        std::mem::replace(&mut *buf, Vec::with_capacity(64 << 10))
    }
}

/// Background service writing the buffer to its target.
pub struct AccessLogWriter {
    log: Arc<AccessLog>,
    cfg: AccessLogConfig,
}

impl AccessLogWriter {
    /// A writer for `log`.
    pub fn new(log: Arc<AccessLog>, cfg: AccessLogConfig) -> Self {
        AccessLogWriter { log, cfg }
    }

    fn flush(&self, out: &mut Option<Box<dyn Write + Send>>) {
        let data = self.log.take();
        let dropped = self.log.dropped.swap(0, Ordering::Relaxed);
        if data.is_empty() && dropped == 0 {
            return;
        }
        if out.is_none() {
            *out = match &self.cfg.target {
                AccessLogTarget::Off => None,
                AccessLogTarget::Stdout => Some(Box::new(std::io::stdout())),
                AccessLogTarget::File(p) => {
                    match std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(p)
                    {
                        Ok(f) => Some(Box::new(f)),
                        Err(e) => {
                            tracing::error!(path = %p.display(), error = %e, "cannot open access log");
                            None
                        }
                    }
                }
            };
        }
        if let Some(w) = out.as_mut() {
            let mut res = w.write_all(&data);
            if dropped > 0 {
                res = res.and_then(|_| {
                    writeln!(w, "# access log dropped {dropped} lines (writer behind)")
                });
            }
            if let Err(e) = res.and_then(|_| w.flush()) {
                tracing::error!(error = %e, "access log write failed; reopening");
                *out = None;
            }
        }
    }
}

#[async_trait]
impl BackgroundService for AccessLogWriter {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut out: Option<Box<dyn Write + Send>> = None;
        let mut tick = tokio::time::interval(self.cfg.flush_interval);
        let mut shutting_down = false;
        // Requests are still served during the graceful-shutdown period, so
        // keep flushing until the process exits.
        loop {
            tokio::select! {
                _ = tick.tick() => self.flush(&mut out),
                _ = shutdown.changed(), if !shutting_down => {
                    shutting_down = true;
                    self.flush(&mut out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::truncated;
    use std::net::IpAddr;

    /// The shared cases: the OpenResty module's test reads the same file.
    #[test]
    fn addresses_are_cut_to_their_network_as_the_module_does() {
        let cases = include_str!("../../common/data/truncated_addresses.txt");
        let mut n = 0;
        for line in cases.lines().filter(|l| !l.starts_with('#')) {
            let (ip, want) = line.split_once(' ').unwrap();
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(truncated(ip).to_string(), want, "{ip}");
            n += 1;
        }
        assert_eq!(n, 14);
    }
}
