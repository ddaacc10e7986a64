//! The address a console request comes from, as the sign-in limits key it:
//! the TCP peer, unless the peer is in `admin.trusted_proxies`; then
//! `X-Forwarded-For` is walked from the right past trusted hops and the
//! first untrusted hop is the client (the edge's rule, nginx `realip` with
//! `real_ip_recursive on`). Behind a reverse proxy every user would
//! otherwise share the proxy's address, and one stranger's failures would
//! lock everyone out. IPv6 addresses count by /64 (one subscriber holds a
//! whole /64).

use http::HeaderMap;
use shorturl_common::cidr::{truncate, CidrList};
use std::net::{IpAddr, SocketAddr};

/// IPv6 prefix the limits count under.
const IPV6_PREFIX: u8 = 64;

/// One `X-Forwarded-For` hop as an address (`1.2.3.4`, `::1`, or with a port).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// The client of a request from `peer` (`None`: unknown peer).
pub fn address(
    trusted: &CidrList,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Option<IpAddr> {
    let mut client = peer?.ip();
    if !trusted.is_empty() {
        let hops = headers
            .get_all("x-forwarded-for")
            .iter()
            .rev()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.rsplit(','));
        for hop in hops {
            if !trusted.contains(client) {
                break;
            }
            match parse_hop(hop) {
                Some(ip) => client = ip,
                None => break,
            }
        }
    }
    Some(truncate(client, IPV6_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn xff(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_peer_unless_it_is_a_trusted_proxy() {
        let peer = Some("10.0.0.1:4000".parse().unwrap());
        let none = CidrList::default();
        let t = CidrList::parse(&["10.0.0.0/8"]).unwrap();
        let h = xff("6.6.6.6, 7.7.7.7, 10.0.0.9");
        // Untrusted peer: the header is never read.
        assert_eq!(address(&none, &h, peer), Some(ip("10.0.0.1")));
        assert_eq!(
            address(&t, &h, Some("9.9.9.9:1".parse().unwrap())),
            Some(ip("9.9.9.9"))
        );
        // Trusted: the rightmost untrusted hop (6.6.6.6 was written by 7.7.7.7).
        assert_eq!(address(&t, &h, peer), Some(ip("7.7.7.7")));
        assert_eq!(address(&t, &HeaderMap::new(), peer), Some(ip("10.0.0.1")));
        // A hop that is not an address stops the walk.
        assert_eq!(
            address(&t, &xff("junk, 10.0.0.3"), peer),
            Some(ip("10.0.0.3"))
        );
        assert_eq!(address(&t, &h, None), None);
    }

    #[test]
    fn ipv6_counts_by_64() {
        let none = CidrList::default();
        let a = address(
            &none,
            &HeaderMap::new(),
            Some("[2001:db8:1:2::5]:1".parse().unwrap()),
        );
        assert_eq!(a, Some(ip("2001:db8:1:2::")));
    }
}
