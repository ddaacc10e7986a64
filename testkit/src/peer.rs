//! A stand-in HTTP peer for the requests an edge makes to an origin by
//! itself: its health check (answered as the test sets the peer's
//! [`Health`]), record fetches, the status merge, the heartbeat and the
//! whitelist. It records every request it gets (method, path,
//! `Authorization`), so a test can see which origins an edge considers
//! healthy and what its own requests carry. Any other request (a forwarded
//! API call) gets a small JSON 200 naming the peer.
//!
//! It is not an origin: tests of the edge against one start the real
//! `shorturl-origin`. Plain threads and blocking sockets; HTTP/1.1 with
//! keep-alive and `Content-Length` bodies, as the edges speak it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the peer's `/healthz` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// `200 {"status":"ok"}`, `Shorturl-Health: ok`.
    Ok,
    /// `503 {"status":"draining"}`, `Shorturl-Health: draining`,
    /// `Connection: close`: an origin about to stop (protocol 5, `/healthz`).
    Draining,
    /// `503` without `Shorturl-Health` (as an origin whose MySQL is down
    /// answered before the header existed).
    Unavailable,
}

/// One request the peer got.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The request target (path and query).
    pub path: String,
    /// The `Authorization` value, if the request had one.
    pub authorization: Option<String>,
}

struct State {
    health: Health,
    seen: Vec<Seen>,
    /// Close a connection when a second request arrives on it, unanswered.
    drop_reused: bool,
    /// Requests dropped that way.
    dropped: usize,
    /// Connections accepted, and closed by the client while idle.
    connections: usize,
    closed_idle: usize,
    /// The `Authorization` value internal routes and the status require.
    token: Option<String>,
}

/// A running stand-in peer on a loopback port; it stops accepting when
/// dropped.
pub struct Peer {
    port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl Peer {
    /// Starts a peer whose health is [`Health::Ok`].
    pub fn start() -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            health: Health::Ok,
            seen: Vec::new(),
            drop_reused: false,
            dropped: 0,
            connections: 0,
            closed_idle: 0,
            token: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, halt) = (Arc::clone(&state), Arc::clone(&stop));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if halt.load(Ordering::Acquire) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                lock(&st).connections += 1;
                let (st, halt) = (Arc::clone(&st), Arc::clone(&halt));
                std::thread::spawn(move || serve(stream, &st, &halt));
            }
        });
        Peer { port, state, stop }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, for an edge's origin list.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What `/healthz` answers from now on.
    pub fn set_health(&self, health: Health) {
        lock(&self.state).health = health;
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.state).seen.clone()
    }

    /// The requests so far that `pred` selects.
    pub fn count(&self, pred: impl Fn(&Seen) -> bool) -> usize {
        lock(&self.state).seen.iter().filter(|s| pred(s)).count()
    }

    /// Health checks (`GET /healthz`) so far.
    pub fn health_checks(&self) -> usize {
        self.count(|s| s.path == "/healthz")
    }

    /// From now on, a connection that was already answered once is closed,
    /// unanswered, when its next request arrives: an origin closing an idle
    /// keep-alive connection just as a client sends on it.
    pub fn set_drop_reused(&self, on: bool) {
        lock(&self.state).drop_reused = on;
    }

    /// From now on, `/internal/...` and `/shorturl_status` answer `401
    /// {"error":"unauthorized"}` unless `Authorization` is exactly this
    /// (`None`: anything goes), as an origin with an internal token.
    pub fn require_authorization(&self, value: Option<&str>) {
        lock(&self.state).token = value.map(str::to_owned);
    }

    /// Requests dropped by [`Peer::set_drop_reused`].
    pub fn dropped(&self) -> usize {
        lock(&self.state).dropped
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        lock(&self.state).connections
    }

    /// Connections the client closed while idle (between requests) after
    /// they served a request other than a health check.
    pub fn closed_idle(&self) -> usize {
        lock(&self.state).closed_idle
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop, which then closes the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one connection until the client closes it, the peer stops, or
/// an answer closes it.
fn serve(stream: TcpStream, state: &Mutex<State>, stop: &AtomicBool) {
    let mut r = BufReader::new(stream);
    let (mut answered, mut beyond_health) = (0usize, false);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            if beyond_health {
                lock(state).closed_idle += 1;
            }
            return;
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        let (mut len, mut authorization, mut close) = (0usize, None, false);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" || h == "\n" {
                break;
            }
            let Some((name, value)) = h.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = value.parse().unwrap_or(0),
                "authorization" => authorization = Some(value.to_owned()),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let (status, headers, body) = {
            let mut st = lock(state);
            if st.drop_reused && answered > 0 {
                st.dropped += 1;
                return;
            }
            let refused = st.token.is_some()
                && (path.starts_with("/internal/") || path == "/shorturl_status")
                && authorization != st.token;
            st.seen.push(Seen {
                method: method.clone(),
                path: path.clone(),
                authorization,
            });
            if refused {
                (
                    "401 Unauthorized",
                    "",
                    r#"{"error":"unauthorized","message":"internal token required"}"#.to_owned(),
                )
            } else {
                answer(&method, &path, st.health)
            }
        };
        close |= headers.contains("Connection: close");
        let resp = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{body}",
            body.len()
        );
        if r.get_mut().write_all(resp.as_bytes()).is_err() || close {
            return;
        }
        answered += 1;
        beyond_health |= path != "/healthz";
    }
}

/// Status line, extra header lines and body for a request.
fn answer(method: &str, path: &str, health: Health) -> (&'static str, &'static str, String) {
    match (method, path) {
        ("GET", "/healthz") => match health {
            Health::Ok => (
                "200 OK",
                "Shorturl-Health: ok\r\n",
                r#"{"status":"ok"}"#.into(),
            ),
            Health::Draining => (
                "503 Service Unavailable",
                "Shorturl-Health: draining\r\nConnection: close\r\n",
                r#"{"status":"draining"}"#.into(),
            ),
            Health::Unavailable => (
                "503 Service Unavailable",
                "",
                r#"{"status":"degraded"}"#.into(),
            ),
        },
        ("GET", "/shorturl_status") => (
            "200 OK",
            "",
            concat!(
                r#"{"service":"origin","mysql":{"update":0,"select":0,"error":0},"#,
                r#""issuer":{"current":0,"capacity":0,"remaining":0,"error":0,"exhausted":false}}"#
            )
            .into(),
        ),
        ("GET", "/internal/v1/domains") => (
            "200 OK",
            "",
            r#"{"default_domain":"localhost","domains":["localhost"]}"#.into(),
        ),
        // Every code is unknown here (a protocol 2 negative record).
        ("GET", p) if p.starts_with("/internal/v1/records/") => {
            ("404 Not Found", "", "- 0\n".into())
        }
        ("POST", "/internal/v1/heartbeat") => ("204 No Content", "", String::new()),
        _ => ("200 OK", "", r#"{"peer":"stand-in"}"#.into()),
    }
}
