//! A mixed load for operations tests: each worker creates a link through
//! an edge, then follows it at once (a code created a moment ago is a record
//! the edge has not seen: its lookup reaches an origin), until stopped.
//! Every answer that is not the expected 201 and 302 is kept as a failure.
//!
//! Each worker is paced ([`PACE`]): the codes a test pre-generates must
//! outlast the load however fast the machine is (an unpaced load once
//! issued all 20,000 codes of a rolling-restart test and failed it).

use crate::http;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// At most one creation per worker per `PACE` (40 a second each).
pub const PACE: Duration = Duration::from_millis(25);

/// Workers creating and following links through an edge.
pub struct CreateAndFollow {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<(u64, Vec<String>)>>,
}

impl CreateAndFollow {
    /// Starts `n` workers against the edge on `port`, creating with the API
    /// key `key` on `domain` (and following with that Host).
    pub fn start(port: u16, key: &str, domain: &str, n: usize) -> CreateAndFollow {
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..n)
            .map(|w| {
                let stop = Arc::clone(&stop);
                let (auth, domain) = (format!("Bearer {key}"), domain.to_owned());
                std::thread::spawn(move || {
                    let (mut done, mut failed) = (0u64, Vec::new());
                    let mut i = 0;
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(wait) = next.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        next += PACE;
                        i += 1;
                        let url = format!("https://load.example/{w}/{i}");
                        let body = serde_json::json!({ "url": url, "domain": domain }).to_string();
                        let r = http::request(
                            port,
                            "POST",
                            "/api/v1/links",
                            &domain,
                            &[
                                ("Authorization", &auth),
                                ("Content-Type", "application/json"),
                            ],
                            body.as_bytes(),
                        );
                        if r.status != 201 {
                            failed.push(format!("create: {} {}", r.status, r.text()));
                            continue;
                        }
                        let code = r.json()["code"].as_str().unwrap_or("").to_owned();
                        let r = http::get(port, &format!("/{code}"), &domain);
                        if r.status == 302 && r.header("location") == Some(url.as_str()) {
                            done += 1;
                        } else {
                            failed.push(format!("follow /{code}: {} {}", r.status, r.text()));
                        }
                    }
                    (done, failed)
                })
            })
            .collect();
        CreateAndFollow { stop, workers }
    }

    /// Stops the workers: how many links were created and followed, and
    /// every failed request.
    pub fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let (mut done, mut failed) = (0, Vec::new());
        for w in self.workers {
            let (d, f) = w.join().unwrap();
            done += d;
            failed.extend(f);
        }
        (done, failed)
    }
}
