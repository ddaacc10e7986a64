//! Import (issue 28 item 2): links from this service's CSV and from the
//! exports of Bitly, Shlink, Kutt and YOURLS (`docs/integrations.md`).
//!
//! [`format`] reads a file into rows (YOURLS' SQL dumps through [`sql`]),
//! [`run`] turns rows into creations of the importing app, [`cli`] is the
//! `shorturl-origin import` command around them, [`job`] the API's
//! `POST /api/v1/imports` (a task of the origin, its progress in MySQL).

pub mod cli;
pub mod format;
pub mod job;
pub mod row;
pub mod run;
pub mod sql;
