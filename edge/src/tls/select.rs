//! Certificate selection by SNI: the exact name, then the wildcard one
//! label up (`*.shop55.com` for `s.shop55.com`, never for `shop55.com` or
//! `a.s.shop55.com`), then the default certificate. Lookups borrow the
//! requested name: no allocation in a handshake unless the client sent
//! upper-case letters.

use super::cert::Certified;
use std::collections::HashMap;
use std::sync::Arc;

/// An immutable set of certificates, swapped as a whole when it changes.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Exact names, lower-case.
    exact: HashMap<String, Arc<Certified>>,
    /// Wildcards by the domain under the `*`: `shop55.com` for `*.shop55.com`.
    wildcard: HashMap<String, Arc<Certified>>,
    /// Name of the default certificate and the certificate, if loaded.
    default: Option<(String, Arc<Certified>)>,
}

impl Snapshot {
    /// Builds a snapshot from `(name, cert)` pairs (`*.x` for wildcards).
    /// For a name given twice, the certificate that expires last wins.
    /// `default_name` picks the default certificate among them.
    pub fn build(
        certs: impl IntoIterator<Item = (String, Arc<Certified>)>,
        default_name: &str,
    ) -> Snapshot {
        let mut s = Snapshot::default();
        for (name, cert) in certs {
            let name = name.to_ascii_lowercase();
            let (map, key) = match name.strip_prefix("*.") {
                Some(base) => (&mut s.wildcard, base.to_owned()),
                None => (&mut s.exact, name),
            };
            match map.get(&key) {
                Some(old) if old.not_after >= cert.not_after => {}
                _ => {
                    map.insert(key, cert);
                }
            }
        }
        let default_name = default_name.to_ascii_lowercase();
        s.default = s
            .lookup(&default_name)
            .map(|c| (default_name, Arc::clone(c)));
        s
    }

    fn lookup(&self, name: &str) -> Option<&Arc<Certified>> {
        if let Some(base) = name.strip_prefix("*.") {
            return self.wildcard.get(base);
        }
        self.exact.get(name)
    }

    /// The certificate for a handshake that asked for `sni` (`None`: no
    /// SNI, e.g. a client that connected to an IP address).
    pub fn select(&self, sni: Option<&str>) -> Option<&Arc<Certified>> {
        let by_name = sni.and_then(|n| {
            if n.bytes().any(|b| b.is_ascii_uppercase()) {
                self.select_lower(&n.to_ascii_lowercase())
            } else {
                self.select_lower(n)
            }
        });
        by_name.or(self.default.as_ref().map(|(_, c)| c))
    }

    fn select_lower(&self, name: &str) -> Option<&Arc<Certified>> {
        let name = name.strip_suffix('.').unwrap_or(name);
        self.exact.get(name).or_else(|| {
            let (_, up) = name.split_once('.')?;
            // `*.com` would cover every `x.com`: a wildcard needs two labels.
            up.contains('.').then(|| self.wildcard.get(up)).flatten()
        })
    }

    /// The default certificate's name, if it is loaded.
    pub fn default_name(&self) -> Option<&str> {
        self.default.as_ref().map(|(n, _)| n.as_str())
    }

    /// Every `(name, certificate)`, wildcards as `*.x`, sorted by name.
    pub fn entries(&self) -> Vec<(String, Arc<Certified>)> {
        let mut v: Vec<(String, Arc<Certified>)> = self
            .exact
            .iter()
            .map(|(n, c)| (n.clone(), Arc::clone(c)))
            .chain(
                self.wildcard
                    .iter()
                    .map(|(n, c)| (format!("*.{n}"), Arc::clone(c))),
            )
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// The certificate stored under exactly `name` (`*.x` for a wildcard).
    pub fn get(&self, name: &str) -> Option<&Arc<Certified>> {
        self.lookup(&name.to_ascii_lowercase())
    }

    /// Number of certificates.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len()
    }

    /// True when it holds no certificate.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::cert::test_certs::self_signed;
    use crate::tls::cert::Source;

    fn cert(name: &str, days: u32, serial: u32) -> (String, Arc<Certified>) {
        let (c, k) = self_signed(&[name], days, serial);
        let c = Certified::from_pem(&c, &k, Source::Dir).unwrap_or_else(|e| panic!("{e}"));
        (name.to_owned(), Arc::new(c))
    }

    fn serial_for(s: &Snapshot, sni: Option<&str>) -> Option<String> {
        s.select(sni).map(|c| c.serial.clone())
    }

    #[test]
    fn exact_then_wildcard_one_label_up_then_default() {
        let s = Snapshot::build(
            [
                cert("localhost", 30, 1),
                cert("a.shop55.com", 30, 2),
                cert("b.shop55.com", 30, 3),
                cert("c.example.org", 30, 4),
                cert("*.shop55.com", 30, 5),
            ],
            "localhost",
        );
        assert_eq!(s.len(), 5);
        assert_eq!(s.default_name(), Some("localhost"));
        let want = |sni: Option<&str>, serial: &str| {
            assert_eq!(serial_for(&s, sni).as_deref(), Some(serial), "{sni:?}");
        };
        want(Some("a.shop55.com"), "02");
        want(Some("B.Shop55.COM"), "03");
        want(Some("c.example.org."), "04");
        want(Some("zz.shop55.com"), "05");
        // The wildcard covers one label only, and not the bare domain.
        want(Some("x.zz.shop55.com"), "01");
        want(Some("shop55.com"), "01");
        want(Some("unknown.net"), "01");
        want(None, "01");
        want(Some(""), "01");
    }

    #[test]
    fn no_default_means_no_certificate_for_unknown_names() {
        let s = Snapshot::build([cert("a.com", 30, 1)], "localhost");
        assert_eq!(s.default_name(), None);
        assert!(s.select(Some("b.com")).is_none());
        assert!(s.select(None).is_none());
        assert!(Snapshot::default().select(Some("a.com")).is_none());
    }

    #[test]
    fn the_certificate_that_expires_last_wins() {
        let s = Snapshot::build(
            [
                cert("a.com", 90, 1),
                cert("a.com", 10, 2),
                cert("A.com", 91, 3),
            ],
            "a.com",
        );
        assert_eq!(s.len(), 1);
        assert_eq!(serial_for(&s, Some("a.com")).as_deref(), Some("03"));
    }

    #[test]
    fn a_wildcard_needs_two_labels_under_it() {
        let s = Snapshot::build([cert("*.com", 30, 1)], "none");
        assert!(s.select(Some("x.com")).is_none());
    }
}
