//! Conformance suite of the two edge implementations.
//!
//! Everything lives in `tests/`: `cases.yaml` is the table of cases,
//! `tests/conformance.rs` starts private Redis, MariaDB, the origin, the
//! Pingora edge and the OpenResty module (`lua-compat/openresty/start.sh`),
//! runs every case against both edges and fails on any difference, or on any
//! answer that differs from the table's expectation. Run it with
//! `lua-compat/conformance/run` (it builds the binaries first).
