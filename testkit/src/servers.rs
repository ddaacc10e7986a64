//! Private Redis and MariaDB servers from the Debian packages.

use crate::proc::{spawn, Proc};
use crate::wait::{wait_for, wait_for_tcp};
use crate::{free_port, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const START_TIMEOUT: Duration = Duration::from_secs(60);

fn require(bin: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).exists()))
        .unwrap_or(false);
    let sbin =
        Path::new("/usr/sbin").join(bin).exists() || Path::new("/usr/bin").join(bin).exists();
    assert!(
        found || sbin,
        "{bin} is not installed: run `make deps` (apt-get install redis-server mariadb-server)"
    );
}

/// A private `redis-server` on a free loopback port: no persistence, or
/// (with [`Redis::start_persistent`]) an append-only file synced on every
/// write, so a restart keeps everything it acknowledged.
pub struct Redis {
    port: u16,
    dir: TempDir,
    proc: Option<Proc>,
    persistent: bool,
}

impl Redis {
    /// Starts a server and waits until it accepts connections.
    pub fn start() -> Redis {
        Redis::start_with(false)
    }

    /// A server that keeps its data across [`Redis::restart`] (AOF,
    /// `appendfsync always`), as an analytics Redis should be run.
    pub fn start_persistent() -> Redis {
        Redis::start_with(true)
    }

    fn start_with(persistent: bool) -> Redis {
        require("redis-server");
        let mut r = Redis {
            port: free_port(),
            dir: TempDir::new("redis"),
            proc: None,
            persistent,
        };
        r.restart();
        r
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL): a crash, as far as clients can tell.
    pub fn stop(&mut self) {
        Proc::kill_listener(&mut self.proc, self.port, "redis", START_TIMEOUT);
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing is
    /// answered, as in a network cut that sends no FIN.
    pub fn pause(&self) {
        if let Some(p) = &self.proc {
            p.signal(libc::SIGSTOP);
        }
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        if let Some(p) = &self.proc {
            p.signal(libc::SIGCONT);
        }
    }

    /// (Re)starts the server on the same port: empty, or for a persistent
    /// one with what it held.
    pub fn restart(&mut self) {
        self.stop();
        let mut cmd = Command::new("redis-server");
        let aof: &[&str] = if self.persistent {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &["--appendonly", "no"]
        };
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(aof)
        .arg("--dir")
        .arg(self.dir.path())
        .args(["--daemonize", "no", "--protected-mode", "no"]);
        let log = self.dir.path().join("redis.log");
        self.proc = Some(spawn("redis-server", cmd, &log));
        wait_for_tcp(self.port, START_TIMEOUT);
    }
}

/// A private `mariadbd` with its own datadir, on a free loopback port; the
/// user `root` has no password over TCP from 127.0.0.1.
pub struct MariaDb {
    port: u16,
    /// Declared before `dir`: fields drop in order, so the server is
    /// killed before its datadir is removed.
    proc: Option<Proc>,
    dir: TempDir,
    /// Replication role: `None` for a plain server (no binary log), else
    /// its `server-id` (a primary logs binary changes, a replica follows one).
    server_id: Option<u32>,
    /// A scratch server ([`MariaDb::start_scratch`]): settings for bulk work.
    scratch: bool,
}

fn template_dir() -> PathBuf {
    // One initialised datadir per machine user, copied for each server: saves
    // the install step (and its fsyncs) for every test.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("shorturl-mariadb-template-{uid}"))
}

fn ensure_template() -> PathBuf {
    // Threads of one test process build it once (they would share the
    // staging directory below); other processes race only on the rename.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tpl = template_dir();
    if tpl.join("mysql").exists() {
        return tpl;
    }
    require("mariadb-install-db");
    let staging = tpl.with_extension(format!("staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let out = Command::new("mariadb-install-db")
        .arg("--no-defaults")
        .arg(format!("--datadir={}", staging.display()))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
        ])
        .output()
        .expect("run mariadb-install-db");
    assert!(
        out.status.success(),
        "mariadb-install-db failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Rename is atomic: a concurrent test process either wins or finds the template.
    if std::fs::rename(&staging, &tpl).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    tpl
}

impl MariaDb {
    /// Starts a server with a fresh datadir and waits until it is ready.
    pub fn start() -> MariaDb {
        MariaDb::start_with_id(None, false)
    }

    /// A private server for bulk work (a million rows and their index
    /// builds): its datadir in memory, a buffer pool that holds such a
    /// table, and no flush per commit. On the shared server the same work
    /// stalled every other test's queries past the origin's
    /// `mysql.timeout_ms` (redo-log checkpoints, a buffer pool resize);
    /// on the disk it would queue their fsyncs behind it.
    pub fn start_scratch() -> MariaDb {
        MariaDb::start_with_id(None, true)
    }

    /// A replication primary: binary log on, `server-id` 1.
    pub fn start_primary() -> MariaDb {
        MariaDb::start_with_id(Some(1), false)
    }

    /// A replica of `primary` (`server-id` 2), replicating everything the
    /// primary logged since it started (`CHANGE MASTER TO` + `START SLAVE`).
    pub fn start_replica_of(primary: &MariaDb) -> MariaDb {
        let r = MariaDb::start_with_id(Some(2), false);
        r.sql(&format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', \
             MASTER_PASSWORD=''; START SLAVE",
            primary.port
        ));
        r
    }

    /// Waits until this replica has applied everything `primary` has logged
    /// so far (`MASTER_POS_WAIT` on the primary's current binlog position).
    pub fn wait_caught_up(&self, primary: &MariaDb) {
        let status = primary.sql("SHOW MASTER STATUS");
        let mut cols = status.split('\t');
        let (file, pos) = (cols.next().unwrap_or(""), cols.next().unwrap_or("0").trim());
        // The number of events it waited for (0: none were left), -1 past
        // the timeout, NULL when the replica is not replicating.
        let got = self.sql(&format!("SELECT MASTER_POS_WAIT('{file}', {pos}, 30)"));
        assert!(
            got.trim().parse::<u64>().is_ok(),
            "replica did not catch up with {file}:{pos}: MASTER_POS_WAIT said {got:?}"
        );
    }

    /// Stops applying the primary's changes (`STOP SLAVE`).
    pub fn pause_replication(&self) {
        self.sql("STOP SLAVE");
    }

    fn start_with_id(server_id: Option<u32>, scratch: bool) -> MariaDb {
        require("mariadbd");
        let tpl = ensure_template();
        let dir = if scratch {
            TempDir::in_memory("mariadb")
        } else {
            TempDir::new("mariadb")
        };
        let st = Command::new("cp")
            .arg("-a")
            .arg(&tpl)
            .arg(dir.path().join("data"))
            .status()
            .expect("cp");
        assert!(st.success(), "copy mariadb template");
        let mut m = MariaDb {
            port: free_port(),
            proc: None,
            dir,
            server_id,
            scratch,
        };
        m.restart();
        m
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://root@127.0.0.1:<port>/<db>`.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `db` (via the `mariadb` client) and returns its URL.
    pub fn create_database(&self, db: &str) -> String {
        self.sql(&format!("CREATE DATABASE IF NOT EXISTS `{db}`"));
        self.url(db)
    }

    /// Runs SQL through the `mariadb` command-line client; returns stdout (tab-separated, no headers).
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("sql {sql:?} failed: {e}"))
    }

    /// Like [`MariaDb::sql`], but a failing statement is an `Err` (e.g. a table that does not exist yet).
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        use std::io::Write;
        // SQL goes through stdin: statements may be longer than an argument may be.
        let mut child = Command::new("mariadb")
            .args(["-h127.0.0.1", "-uroot", "-N", "-B"])
            .arg(format!("-P{}", self.port))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run mariadb client");
        let mut stdin = child.stdin.take().expect("stdin");
        let text = sql.to_owned();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
            let _ = stdin.write_all(b";\n");
        });
        let out = child.wait_with_output().expect("mariadb client output");
        let _ = writer.join();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Kills the server (SIGKILL: InnoDB recovers on restart).
    pub fn stop(&mut self) {
        Proc::kill_listener(&mut self.proc, self.port, "mariadb", START_TIMEOUT);
    }

    /// (Re)starts the server on the same port and datadir.
    pub fn restart(&mut self) {
        self.stop();
        let d = self.dir.path();
        let mut cmd = Command::new("mariadbd");
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", d.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", d.join("mysqld.pid").display()))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-name-resolve",
                "--max-connections=500",
            ]);
        if self.scratch {
            cmd.args([
                "--innodb-buffer-pool-size=768M",
                "--innodb-log-file-size=512M",
                "--innodb-flush-log-at-trx-commit=0",
                // tmpfs has no O_DIRECT.
                "--innodb-flush-method=fsync",
            ]);
        } else {
            cmd.arg("--innodb-buffer-pool-size=64M");
        }
        match self.server_id {
            None => {
                cmd.arg("--skip-log-bin");
            }
            Some(id) => {
                cmd.arg(format!("--server-id={id}"))
                    .arg(format!("--log-bin={}", d.join("binlog").display()))
                    .arg("--binlog-format=ROW");
            }
        }
        let log = d.join("mariadb.log");
        let _ = std::fs::remove_file(&log);
        let proc = spawn("mariadbd", cmd, &log);
        wait_for("mariadb ready for connections", START_TIMEOUT, || {
            std::fs::read_to_string(&log)
                .map(|s| s.contains("ready for connections"))
                .unwrap_or(false)
        });
        wait_for_tcp(self.port, START_TIMEOUT);
        self.proc = Some(proc);
    }
}

/// A private standalone ZooKeeper (Debian's `zookeeper` package, run by
/// `java`) on a free loopback port, with its own data directory (kept
/// across [`ZooKeeper::restart`]). A short tick (500 ms) lets sessions be
/// as short as 1 s.
pub struct ZooKeeper {
    port: u16,
    dir: TempDir,
    proc: Option<Proc>,
}

/// The server's jar; its manifest names the libraries it needs.
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

impl ZooKeeper {
    /// Starts a server and waits until it answers `ruok`.
    pub fn start() -> ZooKeeper {
        require_zookeeper();
        let mut z = ZooKeeper {
            port: free_port(),
            dir: TempDir::new("zookeeper"),
            proc: None,
        };
        z.restart();
        z
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connect string, `127.0.0.1:<port>`.
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits until its port is closed.
    pub fn stop(&mut self) {
        Proc::kill_listener(&mut self.proc, self.port, "zookeeper", START_TIMEOUT);
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is
    /// answered, and sessions time out meanwhile (they expire once it goes
    /// on).
    pub fn pause(&self) {
        if let Some(p) = &self.proc {
            p.signal(libc::SIGSTOP);
        }
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        if let Some(p) = &self.proc {
            p.signal(libc::SIGCONT);
        }
    }

    /// (Re)starts the server on the same port with the data it had.
    pub fn restart(&mut self) {
        self.stop();
        let cfg = self.dir.path().join("zoo.cfg");
        let conf = format!(
            "tickTime=500\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n4lw.commands.whitelist=ruok\nmaxClientCnxns=0\n",
            self.dir.path().join("data").display(),
            self.port
        );
        std::fs::write(&cfg, conf).expect("write zoo.cfg");
        let cmd = zookeeper_cmd("org.apache.zookeeper.server.ZooKeeperServerMain", &cfg);
        let log = self.dir.path().join("zookeeper.log");
        self.proc = Some(spawn("zookeeper", cmd, &log));
        let port = self.port;
        wait_for("zookeeper to answer ruok", START_TIMEOUT, || ruok(port));
    }
}

fn require_zookeeper() {
    assert!(
        Path::new(ZOOKEEPER_JAR).exists(),
        "ZooKeeper is not installed: run `make deps` (apt-get install zookeeper)"
    );
}

/// `java` running ZooKeeper's `main` class (standalone or quorum member)
/// on the config file `cfg`, with a small heap.
fn zookeeper_cmd(main: &str, cfg: &Path) -> Command {
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx128m", "-XX:+UseSerialGC", "-cp", ZOOKEEPER_JAR])
        .arg(main)
        .arg(cfg);
    cmd
}

/// Whether the server on `port` answers the `ruok` command with `imok`.
fn ruok(port: u16) -> bool {
    four_letters(port, "ruok").is_some_and(|out| out == "imok")
}

/// A four-letter command's answer from the server on `port`.
fn four_letters(port: u16, cmd: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// A private three-member ZooKeeper ensemble on free loopback ports (each
/// member a `java` process with its own data directory).
pub struct ZooKeeperEnsemble {
    /// Client port of each member.
    ports: Vec<u16>,
    members: Vec<Option<Proc>>,
    dir: TempDir,
}

impl ZooKeeperEnsemble {
    /// Starts three members and waits until each is a leader or follower.
    pub fn start() -> ZooKeeperEnsemble {
        require_zookeeper();
        let dir = TempDir::new("zk-ensemble");
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let quorum: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let servers: String = quorum
            .iter()
            .enumerate()
            .map(|(i, (peer, election))| format!("server.{}=127.0.0.1:{peer}:{election}\n", i + 1))
            .collect();
        let mut members = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let data = dir.path().join(format!("member{}", i + 1));
            std::fs::create_dir_all(&data).expect("member data dir");
            std::fs::write(data.join("myid"), format!("{}\n", i + 1)).expect("myid");
            let cfg = data.join("zoo.cfg");
            let conf = format!(
                "tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={port}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=ruok,srvr\nmaxClientCnxns=0\n{servers}",
                data.display()
            );
            std::fs::write(&cfg, conf).expect("write zoo.cfg");
            let cmd = zookeeper_cmd("org.apache.zookeeper.server.quorum.QuorumPeerMain", &cfg);
            members.push(Some(spawn(
                &format!("zookeeper-{}", i + 1),
                cmd,
                &data.join("zookeeper.log"),
            )));
        }
        let e = ZooKeeperEnsemble {
            ports,
            members,
            dir,
        };
        for i in 0..3 {
            wait_for(
                "an ensemble member to join the quorum",
                START_TIMEOUT,
                || e.mode(i).is_some(),
            );
        }
        e
    }

    /// The connect string of every member.
    pub fn hosts(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s role (`leader`, `follower`), or `None` while it is not
    /// serving (down, or no quorum).
    pub fn mode(&self, i: usize) -> Option<String> {
        let out = four_letters(self.ports[i], "srvr")?;
        let mode = out.lines().find_map(|l| l.strip_prefix("Mode: "))?.trim();
        matches!(mode, "leader" | "follower").then(|| mode.to_owned())
    }

    /// The member that leads now, if one does.
    pub fn leader(&self) -> Option<usize> {
        (0..self.ports.len()).find(|&i| self.mode(i).as_deref() == Some("leader"))
    }

    /// Kills member `i` (SIGKILL) and waits until its client port is closed.
    pub fn kill(&mut self, i: usize) {
        Proc::kill_listener(
            &mut self.members[i],
            self.ports[i],
            "an ensemble member's",
            START_TIMEOUT,
        );
    }

    /// Where the members keep their data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
