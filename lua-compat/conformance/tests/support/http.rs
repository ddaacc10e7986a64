//! A raw HTTP/1.x client: the suite controls every byte of the request
//! (missing Host, HTTP/1.0, odd paths) and sees every byte of the answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One request as sent.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// `None`: no Host header at all.
    pub host: Option<String>,
    /// "1.1" (default) or "1.0".
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

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `req` on a fresh connection to 127.0.0.1:`port` and reads the answer.
pub fn send(port: u16, req: &Request) -> std::io::Result<Response> {
    let s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(15)))?;
    s.set_nodelay(true)?;
    let version = if req.version.is_empty() {
        "1.1"
    } else {
        req.version.as_str()
    };
    let mut head = format!("{} {} HTTP/{version}\r\n", req.method, req.path);
    if let Some(h) = &req.host {
        head.push_str(&format!("Host: {h}\r\n"));
    }
    for (k, v) in &req.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !req.body.is_empty() || req.method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", req.body.len()));
    }
    head.push_str("\r\n");
    let mut reader = BufReader::new(s);
    reader.get_mut().write_all(head.as_bytes())?;
    reader.get_mut().write_all(&req.body)?;
    read_response(&mut reader, req.method == "HEAD")
}

fn read_response(reader: &mut BufReader<TcpStream>, head: bool) -> std::io::Result<Response> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
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

/// `GET path` with `Host: localhost`, panicking on transport errors.
pub fn get(port: u16, path: &str) -> Response {
    let req = Request {
        method: "GET".into(),
        path: path.into(),
        host: Some("localhost".into()),
        ..Default::default()
    };
    send(port, &req).unwrap_or_else(|e| panic!("GET {path} on {port}: {e}"))
}
