//! IP networks in CIDR notation (`10.0.0.0/8`, `::1/128`), for the access
//! lists both services share: who may read `/shorturl_status`
//! (`status_allow`) and which peers are trusted proxies.
//!
//! Deliberately small: parse, contain, and the default list. An IPv4 peer
//! seen as an IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, a dual-stack
//! listener) matches the IPv4 networks.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Who may read `/shorturl_status` unless configured otherwise: loopback and
/// the private ranges (RFC 1918, RFC 4193).
pub const DEFAULT_STATUS_ALLOW: [&str; 6] = [
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
];

/// One network: an address whose host bits are zero, and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a string is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("{0:?} is not an IP address or network")]
    Address(String),
    #[error("{0:?}: the prefix length must be 0-32 for IPv4 and 0-128 for IPv6")]
    Prefix(String),
    #[error("{0:?}: host bits are set below the prefix (did you mean {1}?)")]
    HostBits(String, Cidr),
}

fn mask_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn width(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

/// The `prefix` high bits of a `width`-bit number, as a mask.
fn mask(prefix: u8, width: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        (u128::MAX << (128 - u32::from(prefix))) >> (128 - u32::from(width))
    }
}

impl Cidr {
    /// True when `ip` is inside this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        if ip.is_ipv4() != self.network.is_ipv4() {
            return false;
        }
        let m = mask(self.prefix, width(ip));
        mask_bits(ip) & m == mask_bits(self.network)
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// `addr/prefix`, or a bare address (a single host). Host bits must be zero.
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let t = s.trim();
        let (addr, prefix) = match t.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (t, None),
        };
        let network: IpAddr = addr.parse().map_err(|_| CidrError::Address(s.to_owned()))?;
        let w = width(network);
        let prefix = match prefix {
            None => w,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= w)
                .ok_or_else(|| CidrError::Prefix(s.to_owned()))?,
        };
        let bits = mask_bits(network);
        let m = mask(prefix, w);
        if bits & !m != 0 {
            let masked = match network {
                IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from((bits & m) as u32)),
                IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(bits & m)),
            };
            return Err(CidrError::HostBits(
                s.to_owned(),
                Cidr {
                    network: masked,
                    prefix,
                },
            ));
        }
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// `ip` with the bits below `prefix` cleared (IPv4-mapped IPv6 addresses
/// are treated as the IPv4 address they carry): the key per-client limits
/// count IPv6 clients under, since one subscriber usually holds a whole /64.
pub fn truncate(ip: IpAddr, prefix: u8) -> IpAddr {
    let ip = ip.to_canonical();
    let w = width(ip);
    let m = mask(prefix.min(w), w);
    match ip {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from((mask_bits(ip) & m) as u32)),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(mask_bits(ip) & m)),
    }
}

/// A configured list of networks; an address matches when any contains it.
/// Empty matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrList(Vec<Cidr>);

impl CidrList {
    /// Parses every entry; the error names the first bad one.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<CidrList, CidrError> {
        items
            .iter()
            .map(|s| s.as_ref().parse())
            .collect::<Result<Vec<_>, _>>()
            .map(CidrList)
    }

    /// True when some network of the list contains `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// True when the list has no network.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The networks, in configured order.
    pub fn iter(&self) -> impl Iterator<Item = &Cidr> {
        self.0.iter()
    }

    /// Number of networks.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// [`DEFAULT_STATUS_ALLOW`], parsed.
    pub fn default_status_allow() -> CidrList {
        // The constants are valid; `default_list_is_loopback_and_private` checks it.
        CidrList(
            DEFAULT_STATUS_ALLOW
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect(),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn contains_v4_and_v6() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains(ip("10.255.1.2")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.1.2.3")), "v4-mapped peer");
        assert!(!c.contains(ip("::1")));
        let c: Cidr = "fc00::/7".parse().unwrap();
        assert!(c.contains(ip("fd12:3456::1")));
        assert!(!c.contains(ip("fe80::1")));
        let host: Cidr = "192.0.2.7".parse().unwrap();
        assert_eq!(host.to_string(), "192.0.2.7/32");
        assert!(host.contains(ip("192.0.2.7")) && !host.contains(ip("192.0.2.8")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("2001:db8::1")));
        let all6: Cidr = "::/0".parse().unwrap();
        assert!(all6.contains(ip("2001:db8::1")));
    }

    #[test]
    fn refuses_what_is_not_a_network() {
        assert!(matches!(
            "10.0.0.0/33".parse::<Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(matches!(
            "::/129".parse::<Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(matches!(
            "10.0.0.0/x".parse::<Cidr>(),
            Err(CidrError::Prefix(_))
        ));
        assert!(matches!(
            "ten/8".parse::<Cidr>(),
            Err(CidrError::Address(_))
        ));
        let e = "10.1.2.3/8".parse::<Cidr>().unwrap_err();
        assert!(e.to_string().contains("10.0.0.0/8"), "{e}");
    }

    #[test]
    fn default_list_is_loopback_and_private() {
        let d = CidrList::default_status_allow();
        assert_eq!(d.len(), DEFAULT_STATUS_ALLOW.len());
        for yes in [
            "127.0.0.1",
            "::1",
            "10.1.1.1",
            "172.31.0.1",
            "192.168.1.1",
            "fd00::5",
        ] {
            assert!(d.contains(ip(yes)), "{yes}");
        }
        for no in ["8.8.8.8", "172.32.0.1", "2001:db8::1", "::ffff:8.8.8.8"] {
            assert!(!d.contains(ip(no)), "{no}");
        }
    }
}
