//! Debian's `pebble` (Let's Encrypt's test ACME server) on loopback, with
//! `pebble-challtestsrv` as its DNS server: every name resolves to
//! 127.0.0.1, and Pebble validates HTTP-01 challenges for real, by
//! connecting to `127.0.0.1:<http_port>` (an edge's plain listener) and
//! fetching `/.well-known/acme-challenge/<token>` with the name as `Host`.
//! Pebble's own HTTPS uses a certificate from a test CA ([`Pebble::ca_pem`]);
//! its issuing root is regenerated at every start ([`Pebble::root_pem`]).

use crate::proc::{spawn, Proc};
use crate::tls::{connect, ClientOpts};
use crate::wait::wait_for_tcp;
use crate::{free_port, TempDir};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A running Pebble with its DNS server.
pub struct Pebble {
    pub port: u16,
    pub mgmt_port: u16,
    dns_port: u16,
    http_port: u16,
    validity_secs: u64,
    dir: TempDir,
    ca_pem: Vec<u8>,
    dns: Option<Proc>,
    proc: Option<Proc>,
}

fn require(bin: &str) {
    let ok = Command::new(bin).arg("-h").output().is_ok();
    assert!(
        ok,
        "{bin} is not installed: run `make deps` (apt-get install pebble)"
    );
}

impl Pebble {
    /// Starts Pebble validating HTTP-01 on `http_port`, issuing
    /// certificates valid `validity_secs`.
    pub fn start(http_port: u16, validity_secs: u64) -> Pebble {
        require("pebble");
        require("pebble-challtestsrv");
        let dir = TempDir::new("pebble");
        let ca = crate::tls::Ca::new("pebble test ca");
        let server = ca.issue(&["localhost"], &["127.0.0.1"], 7);
        server.write(dir.path(), "server");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        let mut p = Pebble {
            port: free_port(),
            mgmt_port: free_port(),
            dns_port: free_port(),
            http_port,
            validity_secs,
            dir,
            ca_pem: ca.pem(),
            dns: None,
            proc: None,
        };
        p.start_dns();
        p.restart();
        p
    }

    fn start_dns(&mut self) {
        let mut cmd = Command::new("pebble-challtestsrv");
        cmd.args([
            "-dns01",
            &format!("127.0.0.1:{}", self.dns_port),
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
            "-management",
            &format!("127.0.0.1:{}", free_port()),
            "-defaultIPv4",
            "127.0.0.1",
            "-defaultIPv6",
            "",
        ]);
        let log = self.dir.path().join("dns.log");
        self.dns = Some(spawn("pebble-challtestsrv", cmd, &log));
        crate::wait::wait_for("challtestsrv DNS", Duration::from_secs(30), || {
            std::fs::read_to_string(&log).is_ok_and(|s| s.contains("Starting challenge servers"))
        });
    }

    /// The ACME directory URL.
    pub fn directory_url(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// The CA of Pebble's own HTTPS certificate (PEM).
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    /// That CA as a file (for `acme.ca_roots`).
    pub fn ca_pem_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The root Pebble issues under (PEM), from its management interface.
    pub fn root_pem(&self) -> Vec<u8> {
        let mut c = connect(
            self.mgmt_port,
            &ClientOpts {
                sni: Some("localhost"),
                roots: Some(&self.ca_pem),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("pebble management: {e}"));
        let r = c.get("/roots/0", "localhost").unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        r.body
    }

    /// Kills Pebble (SIGKILL); the DNS server keeps running.
    pub fn stop(&mut self) {
        Proc::kill_listener(&mut self.proc, self.port, "pebble", Duration::from_secs(30));
    }

    /// (Re)starts Pebble on the same ports: a fresh CA with no state (new
    /// roots, no accounts), as Pebble always starts.
    pub fn restart(&mut self) {
        self.stop();
        let d = self.dir.path();
        let cfg = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{}", self.port),
            "managementListenAddress": format!("127.0.0.1:{}", self.mgmt_port),
            "certificate": d.join("server.crt"),
            "privateKey": d.join("server.key"),
            "httpPort": self.http_port,
            "tlsPort": free_port(),
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "certificateValidityPeriod": self.validity_secs,
        }});
        let cfg_path = d.join("pebble.json");
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        let mut cmd = Command::new("pebble");
        cmd.arg("-config")
            .arg(&cfg_path)
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{}", self.dns_port))
            .arg("-strict=false")
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0");
        self.proc = Some(spawn("pebble", cmd, &d.join("pebble.log")));
        wait_for_tcp(self.port, Duration::from_secs(30));
        wait_for_tcp(self.mgmt_port, Duration::from_secs(30));
    }

    /// Pebble's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }
}
