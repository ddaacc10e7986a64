//! The edge's integration tests, one binary (each file a module): one link instead of one per file.
//!
//! Run one file's tests with a filter: `cargo test -p shorturl-edge --test it -- <file>::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod abuse;
mod acme;
mod admin_browser;
mod cache_memory;
mod clicks;
mod clicks_e2e;
mod clicks_shutdown;
mod e2e_origin;
mod fast_path;
mod faults;
mod invalidation;
mod legacy_config;
mod operations;
mod pages_cache;
mod password_browser;
mod redirects;
mod redis_cluster;
mod redis_sentinel;
mod tls;
