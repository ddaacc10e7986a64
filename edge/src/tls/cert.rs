//! One certificate the edge can serve: the decoded leaf, its chain and key,
//! kept in memory so a handshake never parses PEM or touches a store.

use openssl::asn1::{Asn1Time, Asn1TimeRef};
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::{X509NameRef, X509};
use std::fmt;

/// Where a certificate was loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The certificate directory (`tls.cert_dir`).
    Dir,
    /// The shared store in Redis (issued by ACME, or put there by an operator).
    Shared,
}

impl Source {
    /// The name used in the status JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Dir => "dir",
            Source::Shared => "shared",
        }
    }
}

/// Why a PEM pair was refused.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("no certificate in the PEM data")]
    NoCertificate,
    #[error("the private key does not match the certificate")]
    KeyMismatch,
    #[error("invalid PEM or DER: {0}")]
    Parse(#[from] openssl::error::ErrorStack),
}

/// A certificate with everything a handshake needs, already decoded.
pub struct Certified {
    pub leaf: X509,
    /// Intermediates, in the order they were given.
    pub chain: Vec<X509>,
    pub key: PKey<Private>,
    /// `notBefore` and `notAfter`, Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// The issuer's name as `CN=..., O=...`.
    pub issuer: String,
    /// The leaf's serial number, hex.
    pub serial: String,
    pub source: Source,
}

impl fmt::Debug for Certified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certified")
            .field("serial", &self.serial)
            .field("issuer", &self.issuer)
            .field("not_after", &self.not_after)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch of an ASN.1 time.
pub fn unix_of(t: &Asn1TimeRef) -> Result<i64, CertError> {
    let epoch = Asn1Time::from_unix(0)?;
    let d = epoch.diff(t)?;
    Ok(i64::from(d.days) * 86_400 + i64::from(d.secs))
}

fn name_text(name: &X509NameRef) -> String {
    let mut parts = Vec::new();
    for e in name.entries() {
        let key = e.object().nid().short_name().unwrap_or("?");
        let val = e.data().to_string().unwrap_or_default();
        parts.push(format!("{key}={val}"));
    }
    parts.join(", ")
}

impl Certified {
    /// Decodes a PEM chain (leaf first) and its PEM private key.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8], source: Source) -> Result<Self, CertError> {
        let mut certs = X509::stack_from_pem(cert_pem)?.into_iter();
        let leaf = certs.next().ok_or(CertError::NoCertificate)?;
        let key = PKey::private_key_from_pem(key_pem)?;
        if !leaf.public_key()?.public_eq(&key) {
            return Err(CertError::KeyMismatch);
        }
        let serial = leaf
            .serial_number()
            .to_bn()?
            .to_hex_str()?
            .to_string()
            .to_ascii_lowercase();
        Ok(Certified {
            not_before: unix_of(leaf.not_before())?,
            not_after: unix_of(leaf.not_after())?,
            issuer: name_text(leaf.issuer_name()),
            serial,
            chain: certs.collect(),
            key,
            leaf,
            source,
        })
    }

    /// The DNS names of the leaf (subject alternative names, else its CN),
    /// lower-cased.
    pub fn dns_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .leaf
            .subject_alt_names()
            .map(|sans| {
                sans.iter()
                    .filter_map(|n| n.dnsname().map(str::to_ascii_lowercase))
                    .collect()
            })
            .unwrap_or_default();
        if names.is_empty() {
            names = self
                .leaf
                .subject_name()
                .entries_by_nid(Nid::COMMONNAME)
                .filter_map(|e| e.data().to_string().ok().map(|s| s.to_ascii_lowercase()))
                .collect();
        }
        names
    }

    /// When the certificate is due for renewal: two thirds into its lifetime.
    pub fn renew_at(&self) -> i64 {
        self.not_before + (self.not_after - self.not_before) * 2 / 3
    }
}

#[cfg(test)]
pub(crate) mod test_certs {
    //! Self-signed certificates for unit tests.
    use openssl::asn1::Asn1Time;
    use openssl::bn::BigNum;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::hash::MessageDigest;
    use openssl::nid::Nid;
    use openssl::pkey::PKey;
    use openssl::x509::extension::SubjectAlternativeName;
    use openssl::x509::{X509NameBuilder, X509};

    /// (cert PEM, key PEM) for `names`, valid for `days`, serial `serial`.
    pub fn self_signed(names: &[&str], days: u32, serial: u32) -> (Vec<u8>, Vec<u8>) {
        let group =
            EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap_or_else(|e| panic!("{e}"));
        let key = PKey::from_ec_key(EcKey::generate(&group).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut name = X509NameBuilder::new().unwrap_or_else(|e| panic!("{e}"));
        name.append_entry_by_nid(Nid::COMMONNAME, names[0])
            .unwrap_or_else(|e| panic!("{e}"));
        let name = name.build();
        let mut b = X509::builder().unwrap_or_else(|e| panic!("{e}"));
        b.set_version(2).unwrap_or_else(|e| panic!("{e}"));
        let serial = BigNum::from_u32(serial)
            .and_then(|b| b.to_asn1_integer())
            .unwrap_or_else(|e| panic!("{e}"));
        b.set_serial_number(&serial)
            .unwrap_or_else(|e| panic!("{e}"));
        b.set_subject_name(&name).unwrap_or_else(|e| panic!("{e}"));
        b.set_issuer_name(&name).unwrap_or_else(|e| panic!("{e}"));
        b.set_pubkey(&key).unwrap_or_else(|e| panic!("{e}"));
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        b.set_not_after(&Asn1Time::days_from_now(days).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut san = SubjectAlternativeName::new();
        for n in names {
            san.dns(n);
        }
        let ext = san
            .build(&b.x509v3_context(None, None))
            .unwrap_or_else(|e| panic!("{e}"));
        b.append_extension(ext).unwrap_or_else(|e| panic!("{e}"));
        b.sign(&key, MessageDigest::sha256())
            .unwrap_or_else(|e| panic!("{e}"));
        (
            b.build().to_pem().unwrap_or_else(|e| panic!("{e}")),
            key.private_key_to_pem_pkcs8()
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::test_certs::self_signed;
    use super::*;

    #[test]
    fn decodes_names_dates_and_refuses_a_foreign_key() {
        let (crt, key) = self_signed(&["a.com", "*.a.com"], 90, 7);
        let c = Certified::from_pem(&crt, &key, Source::Dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.dns_names(), ["a.com", "*.a.com"]);
        assert_eq!(c.serial, "07");
        assert!(c.issuer.contains("CN=a.com"), "{}", c.issuer);
        let life = c.not_after - c.not_before;
        assert!(
            (90 * 86_400 - 5..=90 * 86_400 + 5).contains(&life),
            "{life}"
        );
        assert_eq!(c.renew_at(), c.not_before + life * 2 / 3);
        let (_, other_key) = self_signed(&["b.com"], 1, 1);
        assert!(matches!(
            Certified::from_pem(&crt, &other_key, Source::Dir),
            Err(CertError::KeyMismatch)
        ));
        assert!(matches!(
            Certified::from_pem(b"", &key, Source::Dir),
            Err(CertError::NoCertificate) | Err(CertError::Parse(_))
        ));
    }
}
