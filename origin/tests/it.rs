//! The origin's integration tests, one binary (each file a module): one link instead of one per file.
//!
//! Run one file's tests with a filter: `cargo test -p shorturl-origin --test it -- <file>::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod admin;
mod admin_scale;
mod api;
mod apollo_client;
mod apollo_whitelist;
mod batch;
mod clicks;
mod clicks_api;
mod clicks_faults;
mod clicks_live;
mod clicks_retention;
mod coalescing;
mod code_pool;
mod concurrency;
mod faults;
mod import;
mod inapp_guide;
mod invalidation;
mod issuing;
mod lifecycle;
mod lifecycle_scale;
mod link_rules;
mod manage;
mod odd_requests;
mod oidc_browser;
mod openapi;
mod operations;
mod pages;
mod password_links;
mod per_domain_codes;
mod recycle;
mod schemathesis;
mod screening;
mod search;
mod search_indexes;
mod shards;
mod tenancy;
mod upgrade;
mod webhooks;
