//! Import (issue 28 item 2): links from this service's CSV and from the
//! exports of Bitly, Shlink, Kutt and YOURLS (`docs/integrations.md`).
//!
//! [`format`] reads a file into rows (YOURLS' SQL dumps through [`sql`]),
//! [`run`] turns rows into creations of the importing app, [`cli`] is the
//! `shorturl-origin import` command around them.

pub mod cli;
pub mod format;
pub mod run;
pub mod sql;
