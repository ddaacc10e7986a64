//! The origin: creates short links and answers the edge's misses.
//!
//! See `docs/architecture.md` for the request paths and `docs/protocol.md`
//! for the contract with the edge.

pub mod admin;
pub mod apollo;
pub mod auth;
pub mod background;
pub mod bench;
mod body;
pub mod bucket;
pub mod ca_file;
pub mod cache;
pub mod claim;
pub mod clicks;
pub mod config;
pub mod conn;
pub mod cursor;
pub mod db;
pub mod download;
pub mod error;
pub mod form;
pub mod health;
pub mod http;
pub mod import;
pub mod issuer;
pub mod lifecycle;
pub mod links;
pub mod metrics;
pub mod outbox;
pub mod pages;
pub mod passwords;
pub mod permutation;
pub mod pregen;
pub mod rekey;
pub mod schema;
pub mod screening;
pub mod serve;
pub mod store;
pub mod tenancy;
pub mod validate;
pub mod webhooks;
pub mod whitelist;
