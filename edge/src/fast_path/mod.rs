//! The redirect fast path: hot hits answered before a proxy session exists
//! (issue 17).
//!
//! [`FastPath`] is the [`ServerApp`](pingora::apps::ServerApp) behind the
//! connection guard (`crate::conn`: caps, TLS handshake, request-head
//! deadline) on every listener, in front of the Pingora proxy. For each
//! HTTP/1 request on a connection it reads the head into a per-connection
//! buffer and parses it in place (`parse`).
//!
//! **It answers** a `GET` or `HEAD /{code}` (the code grammar of
//! `shorturl_common::code`, routed by `route::route_path` like the proxy)
//! whose head is plain (see `parse`: no body, no upgrade, no `Expect`, no
//! pipelined bytes, a `Host` the section 2.1 rules accept, within the size
//! limits), that is not sent to HTTPS first (`edge.https.redirect`), when
//! the in-process cache holds a fresh entry for the code that is
//! * a record bound to the request's host and not expired: the redirect,
//!   from the pre-serialised frame around the entry's URL (`answer`), and the
//!   click counted (`clicks`, same queue and classification);
//! * a negative entry, and the client is under its unknown-code limit: the
//!   protocol 404, counted against that limit;
//!
//! and when the cache holds nothing for the code (a miss) and the client is
//! under its unknown-code limit, it looks the code up itself through the
//! proxy's [`Resolver`](crate::lookup::Resolver) (Redis, then the origin,
//! coalesced, stored) and answers as the proxy would: the redirect, the
//! 404 (unknown, expired, another domain's) or the 503 of a failed lookup.
//!
//! `Date` comes from a once-per-second clock (`clock`), `Connection` from
//! the same keep-alive rules as Pingora's; the head is written with one
//! `write_all` and one flush. Metrics (`shorturl_status_total` local hits,
//! the latency histogram), the access log and `/shorturl_status` see the
//! request as the proxy would have counted it, plus
//! `shorturl_edge_fast_path_total{result}`.
//!
//! **It hands over** everything else — an unbound, expired or failed
//! cached entry, a client over its limit, a browser's 404 (the origin's
//! page; after a miss the proxy finds the stored answer), the API, pages, status,
//! health and ACME paths, another method, a malformed or unusual head,
//! pipelined bytes, a head longer than its buffer — to the proxy, with the
//! bytes already read as the session's first bytes (Pingora's pipelined
//! prefix): the proxy answers exactly as without the fast path. When the
//! proxy keeps the connection, the next request on it comes back here.
//!
//! HTTP/2 (TLS with ALPN `h2`) is framed and multiplexed: such connections
//! go to the proxy whole. HTTP/1.1 over TLS goes through the split after
//! the handshake. `edge.fast_path.enabled: false` sends every connection
//! to the proxy whole, as before the fast path existed.

mod answer;
mod clock;
mod parse;
mod service;

pub use answer::{redirect_frame, redirect_serialiser, serialise, AnswerError};
pub use clock::{date, format as format_date};
pub use service::FastPath;
