//! TLS for the tests: a private CA that issues server certificates, and a
//! blocking HTTPS/1.1 client (OpenSSL) that shows which certificate a
//! server presented, which ALPN protocol it chose and whether a session
//! was resumed.

use crate::http::{read_response, request_bytes, Response};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{SslConnector, SslMethod, SslSession, SslStream, SslVerifyMode};
use openssl::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::{X509NameBuilder, X509};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn ec_key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

fn serial() -> openssl::asn1::Asn1Integer {
    static N: AtomicU32 = AtomicU32::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed) + std::process::id() % 10_000 * 100_000;
    BigNum::from_u32(n).unwrap().to_asn1_integer().unwrap()
}

/// A certificate authority for tests.
pub struct Ca {
    pub cert: X509,
    key: PKey<Private>,
}

/// A certificate and its key, PEM.
pub struct Issued {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// The serial number, lower-case hex.
    pub serial: String,
}

impl Issued {
    /// Writes `<dir>/<stem>.crt` and `<dir>/<stem>.key`.
    pub fn write(&self, dir: &Path, stem: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(format!("{stem}.key")), &self.key_pem).unwrap();
        std::fs::write(dir.join(format!("{stem}.crt")), &self.cert_pem).unwrap();
    }
}

impl Ca {
    /// A new self-signed CA named `cn`.
    pub fn new(cn: &str) -> Ca {
        let key = ec_key();
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_nid(Nid::COMMONNAME, cn).unwrap();
        let name = name.build();
        let mut b = X509::builder().unwrap();
        b.set_version(2).unwrap();
        b.set_serial_number(&serial()).unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_issuer_name(&name).unwrap();
        b.set_pubkey(&key).unwrap();
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::days_from_now(30).unwrap())
            .unwrap();
        b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
            .unwrap();
        b.append_extension(
            KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build()
                .unwrap(),
        )
        .unwrap();
        b.sign(&key, MessageDigest::sha256()).unwrap();
        Ca {
            cert: b.build(),
            key,
        }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> Vec<u8> {
        self.cert.to_pem().unwrap()
    }

    /// A server certificate for DNS `names` and IP `ips`, valid `days`.
    pub fn issue(&self, names: &[&str], ips: &[&str], days: u32) -> Issued {
        let key = ec_key();
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_nid(Nid::COMMONNAME, names.first().or(ips.first()).unwrap())
            .unwrap();
        let name = name.build();
        let mut b = X509::builder().unwrap();
        b.set_version(2).unwrap();
        let sn = serial();
        let serial_hex = sn
            .to_bn()
            .unwrap()
            .to_hex_str()
            .unwrap()
            .to_ascii_lowercase();
        b.set_serial_number(&sn).unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_issuer_name(self.cert.subject_name()).unwrap();
        b.set_pubkey(&key).unwrap();
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::days_from_now(days).unwrap())
            .unwrap();
        let mut san = SubjectAlternativeName::new();
        for n in names {
            san.dns(n);
        }
        for ip in ips {
            san.ip(ip);
        }
        let ext = san
            .build(&b.x509v3_context(Some(&self.cert), None))
            .unwrap();
        b.append_extension(ext).unwrap();
        b.sign(&self.key, MessageDigest::sha256()).unwrap();
        Issued {
            cert_pem: b.build().to_pem().unwrap(),
            key_pem: key.private_key_to_pem_pkcs8().unwrap(),
            serial: serial_hex,
        }
    }
}

/// How to connect.
#[derive(Default, Clone)]
pub struct ClientOpts<'a> {
    /// Server name sent in the ClientHello (`None`: no SNI).
    pub sni: Option<&'a str>,
    /// PEM roots to verify the chain and the name against (`None`: no verification).
    pub roots: Option<&'a [u8]>,
    /// ALPN protocols offered, wire format (e.g. `b"\x02h2\x08http/1.1"`).
    pub alpn: Option<&'a [u8]>,
    /// A session to resume.
    pub session: Option<&'a SslSession>,
    /// Highest TLS version (`None`: the library's).
    pub max_tls12: bool,
}

/// One HTTPS connection.
pub struct TlsConn {
    reader: BufReader<SslStream<TcpStream>>,
}

/// Connects to 127.0.0.1:`port` and completes the handshake.
pub fn connect(port: u16, o: &ClientOpts<'_>) -> Result<TlsConn, String> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    match o.roots {
        Some(pem) => {
            let mut store = X509StoreBuilder::new().map_err(|e| e.to_string())?;
            for c in X509::stack_from_pem(pem).map_err(|e| e.to_string())? {
                store.add_cert(c).map_err(|e| e.to_string())?;
            }
            b.set_verify_cert_store(store.build())
                .map_err(|e| e.to_string())?;
            b.set_verify(SslVerifyMode::PEER);
        }
        None => b.set_verify(SslVerifyMode::NONE),
    }
    if let Some(a) = o.alpn {
        b.set_alpn_protos(a).map_err(|e| e.to_string())?;
    }
    if o.max_tls12 {
        b.set_max_proto_version(Some(openssl::ssl::SslVersion::TLS1_2))
            .map_err(|e| e.to_string())?;
    }
    let connector = b.build();
    let mut cfg = connector.configure().map_err(|e| e.to_string())?;
    cfg.set_use_server_name_indication(o.sni.is_some());
    cfg.set_verify_hostname(o.roots.is_some() && o.sni.is_some());
    if let Some(s) = o.session {
        // SAFETY: the session comes from a connection with the same settings.
        unsafe { cfg.set_session(s) }.map_err(|e| e.to_string())?;
    }
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let stream = cfg
        .connect(o.sni.unwrap_or("localhost"), tcp)
        .map_err(|e| e.to_string())?;
    Ok(TlsConn {
        reader: BufReader::new(stream),
    })
}

impl TlsConn {
    /// The certificate the server presented.
    pub fn peer_cert(&self) -> X509 {
        self.reader.get_ref().ssl().peer_certificate().unwrap()
    }

    /// Its serial number, lower-case hex.
    pub fn peer_serial(&self) -> String {
        serial_of(&self.peer_cert())
    }

    /// Its DNS names.
    pub fn peer_names(&self) -> Vec<String> {
        self.peer_cert()
            .subject_alt_names()
            .map(|s| {
                s.iter()
                    .filter_map(|n| n.dnsname().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The ALPN protocol the server chose.
    pub fn alpn(&self) -> Option<String> {
        self.reader
            .get_ref()
            .ssl()
            .selected_alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }

    /// The negotiated version (`TLSv1.3`, ...).
    pub fn version(&self) -> String {
        self.reader.get_ref().ssl().version_str().to_owned()
    }

    /// Whether the handshake resumed a session.
    pub fn reused(&self) -> bool {
        self.reader.get_ref().ssl().session_reused()
    }

    /// The session, to resume later (TLS 1.3 delivers tickets after the
    /// handshake: read a response first).
    pub fn session(&self) -> Option<SslSession> {
        self.reader.get_ref().ssl().session().map(|s| s.to_owned())
    }

    /// Sends an HTTP/1.1 request and reads the answer.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        host: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        let req = request_bytes("1.1", method, path, Some(host), headers, body);
        self.reader.get_mut().write_all(&req)?;
        read_response(&mut self.reader, method == "HEAD")
    }

    /// `GET path` with `Host: host`.
    pub fn get(&mut self, path: &str, host: &str) -> std::io::Result<Response> {
        self.send("GET", path, host, &[], b"")
    }
}

/// Lower-case hex serial of `cert`.
pub fn serial_of(cert: &X509) -> String {
    cert.serial_number()
        .to_bn()
        .unwrap()
        .to_hex_str()
        .unwrap()
        .to_ascii_lowercase()
}

/// `GET path` over HTTPS on a fresh connection, verified against `roots`.
pub fn https_get(port: u16, sni: &str, path: &str, roots: &[u8]) -> Response {
    let mut c = connect(
        port,
        &ClientOpts {
            sni: Some(sni),
            roots: Some(roots),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("TLS to {sni}:{port}: {e}"));
    c.get(path, sni)
        .unwrap_or_else(|e| panic!("GET https://{sni}:{port}{path}: {e}"))
}
