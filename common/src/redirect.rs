//! Redirect response policy shared by the edge and the origin, so both answer
//! a click with the same status and caching headers.

use crate::config::FieldError;
use serde::{Deserialize, Serialize};

/// Statuses a redirect may use.
pub const ALLOWED_STATUSES: [u16; 4] = [301, 302, 307, 308];

/// How a redirect is answered. `Cache-Control` is always explicit: a 301
/// without it is cached by browsers forever, which turns every later edit or
/// delete into a support ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedirectPolicy {
    /// 301, 302 (default), 307 or 308.
    pub status: u16,
    /// `Cache-Control` for redirects.
    pub cache_control: String,
    /// `Cache-Control` for 404s.
    pub not_found_cache_control: String,
}

impl Default for RedirectPolicy {
    fn default() -> Self {
        RedirectPolicy {
            status: 302,
            cache_control: "private, max-age=60".into(),
            not_found_cache_control: "no-store".into(),
        }
    }
}

impl RedirectPolicy {
    /// Checks the policy; `prefix` is the section's path in the file
    /// (`edge.redirect`, `redirect`), so the error names the field.
    pub fn validate(&self, prefix: &str) -> Result<(), FieldError> {
        if !ALLOWED_STATUSES.contains(&self.status) {
            return Err(FieldError::new(
                format!("{prefix}.status"),
                format!("must be one of 301, 302, 307, 308 (got {})", self.status),
            ));
        }
        for (name, v) in [
            ("cache_control", &self.cache_control),
            ("not_found_cache_control", &self.not_found_cache_control),
        ] {
            if v.is_empty() || v.bytes().any(|b| b.is_ascii_control()) {
                return Err(FieldError::new(
                    format!("{prefix}.{name}"),
                    "must be a non-empty header value",
                ));
            }
        }
        Ok(())
    }
}
