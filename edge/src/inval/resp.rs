//! The subscription's own connection: `SUBSCRIBE` spoken in RESP2 on a
//! plain socket, each pushed message handed over as a slice of the read
//! buffer. redis-rs's pub/sub decodes every push through its general
//! value parser into owned values: ~5,100 of the ~9,400 instructions an
//! applied message cost the edge (callgrind, 50,000 messages), which at
//! 20,000 messages a second took ~6% of a redirect core (issue 30, item
//! 1). Where the connection goes (the node, its credentials) is still
//! `RedisConn`'s choice; only what is said on it is ours.

use bytes::{Buf, BytesMut};
use redis::{ConnectionAddr, ConnectionInfo};
use std::ops::Range;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest frame accepted: invalidation messages are tens of bytes; a
/// larger push (someone else's use of the channel) ends the connection,
/// which is then made again, rather than buffering without bound.
pub const MAX_FRAME: usize = 64 * 1024;

/// Why the connection cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("redis connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("redis answered an error: {0}")]
    Server(String),
    #[error("redis protocol: {0}")]
    Protocol(&'static str),
    #[error("redis address not supported by the subscriber: {0}")]
    Unsupported(String),
}

/// What a complete frame at the head of the buffer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A `message` push: the payload's bytes in the buffer.
    Message(Range<usize>),
    /// The answer to a `PING` in subscribed mode.
    Pong,
    /// `+OK` and the `subscribe` confirmation.
    Ok,
    /// An error reply (its text).
    Error(String),
}

/// A complete frame at the head of `buf` and its length, `None` while
/// incomplete.
pub fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, RespError> {
    let Some((head, mut pos)) = line(buf, 0)? else {
        return Ok(None);
    };
    match head.first() {
        Some(b'+') => return Ok(Some((Frame::Ok, pos))),
        Some(b'-') => {
            let text = String::from_utf8_lossy(&head[1..]).into_owned();
            return Ok(Some((Frame::Error(text), pos)));
        }
        Some(b'*') => {}
        _ => return Err(RespError::Protocol("unexpected frame type")),
    }
    let n = number(&head[1..])?;
    if !(1..=4).contains(&n) {
        return Err(RespError::Protocol("unexpected array length"));
    }
    // At most four elements, each a bulk string or an integer.
    let mut items: [Option<Range<usize>>; 4] = Default::default();
    for item in items.iter_mut().take(n) {
        let Some((h, after)) = line(buf, pos)? else {
            return Ok(None);
        };
        match h.first() {
            Some(b':') => {
                number(&h[1..])?;
                pos = after;
            }
            Some(b'$') => {
                let len = number(&h[1..])?;
                let end = after + len;
                if end + 2 > MAX_FRAME {
                    return Err(RespError::Protocol("frame too long"));
                }
                if buf.len() < end + 2 {
                    return Ok(None);
                }
                if &buf[end..end + 2] != b"\r\n" {
                    return Err(RespError::Protocol("bulk string not ended"));
                }
                *item = Some(after..end);
                pos = end + 2;
            }
            _ => return Err(RespError::Protocol("unexpected array element")),
        }
    }
    let kind = items[0].clone().map(|r| &buf[r]);
    let frame = match (kind, n) {
        (Some(b"message"), 3) => Frame::Message(items[2].clone().unwrap_or(0..0)),
        (Some(b"pong"), 2) => Frame::Pong,
        (Some(b"subscribe"), 3) => Frame::Ok,
        _ => return Err(RespError::Protocol("unexpected push")),
    };
    Ok(Some((frame, pos)))
}

/// The line starting at `from` (without its `\r\n`) and where the next
/// starts; `None` while incomplete.
fn line(buf: &[u8], from: usize) -> Result<Option<(&[u8], usize)>, RespError> {
    let rest = buf.get(from..).unwrap_or_default();
    match memchr::memchr(b'\n', rest) {
        Some(i) if i > 0 && rest[i - 1] == b'\r' => Ok(Some((&rest[..i - 1], from + i + 1))),
        Some(_) => Err(RespError::Protocol("line not ended by CRLF")),
        None if rest.len() > 64 => Err(RespError::Protocol("header line too long")),
        None => Ok(None),
    }
}

/// A non-negative decimal of at most 18 digits.
fn number(s: &[u8]) -> Result<usize, RespError> {
    if s.is_empty() || s.len() > 18 || !s.iter().all(u8::is_ascii_digit) {
        return Err(RespError::Protocol("bad number"));
    }
    Ok(s.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')))
}

/// A command as a RESP array of bulk strings.
fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A subscribed connection.
pub struct Subscription {
    io: Box<dyn Io>,
    buf: BytesMut,
}

impl Subscription {
    /// Connects to `info`'s address, authenticates with its credentials and
    /// subscribes to `channel`, its confirmation read.
    pub async fn open(info: &ConnectionInfo, channel: &str) -> Result<Subscription, RespError> {
        let io: Box<dyn Io> = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
            ConnectionAddr::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            other => return Err(RespError::Unsupported(other.to_string())),
        };
        let mut sub = Subscription {
            io,
            buf: BytesMut::with_capacity(16 * 1024),
        };
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let auth = match settings.username() {
                Some(user) => command(&[b"AUTH", user.as_bytes(), password.as_bytes()]),
                None => command(&[b"AUTH", password.as_bytes()]),
            };
            sub.io.write_all(&auth).await?;
            sub.expect_ok().await?;
        }
        sub.io
            .write_all(&command(&[b"SUBSCRIBE", channel.as_bytes()]))
            .await?;
        sub.expect_ok().await?;
        Ok(sub)
    }

    /// Reads until one frame is complete: it must be `+OK` or the
    /// subscription's confirmation.
    async fn expect_ok(&mut self) -> Result<(), RespError> {
        loop {
            match self.frame()? {
                Some((Frame::Ok, n)) => {
                    self.consume(n);
                    return Ok(());
                }
                Some((Frame::Error(e), _)) => return Err(RespError::Server(e)),
                Some(_) => return Err(RespError::Protocol("unexpected answer")),
                None => {
                    if self.fill().await? == 0 {
                        return Err(RespError::Protocol("connection closed"));
                    }
                }
            }
        }
    }

    /// The complete frame at the head of the buffer, if any.
    pub fn frame(&self) -> Result<Option<(Frame, usize)>, RespError> {
        parse(&self.buf)
    }

    /// The bytes of the buffer (a [`Frame::Message`]'s range indexes them).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Drops the first `n` bytes (a frame handled).
    pub fn consume(&mut self, n: usize) {
        self.buf.advance(n);
    }

    /// Reads more bytes; 0: the connection was closed. Cancel-safe.
    pub async fn fill(&mut self) -> std::io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        self.io.read_buf(&mut self.buf).await
    }

    /// Sends a `PING` (answered by a [`Frame::Pong`]).
    pub async fn ping(&mut self) -> std::io::Result<()> {
        self.io.write_all(b"*1\r\n$4\r\nPING\r\n").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &[u8] = b"*3\r\n$7\r\nmessage\r\n$10\r\nsu:1:inval\r\n$15\r\n2 aB3xYz s.c.cn\r\n";

    #[test]
    fn messages_pongs_and_confirmations() {
        let (f, n) = parse(MSG).unwrap().unwrap();
        assert_eq!(n, MSG.len());
        match f {
            Frame::Message(r) => assert_eq!(&MSG[r], b"2 aB3xYz s.c.cn"),
            other => panic!("{other:?}"),
        }
        let pong = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n";
        assert_eq!(parse(pong).unwrap(), Some((Frame::Pong, pong.len())));
        let sub = b"*3\r\n$9\r\nsubscribe\r\n$10\r\nsu:1:inval\r\n:1\r\n";
        assert_eq!(parse(sub).unwrap(), Some((Frame::Ok, sub.len())));
        assert_eq!(parse(b"+OK\r\n").unwrap(), Some((Frame::Ok, 5)));
        assert_eq!(
            parse(b"-WRONGPASS invalid\r\n").unwrap(),
            Some((Frame::Error("WRONGPASS invalid".into()), 20))
        );
    }

    #[test]
    fn a_frame_split_anywhere_waits_for_the_rest() {
        let two: Vec<u8> = [MSG, MSG].concat();
        for cut in 0..MSG.len() {
            assert_eq!(parse(&MSG[..cut]).unwrap(), None, "cut at {cut}");
        }
        // Two frames back to back: the first, then the second.
        let (_, n) = parse(&two).unwrap().unwrap();
        assert_eq!(n, MSG.len());
        assert!(
            matches!(parse(&two[n..]).unwrap(), Some((Frame::Message(_), m)) if m == MSG.len())
        );
    }

    #[test]
    fn what_is_not_the_protocol_ends_the_connection() {
        for bad in [
            &b"$3\r\nabc\r\n"[..],
            b"*3\n",
            b"*9\r\n",
            b"*2\r\n$4\r\npong\r\n*0\r\n",
            b"*3\r\n$7\r\nmessage\r\n$10\r\nsu:1:inval\r\n$3\r\nabcXY",
            b"*3\r\n$7\r\nmessage\r\n$10\r\nsu:1:inval\r\n$-1\r\n",
            b"*3\r\n$8\r\nmessages\r\n$1\r\nx\r\n$1\r\ny\r\n",
            b"*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$99999\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(parse(&[b'x'; 100]).is_err(), "a line without end");
        assert_eq!(parse(&[b'*'; 10]).unwrap(), None, "short: more may come");
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            command(&[b"AUTH", b"u", b"p w"]),
            b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$3\r\np w\r\n"
        );
    }
}
