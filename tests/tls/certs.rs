//! Test certificates made with rcgen: a CA, a server certificate for localhost and
//! 127.0.0.1, and client certificates with a chosen subject CN, written as PEM files to
//! the test's own directory.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair};

pub struct Pki {
    dir: PathBuf,
    ca: Certificate,
    ca_key: KeyPair,
}

/// A certificate and key written to `<name>.pem` and `<name>.key`.
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "sluice test CA");
        let ca = params.self_signed(&ca_key).expect("CA certificate");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write ca.pem");
        Pki {
            dir: dir.to_owned(),
            ca,
            ca_key,
        }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn issue(&self, name: &str, sans: Vec<String>, cn: &str) -> Issued {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(sans).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("sign");
        let issued = Issued {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        };
        std::fs::write(&issued.cert, cert.pem()).expect("write cert");
        std::fs::write(&issued.key, key.serialize_pem()).expect("write key");
        issued
    }

    /// The broker's certificate: valid for localhost and 127.0.0.1.
    pub fn server(&self) -> Issued {
        self.issue(
            "server",
            vec!["localhost".into(), "127.0.0.1".into()],
            "localhost",
        )
    }

    /// A client certificate whose subject CN is `cn`.
    pub fn client(&self, cn: &str) -> Issued {
        self.issue(&format!("client-{cn}"), Vec::new(), cn)
    }
}
