//! Debian's `chromedriver` (package `chromium-driver`) on a free loopback
//! port, driving a headless Debian `chromium` with its own temporary
//! profile: the admin console's browser tests speak WebDriver to it, with
//! the page helpers below (the browser navigates on its own time: they
//! poll until the page is what the test waits for).

pub use fantoccini::{Client, Locator};

use crate::proc::{spawn, Proc};
use crate::wait::wait_for_tcp;
use crate::{free_port, TempDir};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A running chromedriver.
pub struct ChromeDriver {
    pub proc: Proc,
    pub port: u16,
    /// Chromium's profile (and the driver's log).
    pub dir: TempDir,
}

fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.push("/usr/lib/chromium".into());
    dirs.iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

impl ChromeDriver {
    /// Starts chromedriver on a free loopback port and waits until it listens.
    /// Panics (with what to install) when Chromium or its driver is missing.
    pub fn start() -> ChromeDriver {
        let driver = find(&["chromedriver"])
            .expect("chromedriver not found: run scripts/deps.sh (Debian chromium-driver)");
        let port = free_port();
        let dir = TempDir::new("chromedriver");
        let mut cmd = Command::new(driver);
        cmd.arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .arg(format!(
                "--log-path={}",
                dir.path().join("driver.log").display()
            ));
        let proc = spawn("chromedriver", cmd, &dir.path().join("chromedriver.log"));
        wait_for_tcp(port, Duration::from_secs(30));
        ChromeDriver { proc, port, dir }
    }

    /// The WebDriver URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Capabilities for a headless Chromium with a private profile
    /// (`--no-sandbox`: tests often run as root in a container).
    pub fn capabilities(&self) -> serde_json::Map<String, serde_json::Value> {
        let binary = find(&["chromium", "chromium-browser"])
            .expect("chromium not found: run scripts/deps.sh (Debian chromium)");
        let profile = self.dir.path().join("profile");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": binary,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-dev-shm-usage",
                    "--disable-gpu",
                    "--no-first-run",
                    "--window-size=1280,1100",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        caps
    }
}

impl ChromeDriver {
    /// A WebDriver session on it. One at a time: sessions share the profile.
    pub async fn session(&self) -> fantoccini::Client {
        fantoccini::ClientBuilder::native()
            .capabilities(self.capabilities())
            .connect(&self.url())
            .await
            .expect("a WebDriver session on headless Chromium")
    }
}

/// Waits (polling, up to 30 s) until the URL's path is `path`.
pub async fn wait_path(c: &fantoccini::Client, path: &str) {
    let mut last = String::new();
    for _ in 0..300 {
        if let Ok(u) = c.current_url().await {
            if u.path() == path {
                return;
            }
            last = u.path().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("waited for {path}, still at {last}");
}

/// Waits (polling, up to 30 s) until the text of `#id` satisfies `want`;
/// returns it.
pub async fn wait_text(c: &fantoccini::Client, id: &str, want: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    for _ in 0..300 {
        if let Ok(e) = c.find(fantoccini::Locator::Id(id)).await {
            if let Ok(t) = e.text().await {
                if want(&t) {
                    return t;
                }
                last = t;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("#{id}: {last}");
}

/// The text of `#id` now.
pub async fn text(c: &fantoccini::Client, id: &str) -> String {
    c.find(fantoccini::Locator::Id(id))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

impl Drop for ChromeDriver {
    /// Chromium outlives a killed chromedriver (it is reparented, not
    /// signalled): a test that panicked before closing its session would
    /// leave one running. Every process whose command line names this
    /// driver's private profile is ours: stop them.
    fn drop(&mut self) {
        self.proc.kill();
        let profile = self.dir.path().join("profile");
        let needle = format!("--user-data-dir={}", profile.display());
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let ours = cmdline
                .split(|&b| b == 0)
                .any(|arg| arg == needle.as_bytes());
            if ours {
                // SAFETY: kill(2) on a process started by this driver.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}
