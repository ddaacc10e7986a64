//! `shorturl-edge --lua-config`: a legacy OpenResty `config.lua` is read,
//! mapped and validated like `conf/edge.yaml`.

use crate::support;

use std::process::Command;
use support::edge_bin;

#[test]
fn the_legacy_example_validates_and_reports_ignored_keys() {
    let out = Command::new(edge_bin())
        .args(["--test", "--lua-config"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../conf/legacy/config.lua"
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("mysql ignored"), "{stderr}");
    assert!(stderr.contains("domain.allowed ignored"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is valid"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_wrong_legacy_key_is_named_and_refused() {
    let dir = testkit::TempDir::new("legacy-lua");
    let bad = dir.path().join("config.lua");
    std::fs::write(
        &bad,
        "return { default_domain = 'a.example', redis = { host = '127.0.0.1', colour = 'blue' }, origin = { servers = { '127.0.0.1:8081' } } }",
    )
    .unwrap();
    let out = Command::new(edge_bin())
        .args(["--test", "--lua-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown setting redis.colour"), "{stderr}");
}
