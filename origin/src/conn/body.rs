//! Whether a request body was read whole before its answer.
//!
//! A handler that refuses a request (401, 403, 413 ...) answers before
//! reading the body. hyper then cannot reuse the connection unless the rest
//! of the body happens to be in its buffer already, and closes it *after*
//! the answer, without saying so: a client that pooled the connection (an
//! edge) sends its next request into a closed socket and gets a reset,
//! which for a creation means a 502 (it cannot be retried blindly). So any
//! answer given before the body's end carries `Connection: close`, and the
//! client knows not to reuse the connection.

use bytes::Bytes;
use http::{header, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Whether the body was read to its end (shared with [`Tracked`]).
#[derive(Debug, Clone)]
pub struct Read(Arc<AtomicBool>);

impl Read {
    /// True once the body's end was read (at once for a request without one).
    pub fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A request body that records when its end is read.
pub struct Tracked {
    inner: Incoming,
    read: Read,
}

impl Tracked {
    /// Wraps `inner`; the [`Read`] says whether its end was read.
    pub fn new(inner: Incoming) -> (Tracked, Read) {
        let read = Read(Arc::new(AtomicBool::new(inner.is_end_stream())));
        (
            Tracked {
                inner,
                read: read.clone(),
            },
            read,
        )
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.0.store(true, Ordering::Release);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Makes `resp` close its connection after it is sent.
pub fn close_after(resp: &mut axum::response::Response) {
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}
