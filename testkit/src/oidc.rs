//! A real OpenID provider: the `oidc-provider` package (OpenID Certified)
//! from the npm registry, run by Node from `testkit/oidc/provider.mjs`
//! (installed by `scripts/deps.sh`; its accounts and claims are listed
//! there). It listens on 127.0.0.2, another site than the console's
//! 127.0.0.1 for the browser, as a real provider is.

use crate::proc::{spawn, workspace_root, Proc};
use crate::wait::wait_for;
use crate::{free_port, TempDir};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The provider's address (the console under test is on 127.0.0.1).
pub const HOST: &str = "127.0.0.2";

/// A running provider with one confidential client.
pub struct OidcProvider {
    pub port: u16,
    client_id: String,
    client_secret: String,
    redirect_uri: String,
    dir: TempDir,
    proc: Option<Proc>,
}

/// The provider script of the checkout under test, found at run time (see
/// `proc::workspace_root`): a path compiled into testkit may name another
/// checkout that shared the target directory.
fn script() -> PathBuf {
    let root =
        workspace_root().unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
    let p = root.join("testkit/oidc/provider.mjs");
    let module = p.with_file_name("node_modules/oidc-provider/package.json");
    assert!(
        module.exists(),
        "{} is missing: run `make deps` (scripts/deps.sh installs oidc-provider)",
        module.display()
    );
    p
}

impl OidcProvider {
    /// Starts the provider with client `client_id`/`client_secret` whose
    /// one redirect URI is `redirect_uri`.
    pub fn start(client_id: &str, client_secret: &str, redirect_uri: &str) -> OidcProvider {
        let mut p = OidcProvider {
            port: free_port(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            redirect_uri: redirect_uri.into(),
            dir: TempDir::new("oidc-provider"),
            proc: None,
        };
        p.restart();
        p
    }

    /// The issuer identifier (no trailing slash, as the provider says it).
    pub fn issuer(&self) -> String {
        format!("http://{HOST}:{}", self.port)
    }

    /// Starts it again (after [`OidcProvider::stop`]): a fresh provider
    /// with new signing keys and no sessions.
    pub fn restart(&mut self) {
        let mut cmd = Command::new("node");
        cmd.arg(script()).args([
            HOST,
            &self.port.to_string(),
            &self.client_id,
            &self.client_secret,
            &self.redirect_uri,
        ]);
        let log = self.dir.path().join("provider.log");
        self.proc = Some(spawn("oidc-provider", cmd, &log));
        let port = self.port;
        wait_for(
            &format!("oidc-provider on {HOST}:{port}"),
            Duration::from_secs(30),
            || std::net::TcpStream::connect((HOST, port)).is_ok(),
        );
    }

    /// Stops it (a provider that is down).
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("provider.log")).unwrap_or_default()
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        self.stop();
    }
}
