use super::*;
use crate::config::file::FileConfig;
use shorturl_common::redis::RedisTopology;

fn no_env(_: &str) -> Option<String> {
    None
}

fn example() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/legacy/config.lua");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn mapped(src: &str) -> Mapped {
    match eval(src, "config.lua").and_then(|d| map(&d)) {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    }
}

fn loaded(src: &str) -> Loaded {
    match parse(src, "config.lua", no_env) {
        Ok((l, _)) => l,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_example_maps_onto_the_edge_config() {
    let (l, notes) = match parse(&example(), "config.lua", no_env) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(l.edge.default_domain, "s.example.com");
    assert_eq!(
        l.edge.redis.topology,
        RedisTopology::Single {
            url: "redis://:s3cr%2Ft@127.0.0.1:6379/2".into()
        }
    );
    assert_eq!(l.edge.redis.timeout.as_millis(), 30);
    assert_eq!(l.edge.origin.servers.len(), 2);
    assert_eq!(l.edge.origin.record_timeout.as_millis(), 500);
    assert_eq!(l.edge.cache.positive_ttl.as_secs(), 30);
    assert_eq!(l.edge.cache.negative_ttl.as_secs(), 5);
    assert_eq!(l.edge.redirect.status, 302);
    assert_eq!(l.edge.listen, vec!["0.0.0.0:8080".to_owned()]);
    assert_eq!(l.server.threads, 2);
    assert_eq!(l.server.grace_period_seconds, Some(10));
    assert_eq!(l.server.graceful_shutdown_timeout_seconds, Some(5));
    let joined = notes.join("\n");
    for n in [
        "mysql ignored",
        "domain.allowed ignored",
        "redis.pool_size ignored",
        "redis.keepalive ignored",
        "cache.lru_size ignored",
    ] {
        assert!(joined.contains(n), "{n:?} not in {joined}");
    }
    assert_eq!(notes.len(), 5, "{joined}");
}

/// The mapping builds exactly the file model that the equivalent YAML
/// (what the edge used to render and re-read) deserialises to.
#[test]
fn the_example_maps_to_the_file_model_of_its_yaml() {
    let yaml = r#"
server: { version: 1, threads: 2, grace_period_seconds: 10, graceful_shutdown_timeout_seconds: 5 }
edge:
  listen: ["0.0.0.0:8080"]
  default_domain: s.example.com
  redis: { url: "redis://:s3cr%2Ft@127.0.0.1:6379/2", timeout_ms: 30 }
  origin: { servers: ["127.0.0.1:8081", "127.0.0.1:8082"], record_timeout_ms: 500, connect_timeout_ms: 100 }
  cache: { positive_ttl_secs: 30, negative_ttl_secs: 5 }
  redirect: { status: 302, cache_control: "private, max-age=60" }
"#;
    let want: FileConfig = match serde_yaml::from_str(yaml) {
        Ok(f) => f,
        Err(e) => panic!("{e}"),
    };
    let got = mapped(&example()).file;
    assert_eq!(got.server, want.server);
    assert_eq!(format!("{:?}", got.edge), format!("{:?}", want.edge));
}

#[test]
fn every_mapped_key_lands_in_its_field() {
    let src = r#"return {
        listen = { "127.0.0.1:9000", "9001" },
        worker_processes = 4,
        metrics_listen = "127.0.0.1:9100",
        default_domain = "a.example",
        redis = { host = "::1", port = 7000, database = 3, connect_timeout = 150 },
        origin = { host = "127.0.0.1", read_timeout = 4000, status_timeout = 200,
                   health_check_interval = 2000, health_check_path = "/up" },
        cache = { ttl = 10, negative_ttl = 2, max_bytes = 1048576 },
        redirect = { status = 301, cache_control = "max-age=5", not_found_cache_control = "no-cache" },
        limits = { unknown_per_ip_per_sec = 7, creations_per_ip_per_sec = 3,
                   max_uri_bytes = 2048, max_header_bytes = 8192 },
        access_log = "-",
        lua_code_cache = "on",
    }"#;
    let l = loaded(src);
    let e = &l.edge;
    assert_eq!(e.listen, ["127.0.0.1:9000", "0.0.0.0:9001"]);
    assert_eq!(l.server.threads, 4);
    assert_eq!(e.metrics_listen.as_deref(), Some("127.0.0.1:9100"));
    assert_eq!(e.default_domain, "a.example");
    assert_eq!(
        e.redis.topology,
        RedisTopology::Single {
            url: "redis://[::1]:7000/3".into()
        }
    );
    assert_eq!(e.redis.connect_timeout.as_millis(), 150);
    assert_eq!(e.redis.timeout.as_millis(), 30, "default kept");
    assert_eq!(e.origin.servers.len(), 1);
    assert_eq!(e.origin.servers[0].to_string(), "127.0.0.1:8081");
    assert_eq!(e.origin.read_timeout.as_millis(), 4000);
    assert_eq!(e.origin.status_timeout.as_millis(), 200);
    assert_eq!(e.origin.health_check_interval.as_millis(), 2000);
    assert_eq!(e.origin.health_check_path, "/up");
    assert_eq!(e.origin.record_timeout.as_millis(), 500, "default kept");
    assert_eq!(e.cache.positive_ttl.as_secs(), 10);
    assert_eq!(e.cache.negative_ttl.as_secs(), 2);
    assert_eq!(e.cache.max_bytes, 1 << 20);
    assert_eq!(e.cache.unavailable_ttl.as_millis(), 1000, "default kept");
    assert_eq!(e.redirect.status, 301);
    assert_eq!(e.redirect.cache_control, "max-age=5");
    assert_eq!(e.redirect.not_found_cache_control, "no-cache");
    assert_eq!(e.limits.unknown_per_ip_per_sec, 7);
    assert_eq!(e.limits.creations_per_ip_per_sec, 3);
    assert_eq!(e.limits.max_uri_bytes, 2048);
    assert_eq!(e.limits.max_header_bytes, 8192);
    assert!(matches!(
        e.access_log.target,
        crate::config::AccessLogTarget::Stdout
    ));
}

#[test]
fn defaults_when_the_legacy_file_says_nothing() {
    let l = loaded(
        "return { default_domain = 'a.example', redis = { url = 'redis://127.0.0.1:6379/' }, origin = { servers = '127.0.0.1:8081, 127.0.0.1:8082' } }",
    );
    assert_eq!(l.edge.listen, ["0.0.0.0:80"]);
    assert_eq!(l.server.threads, 2);
    assert_eq!(l.edge.origin.servers.len(), 2);
    assert_eq!(l.edge.cache.max_bytes, 64 << 20);
    assert_eq!(l.edge.redirect.status, 302);
    assert_eq!(l.edge.limits.unknown_per_ip_per_sec, 50);
    assert!(matches!(
        l.edge.access_log.target,
        crate::config::AccessLogTarget::Off
    ));
}

#[test]
fn unknown_and_wrong_settings_are_named() {
    let base = example();
    let cases = [
        (
            base.replace("redis = {", "redis = { bogus = 1,"),
            "redis.bogus",
        ),
        (
            base.replace("return config", "config.surprise = true\nreturn config"),
            "unknown setting surprise",
        ),
        (
            base.replace("timeout = 30,", "timeout = 'soon',"),
            "redis.timeout",
        ),
        (
            base.replace("status = 302", "status = 200"),
            "redirect.status",
        ),
        (
            base.replace("status = 302", "status = 70000"),
            "redirect.status is out of range",
        ),
        (
            base.replace("negative_ttl = 5,", "negative_ttl = 5, max_bytes = -1,"),
            "cache.max_bytes must be a non-negative integer",
        ),
        (
            base.replace("default = \"s.example.com\"", "default = \"bad host!\""),
            "default_domain",
        ),
        (
            base.replace("listen = 8080,", "listen = { 8080 },"),
            "listen must list strings",
        ),
        ("return 42".to_owned(), "must return a table"),
        (
            "return { default_domain = 'a.com', redis = {}, mysql = { host = 'db' } }".to_owned(),
            "the legacy edge read MySQL directly",
        ),
        (
            "return { redis = {}, origin = { servers = { '127.0.0.1:1' } } }".to_owned(),
            "default_domain (or domain.default) is required",
        ),
        (
            "return { default_domain = 'a.com', origin = { servers = { '127.0.0.1:1' } } }"
                .to_owned(),
            "redis is required",
        ),
        (
            "return { default_domain = 'a.com', redis = {}, origin = { port = 1 } }".to_owned(),
            "origin.servers (or origin.host) is required",
        ),
        (
            "return { default_domain = 'a.com', redis = 'x', origin = {} }".to_owned(),
            "redis must be a table",
        ),
    ];
    for (src, needle) in cases {
        match parse(&src, "config.lua", no_env) {
            Ok(_) => panic!("accepted a config expected to fail on {needle}"),
            Err(e) => assert!(
                e.to_string().contains(needle),
                "{needle:?} not in {:?}",
                e.to_string()
            ),
        }
    }
}

#[test]
fn errors_keep_their_source() {
    use std::error::Error;
    match parse("return {", "broken.lua", no_env) {
        Err(e @ LegacyError::Lua { .. }) => assert!(e.source().is_some()),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    }
    match parse(
        "return { default_domain = 'a.com', redis = {}, origin = { servers = { 'nowhere' } } }",
        "c.lua",
        no_env,
    ) {
        Err(e @ LegacyError::Edge(_)) => {
            assert!(
                e.to_string().contains("as mapped onto the edge config"),
                "{e}"
            );
            assert!(e.source().is_some());
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    }
    match load(Path::new("/nonexistent/config.lua")) {
        Err(e @ LegacyError::Read { .. }) => assert!(e.source().is_some()),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    }
}
