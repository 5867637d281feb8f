//! `--server https://…` with `--cacert`: the management listener has no TLS of its own,
//! so the test puts a TLS-terminating proxy (rustls, a certificate from the test's CA)
//! in front of it, as a reverse proxy would in deployment.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::certs::Pki;
use crate::common::{Broker, TestDir};
use crate::FILE;

/// A TLS proxy on 127.0.0.1 to `backend`: its port (it runs until the test ends).
fn tls_proxy(pki: &Pki, backend: u16) -> u16 {
    let issued = pki.server();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&issued.cert)
        .expect("cert file")
        .collect::<Result<_, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_file(&issued.key).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            while let Ok((sock, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(sock).await else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", backend)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    port
}

#[test]
fn https_with_a_private_ca() {
    let broker = Broker::start_with_config(1, FILE);
    let dir = TestDir::new("sluicectl-https");
    let pki = Pki::new(dir.path());
    let port = tls_proxy(&pki, broker.http_port());
    let ca = pki.ca_file();
    let ca = ca.to_str().expect("utf-8");
    let server = format!("https://127.0.0.1:{port}");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sluicectl"))
            .args(["--server", &server])
            .args(args)
            .env_remove("SLUICE_PASSWORD")
            .output()
            .expect("run sluicectl")
    };
    let out = run(&["declare-queue", "ctl.tls", "--cacert", ca]);
    assert!(out.status.success(), "{out:?}");
    let out = run(&["queues", "--cacert", ca]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ctl.tls"));
    // Without the CA (the webpki roots only), the certificate is not trusted.
    let out = run(&["queues"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("sluicectl: cannot reach https://"),
        "{out:?}"
    );
}
