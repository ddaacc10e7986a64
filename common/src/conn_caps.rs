//! Connection caps shared by the edge and the origin: at most `max_total`
//! connections open, and at most `max_per_client` per client key (IPv6 by
//! prefix), taken when a connection is accepted and given back when it
//! ends, however it ends (a drop guard). Over a cap the caller closes the
//! connection before reading a byte.
//!
//! Per connection: two atomic operations, and with a per-client cap one
//! short lock of one of 16 shards. Nothing per request.

use crate::cidr::{truncate, CidrList};
use prometheus::IntGauge;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const SHARDS: usize = 16;

/// What per-client limits count under: an IPv4 address, or an IPv6 address
/// cut to its prefix (one subscriber usually holds a whole /64, so counting
/// single IPv6 addresses would let one client be 2^64 clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(IpAddr);

impl ClientKey {
    /// The key of `ip` with IPv6 cut to `v6_prefix` bits.
    pub fn new(ip: IpAddr, v6_prefix: u8) -> ClientKey {
        match ip.to_canonical() {
            v4 @ IpAddr::V4(_) => ClientKey(v4),
            v6 => ClientKey(truncate(v6, v6_prefix)),
        }
    }
}

/// The caps (0 = no cap).
#[derive(Debug, Clone)]
pub struct CapsConfig {
    pub max_total: usize,
    pub max_per_client: u32,
    pub v6_prefix: u8,
    /// Peers exempt from the per-client cap (proxies carrying many clients).
    pub exempt: CidrList,
}

/// Why a connection was closed on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `max_total` reached.
    Total,
    /// `max_per_client` reached for this client.
    PerClient,
}

/// Counts of open connections, in total and per client key.
pub struct ConnCaps {
    cfg: CapsConfig,
    open: AtomicUsize,
    per_client: Box<[Mutex<HashMap<ClientKey, u32>>]>,
    hasher: std::hash::RandomState,
    gauge: IntGauge,
}

/// One admitted connection; dropping it gives the place back.
pub struct Slot {
    caps: Arc<ConnCaps>,
    key: Option<ClientKey>,
    admitted: bool,
}

impl ConnCaps {
    /// Caps from `cfg`; `gauge` shows the connections open.
    pub fn new(cfg: CapsConfig, gauge: IntGauge) -> Arc<Self> {
        Arc::new(ConnCaps {
            cfg,
            open: AtomicUsize::new(0),
            per_client: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::hash::RandomState::new(),
            gauge,
        })
    }

    fn shard(&self, key: &ClientKey) -> MutexGuard<'_, HashMap<ClientKey, u32>> {
        let m = &self.per_client[(self.hasher.hash_one(key) as usize) % SHARDS];
        match m.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Admits a connection from `peer`, or says which cap it hit.
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Slot, Refused> {
        let n = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        // From here on, dropping `slot` undoes the count.
        let mut slot = Slot {
            caps: Arc::clone(self),
            key: None,
            admitted: false,
        };
        if self.cfg.max_total > 0 && n > self.cfg.max_total {
            return Err(Refused::Total);
        }
        if self.cfg.max_per_client > 0 {
            if let Some(ip) = peer.filter(|ip| !self.cfg.exempt.contains(*ip)) {
                let key = ClientKey::new(ip, self.cfg.v6_prefix);
                let mut shard = self.shard(&key);
                let count = shard.entry(key).or_insert(0);
                if *count >= self.cfg.max_per_client {
                    return Err(Refused::PerClient);
                }
                *count += 1;
                slot.key = Some(key);
            }
        }
        slot.admitted = true;
        self.gauge.inc();
        Ok(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut shard = self.caps.shard(&key);
            if let Some(c) = shard.get_mut(&key) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    shard.remove(&key);
                }
            }
        }
        if self.admitted {
            self.caps.gauge.dec();
        }
        self.caps.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(total: usize, per: u32, exempt: &[&str]) -> Arc<ConnCaps> {
        let gauge = IntGauge::new("test_open", "test").unwrap_or_else(|e| panic!("{e}"));
        let exempt = CidrList::parse(exempt).unwrap_or_else(|e| panic!("{e}"));
        ConnCaps::new(
            CapsConfig {
                max_total: total,
                max_per_client: per,
                v6_prefix: 64,
                exempt,
            },
            gauge,
        )
    }

    fn ip(s: &str) -> Option<IpAddr> {
        s.parse().ok()
    }

    #[test]
    fn per_client_and_total_caps_with_release() {
        let c = caps(5, 2, &["10.0.0.0/8"]);
        let a1 = c.admit(ip("1.1.1.1")).ok();
        let a2 = c.admit(ip("1.1.1.1")).ok();
        assert!(a1.is_some() && a2.is_some());
        assert_eq!(c.admit(ip("1.1.1.1")).err(), Some(Refused::PerClient));
        // IPv6: one /64 is one client.
        let v1 = c.admit(ip("2001:db8::1")).ok();
        let v2 = c.admit(ip("2001:db8::2")).ok();
        assert!(v1.is_some() && v2.is_some());
        assert_eq!(c.admit(ip("2001:db8::3")).err(), Some(Refused::PerClient));
        // An exempt peer is not capped per client, only in total.
        let p = c.admit(ip("10.0.0.1")).ok();
        assert!(p.is_some());
        assert_eq!(c.admit(ip("10.0.0.1")).err(), Some(Refused::Total));
        assert_eq!(c.admit(ip("2.2.2.2")).err(), Some(Refused::Total));
        assert_eq!(c.open(), 5, "refusals give their place back");
        drop(a1);
        assert_eq!(c.open(), 4);
        assert!(
            c.admit(ip("1.1.1.1")).is_ok(),
            "a closed connection frees its place"
        );
        drop((a2, v1, v2, p));
        assert_eq!(c.open(), 0);
        assert!(c
            .per_client
            .iter()
            .all(|s| s.lock().map(|m| m.is_empty()).unwrap_or(false)));
        assert_eq!(c.gauge.get(), 0);
    }

    #[test]
    fn zero_caps_are_off() {
        let c = caps(0, 0, &[]);
        let slots: Vec<_> = (0..1000)
            .filter_map(|_| c.admit(ip("1.1.1.1")).ok())
            .collect();
        assert_eq!(slots.len(), 1000);
        assert_eq!(c.gauge.get(), 1000);
        drop(slots);
        assert_eq!((c.open(), c.gauge.get()), (0, 0));
    }

    #[test]
    fn client_keys_cut_ipv6_to_the_prefix() {
        let k = |s: &str, p| ClientKey::new(s.parse().unwrap_or_else(|e| panic!("{e}")), p);
        assert_eq!(k("2001:db8:1:2:aaaa::1", 64), k("2001:db8:1:2:bbbb::9", 64));
        assert_ne!(k("2001:db8:1:2:aaaa::1", 64), k("2001:db8:1:3::1", 64));
        assert_ne!(
            k("2001:db8:1:2:aaaa::1", 128),
            k("2001:db8:1:2:bbbb::9", 128)
        );
        assert_eq!(k("::ffff:1.2.3.4", 64), k("1.2.3.4", 64));
        assert_ne!(k("1.2.3.4", 64), k("1.2.3.5", 64));
    }
}
