//! A raw HTTP/1.x client over one TCP connection: tests control every byte
//! of the request (missing Host, HTTP/1.0, odd paths) and see exactly what a
//! server sends back (status, headers, body, keep-alive), with no client
//! library hiding it. Shared by the edge tests and the conformance suite.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// One request as sent by [`send`].
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// `None`: no Host header at all.
    pub host: Option<String>,
    /// "1.1" (default when empty) or "1.0".
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// First header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// One keep-alive connection.
pub struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// Connects to 127.0.0.1:`port`.
    pub fn open(port: u16) -> std::io::Result<Conn> {
        Conn::from_stream(TcpStream::connect(("127.0.0.1", port))?)
    }

    /// Connects to 127.0.0.1:`port` from the local address `from`, so one
    /// test can be many clients (Linux routes all of 127.0.0.0/8 to `lo`).
    pub fn open_from(from: IpAddr, port: u16) -> std::io::Result<Conn> {
        Conn::from_stream(connect_from(from, port)?)
    }

    fn from_stream(s: TcpStream) -> std::io::Result<Conn> {
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(s),
        })
    }

    /// Sends a request and reads the whole response.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        host: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        self.send_version("1.1", method, path, host, headers, body)
    }

    /// Like [`Conn::send`] with an explicit HTTP version ("1.0" or "1.1").
    pub fn send_version(
        &mut self,
        version: &str,
        method: &str,
        path: &str,
        host: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        let req = request_bytes(version, method, path, host, headers, body);
        self.reader.get_mut().write_all(&req)?;
        self.read_response(method == "HEAD")
    }

    /// The underlying stream (to observe the server closing it).
    pub fn into_stream(self) -> TcpStream {
        self.reader.into_inner()
    }

    /// `GET path` with `Host: host`.
    pub fn get(&mut self, path: &str, host: &str) -> std::io::Result<Response> {
        self.send("GET", path, Some(host), &[], b"")
    }

    fn read_response(&mut self, head: bool) -> std::io::Result<Response> {
        read_response(&mut self.reader, head)
    }
}

/// The bytes of an HTTP/1.x request (a `Content-Length` for bodies and POSTs).
pub fn request_bytes(
    version: &str,
    method: &str,
    path: &str,
    host: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/{version}\r\n");
    if let Some(h) = host {
        req.push_str(&format!("Host: {h}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut out = req.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Reads one response (status line, headers, body by length, chunks or
/// until close) from any buffered stream.
pub fn read_response<R: BufRead>(reader: &mut R, head: bool) -> std::io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if head || status == 204 || status == 304 {
        return Ok(resp);
    }
    if let Some(len) = resp
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        resp.body = body;
    } else if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim(), 16).map_err(std::io::Error::other)?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            resp.body.extend_from_slice(&chunk[..size]);
        }
    } else {
        reader.read_to_end(&mut resp.body)?;
    }
    Ok(resp)
}

/// A TCP connection to 127.0.0.1:`port` whose source address is `from`.
pub fn connect_from(from: IpAddr, port: u16) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    sock.bind(&SocketAddr::new(from, 0).into())?;
    sock.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    Ok(sock.into())
}

/// One request on a fresh connection.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut c = Conn::open(port).unwrap_or_else(|e| panic!("connect to {port}: {e}"));
    c.send(method, path, Some(host), headers, body)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// An API call on a fresh connection: `Authorization: Bearer <key>` and,
/// unless `body` is `Null`, a JSON body (`Host: localhost`).
pub fn api(port: u16, key: &str, method: &str, path: &str, body: &serde_json::Value) -> Response {
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Authorization", auth.as_str())];
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        headers.push(("Content-Type", "application/json"));
        body.to_string().into_bytes()
    };
    request(port, method, path, "localhost", &headers, &bytes)
}

/// `GET path` on a fresh connection.
pub fn get(port: u16, path: &str, host: &str) -> Response {
    request(port, "GET", path, host, &[], b"")
}

/// Sends `req` on a fresh connection to 127.0.0.1:`port` and reads the answer.
pub fn send(port: u16, req: &Request) -> std::io::Result<Response> {
    let mut c = Conn::open(port)?;
    let version = if req.version.is_empty() {
        "1.1"
    } else {
        req.version.as_str()
    };
    let headers: Vec<(&str, &str)> = req
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    c.send_version(
        version,
        &req.method,
        &req.path,
        req.host.as_deref(),
        &headers,
        &req.body,
    )
}

/// What a server did with raw bytes: its answer (`None`: it closed the
/// connection without one) and whether it closed the connection after it.
#[derive(Debug, Clone)]
pub struct RawExchange {
    pub response: Option<Response>,
    pub closed: bool,
}

/// Sends `bytes` as they are on a fresh connection to 127.0.0.1:`port` and
/// reads one answer. When the answer says `Connection: close` (or there is
/// none), waits for the server to actually close; `keep-alive` counts as
/// kept open; without either (HTTP/1.0 answers), the connection is closed
/// if the server closes it within 200 ms.
pub fn exchange_raw(port: u16, bytes: &[u8]) -> std::io::Result<RawExchange> {
    let mut c = Conn::open(port)?;
    c.reader.get_mut().write_all(bytes)?;
    let response = match c.read_response(false) {
        Ok(r) => Some(r),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            None
        }
        Err(e) => return Err(e),
    };
    let connection = response
        .as_ref()
        .map_or(Some("close"), |r| r.header("connection"));
    let closed = match connection {
        Some(v) if v.eq_ignore_ascii_case("keep-alive") => false,
        Some(v) if v.eq_ignore_ascii_case("close") => closes(&mut c, Duration::from_secs(10))?,
        _ => closes(&mut c, Duration::from_millis(200))?,
    };
    Ok(RawExchange { response, closed })
}

/// True when the server closes the connection within `wait`.
fn closes(c: &mut Conn, wait: Duration) -> std::io::Result<bool> {
    c.reader.get_mut().set_read_timeout(Some(wait))?;
    let mut rest = Vec::new();
    match c.reader.read_to_end(&mut rest) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
