//! The conformance suite and the two edges' comparisons, one binary (each file a module): one link instead of one per file.
//!
//! Run one file's tests with a filter: `cargo test -p conformance --test it -- <file>::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod clicks_fleet;
mod clicks_two_edges;
mod conformance;
mod openresty;
mod openresty_clicks;
mod openresty_cluster;
mod openresty_invalidation;
mod openresty_tls;
mod pages;
mod password_links;
mod screening;
