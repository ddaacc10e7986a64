//! Client addresses: CIDR lists (`trusted_proxies`, `status_allow`), the
//! client behind trusted proxies (`X-Forwarded-For`, nginx `realip`
//! semantics), and the key per-client limits count under (IPv6 by prefix).
//!
//! Nothing here allocates on the redirect path: the forwarded chain is only
//! materialised for requests that are proxied to the origin.

use http::HeaderMap;
pub use shorturl_common::cidr::{Cidr, CidrError, CidrList};
use std::net::{IpAddr, SocketAddr};

pub use shorturl_common::conn_caps::ClientKey;
use shorturl_common::memo::{remembered, Last};
use shorturl_common::request_rules::trim_ows;

/// One `X-Forwarded-For` hop as an address: `1.2.3.4`, `::1`, and the
/// `1.2.3.4:5678` / `[::1]:5678` forms some proxies write.
/// Header values are visible ASCII, so the spaces and tabs around a hop
/// are all the whitespace it can have.
fn parse_hop(hop: &[u8]) -> Option<IpAddr> {
    let hop = trim_ows(hop);
    if let Some(v4) = dotted_quad(hop) {
        return Some(IpAddr::V4(v4));
    }
    let hop = std::str::from_utf8(hop).ok()?;
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// The common hop, `a.b.c.d`, read byte by byte: a fifth of std's
/// `IpAddr` parser, which tries every form in turn (the link rules read
/// the client on every request with a country rule). Accepts exactly
/// what std accepts for this form (1-3 digits, no leading zero, at most
/// 255); anything else is left to std.
fn dotted_quad(b: &[u8]) -> Option<std::net::Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (n, o) in octets.iter_mut().enumerate() {
        if n > 0 {
            if b.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut v: u32 = 0;
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            v = v * 10 + u32::from(d - b'0');
            i += 1;
            if i - start > 3 {
                return None;
            }
        }
        let len = i - start;
        if len == 0 || (len > 1 && b[start] == b'0') {
            return None;
        }
        *o = u8::try_from(v).ok()?;
    }
    (i == b.len()).then(|| std::net::Ipv4Addr::from(octets))
}

/// Every `X-Forwarded-For` hop, right to left (nearest proxy first), over
/// all header fields in order.
fn hops_rev(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.as_bytes().rsplit(|&b| b == b','))
}

/// The client: the peer itself unless the peer is a trusted proxy; then
/// `X-Forwarded-For` is walked from the right past trusted hops, and the
/// first untrusted hop is the client (all trusted: the leftmost; a hop that
/// is not an address stops the walk at the last good one). Returns the
/// client and how many hops it consumed. Without trusted proxies the
/// header is never read.
pub fn client_of(peer: IpAddr, headers: &HeaderMap, trusted: &CidrList) -> (IpAddr, usize) {
    if trusted.is_empty() {
        return (peer, 0);
    }
    client_behind(peer, hops_rev(headers), trusted)
}

/// [`client_of`] over raw `X-Forwarded-For` field values in their order
/// in the head (the fast path, which has no `HeaderMap`).
pub fn client_of_values<'a>(
    peer: IpAddr,
    values: impl DoubleEndedIterator<Item = &'a [u8]>,
    trusted: &CidrList,
) -> IpAddr {
    if trusted.is_empty() {
        return peer;
    }
    // What `HeaderValue::to_str` accepts: visible ASCII, space and tab.
    // Bytes throughout: the link rules read the client on every request
    // with a country rule (a `str` walk cost ~700 instructions a request).
    let hops = values
        .rev()
        .filter(|v| v.iter().all(|&b| b == b'\t' || (32..127).contains(&b)))
        .flat_map(|v| v.rsplit(|&b| b == b','));
    client_behind(peer, hops, trusted).0
}

/// [`client_of_values`] through a one-entry memo per thread, keyed by the
/// trusted list, the peer and the header's bytes: a browser's connection
/// (or a proxy's, for one visitor) repeats them on every request, and the
/// link rules read the client on every request with a country rule.
pub fn client_of_values_repeated<'a>(
    peer: IpAddr,
    values: impl DoubleEndedIterator<Item = &'a [u8]> + Clone,
    trusted: &CidrList,
) -> IpAddr {
    thread_local! {
        static LAST: std::cell::RefCell<Last<IpAddr>> =
            const { std::cell::RefCell::new(Last::new()) };
    }
    if trusted.is_empty() {
        return peer;
    }
    // The key: the list's address, the peer, each value and a `\n` (which
    // no header value holds), in a stack buffer; a longer one is not kept.
    let mut key = [0u8; 160];
    let mut len = 0;
    let mut put = |b: &[u8]| {
        let end = len + b.len();
        if let Some(dst) = key.get_mut(len..end) {
            dst.copy_from_slice(b);
        }
        len = end;
    };
    put(&(trusted as *const CidrList as usize).to_ne_bytes());
    match peer {
        IpAddr::V4(a) => put(&a.octets()),
        IpAddr::V6(a) => put(&a.octets()),
    }
    for v in values.clone() {
        put(v);
        put(b"\n");
    }
    match key.get(..len) {
        Some(k) => remembered(&LAST, k, key.len(), || {
            client_of_values(peer, values, trusted)
        }),
        None => client_of_values(peer, values, trusted),
    }
}

/// Walks `hops` (right to left) past trusted proxies, from `peer`.
fn client_behind<'a>(
    peer: IpAddr,
    hops: impl Iterator<Item = &'a [u8]>,
    trusted: &CidrList,
) -> (IpAddr, usize) {
    let mut client = peer;
    let mut used = 0;
    for hop in hops {
        if !trusted.contains(client) {
            break;
        }
        match parse_hop(hop) {
            Some(ip) => {
                client = ip;
                used += 1;
            }
            None => break,
        }
    }
    (client, used)
}

/// The `X-Forwarded-For` sent to the origin: the client, the trusted hops
/// between it and the edge, then the peer. Whatever an untrusted client
/// wrote itself is dropped, so the origin can read the first entry as the
/// client address the edge decided on.
pub fn forwarded_for(peer: IpAddr, headers: &HeaderMap, trusted: &CidrList) -> String {
    let (_, used) = client_of(peer, headers, trusted);
    let mut chain: Vec<IpAddr> = hops_rev(headers).take(used).filter_map(parse_hop).collect();
    chain.reverse();
    chain.push(peer);
    chain
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|_| panic!("{s}"))
    }

    fn list(items: &[&str]) -> CidrList {
        CidrList::parse(items).unwrap_or_else(|e| panic!("{e}"))
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn dotted_quads_read_as_std_reads_them() {
        for s in [
            "8.8.8.8",
            "0.0.0.0",
            "255.255.255.255",
            "10.0.0.1",
            "1.2.3.04",
            "1.2.3.256",
            "1.2.3",
            "1.2.3.4.5",
            "1..2.3",
            ".1.2.3",
            "1.2.3.",
            "01.2.3.4",
            "1.2.3.4:80",
            "1.2.3.1000",
            "",
            "a.b.c.d",
            "1.2.3.4 ",
            "00.1.2.3",
            "1.2.3.00",
            "999.1.1.1",
            "1.2.3.-4",
            "+1.2.3.4",
            "1.2.3.4\0",
        ] {
            assert_eq!(
                dotted_quad(s.as_bytes()),
                s.parse::<std::net::Ipv4Addr>().ok(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn cidr_parse_and_contains() {
        let l = list(&[
            "10.0.0.0/8",
            "::1/128",
            "192.168.1.7",
            "fc00::/7",
            "172.16.0.0/12",
        ]);
        for yes in [
            "10.2.3.4",
            "::1",
            "192.168.1.7",
            "fd12::1",
            "172.31.0.1",
            "::ffff:10.0.0.9",
        ] {
            assert!(l.contains(ip(yes)), "{yes}");
        }
        for no in [
            "11.0.0.1",
            "::2",
            "192.168.1.8",
            "fe80::1",
            "172.32.0.1",
            "127.0.0.1",
        ] {
            assert!(!l.contains(ip(no)), "{no}");
        }
        assert_eq!(
            "172.16.0.0/12".parse::<Cidr>().map(|c| c.to_string()),
            Ok("172.16.0.0/12".into())
        );
        assert!(list(&["0.0.0.0/0"]).contains(ip("8.8.8.8")));
        assert!(!list(&["0.0.0.0/0"]).contains(ip("2001:db8::1")));
        assert!(list(&["::/0"]).contains(ip("2001:db8::1")));
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "nope",
            "10.0.0.0/",
            "/8",
            "10.0.0.0/x",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert!(!CidrList::default().contains(ip("127.0.0.1")));
    }

    #[test]
    fn the_remembered_client_is_the_one_computed() {
        // The per-thread memo answers exactly as the walk does, whatever the
        // order: a repeat, another peer, another header, another list, a
        // header too long to keep.
        let proxies = list(&["127.0.0.1/32", "10.0.0.0/8"]);
        let loopback = list(&["127.0.0.1/32"]);
        let long = format!("{}8.8.8.8", "1.1.1.1, ".repeat(40));
        let cases: [(&str, &[&str], &CidrList); 8] = [
            ("127.0.0.1", &["8.8.8.8"], &proxies),
            ("127.0.0.1", &["8.8.8.8"], &proxies),
            ("192.0.2.9", &["8.8.8.8"], &proxies),
            ("127.0.0.1", &["9.9.9.9, 10.1.2.3"], &proxies),
            ("127.0.0.1", &["9.9.9.9, 10.1.2.3"], &loopback),
            ("127.0.0.1", &["9.9.9.9", "10.1.2.3"], &proxies),
            ("127.0.0.1", &[long.as_str()], &proxies),
            ("127.0.0.1", &[long.as_str()], &proxies),
        ];
        for (peer, values, trusted) in cases {
            let bytes: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
            assert_eq!(
                client_of_values_repeated(ip(peer), bytes.iter().copied(), trusted),
                client_of_values(ip(peer), bytes.iter().copied(), trusted),
                "{peer} {values:?}"
            );
        }
    }

    #[test]
    fn untrusted_peers_are_the_client() {
        let h = xff(&["1.2.3.4"]);
        assert_eq!(
            client_of(ip("9.9.9.9"), &h, &CidrList::default()),
            (ip("9.9.9.9"), 0)
        );
        let t = list(&["10.0.0.0/8"]);
        assert_eq!(client_of(ip("9.9.9.9"), &h, &t), (ip("9.9.9.9"), 0));
        assert_eq!(forwarded_for(ip("9.9.9.9"), &h, &t), "9.9.9.9");
    }

    #[test]
    fn trusted_peers_yield_the_rightmost_untrusted_hop() {
        let t = list(&["10.0.0.0/8"]);
        let h = xff(&["6.6.6.6, 1.2.3.4", "10.0.0.2"]);
        assert_eq!(client_of(ip("10.0.0.1"), &h, &t), (ip("1.2.3.4"), 2));
        assert_eq!(
            forwarded_for(ip("10.0.0.1"), &h, &t),
            "1.2.3.4, 10.0.0.2, 10.0.0.1"
        );
        // All hops trusted: the leftmost.
        let h = xff(&["10.0.0.7, 10.0.0.2"]);
        assert_eq!(client_of(ip("10.0.0.1"), &h, &t), (ip("10.0.0.7"), 2));
        // A hop that is not an address stops the walk.
        let h = xff(&["1.2.3.4, garbage, 10.0.0.2"]);
        assert_eq!(client_of(ip("10.0.0.1"), &h, &t), (ip("10.0.0.2"), 1));
        assert_eq!(forwarded_for(ip("10.0.0.1"), &h, &t), "10.0.0.2, 10.0.0.1");
        // Ports and brackets are tolerated; no header: the peer.
        let h = xff(&["[2001:db8::5]:4711, 1.2.3.4:80"]);
        assert_eq!(client_of(ip("10.0.0.1"), &h, &t), (ip("1.2.3.4"), 1));
        assert_eq!(
            client_of(ip("10.0.0.1"), &HeaderMap::new(), &t),
            (ip("10.0.0.1"), 0)
        );
        assert_eq!(
            forwarded_for(ip("10.0.0.1"), &HeaderMap::new(), &t),
            "10.0.0.1"
        );
    }
}
