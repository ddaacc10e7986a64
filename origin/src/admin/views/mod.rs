//! The console's pages, one file each.

pub mod apps;
pub mod dims;
pub mod link;
pub mod live;
pub mod login;
pub mod merchants;
pub mod overview;
pub mod screening;
pub mod search;
pub mod sso;
pub mod tenant;
pub mod webhooks;

use shorturl_common::time::rfc3339;

/// `YYYY-MM-DD HH:MM` UTC of a Unix time.
pub fn when(unix: u64) -> String {
    let s = rfc3339(unix);
    format!(
        "{} {}",
        s.get(..10).unwrap_or(""),
        s.get(11..16).unwrap_or("")
    )
}

/// `YYYY-MM-DD` of a Unix time.
pub fn day(unix: u64) -> String {
    rfc3339(unix).get(..10).unwrap_or("").to_owned()
}
