//! Owns: [`TlsOptions`], the client side of `amqps://` — the trust roots (a PEM CA
//! bundle) and the rustls client configuration (ring provider) that `Connection`
//! wraps its socket in (tokio-rustls; the client is tokio based, unlike the broker).
//!
//! Does not: offer a way to skip verifying the server: a certificate that does not chain
//! to the given roots or does not name the host is refused.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::error::ClientError;

/// How `amqps://` connections verify the server (and, optionally, present a client
/// certificate for SASL EXTERNAL).
#[derive(Clone)]
pub struct TlsOptions {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsOptions")
    }
}

fn tls_error(what: &str, path: &Path, e: impl std::fmt::Display) -> ClientError {
    ClientError::io(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{what} {}: {e}", path.display()),
    ))
}

fn certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(what, path, e))?;
    if certs.is_empty() {
        return Err(tls_error(what, path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

fn roots(ca_file: &Path) -> Result<RootCertStore, ClientError> {
    let mut roots = RootCertStore::empty();
    for cert in certs("CA file", ca_file)? {
        roots
            .add(cert)
            .map_err(|e| tls_error("CA file", ca_file, e))?;
    }
    Ok(roots)
}

fn builder() -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>, ClientError> {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::io(std::io::Error::other(e)))
}

impl TlsOptions {
    /// Trusts the CA certificates in the PEM file `ca_file`; no client certificate.
    pub fn from_ca_file(ca_file: &Path) -> Result<TlsOptions, ClientError> {
        let config = builder()?
            .with_root_certificates(roots(ca_file)?)
            .with_no_client_auth();
        Ok(TlsOptions {
            config: Arc::new(config),
        })
    }

    /// As [`TlsOptions::from_ca_file`], presenting the client certificate chain and key
    /// (PEM) to a broker that verifies peers.
    pub fn with_client_cert(
        ca_file: &Path,
        cert_file: &Path,
        key_file: &Path,
    ) -> Result<TlsOptions, ClientError> {
        let chain = certs("client certificate", cert_file)?;
        let key = PrivateKeyDer::from_pem_file(key_file)
            .map_err(|e| tls_error("client key", key_file, e))?;
        let config = builder()?
            .with_root_certificates(roots(ca_file)?)
            .with_client_auth_cert(chain, key)
            .map_err(|e| tls_error("client key", key_file, e))?;
        Ok(TlsOptions {
            config: Arc::new(config),
        })
    }

    /// Runs the TLS handshake on `sock` for `host` (the name the server's certificate
    /// must carry: a DNS name or an IP address).
    pub(crate) async fn connect(
        &self,
        host: &str,
        sock: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, ClientError> {
        let name = ServerName::try_from(host.to_owned()).map_err(|_| {
            ClientError::io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{host:?} is not a valid TLS server name"),
            ))
        })?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.config));
        Ok(connector.connect(name, sock).await?)
    }
}
