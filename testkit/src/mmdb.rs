//! A minimal MaxMind DB writer (format 2.0: an IPv6 search tree of 24-bit
//! records, IPv4 at `::/96`, the data section, the metadata), for test
//! databases of our own: what the city dimension reads exists in no
//! package a test may fetch (GeoLite2 needs a licence key). Enough of the
//! format for lookups by both edges' readers (the `maxminddb` crate and
//! libmaxminddb): maps, UTF-8 strings, unsigned integers and arrays.
//!
//! [`city_test_db`] is committed as `testkit/data/city-test.mmdb` for the
//! OpenResty module's Lua tests; a test holds the file to this code.

use std::net::IpAddr;

/// A value of the data section.
#[derive(Debug, Clone)]
pub enum Value {
    Str(String),
    U16(u16),
    U32(u32),
    U64(u64),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
}

/// A map from `(key, value)` pairs.
pub fn map<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// A string value.
pub fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

/// One record of the tree: nothing, another node, or data at an offset.
#[derive(Clone, Copy)]
enum Rec {
    Empty,
    Node(usize),
    Data(usize),
}

/// A database being built.
pub struct Writer {
    nodes: Vec<[Rec; 2]>,
    data: Vec<u8>,
    database_type: String,
}

fn control(out: &mut Vec<u8>, kind: u8, size: usize) {
    let (low, extra): (u8, Vec<u8>) = match size {
        0..=28 => (size as u8, vec![]),
        29..=284 => (29, vec![(size - 29) as u8]),
        285..=65_820 => (30, ((size - 285) as u16).to_be_bytes().to_vec()),
        _ => (31, ((size - 65_821) as u32).to_be_bytes()[1..].to_vec()),
    };
    if kind <= 7 {
        out.push(kind << 5 | low);
    } else {
        out.push(low);
        out.push(kind - 7);
    }
    out.extend_from_slice(&extra);
}

fn uint(out: &mut Vec<u8>, kind: u8, v: u64, width: usize) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count().max(8 - width);
    control(out, kind, 8 - skip);
    out.extend_from_slice(&bytes[skip..]);
}

fn encode(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(t) => {
            control(out, 2, t.len());
            out.extend_from_slice(t.as_bytes());
        }
        Value::U16(n) => uint(out, 5, u64::from(*n), 2),
        Value::U32(n) => uint(out, 6, u64::from(*n), 4),
        Value::U64(n) => uint(out, 9, *n, 8),
        Value::Array(items) => {
            control(out, 11, items.len());
            items.iter().for_each(|i| encode(out, i));
        }
        Value::Map(pairs) => {
            control(out, 7, pairs.len());
            for (k, v) in pairs {
                encode(out, &Value::Str(k.clone()));
                encode(out, v);
            }
        }
    }
}

impl Writer {
    pub fn new(database_type: &str) -> Writer {
        Writer {
            nodes: vec![[Rec::Empty; 2]],
            data: Vec::new(),
            database_type: database_type.to_owned(),
        }
    }

    /// Points the network `ip/prefix` (an IPv4 one at `::/96`) at `value`.
    /// Networks must not nest.
    pub fn insert(&mut self, ip: IpAddr, prefix: u8, value: &Value) {
        let (bits, len) = match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 96 + u32::from(prefix)),
            IpAddr::V6(a) => (u128::from(a), u32::from(prefix)),
        };
        assert!((1..=128).contains(&len), "prefix {prefix} of {ip}");
        let offset = self.data.len();
        encode(&mut self.data, value);
        let mut node = 0;
        for i in 0..len {
            let bit = (bits >> (127 - i) & 1) as usize;
            if i + 1 == len {
                self.nodes[node][bit] = Rec::Data(offset);
                return;
            }
            node = match self.nodes[node][bit] {
                Rec::Node(n) => n,
                Rec::Empty => {
                    self.nodes.push([Rec::Empty; 2]);
                    let n = self.nodes.len() - 1;
                    self.nodes[node][bit] = Rec::Node(n);
                    n
                }
                Rec::Data(_) => panic!("{ip}/{prefix} is inside a network already inserted"),
            };
        }
    }

    /// The file's bytes (the build time fixed, so a database is the same
    /// bytes every time).
    pub fn finish(&self) -> Vec<u8> {
        let count = self.nodes.len();
        let rec = |r: Rec| -> [u8; 3] {
            let v = match r {
                Rec::Empty => count,
                Rec::Node(n) => n,
                Rec::Data(off) => count + 16 + off,
            };
            let v = u32::try_from(v).expect("a small database");
            assert!(v < 1 << 24, "records are 24 bits");
            let b = v.to_be_bytes();
            [b[1], b[2], b[3]]
        };
        let mut out = Vec::with_capacity(count * 6 + 16 + self.data.len() + 256);
        for [l, r] in &self.nodes {
            out.extend_from_slice(&rec(*l));
            out.extend_from_slice(&rec(*r));
        }
        out.extend_from_slice(&[0; 16]);
        out.extend_from_slice(&self.data);
        out.extend_from_slice(b"\xAB\xCD\xEFMaxMind.com");
        encode(
            &mut out,
            &map([
                ("binary_format_major_version", Value::U16(2)),
                ("binary_format_minor_version", Value::U16(0)),
                ("build_epoch", Value::U64(1_700_000_000)),
                ("database_type", s(&self.database_type)),
                ("description", map([("en", s("shorturl test database"))])),
                ("ip_version", Value::U16(6)),
                ("languages", Value::Array(vec![s("en")])),
                ("node_count", Value::U32(count as u32)),
                ("record_size", Value::U16(24)),
            ]),
        );
        out
    }
}

/// A GeoLite2-City record (`city.names.en`, `country.iso_code`).
fn geolite2(city: &str, country: &str) -> Value {
    map([
        (
            "city",
            map([("names", map([("en", s(city)), ("de", s(city))]))]),
        ),
        ("country", map([("iso_code", s(country))])),
    ])
}

/// The city test database: its networks and the `city` value a click from
/// each has (`None`: no value, the default `unknown`).
pub const CITY_TEST_NETWORKS: [(&str, Option<&str>); 7] = [
    ("81.2.69.5", Some("GB-London")),
    ("89.160.20.9", Some("SE-Link%C3%B6ping")),
    ("2.125.160.1", Some("BR-S%C3%A3o%20Paulo")),
    ("67.43.156.7", None),
    ("175.16.199.3", Some("~other")),
    ("216.160.83.4", None),
    ("2001:db8:1::5", Some("DE-Berlin")),
];

/// The city test database (see [`CITY_TEST_NETWORKS`]): GeoLite2-City
/// records and one of ip-location-db's city files (`city`,
/// `country_code`), a name too long to send, records without a city.
pub fn city_test_db() -> Vec<u8> {
    let mut w = Writer::new("ShortURL-Test-City");
    let v4 = |s: &str| IpAddr::V4(s.parse().expect("an address"));
    w.insert(v4("81.2.69.0"), 24, &geolite2("London", "GB"));
    w.insert(v4("89.160.20.0"), 24, &geolite2("Linköping", "SE"));
    w.insert(
        v4("2.125.160.0"),
        24,
        &map([("city", s("São Paulo")), ("country_code", s("BR"))]),
    );
    w.insert(
        v4("67.43.156.0"),
        24,
        &map([("country", map([("iso_code", s("US"))]))]),
    );
    w.insert(v4("175.16.199.0"), 24, &geolite2(&"X".repeat(70), "CN"));
    w.insert(v4("216.160.83.0"), 24, &geolite2("", "US"));
    w.insert(
        IpAddr::V6("2001:db8:1::".parse().expect("an address")),
        48,
        &geolite2("Berlin", "DE"),
    );
    w.finish()
}

/// The committed copy of [`city_test_db`].
pub fn city_test_db_path() -> std::path::PathBuf {
    crate::proc::workspace_root()
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .join("testkit/data/city-test.mmdb")
}

#[cfg(test)]
mod tests {
    /// The committed file is this code's output: `SU_WRITE_FIXTURES=1
    /// cargo test -p testkit mmdb` writes it again after a change.
    #[test]
    fn the_committed_city_database_is_the_written_one() {
        let path = super::city_test_db_path();
        let bytes = super::city_test_db();
        if std::env::var_os("SU_WRITE_FIXTURES").is_some() {
            std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
            std::fs::write(&path, &bytes).expect("write the fixture");
        }
        let committed = std::fs::read(&path).expect("testkit/data/city-test.mmdb");
        assert!(
            committed == bytes,
            "{} differs from testkit::mmdb::city_test_db(): run SU_WRITE_FIXTURES=1 cargo test -p testkit mmdb",
            path.display()
        );
    }
}
