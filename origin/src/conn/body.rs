//! What happens to a request body the handler did not read to its end.
//!
//! A handler that refuses a request (401, 403, 413 ...) answers before
//! reading the body. hyper then cannot reuse the connection unless the rest
//! of the body happens to be in its buffer already, and closes it *after*
//! the answer, without saying so: a client that pooled the connection (an
//! edge) sends its next request into a closed socket and gets a reset,
//! which for a creation means a 502 (it cannot be retried blindly). And a
//! client still sending the body when the socket closes gets a reset
//! before it reads the answer: a 413 became a 502 at an edge.
//!
//! So the rest of such a body comes back from the handler ([`Tracked`]
//! hands it over when dropped) and is read and thrown away — at most
//! [`DRAIN_MAX_BYTES`], for at most [`DRAIN_WITHIN`] — before the answer
//! goes out, as nginx's lingering close does. Read whole, the connection
//! stays usable; otherwise the answer says `Connection: close` and the
//! client knows not to reuse it.

use bytes::Bytes;
use http::{header, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

/// Most of an unread body read and thrown away after its answer.
pub const DRAIN_MAX_BYTES: usize = 4 << 20;
/// Longest wait for the rest of an unread body.
pub const DRAIN_WITHIN: Duration = Duration::from_secs(2);

/// A request body that gives back what is left of it when dropped unread.
pub struct Tracked {
    inner: Option<Incoming>,
    rest: Option<oneshot::Sender<Leftover>>,
    /// The handler asked for a frame (hyper has sent `100 Continue`).
    polled: bool,
}

/// What a handler left of a body.
struct Leftover {
    body: Incoming,
    polled: bool,
}

/// The unread rest of a [`Tracked`] body, once the handler dropped it.
pub struct Rest {
    rx: oneshot::Receiver<Leftover>,
    /// The client waits for `100 Continue` before it sends the body.
    expects_continue: bool,
}

impl Tracked {
    /// Wraps `inner`; `expects_continue`: the request said
    /// `Expect: 100-continue`.
    pub fn new(inner: Incoming, expects_continue: bool) -> (Tracked, Rest) {
        let (tx, rx) = oneshot::channel();
        let done = inner.is_end_stream();
        (
            Tracked {
                inner: Some(inner),
                rest: (!done).then_some(tx),
                polled: false,
            },
            Rest {
                rx,
                expects_continue,
            },
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
        self.polled = true;
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let r = Pin::new(&mut *inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None)) || inner.is_end_stream() {
            // Read to its end: nothing to give back.
            self.rest = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let (Some(tx), Some(body)) = (self.rest.take(), self.inner.take()) {
            let _ = tx.send(Leftover {
                body,
                polled: self.polled,
            });
        }
    }
}

impl Rest {
    /// Reads and throws away what the handler left of the body. True when
    /// the connection can carry another request (nothing was left, or it
    /// was all read within the bounds).
    pub async fn drain(self) -> bool {
        let Ok(left) = self.rx.await else {
            // Read to its end (or there was none).
            return true;
        };
        if self.expects_continue && !left.polled {
            // The client waits for `100 Continue` before it sends the body:
            // reading it now would ask for what the answer refuses.
            return false;
        }
        let mut rest = left.body;
        let read_all = async {
            let mut seen = 0usize;
            while let Some(frame) = rest.frame().await {
                let Ok(frame) = frame else { return false };
                if let Some(data) = frame.data_ref() {
                    seen += data.len();
                    if seen > DRAIN_MAX_BYTES {
                        return false;
                    }
                }
            }
            true
        };
        tokio::time::timeout(DRAIN_WITHIN, read_all)
            .await
            .unwrap_or(false)
    }
}

/// Makes `resp` close its connection after it is sent.
pub fn close_after(resp: &mut axum::response::Response) {
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}
