//! ACME end to end: two real edges, a real origin (MariaDB, Redis) whose
//! whitelist comes from the Apollo stand-in, and Debian's Pebble, which
//! validates every HTTP-01 challenge by connecting to an edge's plain port
//! (names resolve to 127.0.0.1 through `pebble-challtestsrv`).
//!
//! One test, in phases, because the setup costs most of the time: static
//! and Apollo domains get certificates from the edge holding the lease and
//! are served by both edges, chained to Pebble's root; a restarted issuer
//! does not re-order; certificates renew at two thirds of their (short)
//! lifetime; with Pebble down the certificates keep being served and the
//! failed orders are retried until Pebble is back.

use crate::support;

use shorturl_common::status::AcmeDim;
use shorturl_common::tls::CertBundle;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;
use support::{
    create_link, redis_get, redis_set, start_edge, store_key_id, store_keys, EdgeOpts, Origin,
    API_KEY, STORE_KEY, STORE_KEY_2,
};
use testkit::apollo::ApolloServer;
use testkit::pebble::Pebble;
use testkit::tls::{connect, Ca, ClientOpts};
use testkit::{free_port, wait_for, Redis, TempDir};

const WAIT: Duration = Duration::from_secs(60);
/// Pebble's certificate lifetime here: renewal is due after 2/3 of it.
const VALIDITY_SECS: u64 = 60;
const KEY: &str = "merchant_domains";

struct AcmeEdge {
    edge: support::Edge,
    tls_port: u16,
}

fn start_acme_edge(
    redis: &Redis,
    origin: &Origin,
    pebble: &Pebble,
    port: Option<u16>,
    state: &TempDir,
    name: &str,
    store_keys: &str,
) -> AcmeEdge {
    let certs = state.path().join(format!("certs-{name}"));
    Ca::new("fallback ca")
        .issue(&["localhost"], &[], 30)
        .write(&certs, "localhost");
    let tls_port = free_port();
    let extra: &'static str = Box::leak(
        format!(
            "  tls_listen: [\"127.0.0.1:{tls_port}\"]\n  tls: {{ cert_dir: \"{certs}\", default_cert: localhost, reload_interval_ms: 300, {store_keys} }}\n  acme:\n    enabled: true\n    directory_url: \"{dir}\"\n    ca_roots: \"{roots}\"\n    contact: [\"mailto:ops@example.com\"]\n    state_dir: \"{state}/acme-{name}\"\n    check_interval_secs: 1\n    whitelist_interval_secs: 1\n    lease_ttl_secs: 3\n    retry_min_secs: 1\n    retry_max_secs: 2\n    order_timeout_secs: 20\n",
            certs = certs.display(),
            dir = pebble.directory_url(),
            roots = pebble.ca_pem_path().display(),
            state = state.path().display(),
        )
        .into_boxed_str(),
    );
    let mut opts = EdgeOpts::new(redis.url(), vec![origin.addr()]);
    opts.extra = extra;
    opts.port = port;
    opts.env = vec![("RUST_LOG", "info,pingora=warn".to_owned())];
    AcmeEdge {
        edge: start_edge(opts),
        tls_port,
    }
}

impl AcmeEdge {
    fn acme(&self) -> AcmeDim {
        self.edge.typed_status().tls.unwrap().acme.unwrap()
    }

    /// The serial served for `sni` if the chain and name verify against `root`.
    fn verified(&self, sni: &str, root: &[u8]) -> Option<String> {
        connect(
            self.tls_port,
            &ClientOpts {
                sni: Some(sni),
                roots: Some(root),
                ..Default::default()
            },
        )
        .ok()
        .map(|c| c.peer_serial())
    }

    /// The serial served for `sni`, unverified.
    fn served(&self, sni: &str) -> String {
        connect(
            self.tls_port,
            &ClientOpts {
                sni: Some(sni),
                ..Default::default()
            },
        )
        .unwrap()
        .peer_serial()
    }
}

fn names_in_store(redis: &Redis) -> BTreeSet<String> {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("SMEMBERS")
        .arg("su:1:tls:names")
        .query(&mut con)
        .unwrap()
}

fn set_lease(redis: &Redis, holder: &str, ms: u64) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("SET")
        .arg("su:1:acme:lease")
        .arg(holder)
        .arg("PX")
        .arg(ms)
        .query::<()>(&mut con)
        .unwrap();
}

/// Every file and directory under `dir` (itself included) with its mode bits.
fn private_modes(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = vec![(
        dir.to_owned(),
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
    )];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(private_modes(&path));
        } else {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            out.push((path, mode));
        }
    }
    out
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn curl_h2(
    tls_port: u16,
    host: &str,
    roots: &std::path::Path,
    args: &[&str],
    path: &str,
) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2", "--cacert"])
        .arg(roots)
        .arg("--resolve")
        .arg(format!("{host}:{tls_port}:127.0.0.1"))
        .args(args)
        .arg(format!("https://{host}:{tls_port}{path}"))
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn whitelisted_domains_get_certificates_served_by_every_edge_renewed_and_retried() {
    let redis = Redis::start();
    let apollo = ApolloServer::start("shorturl-origin", Duration::from_secs(1));
    apollo.release_value("application", KEY, "{}");
    let state = TempDir::new("acme-e2e");
    let apollo_yaml = format!(
        "apollo:\n  config_servers: ['{}']\n  app_id: shorturl-origin\n  namespace: application\n  key: {KEY}\n  \
         last_good_file: '{}/apollo-last-good.json'\n  startup_timeout_ms: 1500\n  request_timeout_ms: 1000\n  \
         poll_timeout_ms: 5000\n  backoff_initial_ms: 50\n  backoff_max_ms: 500\n",
        apollo.url(),
        state.path().display()
    );
    let origin = Origin::start_with(&redis, 200, &apollo_yaml);
    // Pebble validates on edge A's plain port and edge B gets the lease, so
    // the CA reaches an edge other than the one that ordered. The lease is
    // held by a stand-in until both edges run, then handed to B (B renews
    // a lease holding its node id: host name and pid).
    let port_a = free_port();
    let mut pebble = Pebble::start(port_a, VALIDITY_SECS);
    set_lease(&redis, "test-holder", 600_000);
    // A already opens the key the fleet rotates to in phase 2 (the first
    // step of a rotation, docs/architecture.md "TLS").
    let a = start_acme_edge(
        &redis,
        &origin,
        &pebble,
        Some(port_a),
        &state,
        "a",
        &format!("store_key: \"{STORE_KEY}\", store_old_keys: [\"{STORE_KEY_2}\"]"),
    );
    let mut b = start_acme_edge(
        &redis,
        &origin,
        &pebble,
        None,
        &state,
        "b",
        &format!("store_key: \"{STORE_KEY}\""),
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    set_lease(
        &redis,
        &format!("{}:{}", host.trim(), b.edge.proc.pid()),
        3000,
    );
    wait_for("edge B to hold the issuer lease", WAIT, || b.acme().issuer);

    // 1. The static domain, then a domain added to the Apollo whitelist.
    let root = pebble.root_pem();
    wait_for("a certificate for the static domain", WAIT, || {
        a.verified("s.shop55.com", &root).is_some()
    });
    assert_eq!(names_in_store(&redis), set(&["s.shop55.com"]));
    apollo.release_value("application", KEY, r#"{"55": "a.shop55.com"}"#);
    wait_for(
        "a certificate for the Apollo domain on both edges",
        WAIT,
        || {
            let sa = a.verified("a.shop55.com", &root);
            sa.is_some() && sa == b.verified("a.shop55.com", &root)
        },
    );
    assert_eq!(
        names_in_store(&redis),
        set(&["a.shop55.com", "s.shop55.com"])
    );
    let first_a = a.served("a.shop55.com");
    let leaf = connect(
        a.tls_port,
        &ClientOpts {
            sni: Some("a.shop55.com"),
            ..Default::default()
        },
    )
    .unwrap()
    .peer_cert();
    let issuer = format!("{:?}", leaf.issuer_name());
    assert!(issuer.contains("Pebble Intermediate"), "{issuer}");
    // B ordered, A answered the CA (its access log shows the challenge).
    let (acme_a, acme_b) = (a.acme(), b.acme());
    assert!(acme_b.issuer && !acme_a.issuer);
    assert_eq!((acme_b.orders_issued, acme_b.orders_failed), (2, 0));
    assert_eq!((acme_a.orders_issued, acme_a.orders_failed), (0, 0));
    let line = a.edge.log_line("/.well-known/acme-challenge/");
    assert!(line.contains(" 200 "), "{line}");
    // A name that is not on the whitelist is never ordered, however often
    // clients ask for it: it gets the default certificate.
    let fallback = a.served("localhost");
    for _ in 0..3 {
        assert_eq!(a.served("evil.shop55.com"), fallback);
    }
    // Status and metrics.
    let tls = a.edge.typed_status().tls.unwrap();
    let c = tls
        .certificates
        .iter()
        .find(|c| c.domain == "a.shop55.com")
        .unwrap();
    assert_eq!(c.source, "shared");
    assert!(c.issuer.contains("Pebble Intermediate"), "{}", c.issuer);
    assert_eq!(
        b.edge
            .metric("shorturl_acme_orders_total{result=\"issued\"}"),
        2.0
    );

    // Key material at rest: the private keys and the account in Redis are
    // sealed under the store key (no PEM), and the issuer's local copy is
    // its own (files 0600, directories 0700).
    let k1 = store_keys(STORE_KEY, &[]);
    let k1_prefix = format!("enc1:{}:", store_key_id(STORE_KEY));
    for name in ["s.shop55.com", "a.shop55.com"] {
        let redis_key = format!("su:1:tls:cert:{name}");
        let b: CertBundle = serde_json::from_str(&redis_get(&redis, &redis_key).unwrap()).unwrap();
        assert!(
            b.key.starts_with(&k1_prefix) && !b.key.contains("BEGIN"),
            "{name}: {}",
            b.key
        );
        let pem = String::from_utf8(k1.open(&redis_key, &b.key).unwrap().plain).unwrap();
        assert!(pem.contains("PRIVATE KEY-----"), "{name}");
    }
    let account_key = shorturl_common::keys::acme_account_key(&pebble.directory_url());
    let account = redis_get(&redis, &account_key).unwrap();
    assert!(account.starts_with(&k1_prefix), "{account}");
    let opened = k1.open(&account_key, &account).unwrap().plain;
    assert!(serde_json::from_slice::<serde_json::Value>(&opened).is_ok());
    let modes = private_modes(&state.path().join("acme-b"));
    assert!(
        modes
            .iter()
            .any(|(p, _)| p.ends_with("certs/a.shop55.com.key")),
        "{modes:?}"
    );
    assert!(
        modes
            .iter()
            .any(|(p, _)| p.to_string_lossy().contains("account-")),
        "{modes:?}"
    );
    for (path, mode) in &modes {
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(*mode, want, "{}: {mode:o}", path.display());
    }

    // Redirects and proxied API calls over HTTP/2 with the issued
    // certificate of the static domain (a.shop55.com is merchant 55's: the
    // test's unbound key may not create there).
    let root_file = state.path().join("pebble-root.pem");
    std::fs::write(&root_file, &root).unwrap();
    let auth = format!("Authorization: Bearer {API_KEY}");
    let body = r#"{"url":"https://example.com/h2","domain":"s.shop55.com"}"#;
    let created = curl_h2(
        a.tls_port,
        "s.shop55.com",
        &root_file,
        &[
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "--data",
            body,
            "-w",
            "\n%{http_version} %{http_code}",
        ],
        "/api/v1/links",
    );
    let (json, status) = created.rsplit_once('\n').unwrap();
    assert_eq!(status, "2 201", "{created}");
    let code = serde_json::from_str::<serde_json::Value>(json).unwrap()["code"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = curl_h2(
        b.tls_port,
        "s.shop55.com",
        &root_file,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code} %{redirect_url}",
        ],
        &format!("/{code}"),
    );
    assert_eq!(out, "2 302 https://example.com/h2");
    let _ = create_link; // (HTTP/1.1 creation helper; HTTP/2 is used here)

    // 2. A restarted issuer does not order again: the certificates are in
    // Redis and in its local copy. B comes back from a key rotation
    // (STORE_KEY_2 seals, STORE_KEY only opens) and finds a bundle stored
    // in plaintext, as before sealing: it serves it, and once it holds the
    // lease it re-seals every value under the new key. Nobody holds the
    // lease meanwhile, so nothing is re-sealed before.
    set_lease(&redis, "test-holder", 600_000);
    let s_key = "su:1:tls:cert:s.shop55.com";
    let mut plain: CertBundle = serde_json::from_str(&redis_get(&redis, s_key).unwrap()).unwrap();
    plain.key = String::from_utf8(k1.open(s_key, &plain.key).unwrap().plain).unwrap();
    redis_set(&redis, s_key, &serde_json::to_string(&plain).unwrap());
    b.edge.restart(&[
        ("RUST_LOG", "info,pingora=warn"),
        ("SHORTURL_EDGE_TLS_STORE_KEY", STORE_KEY_2),
        ("SHORTURL_EDGE_TLS_STORE_OLD_KEYS", STORE_KEY),
    ]);
    wait_for("B to load the shared store", WAIT, || {
        let tls = b.edge.typed_status().tls.unwrap();
        ["s.shop55.com", "a.shop55.com"].iter().all(|n| {
            tls.certificates
                .iter()
                .any(|c| c.domain == *n && c.source == "shared")
        })
    });
    set_lease(
        &redis,
        &format!("{}:{}", host.trim(), b.edge.proc.pid()),
        3000,
    );
    let k2_prefix = format!("enc1:{}:", store_key_id(STORE_KEY_2));
    let sealed_key = |k: &str| {
        let v = redis_get(&redis, k).unwrap_or_default();
        serde_json::from_str::<CertBundle>(&v).map_or(v, |b| b.key)
    };
    wait_for("every value re-sealed under the new key", WAIT, || {
        [s_key, "su:1:tls:cert:a.shop55.com", &account_key]
            .iter()
            .all(|k| sealed_key(k).starts_with(&k2_prefix))
    });
    assert_eq!(b.edge.metric("shorturl_tls_store_resealed_total"), 3.0);
    // Read in plaintext twice: B's first load of the store and the re-seal.
    assert_eq!(b.edge.metric("shorturl_tls_store_plaintext_total"), 2.0);
    assert_eq!(a.edge.metric("shorturl_tls_store_plaintext_total"), 0.0);
    for e in [&a, &b] {
        for reason in ["malformed", "unknown_key", "undecryptable"] {
            let series = format!("shorturl_tls_store_refused_total{{reason=\"{reason}\"}}");
            assert_eq!(e.edge.metric(&series), 0.0, "{series}");
        }
    }
    wait_for("three issuer passes after the restart", WAIT, || {
        let (x, y) = (a.acme(), b.acme());
        x.checks + y.checks >= 3 && (x.issuer || y.issuer)
    });
    let (x, y) = (a.acme(), b.acme());
    assert_eq!(
        (
            x.orders_issued + y.orders_issued,
            x.orders_failed + y.orders_failed
        ),
        (0, 0),
        "no re-order after a restart: {x:?} {y:?}"
    );
    assert_eq!(b.served("a.shop55.com"), first_a);

    // 3. Renewal at two thirds of the lifetime: a new certificate, later expiry.
    wait_for("the renewed certificate on both edges", WAIT, || {
        let sa = a.verified("a.shop55.com", &root);
        sa.is_some()
            && sa.as_deref() != Some(first_a.as_str())
            && sa == b.verified("a.shop55.com", &root)
    });

    // 4. Pebble down: certificates keep being served; the order for a new
    // domain fails and is retried.
    let before = a.served("a.shop55.com");
    pebble.stop();
    apollo.release_value(
        "application",
        KEY,
        r#"{"55": "a.shop55.com", "56": "c.shop55.com"}"#,
    );
    let failed = |e: &AcmeEdge| e.acme().orders_failed;
    wait_for("the order to fail and be retried", WAIT, || {
        failed(&a) + failed(&b) >= 2
    });
    assert_eq!(a.verified("a.shop55.com", &root), Some(before.clone()));
    assert_eq!(b.verified("a.shop55.com", &root), Some(before));
    assert!(!names_in_store(&redis).contains("c.shop55.com"));

    // 5. Pebble back (a new CA without our account): the retry succeeds.
    pebble.restart();
    let root2 = pebble.root_pem();
    wait_for(
        "the retried order to succeed after Pebble came back",
        WAIT,
        || {
            a.verified("c.shop55.com", &root2).is_some()
                && b.verified("c.shop55.com", &root2).is_some()
        },
    );
    assert_eq!(
        names_in_store(&redis),
        set(&["a.shop55.com", "c.shop55.com", "s.shop55.com"])
    );
}
