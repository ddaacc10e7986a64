//! `edge.access_log`: where the access log goes and how often it is flushed.

use super::file::AccessLogFile;
use super::{ms, ConfigError};
use std::path::PathBuf;
use std::time::Duration;

/// Where access-log lines go.
#[derive(Debug, Clone)]
pub enum AccessLogTarget {
    Off,
    Stdout,
    File(PathBuf),
}

/// Access log settings.
#[derive(Debug, Clone)]
pub struct AccessLogConfig {
    pub target: AccessLogTarget,
    pub flush_interval: Duration,
    /// Client addresses are logged cut to their network (IPv4 /24, IPv6
    /// /48): the line still tells networks apart, never a person.
    pub truncate_addresses: bool,
}

/// `edge.access_log`.
pub fn from_file(f: &AccessLogFile) -> Result<AccessLogConfig, ConfigError> {
    let target = match f.path.as_deref() {
        None | Some("") | Some("off") => AccessLogTarget::Off,
        Some("-") => AccessLogTarget::Stdout,
        Some(p) => AccessLogTarget::File(PathBuf::from(p)),
    };
    Ok(AccessLogConfig {
        target,
        flush_interval: ms(f.flush_interval_ms, "edge.access_log.flush_interval_ms")?,
        truncate_addresses: f.truncate_addresses,
    })
}
