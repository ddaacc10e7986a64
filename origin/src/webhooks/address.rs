//! Where deliveries may go (SSRF): only to public addresses, unless the
//! address is in `webhooks.allow_networks`. Checked after DNS resolution,
//! by the HTTP client's own resolver ([`Resolver`]), so the address
//! checked is the address connected to (no second lookup a rebinding DNS
//! server could answer differently); an IP literal in the URL is checked
//! before sending ([`Policy::allows`]).

use shorturl_common::cidr::CidrList;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// The configured exceptions.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub allow: CidrList,
}

impl Policy {
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allow.contains(ip) || is_public(ip)
    }
}

/// Whether `ip` is a globally routed unicast address: not loopback,
/// private, link-local (cloud metadata), shared (CGNAT), documentation,
/// benchmarking, multicast, reserved or unspecified; an IPv6 address that
/// embeds an IPv4 one (mapped, NAT64, 6to4) is judged by that address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19)))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return is_public_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return is_public_v4(embedded(s[1], s[2]));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] == 0x2001 && s[1] == 0x0db8)
        || s[0..6] == [0, 0, 0, 0, 0, 0])
}

/// A delivery refused because its host resolves to no allowed address.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves to no allowed address")]
pub struct Blocked {
    pub host: String,
}

/// The HTTP client's resolver: the system's answers, less the addresses
/// the policy refuses; none left is [`Blocked`].
pub struct Resolver(pub Arc<Policy>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.0);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let ok: Vec<SocketAddr> = found.filter(|a| policy.allows(a.ip())).collect();
            if ok.is_empty() {
                return Err(Box::new(Blocked { host }) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(ok.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(s: &str) -> bool {
        is_public(s.parse().unwrap())
    }

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for s in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2001:db8::1",
            "::127.0.0.1",
        ] {
            assert!(!public(s), "{s}");
        }
        for s in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(public(s), "{s}");
        }
    }

    #[test]
    fn configured_networks_are_allowed() {
        let p = Policy {
            allow: CidrList::parse(&["127.0.0.0/8"]).unwrap(),
        };
        assert!(p.allows("127.0.0.9".parse().unwrap()));
        assert!(!p.allows("10.0.0.1".parse().unwrap()));
    }
}
