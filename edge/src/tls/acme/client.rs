//! The ACME client's HTTPS transport: HTTP/1.1 over the same OpenSSL the
//! edge serves TLS with (no second TLS stack), verifying the CA against the
//! system roots plus `acme.ca_roots` (a test CA such as Pebble's). One
//! connection per request: an issuer makes a handful of requests a day.

use bytes::Bytes;
use http::header::HOST;
use http::{Request, Uri};
use hyper_util::rt::TokioIo;
use instant_acme::{BodyWrapper, BytesResponse, Error as AcmeError, HttpClient};
use openssl::ssl::{SslConnector, SslMethod};
use openssl::x509::X509;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// HTTPS client for the ACME directory.
#[derive(Clone)]
pub struct AcmeHttp {
    connector: Arc<SslConnector>,
    timeout: Duration,
}

impl AcmeHttp {
    /// A client trusting the system roots and the PEM certificates in `extra_roots`.
    pub fn new(extra_roots: Option<&Path>, timeout: Duration) -> Result<Self, BoxError> {
        let mut b = SslConnector::builder(SslMethod::tls_client())?;
        if let Some(p) = extra_roots {
            for cert in X509::stack_from_pem(&std::fs::read(p)?)? {
                b.cert_store_mut().add_cert(cert)?;
            }
        }
        b.set_alpn_protos(b"\x08http/1.1")?;
        Ok(AcmeHttp {
            connector: Arc::new(b.build()),
            timeout,
        })
    }

    async fn send(
        connector: Arc<SslConnector>,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Result<BytesResponse, BoxError> {
        let (mut parts, body) = req.into_parts();
        if parts.uri.scheme_str() != Some("https") {
            return Err("the ACME server must be reached over https".into());
        }
        let host = parts
            .uri
            .host()
            .ok_or("ACME URL without a host")?
            .to_owned();
        let port = parts.uri.port_u16().unwrap_or(443);
        let authority = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_else(|| host.clone());
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into());
        parts.uri = path.parse::<Uri>()?;
        parts.headers.insert(HOST, authority.parse()?);
        let host_for_dial = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tcp = tokio::net::TcpStream::connect((host_for_dial.as_str(), port)).await?;
        let ssl = connector.configure()?.into_ssl(&host_for_dial)?;
        let mut tls = pingora::tls::tokio_ssl::SslStream::new(ssl, tcp)?;
        Pin::new(&mut tls).connect().await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "ACME connection ended");
            }
        });
        let rsp = sender
            .send_request(Request::from_parts(parts, body))
            .await?;
        Ok(BytesResponse::from(rsp))
    }
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, AcmeError>> + Send>> {
        let connector = Arc::clone(&self.connector);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, Self::send(connector, req)).await {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) => Err(AcmeError::Other(e)),
                Err(_) => Err(AcmeError::Other("ACME request timed out".into())),
            }
        })
    }
}
