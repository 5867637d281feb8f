//! sluice's client logs in with SASL EXTERNAL over TLS, as a federation link does where
//! its upstream URI says `auth_mechanism=external`: the options are built from the amqps
//! URL's RabbitMQ query parameters (`cacertfile`, `certfile`, `keyfile`).

use std::path::Path;
use std::time::Duration;

use sluice::client::{
    AmqpUrl, ClientError, Connection, ConnectionOptions, SaslMechanism, TlsOptions,
};

use crate::certs::Pki;
use crate::common::{bounded, http, Broker, TestDir};

const LOGIN_REFUSED_EXTERNAL: &str = "ACCESS_REFUSED - Login was refused using authentication \
     mechanism EXTERNAL. For details see the broker logfile.";

/// A broker with a plain listener and a TLS one that verifies client certificates
/// (so it offers EXTERNAL). Users: guest (administrator), alice. Returns the TLS port.
fn tls_broker(pki: &Pki) -> (Broker, u16) {
    let server = pki.server();
    let toml = format!(
        "[broker]\n\
         node_name = \"upstream-a\"\n\
         [auth]\n\
         users = [{{ name = \"guest\", password = \"guest\", tags = [\"administrator\"] }},\n\
                  {{ name = \"alice\", password = \"not-used-by-external\" }}]\n\
         [tls]\n\
         listen = [\"127.0.0.1:0\"]\n\
         cert_file = {cert:?}\n\
         key_file = {key:?}\n\
         ca_file = {ca:?}\n\
         verify_peer = true\n\
         fail_if_no_peer_cert = false\n",
        cert = server.cert.display().to_string(),
        key = server.key.display().to_string(),
        ca = pki.ca_file().display().to_string(),
    );
    let broker = Broker::start_with_config(2, &toml);
    let marker = "BRK-1015 : Starting : Listening on TLS 127.0.0.1:";
    let line = broker
        .wait_for_log(marker, Duration::from_secs(5))
        .expect("BRK-1015 line");
    let rest = &line[line.find(marker).expect("marker") + marker.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    (broker, digits.parse().expect("TLS port"))
}

/// An upstream URI as an operator writes it for a link with a client certificate.
fn external_url(port: u16, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "amqps://localhost:{port}/%2f?cacertfile={}&certfile={}&keyfile={}&auth_mechanism=external",
        ca.display(),
        cert.display(),
        key.display()
    )
}

/// What the federation link does with such a URI: TLS options from its query, and
/// EXTERNAL where `auth_mechanism=external`.
fn options_from(url: &AmqpUrl) -> ConnectionOptions {
    let path = |key: &str| Path::new(url.query_value(key).expect(key)).to_owned();
    let tls =
        TlsOptions::with_client_cert(&path("cacertfile"), &path("certfile"), &path("keyfile"))
            .expect("TLS options");
    let mechanism = match url.query_value("auth_mechanism") {
        Some("external") => SaslMechanism::External,
        _ => SaslMechanism::Plain,
    };
    ConnectionOptions {
        tls: Some(tls),
        mechanism,
        name: Some("Federation link (upstream: root, exchange: x)".into()),
        ..ConnectionOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_login_as_the_certificate_cn_from_url_parameters() {
    let dir = TestDir::new("sluice-fed-external");
    let pki = Pki::new(dir.path());
    let alice = pki.client("alice");
    let (broker, port) = tls_broker(&pki);
    bounded(async {
        let url = external_url(port, &pki.ca_file(), &alice.cert, &alice.key);
        let parsed = AmqpUrl::parse(&url).expect("URL");
        assert_eq!(
            (parsed.tls, parsed.host.as_str(), parsed.vhost.as_str()),
            (true, "localhost", "/")
        );
        let opts = options_from(&parsed);
        assert_eq!(opts.mechanism, SaslMechanism::External);
        let conn = Connection::connect_with(&url, opts)
            .await
            .expect("EXTERNAL login");
        let ch = conn.open_channel().await.expect("channel");
        ch.queue_declare("external.q", Default::default())
            .await
            .expect("declare");
        let http_port = broker.http_port();
        let list = tokio::task::spawn_blocking(move || http::get(http_port, "/api/connections"))
            .await
            .expect("list")
            .json();
        let users: Vec<&str> = list
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|c| c["user"].as_str())
            .collect();
        assert_eq!(users, vec!["alice"], "{list}");
        conn.close().await.expect("close");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_refusals() {
    let dir = TestDir::new("sluice-fed-external");
    let pki = Pki::new(dir.path());
    let mallory = pki.client("mallory");
    let (broker, port) = tls_broker(&pki);
    bounded(async {
        // A certificate whose CN is no user: RabbitMQ's login refusal.
        let url = external_url(port, &pki.ca_file(), &mallory.cert, &mallory.key);
        let opts = options_from(&AmqpUrl::parse(&url).expect("URL"));
        let e = Connection::connect_with(&url, opts)
            .await
            .err()
            .expect("refused");
        match e {
            ClientError::ConnectionClosed { code, text, .. } => {
                assert_eq!((code, text.as_str()), (403, LOGIN_REFUSED_EXTERNAL));
            }
            other => panic!("expected a connection close, got {other:?}"),
        }
        // The plain listener does not offer EXTERNAL: the client does not try it.
        let plain = format!("amqp://{}/", broker.addr());
        let opts = ConnectionOptions {
            mechanism: SaslMechanism::External,
            ..ConnectionOptions::default()
        };
        let e = Connection::connect_with(&plain, opts)
            .await
            .err()
            .expect("not offered");
        match e {
            ClientError::UnsupportedMechanism { wanted, offered } => {
                assert_eq!((wanted, offered.as_str()), ("EXTERNAL", "PLAIN AMQPLAIN"));
            }
            other => panic!("expected UnsupportedMechanism, got {other:?}"),
        }
        // PLAIN, the default, still works on the TLS port with the same URL's roots.
        let url = format!("amqps://guest:guest@localhost:{port}/");
        let opts = ConnectionOptions {
            tls: Some(TlsOptions::from_ca_file(&pki.ca_file()).expect("roots")),
            ..ConnectionOptions::default()
        };
        let conn = Connection::connect_with(&url, opts)
            .await
            .expect("PLAIN login");
        conn.close().await.expect("close");
    })
    .await;
}
