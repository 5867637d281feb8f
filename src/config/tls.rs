//! Owns: the `[tls]` section (amqps listeners: addresses, certificate, key, CA bundle and
//! client-certificate verification, with RabbitMQ's `ssl_options` names), its file form,
//! its command-line flags and its cross-field checks.
//!
//! Does not: read the PEM files or build the rustls configuration (`net::tls` does, at
//! start, and names the key and file it could not use).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// `[tls]`: TLS (amqps) listeners.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// Addresses to accept TLS connections on; empty = no TLS listener.
    pub listen: Vec<SocketAddr>,
    /// The server's certificate chain (PEM), leaf first.
    pub cert_file: Option<PathBuf>,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CA bundle (PEM) that client certificates are verified against.
    pub ca_file: Option<PathBuf>,
    /// Ask clients for a certificate and verify it against `ca_file`; enables SASL
    /// EXTERNAL on the TLS listeners.
    pub verify_peer: bool,
    /// With `verify_peer`: refuse a client that sends no certificate.
    pub fail_if_no_peer_cert: bool,
}

/// The `[tls]` table of the configuration file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    listen: Option<Vec<SocketAddr>>,
    cert_file: Option<String>,
    key_file: Option<String>,
    ca_file: Option<String>,
    verify_peer: Option<bool>,
    fail_if_no_peer_cert: Option<bool>,
}

impl TlsSection {
    /// Applies the keys the file sets.
    pub fn apply(self, tls: &mut TlsConfig) {
        if let Some(listen) = self.listen {
            tls.listen = listen;
        }
        let path = |p: Option<String>| p.filter(|p| !p.is_empty()).map(PathBuf::from);
        if self.cert_file.is_some() {
            tls.cert_file = path(self.cert_file);
        }
        if self.key_file.is_some() {
            tls.key_file = path(self.key_file);
        }
        if self.ca_file.is_some() {
            tls.ca_file = path(self.ca_file);
        }
        if let Some(v) = self.verify_peer {
            tls.verify_peer = v;
        }
        if let Some(v) = self.fail_if_no_peer_cert {
            tls.fail_if_no_peer_cert = v;
        }
    }
}

/// The `--tls-*` flags (flattened into `Cli`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsFlags {
    /// Address to accept TLS (amqps) connections on, repeatable; usually 0.0.0.0:5671
    /// [default: none].
    #[arg(long = "tls-listen", value_name = "ADDR")]
    pub tls_listen: Vec<SocketAddr>,

    /// The server certificate chain, PEM (`tls.cert_file`).
    #[arg(long = "tls-cert", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The server private key, PEM (`tls.key_file`).
    #[arg(long = "tls-key", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// CA bundle, PEM, to verify client certificates with (`tls.ca_file`).
    #[arg(long = "tls-ca", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

impl TlsFlags {
    /// Applies the flags that were given.
    pub fn apply(&self, tls: &mut TlsConfig) {
        if !self.tls_listen.is_empty() {
            tls.listen = self.tls_listen.clone();
        }
        if let Some(p) = &self.tls_cert {
            tls.cert_file = Some(p.clone());
        }
        if let Some(p) = &self.tls_key {
            tls.key_file = Some(p.clone());
        }
        if let Some(p) = &self.tls_ca {
            tls.ca_file = Some(p.clone());
        }
    }
}

impl TlsConfig {
    /// Cross-field rules: a listener needs a certificate and key; verification needs a
    /// CA bundle. Returns the key at fault and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.listen.is_empty() {
            return Ok(());
        }
        if self.cert_file.is_none() {
            return Err((
                "tls.cert_file",
                "a TLS listener (tls.listen / --tls-listen) needs a certificate chain (--tls-cert)"
                    .into(),
            ));
        }
        if self.key_file.is_none() {
            return Err((
                "tls.key_file",
                "a TLS listener (tls.listen / --tls-listen) needs a private key (--tls-key)".into(),
            ));
        }
        if self.verify_peer && self.ca_file.is_none() {
            return Err((
                "tls.ca_file",
                "tls.verify_peer = true needs a CA bundle to verify client certificates (--tls-ca)"
                    .into(),
            ));
        }
        if self.fail_if_no_peer_cert && !self.verify_peer {
            return Err((
                "tls.fail_if_no_peer_cert",
                "only applies with tls.verify_peer = true".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_needs_cert_key_and_for_verification_a_ca() {
        let mut t = TlsConfig::default();
        assert_eq!(t.check(), Ok(()));
        t.listen = vec![SocketAddr::from(([127, 0, 0, 1], 5671))];
        assert_eq!(t.check().map_err(|e| e.0), Err("tls.cert_file"));
        t.cert_file = Some("c.pem".into());
        assert_eq!(t.check().map_err(|e| e.0), Err("tls.key_file"));
        t.key_file = Some("k.pem".into());
        assert_eq!(t.check(), Ok(()));
        t.fail_if_no_peer_cert = true;
        assert_eq!(t.check().map_err(|e| e.0), Err("tls.fail_if_no_peer_cert"));
        t.verify_peer = true;
        assert_eq!(t.check().map_err(|e| e.0), Err("tls.ca_file"));
        t.ca_file = Some("ca.pem".into());
        assert_eq!(t.check(), Ok(()));
    }

    #[test]
    fn the_file_section_sets_every_key_and_rejects_unknown_ones() {
        let mut c = crate::config::Config::default();
        crate::config::file::apply_text(
            &mut c,
            "[tls]\nlisten = [\"0.0.0.0:5671\"]\ncert_file = \"/etc/c.pem\"\n\
             key_file = \"/etc/k.pem\"\nca_file = \"/etc/ca.pem\"\nverify_peer = true\n\
             fail_if_no_peer_cert = true\n",
        )
        .expect("parses");
        assert_eq!(
            c.tls,
            TlsConfig {
                listen: vec![SocketAddr::from(([0, 0, 0, 0], 5671))],
                cert_file: Some("/etc/c.pem".into()),
                key_file: Some("/etc/k.pem".into()),
                ca_file: Some("/etc/ca.pem".into()),
                verify_peer: true,
                fail_if_no_peer_cert: true,
            }
        );
        assert_eq!(c.validate(), Ok(()));
        let err = crate::config::file::apply_text(&mut c, "[tls]\nverify = true\n")
            .expect_err("unknown key");
        assert!(err.contains("verify"), "{err}");
        let mut c = crate::config::Config::default();
        crate::config::file::apply_text(&mut c, "[tls]\nlisten = [\"127.0.0.1:5671\"]\n")
            .expect("parses");
        let err = c.validate().expect_err("no certificate");
        assert!(err.to_string().contains("tls.cert_file"), "{err}");
    }
}
