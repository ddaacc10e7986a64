//! [`HeadDeadline`]: the client stream, with a deadline on each request head.
//!
//! Pingora bounds each *read* of a request head (60 s on a new connection,
//! the keep-alive timeout afterwards), so a client sending one byte every
//! few seconds can hold a connection forever. This wrapper bounds the whole
//! head instead: from accept on a new connection, from the first byte of
//! the next request on a kept-alive one (the idle wait before it is the
//! keep-alive timeout's business), to the blank line that ends the head.
//! When the deadline passes, the read fails with `TimedOut` and Pingora
//! closes the connection without an answer (as nginx does on
//! `client_header_timeout`).
//!
//! Cost on the redirect path: the phase is tracked from the bytes themselves
//! (the head ends at an empty line; the next head can only start after the
//! server has written a final response), with one `memchr` over each chunk
//! read while a head is due. A head that arrives whole in one read touches
//! no clock and no timer. A timer is armed (allocated once per connection,
//! then reset) only when a head is due and the socket has nothing more: a
//! slow head, or a new connection whose request has not arrived by the
//! first read (Pingora arms its own read timeout at that moment too).

use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::TlsRef;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use pingora_prometheus::prometheus::IntCounter;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Where the connection is in its request/response cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between requests: the next byte starts a head (no deadline yet).
    Idle,
    /// Receiving a head; `deadline` is set.
    Head,
    /// Head received: body, upstream wait, response. No deadline.
    Body,
    /// The deadline passed; every read fails.
    Expired,
}

/// Finds the empty line that ends a head, across reads. Empty lines before
/// the request line (which parsers skip) do not count.
#[derive(Debug, Default)]
struct EndOfHead {
    /// Some line of this head had content.
    started: bool,
    /// The current (unterminated) line has content.
    partial: bool,
}

impl EndOfHead {
    /// Scans `bytes`; true when the head ends inside them.
    fn scan(&mut self, bytes: &[u8]) -> bool {
        let mut line_start = 0;
        for nl in memchr::memchr_iter(b'\n', bytes) {
            let line = bytes.get(line_start..nl).unwrap_or_default();
            let content = self.partial || line.iter().any(|&b| b != b'\r');
            self.partial = false;
            if content {
                self.started = true;
            } else if self.started {
                *self = EndOfHead::default();
                return true;
            }
            line_start = nl + 1;
        }
        let tail = bytes.get(line_start..).unwrap_or_default();
        self.partial |= tail.iter().any(|&b| b != b'\r');
        false
    }
}

/// A client stream whose request heads must arrive within `timeout`.
pub struct HeadDeadline {
    inner: Stream,
    phase: Phase,
    end: EndOfHead,
    deadline: Option<Instant>,
    timeout: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    timed_out: IntCounter,
}

impl std::fmt::Debug for HeadDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadDeadline")
            .field("inner", &self.inner)
            .field("phase", &self.phase)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl HeadDeadline {
    /// Wraps a newly accepted stream: its first head is due `timeout` from now.
    pub fn new(inner: Stream, timeout: Duration, timed_out: IntCounter) -> Self {
        HeadDeadline {
            inner,
            phase: Phase::Head,
            end: EndOfHead::default(),
            deadline: Some(Instant::now() + timeout),
            timeout,
            timer: None,
            timed_out,
        }
    }

    fn expire(&mut self) -> io::Error {
        if self.phase != Phase::Expired {
            self.phase = Phase::Expired;
            self.timed_out.inc();
        }
        io::Error::new(io::ErrorKind::TimedOut, "request head not received in time")
    }

    /// Polls the deadline timer (armed lazily, reused across requests).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(deadline) = self.deadline else {
            return Poll::Pending;
        };
        let timer = match &mut self.timer {
            Some(t) => {
                if t.deadline() != deadline {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        timer.as_mut().poll(cx)
    }
}

impl AsyncRead for HeadDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match this.phase {
            Phase::Body => return Pin::new(&mut this.inner).poll_read(cx, buf),
            Phase::Expired => return Poll::Ready(Err(this.expire())),
            Phase::Idle | Phase::Head => {}
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = buf.filled().get(before..).unwrap_or_default();
                if new.is_empty() {
                    return Poll::Ready(Ok(())); // EOF
                }
                if this.end.scan(new) {
                    this.phase = Phase::Body;
                    this.deadline = None;
                    return Poll::Ready(Ok(()));
                }
                let now = Instant::now();
                match this.deadline {
                    None => this.deadline = Some(now + this.timeout),
                    Some(d) if now >= d => return Poll::Ready(Err(this.expire())),
                    Some(_) => {}
                }
                this.phase = Phase::Head;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if this.phase == Phase::Head && this.poll_deadline(cx).is_ready() {
                    return Poll::Ready(Err(this.expire()));
                }
                Poll::Pending
            }
        }
    }
}

impl HeadDeadline {
    /// The server wrote: a final response means the next byte read starts
    /// a new head; an interim `1xx` (e.g. `100 Continue`) does not.
    fn wrote(&mut self, buf: &[u8], n: usize) {
        if n > 0 && self.phase == Phase::Body && !is_interim(buf) {
            self.phase = Phase::Idle;
        }
    }
}

/// `HTTP/1.x 1xx` at the start of a write.
fn is_interim(buf: &[u8]) -> bool {
    buf.len() > 9 && buf.starts_with(b"HTTP/1.") && buf.get(9) == Some(&b'1')
}

impl AsyncWrite for HeadDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            this.wrote(buf, n);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            this.wrote(first, n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait::async_trait]
impl Shutdown for HeadDeadline {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for HeadDeadline {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for HeadDeadline {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for HeadDeadline {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for HeadDeadline {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for HeadDeadline {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait::async_trait]
impl Peek for HeadDeadline {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn end_of_head_across_chunks() {
        let head = b"GET /abcdef HTTP/1.1\r\nHost: a\r\n\r\n";
        for split in 0..head.len() {
            let mut e = EndOfHead::default();
            let (a, b) = head.split_at(split);
            let done_a = e.scan(a);
            assert!(!done_a, "ended early at split {split}");
            assert!(e.scan(b), "no end with split {split}");
        }
        let mut e = EndOfHead::default();
        assert!(e.scan(b"GET / HTTP/1.1\nHost: a\n\n"), "bare LF");
        // Empty lines before the request line are not the end of a head.
        let mut e = EndOfHead::default();
        assert!(!e.scan(b"\r\n\r\n\n"));
        assert!(!e.scan(b"GET / HTTP/1.1\r\n"));
        assert!(e.scan(b"\r\n"));
        // Byte by byte.
        let mut e = EndOfHead::default();
        let ends: Vec<bool> = head.iter().map(|b| e.scan(&[*b])).collect();
        assert_eq!(ends.iter().filter(|d| **d).count(), 1);
        assert_eq!(ends.last(), Some(&true));
    }

    #[test]
    fn interim_responses() {
        assert!(is_interim(b"HTTP/1.1 100 Continue\r\n\r\n"));
        assert!(!is_interim(b"HTTP/1.1 200 OK\r\n"));
        assert!(!is_interim(b"HTTP/1.1 302 Found\r\n"));
        assert!(!is_interim(b"{\"x\":1}"));
    }

    fn counter() -> IntCounter {
        IntCounter::new("test_head_timeouts", "test").unwrap_or_else(|e| panic!("{e}"))
    }

    fn pair(timeout: Duration) -> (HeadDeadline, tokio::io::DuplexStream, IntCounter) {
        let (server, client) = tokio::io::duplex(4096);
        let c = counter();
        (
            HeadDeadline::new(Box::new(server), timeout, c.clone()),
            client,
            c,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_head_times_out_as_a_whole() {
        let (mut s, mut c, timeouts) = pair(Duration::from_secs(5));
        let mut buf = [0u8; 64];
        for b in b"GET / HT" {
            c.write_all(&[*b]).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(s.read(&mut buf).await.ok(), Some(1));
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        // 3.2 s in: more than one second of silence is fine per read, but
        // the head as a whole is due at 5 s.
        let err = s.read(&mut buf).await.err().map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::TimedOut));
        assert_eq!(timeouts.get(), 1);
        assert!(s.read(&mut buf).await.is_err(), "stays expired");
        assert_eq!(timeouts.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn kept_alive_connections_get_a_fresh_deadline_per_head() {
        let (mut s, mut c, timeouts) = pair(Duration::from_secs(5));
        let mut buf = [0u8; 256];
        c.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.read(&mut buf).await.is_ok_and(|n| n > 0));
        assert_eq!(s.phase, Phase::Body);
        // An interim answer keeps the request open; the final one ends it.
        s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.phase, Phase::Body);
        s.write_all(b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.phase, Phase::Idle);
        // Idle for a long time: not this wrapper's business.
        tokio::time::sleep(Duration::from_secs(60)).await;
        c.write_all(b"GET /b HTTP/1.1\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.read(&mut buf).await.is_ok_and(|n| n > 0));
        assert_eq!(s.phase, Phase::Head);
        tokio::time::sleep(Duration::from_secs(4)).await;
        c.write_all(b"Host: x\r\n\r\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.read(&mut buf).await.is_ok_and(|n| n > 0));
        assert_eq!(s.phase, Phase::Body);
        assert_eq!(timeouts.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_that_sends_nothing_times_out() {
        let (mut s, _c, timeouts) = pair(Duration::from_secs(2));
        let mut buf = [0u8; 16];
        let started = tokio::time::Instant::now();
        let err = s.read(&mut buf).await.err().map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::TimedOut));
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert_eq!(timeouts.get(), 1);
    }
}
