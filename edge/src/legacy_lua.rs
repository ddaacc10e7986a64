//! `shorturl-edge --lua-config config.lua`: the legacy OpenResty deployment's
//! `config.lua` (a Lua file returning a table of redis, mysql/origin and
//! domain settings) mapped onto the edge configuration, so a node can be
//! migrated without rewriting its config first.
//!
//! The file is evaluated in a sandbox (vendored Lua 5.4 with only `string`,
//! `table`, `math` and `utf8`: no `os`, `io`, `require`, `load`, `dofile`),
//! bounded in memory and instructions. Every key is either mapped, or known
//! and ignored with a note (the MySQL settings now belong to the origin), or
//! refused with an error naming it. The result is the same YAML document
//! `-c` reads, validated by [`crate::config::parse`], so both paths share
//! every check. See `lua-compat/README.md` for the mapping table.

use crate::config::{self, ConfigError, Loaded};
use mlua::{Lua, LuaOptions, StdLib, Value};
use serde_yaml::{Mapping, Value as Yaml};
use std::path::Path;

/// Memory and instruction budgets of the sandbox: a config is a table.
const MEMORY_LIMIT: usize = 16 << 20;
const INSTRUCTION_LIMIT: u64 = 10_000_000;

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

/// A Lua value converted to plain data.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Nil,
    Bool(bool),
    Int(i64),
    Num(f64),
    Str(String),
    List(Vec<Data>),
    Map(Vec<(String, Data)>),
}

/// Runs `source` in the sandbox and returns the table it returns.
pub fn eval(source: &str, name: &str) -> Result<Data, ConfigError> {
    let lua = Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8,
        LuaOptions::default(),
    )
    .map_err(|e| ConfigError(format!("{name}: cannot start Lua: {e}")))?;
    let _ = lua.set_memory_limit(MEMORY_LIMIT);
    let globals = lua.globals();
    for unsafe_global in [
        "dofile",
        "loadfile",
        "load",
        "require",
        "collectgarbage",
        "os",
        "io",
        "package",
        "debug",
    ] {
        globals
            .raw_set(unsafe_global, Value::Nil)
            .map_err(|e| ConfigError(format!("{name}: sandbox: {e}")))?;
    }
    let steps = std::sync::atomic::AtomicU64::new(0);
    lua.set_hook(
        mlua::HookTriggers::new().every_nth_instruction(10_000),
        move |_, _| {
            let n = steps.fetch_add(10_000, std::sync::atomic::Ordering::Relaxed);
            if n > INSTRUCTION_LIMIT {
                return Err(mlua::Error::runtime("instruction limit exceeded"));
            }
            Ok(mlua::VmState::Continue)
        },
    )
    .map_err(|e| ConfigError(format!("{name}: sandbox: {e}")))?;
    let value: Value = lua
        .load(source)
        .set_name(format!("@{name}"))
        .set_mode(mlua::chunk::ChunkMode::Text)
        .eval()
        .map_err(|e| ConfigError(e.to_string().lines().next().unwrap_or_default().to_owned()))?;
    let data = to_data(&value, "", 0)?;
    if !matches!(data, Data::Map(_) | Data::List(_)) {
        return err("the file must return a table");
    }
    Ok(data)
}

fn to_data(v: &Value, path: &str, depth: usize) -> Result<Data, ConfigError> {
    if depth > 16 {
        return err(format!("{path}: nested too deeply"));
    }
    Ok(match v {
        Value::Nil => Data::Nil,
        Value::Boolean(b) => Data::Bool(*b),
        Value::Integer(i) => Data::Int(*i),
        Value::Number(n) => Data::Num(*n),
        Value::String(s) => Data::Str(
            s.to_str()
                .map_err(|_| ConfigError(format!("{path}: not UTF-8")))?
                .to_string(),
        ),
        Value::Table(t) => {
            let len = t.raw_len();
            let mut pairs = Vec::new();
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, v) = pair.map_err(|e| ConfigError(format!("{path}: {e}")))?;
                pairs.push((k, v));
            }
            if len > 0 && pairs.len() == len {
                let mut list = Vec::with_capacity(len);
                for i in 1..=len {
                    let item: Value = t
                        .raw_get(i)
                        .map_err(|e| ConfigError(format!("{path}[{i}]: {e}")))?;
                    list.push(to_data(&item, &format!("{path}[{i}]"), depth + 1)?);
                }
                Data::List(list)
            } else {
                let mut map = Vec::new();
                for (k, v) in pairs {
                    let key = match &k {
                        Value::String(s) => s
                            .to_str()
                            .map_err(|_| ConfigError(format!("{path}: key not UTF-8")))?
                            .to_string(),
                        other => {
                            return err(format!(
                                "{path}: table mixes list items and keys ({} key)",
                                other.type_name()
                            ))
                        }
                    };
                    let sub = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    map.push((key, to_data(&v, &sub, depth + 1)?));
                }
                map.sort_by(|a, b| a.0.cmp(&b.0));
                Data::Map(map)
            }
        }
        other => return err(format!("{path}: unsupported {} value", other.type_name())),
    })
}

/// A section being mapped: hands out its keys and remembers which were read.
struct Section<'a> {
    path: String,
    items: &'a [(String, Data)],
    used: Vec<&'a str>,
}

impl<'a> Section<'a> {
    fn new(path: &str, d: &'a Data) -> Result<Self, ConfigError> {
        match d {
            Data::Map(items) => Ok(Section {
                path: path.to_owned(),
                items,
                used: Vec::new(),
            }),
            Data::List(l) if l.is_empty() => Ok(Section {
                path: path.to_owned(),
                items: &[],
                used: Vec::new(),
            }),
            _ => err(format!("{} must be a table", display(path))),
        }
    }

    fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn get(&mut self, key: &'a str) -> Option<&'a Data> {
        let found = self
            .items
            .iter()
            .find(|(k, v)| k == key && *v != Data::Nil)
            .map(|(_, v)| v);
        if found.is_some() {
            self.used.push(key);
        }
        found
    }

    fn str(&mut self, key: &'a str) -> Result<Option<String>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Data::Str(s)) => Ok(Some(s.clone())),
            Some(Data::Int(i)) => Ok(Some(i.to_string())),
            Some(_) => err(format!("{} must be a string", self.name(key))),
        }
    }

    fn uint(&mut self, key: &'a str) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Data::Int(i)) if *i >= 0 => Ok(Some(*i as u64)),
            Some(Data::Num(n)) if *n >= 0.0 && n.fract() == 0.0 => Ok(Some(*n as u64)),
            Some(Data::Str(s)) if s.parse::<u64>().is_ok() => Ok(s.parse::<u64>().ok()),
            Some(_) => err(format!("{} must be a non-negative integer", self.name(key))),
        }
    }

    fn section(&mut self, key: &'a str) -> Result<Option<Section<'a>>, ConfigError> {
        let name = self.name(key);
        self.get(key).map(|d| Section::new(&name, d)).transpose()
    }

    /// Keys known from the legacy deployment that the edge has no use for.
    fn ignore(&mut self, keys: &[&'a str], why: &str, notes: &mut Vec<String>) {
        for k in keys {
            if self.get(k).is_some() {
                notes.push(format!("{} ignored: {why}", self.name(k)));
            }
        }
    }

    /// Errors on the first key that was not consumed.
    fn finish(self) -> Result<(), ConfigError> {
        for (k, v) in self.items {
            if *v != Data::Nil && !self.used.contains(&k.as_str()) {
                return err(format!(
                    "unknown setting {} in the legacy config (see lua-compat/README.md for the keys the edge understands)",
                    self.name(k)
                ));
            }
        }
        Ok(())
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() {
        "the returned value"
    } else {
        path
    }
}

fn ykey(k: &str) -> Yaml {
    Yaml::String(k.to_owned())
}

fn set(m: &mut Mapping, k: &str, v: impl Into<Yaml>) {
    m.insert(ykey(k), v.into());
}

fn string_list(d: &Data, name: &str) -> Result<Vec<String>, ConfigError> {
    match d {
        Data::Str(s) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()),
        Data::List(items) => items
            .iter()
            .map(|i| match i {
                Data::Str(s) => Ok(s.clone()),
                _ => err(format!("{name} must list strings")),
            })
            .collect(),
        _ => err(format!("{name} must be a list of strings")),
    }
}

/// The result of a mapping: the edge YAML and notes on ignored keys.
#[derive(Debug)]
pub struct Mapped {
    pub yaml: String,
    pub notes: Vec<String>,
}

/// Maps a legacy config table onto the edge's YAML configuration.
pub fn map(data: &Data) -> Result<Mapped, ConfigError> {
    let mut notes = Vec::new();
    let mut top = Section::new("", data)?;
    let mut edge = Mapping::new();
    let mut server = Mapping::new();
    set(&mut server, "version", 1u64);
    set(&mut server, "grace_period_seconds", 10u64);
    set(&mut server, "graceful_shutdown_timeout_seconds", 5u64);
    set(
        &mut server,
        "threads",
        top.uint("worker_processes")?.unwrap_or(2),
    );

    // listen = 80 | "0.0.0.0:80" | { "0.0.0.0:80", ... }
    let listen = match top.get("listen") {
        None => vec!["0.0.0.0:80".to_owned()],
        Some(Data::Int(p)) => vec![format!("0.0.0.0:{p}")],
        Some(d) => string_list(d, "listen")?
            .into_iter()
            .map(|l| {
                if l.parse::<u16>().is_ok() {
                    format!("0.0.0.0:{l}")
                } else {
                    l
                }
            })
            .collect(),
    };
    set(
        &mut edge,
        "listen",
        Yaml::Sequence(listen.into_iter().map(Yaml::String).collect()),
    );
    if let Some(m) = top.str("metrics_listen")? {
        set(&mut edge, "metrics_listen", m);
    }

    // Domains: the default one; the merchant whitelist is the origin's.
    let mut default_domain = top.str("default_domain")?;
    if let Some(mut d) = top.section("domain")? {
        if let Some(v) = d.str("default")? {
            default_domain = Some(v);
        }
        d.ignore(
            &["allowed", "whitelist"],
            "the merchant whitelist is enforced by the origin on creation (conf/origin.yaml links.allowed_domains)",
            &mut notes,
        );
        d.finish()?;
    }
    match default_domain {
        Some(d) => set(&mut edge, "default_domain", d),
        None => return err("default_domain (or domain.default) is required"),
    }

    // Redis: url, or host/port/password/db.
    let Some(mut r) = top.section("redis")? else {
        return err("redis is required");
    };
    let url = match r.str("url")? {
        Some(u) => u,
        None => {
            let host = r.str("host")?.unwrap_or_else(|| "127.0.0.1".into());
            let port = r.uint("port")?.unwrap_or(6379);
            let auth = match r.str("password")? {
                Some(p) => format!(":{}@", url_escape(&p)),
                None => String::new(),
            };
            let db = match r.uint("db")? {
                Some(db) => db,
                None => r.uint("database")?.unwrap_or(0),
            };
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            format!("redis://{auth}{host}:{port}/{db}")
        }
    };
    let mut redis = Mapping::new();
    set(&mut redis, "url", url);
    if let Some(t) = r.uint("timeout")? {
        set(&mut redis, "timeout_ms", t);
    }
    if let Some(t) = r.uint("connect_timeout")? {
        set(&mut redis, "connect_timeout_ms", t);
    }
    r.ignore(
        &["pool_size", "keepalive", "keepalive_timeout", "backlog"],
        "the edge keeps one multiplexed connection per process",
        &mut notes,
    );
    r.finish()?;
    set(&mut edge, "redis", Yaml::Mapping(redis));

    // Origin: the old edge read MySQL itself; the new one asks the origin.
    let mysql_present = top.get("mysql").is_some();
    if mysql_present {
        notes.push(
            "mysql ignored: the edge no longer reads MySQL; point the origin at it (conf/origin.yaml mysql.url)".into(),
        );
    }
    let mut origin = Mapping::new();
    match top.section("origin")? {
        Some(mut o) => {
            let servers = match o.get("servers") {
                Some(d) => string_list(d, "origin.servers")?,
                None => match (o.str("host")?, o.uint("port")?) {
                    (Some(h), p) => vec![format!("{h}:{}", p.unwrap_or(8081))],
                    (None, _) => return err("origin.servers (or origin.host) is required"),
                },
            };
            set(
                &mut origin,
                "servers",
                Yaml::Sequence(servers.into_iter().map(Yaml::String).collect()),
            );
            for (legacy, key) in [
                ("timeout", "record_timeout_ms"),
                ("connect_timeout", "connect_timeout_ms"),
                ("read_timeout", "read_timeout_ms"),
                ("status_timeout", "status_timeout_ms"),
                ("health_check_interval", "health_check_interval_ms"),
            ] {
                if let Some(v) = o.uint(legacy)? {
                    set(&mut origin, key, v);
                }
            }
            if let Some(p) = o.str("health_check_path")? {
                set(&mut origin, "health_check_path", p);
            }
            o.finish()?;
        }
        None => {
            return err(if mysql_present {
                "origin.servers is required: the legacy edge read MySQL directly, the new edge asks the origin (set origin = { servers = { \"host:8081\" } })"
            } else {
                "origin.servers is required"
            })
        }
    }
    set(&mut edge, "origin", Yaml::Mapping(origin));

    if let Some(mut c) = top.section("cache")? {
        let mut cache = Mapping::new();
        for (legacy, key) in [
            ("ttl", "positive_ttl_secs"),
            ("negative_ttl", "negative_ttl_secs"),
            ("max_bytes", "max_bytes"),
        ] {
            if let Some(v) = c.uint(legacy)? {
                set(&mut cache, key, v);
            }
        }
        c.ignore(
            &["lru_size", "shared_dict", "shared_dict_size"],
            "the edge's in-process cache is bounded in bytes (cache.max_bytes)",
            &mut notes,
        );
        c.finish()?;
        set(&mut edge, "cache", Yaml::Mapping(cache));
    }

    if let Some(mut rd) = top.section("redirect")? {
        let mut redirect = Mapping::new();
        if let Some(s) = rd.uint("status")? {
            set(&mut redirect, "status", s);
        }
        for k in ["cache_control", "not_found_cache_control"] {
            if let Some(v) = rd.str(k)? {
                set(&mut redirect, k, v);
            }
        }
        rd.finish()?;
        set(&mut edge, "redirect", Yaml::Mapping(redirect));
    }

    if let Some(mut l) = top.section("limits")? {
        let mut limits = Mapping::new();
        for k in [
            "unknown_per_ip_per_sec",
            "creations_per_ip_per_sec",
            "max_uri_bytes",
            "max_header_bytes",
        ] {
            if let Some(v) = l.uint(k)? {
                set(&mut limits, k, v);
            }
        }
        l.finish()?;
        set(&mut edge, "limits", Yaml::Mapping(limits));
    }

    if let Some(p) = top.str("access_log")? {
        let mut log = Mapping::new();
        set(&mut log, "path", p);
        set(&mut edge, "access_log", Yaml::Mapping(log));
    }
    top.ignore(
        &["lua_code_cache", "resolver", "shared_dict"],
        "nginx-only setting",
        &mut notes,
    );
    top.finish()?;

    let mut root = Mapping::new();
    set(&mut root, "server", Yaml::Mapping(server));
    set(&mut root, "edge", Yaml::Mapping(edge));
    let yaml = serde_yaml::to_string(&Yaml::Mapping(root))
        .map_err(|e| ConfigError(format!("cannot render the mapped config: {e}")))?;
    Ok(Mapped { yaml, notes })
}

fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Evaluates, maps and validates a legacy config text (`env` as in
/// [`config::parse`]). Returns the loaded config and the notes.
pub fn parse(
    source: &str,
    name: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Loaded, Vec<String>), ConfigError> {
    let data = eval(source, name)?;
    let mapped = map(&data)?;
    let loaded = config::parse(&mapped.yaml, env)
        .map_err(|e| ConfigError(format!("{} (as mapped onto the edge config)", e.0)))?;
    Ok((loaded, mapped.notes))
}

/// Reads `path` and [`parse`]s it with the process environment.
pub fn load(path: &Path) -> Result<(Loaded, Vec<String>), ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
    parse(&text, &path.display().to_string(), |k| {
        std::env::var(k).ok()
    })
}

/// `--conf` YAML, or with `legacy` the Lua file at `path` (its notes go to
/// stderr: they are for the operator running `--test`).
pub fn load_either(path: &Path, legacy: bool) -> Result<Loaded, ConfigError> {
    if !legacy {
        return config::load(path);
    }
    let (loaded, notes) = load(path)?;
    for n in notes {
        eprintln!("shorturl-edge: {}: {n}", path.display());
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn example() -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/legacy/config.lua");
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn the_example_maps_onto_the_edge_config() {
        let (l, notes) = match parse(&example(), "config.lua", no_env) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(l.edge.default_domain, "s.example.com");
        assert_eq!(l.edge.redis.url, "redis://:s3cr%2Ft@127.0.0.1:6379/2");
        assert_eq!(l.edge.redis.timeout.as_millis(), 30);
        assert_eq!(l.edge.origin.servers.len(), 2);
        assert_eq!(l.edge.origin.record_timeout.as_millis(), 500);
        assert_eq!(l.edge.cache.positive_ttl.as_secs(), 30);
        assert_eq!(l.edge.cache.negative_ttl.as_secs(), 5);
        assert_eq!(l.edge.redirect.status, 302);
        assert_eq!(l.edge.listen, vec!["0.0.0.0:8080".to_owned()]);
        assert_eq!(l.server.threads, 2);
        let joined = notes.join("\n");
        assert!(joined.contains("mysql ignored"), "{joined}");
        assert!(joined.contains("domain.allowed ignored"), "{joined}");
    }

    #[test]
    fn the_sandbox_has_no_os_io_or_require() {
        for (src, needle) in [
            ("return { x = os.getenv('HOME') }", "os"),
            ("return io.open('/etc/passwd')", "io"),
            ("return require('socket')", "require"),
            ("return dofile('/etc/passwd')", "dofile"),
            ("return load('return 1')()", "load"),
            ("while true do end", "instruction limit"),
            (
                "local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(1000) end",
                "memory",
            ),
        ] {
            match eval(src, "evil.lua") {
                Ok(v) => panic!("{src:?} ran: {v:?}"),
                Err(e) => assert!(e.0.contains(needle), "{src:?}: {}", e.0),
            }
        }
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
                base.replace("default = \"s.example.com\"", "default = \"bad host!\""),
                "default_domain",
            ),
            ("return 42".to_owned(), "must return a table"),
            (
                "return { default_domain = 'a.com', redis = {}, mysql = { host = 'db' } }"
                    .to_owned(),
                "the legacy edge read MySQL directly",
            ),
        ];
        for (src, needle) in cases {
            match parse(&src, "config.lua", no_env) {
                Ok(_) => panic!("accepted a config expected to fail on {needle}"),
                Err(e) => assert!(e.0.contains(needle), "{needle:?} not in {:?}", e.0),
            }
        }
    }
}
