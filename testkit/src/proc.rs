//! Child processes tied to the test process's lifetime.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type SpawnReq = (Command, mpsc::Sender<std::io::Result<Child>>);

/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, so
/// all children are forked by this one thread, which lives as long as the
/// process.
fn supervisor() -> &'static Mutex<mpsc::Sender<SpawnReq>> {
    static TX: OnceLock<Mutex<mpsc::Sender<SpawnReq>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnReq>();
        std::thread::Builder::new()
            .name("testkit-supervisor".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // Keep the thread (and so the children) alive until exit.
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn supervisor");
        Mutex::new(tx)
    })
}

/// A running child process, killed (SIGKILL) on drop.
pub struct Proc {
    child: Option<Child>,
    name: String,
    log: PathBuf,
}

/// Spawns `cmd` with stdout/stderr appended to `log`; the child gets SIGKILL
/// if the test process dies.
pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Proc {
    use std::os::unix::process::CommandExt;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open log");
    let err = out.try_clone().expect("clone log fd");
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: prctl is async-signal-safe and touches no Rust state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    supervisor()
        .lock()
        .expect("supervisor lock")
        .send((cmd, tx))
        .expect("supervisor alive");
    let child = rx
        .recv()
        .expect("supervisor reply")
        .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    Proc {
        child: Some(child),
        name: name.to_owned(),
        log: log.to_owned(),
    }
}

impl Proc {
    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Sends `sig` (e.g. `libc::SIGTERM`).
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: plain kill(2) on our own child.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL (when `proc` runs), then wait until nothing accepts on
    /// 127.0.0.1:`port`: a server gone as a crash leaves it.
    pub fn kill_listener(
        proc: &mut Option<Proc>,
        port: u16,
        name: &str,
        timeout: std::time::Duration,
    ) {
        if let Some(mut p) = proc.take() {
            p.kill();
        }
        crate::wait::wait_for(&format!("{name} port to close"), timeout, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        });
    }

    /// SIGTERM, then wait for exit (SIGKILL after `grace`). Returns the exit code if any.
    pub fn terminate(&mut self, grace: std::time::Duration) -> Option<i32> {
        let mut c = self.child.take()?;
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + grace;
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return st.code();
            }
            if std::time::Instant::now() >= deadline {
                let _ = c.kill();
                return c.wait().ok().and_then(|s| s.code());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// True while the child has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The log file's contents (for assertions and failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Path of a binary of this workspace, next to the running test
/// executable (`<target>/<profile>/deps/...` → `<target>/<profile>/<name>`).
///
/// The first call per binary runs `cargo build --bin <name>` for the same
/// profile and target directory (a no-op when it is fresh), so `cargo test`
/// alone works on a clean checkout and never runs a stale binary of another
/// package.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    build_once(name, profile_dir);
    let p = profile_dir.join(name);
    assert!(
        p.exists(),
        "{} not built: run `cargo build --workspace` first",
        p.display()
    );
    p
}

/// The workspace under test: the nearest directory holding `Cargo.lock`
/// above the running test's package (cargo sets `CARGO_MANIFEST_DIR` when
/// it runs a test). Read at run time: testkit's own path, compiled in, may
/// name another checkout that shared the target directory, since removed.
pub(crate) fn workspace_root() -> Option<PathBuf> {
    let package = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    package
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .map(Path::to_path_buf)
}

fn build_once(name: &str, profile_dir: &Path) {
    static BUILT: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
    if built.contains(name) {
        return;
    }
    // Only when run by cargo (it sets CARGO); a test binary run by hand uses
    // what is there.
    let (Some(cargo), Some(target), Some(profile), Some(root)) = (
        std::env::var_os("CARGO"),
        profile_dir.parent(),
        profile_dir.file_name().and_then(|p| p.to_str()),
        workspace_root(),
    ) else {
        return;
    };
    let profile = if profile == "debug" { "dev" } else { profile };
    let out = Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--quiet", "--bin", name, "--profile", profile])
        .arg("--target-dir")
        .arg(target)
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build --bin {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    built.insert(name.to_owned());
}
