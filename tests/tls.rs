//! TLS (amqps): the listener beside the plain one, large messages across several frames
//! and TLS records, a plain client on the TLS port, the handshake timeout, SASL EXTERNAL
//! with client certificates (offered only where peers are verified), required client
//! certificates, a bad key file at start, and sluice's own client over amqps.
//! Certificates are made in the test (rcgen). Every wait is bounded.

#[path = "tls/certs.rs"]
mod certs;
mod common;
#[path = "tls/raw.rs"]
mod raw;

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use amqprs::channel::{BasicGetArguments, BasicPublishArguments, QueueDeclareArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::security::SecurityCredentials;
use amqprs::tls::TlsAdaptor;
use amqprs::BasicProperties;
use certs::Pki;
use common::{bounded, http, Broker, RawConn, TestDir};
use raw::TlsAmqp;

const LOGIN_REFUSED_EXTERNAL: &str = "ACCESS_REFUSED - Login was refused using authentication \
     mechanism EXTERNAL. For details see the broker logfile.";

/// A broker with a plain and a TLS listener; `verify` adds client-certificate
/// verification (and `require` makes a certificate mandatory). Users: guest, alice.
fn tls_broker(pki: &Pki, verify: bool, require: bool) -> (Broker, u16) {
    tls_broker_with(pki, 2, verify, require, "")
}

/// As [`tls_broker`], on `shards` shards, with `extra` appended to the configuration.
fn tls_broker_with(
    pki: &Pki,
    shards: usize,
    verify: bool,
    require: bool,
    extra: &str,
) -> (Broker, u16) {
    let server = pki.server();
    let toml = format!(
        "[auth]\n\
         users = [{{ name = \"guest\", password = \"guest\", tags = [\"administrator\"] }},\n\
                  {{ name = \"alice\", password = \"not-used-by-external\" }}]\n\
         [tls]\n\
         listen = [\"127.0.0.1:0\"]\n\
         cert_file = {cert:?}\n\
         key_file = {key:?}\n\
         ca_file = {ca:?}\n\
         verify_peer = {verify}\n\
         fail_if_no_peer_cert = {require}\n\
         {extra}",
        cert = server.cert.display().to_string(),
        key = server.key.display().to_string(),
        ca = pki.ca_file().display().to_string(),
    );
    let broker = Broker::start_with_config(shards, &toml);
    let port = tls_port(&broker);
    (broker, port)
}

fn tls_port(broker: &Broker) -> u16 {
    let marker = "BRK-1015 : Starting : Listening on TLS 127.0.0.1:";
    let line = broker
        .wait_for_log(marker, Duration::from_secs(5))
        .expect("BRK-1015 line");
    let rest = &line[line.find(marker).expect("marker") + marker.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().expect("TLS port")
}

fn connector(ca: &Path, client: Option<(&Path, &Path)>) -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(raw::client_config(ca, client))
}

fn amqprs_tls_args(
    port: u16,
    ca: &Path,
    client: Option<(&Path, &Path)>,
    credentials: SecurityCredentials,
) -> OpenConnectionArguments {
    let mut args = OpenConnectionArguments::new("127.0.0.1", port, "guest", "guest");
    args.credentials(credentials)
        .tls_adaptor(TlsAdaptor::new(connector(ca, client), "localhost".into()));
    args
}

/// An amqprs connection as guest over TLS, trusting the test CA.
async fn open_tls_guest(port: u16, pki: &Pki) -> Result<Connection, amqprs::error::Error> {
    Connection::open(&amqprs_tls_args(
        port,
        &pki.ca_file(),
        None,
        SecurityCredentials::new_plain("guest", "guest"),
    ))
    .await
}

/// Connects over TLS with `config`, reads the offered mechanisms and tries EXTERNAL:
/// the mechanisms and the reply (`None` for connection.tune, else the close's code and
/// text).
fn try_external(
    port: u16,
    config: std::sync::Arc<rustls::ClientConfig>,
) -> (String, Option<(u16, String)>) {
    let mut c = TlsAmqp::connect(port, config).expect("TLS connect");
    let mechanisms = c.read_mechanisms().expect("start");
    c.send_start_ok("EXTERNAL", b"").expect("start-ok");
    (mechanisms, c.read_login_reply().expect("reply"))
}

/// Sends a plain AMQP protocol header to `port` and reads until the broker closes:
/// the socket's local address and everything the broker sent.
fn plain_header_to(port: u16) -> (std::net::SocketAddr, Vec<u8>) {
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let local = sock.local_addr().expect("local addr");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    sock.write_all(b"AMQP\x00\x00\x09\x01").expect("header");
    let mut reply = Vec::new();
    let _ = sock.read_to_end(&mut reply);
    (local, reply)
}

/// A body whose bytes depend on their position and on `seed`.
fn body(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn get_body(ch: &amqprs::channel::Channel, queue: &str) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = ch
            .basic_get(BasicGetArguments::new(queue).no_ack(true).finish())
            .await
            .expect("basic.get");
        if let Some((_, _, content)) = got {
            return content;
        }
        assert!(Instant::now() < deadline, "no message on {queue}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn large_messages_round_trip_over_tls_beside_plain() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (broker, port) = tls_broker(&pki, false, false);
    bounded(async {
        let tls = open_tls_guest(port, &pki).await.expect("amqps connection");
        let plain = broker.connect().await;
        let tls_ch = tls.open_channel(None).await.expect("channel");
        let plain_ch = plain.conn.open_channel(None).await.expect("channel");
        for q in ["tls.in", "tls.out"] {
            tls_ch
                .queue_declare(QueueDeclareArguments::new(q))
                .await
                .expect("declare");
        }
        // 10 bytes; above one TLS record (16 KiB); above frame_max (128 KiB): several
        // body frames and many records.
        let sizes = [10usize, 20 * 1024, 300 * 1024 + 7];
        for (i, &size) in sizes.iter().enumerate() {
            let sent = body(size, i as u8);
            // TLS in, plain out.
            tls_ch
                .basic_publish(
                    BasicProperties::default(),
                    sent.clone(),
                    BasicPublishArguments::new("", "tls.in"),
                )
                .await
                .expect("publish over TLS");
            assert_eq!(get_body(&plain_ch, "tls.in").await, sent, "size {size}");
            // Plain in, TLS out.
            plain_ch
                .basic_publish(
                    BasicProperties::default(),
                    sent.clone(),
                    BasicPublishArguments::new("", "tls.out"),
                )
                .await
                .expect("publish over TCP");
            assert_eq!(get_body(&tls_ch, "tls.out").await, sent, "size {size}");
        }
        tls.close().await.expect("close TLS connection");
        plain.close().await;
    })
    .await;
}

#[tokio::test]
async fn plain_amqp_on_the_tls_port_is_closed_and_logged() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (broker, port) = tls_broker(&pki, false, false);
    let (local, reply) = plain_header_to(port);
    // No AMQP reply (no protocol header, no connection.start); at most a TLS alert
    // record (content type 21).
    assert!(
        reply.is_empty() || reply[0] == 21,
        "unexpected reply {reply:?}"
    );
    assert!(!reply.windows(4).any(|w| w == b"AMQP"), "{reply:?}");
    let line = broker
        .wait_for_log(
            &format!("TLS handshake failed from {local}"),
            Duration::from_secs(5),
        )
        .expect("CON-1010 line");
    assert!(line.contains("CON-1010"), "{line}");
    assert!(line.contains("socket closed"), "{line}");
    // Others are served: a TLS client and a plain one.
    bounded(async {
        let tls = open_tls_guest(port, &pki)
            .await
            .expect("amqps connection after the bad client");
        tls.close().await.expect("close");
        broker.connect().await.close().await;
    })
    .await;
}

/// A socket whose TLS handshake fails gives back its place among the shard's
/// unauthenticated sockets: failed handshakes beyond the cap never lock TLS out.
#[tokio::test]
async fn failed_handshakes_do_not_use_up_the_unauthenticated_cap() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let cap = "[limits.connections]\nunauthenticated_per_shard = 2\n";
    let (mut broker, port) = tls_broker_with(&pki, 1, false, false, cap);
    for _ in 0..6 {
        plain_header_to(port);
    }
    bounded(async {
        for _ in 0..3 {
            let tls = open_tls_guest(port, &pki)
                .await
                .expect("amqps connection after failed handshakes");
            tls.close().await.expect("close");
        }
    })
    .await;
    broker.assert_healthy();
}

#[tokio::test]
async fn a_silent_client_is_cut_off_by_the_handshake_timeout() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (broker, port) = tls_broker(&pki, false, false);
    // Beside it, a client that finishes its TLS handshake 8 s after connecting and then
    // sends nothing after the protocol header: the AMQP handshake deadline counts from
    // the accept too, so it is cut off about 10 s after connecting, not 10 s after its
    // TLS handshake.
    let config = raw::client_config(&pki.ca_file(), None);
    let late = std::thread::spawn(move || {
        let started = Instant::now();
        let sock = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        std::thread::sleep(Duration::from_secs(8));
        let mut c = TlsAmqp::over(sock, config).expect("TLS handshake");
        c.read_mechanisms().expect("connection.start");
        while c.read_frame().is_ok() {}
        started.elapsed()
    });
    let started = Instant::now();
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let local = sock.local_addr().expect("local addr");
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut reply = Vec::new();
    let _ = sock.read_to_end(&mut reply);
    let waited = started.elapsed();
    assert!(reply.is_empty(), "{reply:?}");
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(25),
        "closed after {waited:?}"
    );
    let line = broker
        .wait_for_log(
            &format!("TLS handshake failed from {local}"),
            Duration::from_secs(5),
        )
        .expect("CON-1010 line");
    assert!(line.contains("no TLS handshake within 10 s"), "{line}");
    let late = late.join().expect("late client");
    assert!(
        late >= Duration::from_secs(9) && late < Duration::from_secs(15),
        "the late client was cut off after {late:?}"
    );
}

#[tokio::test]
async fn external_logs_in_as_the_certificate_cn() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let alice = pki.client("alice");
    let (broker, port) = tls_broker(&pki, true, false);
    bounded(async {
        let conn = Connection::open(&amqprs_tls_args(
            port,
            &pki.ca_file(),
            Some((&alice.cert, &alice.key)),
            SecurityCredentials::new_external(),
        ))
        .await
        .expect("EXTERNAL login");
        let ch = conn.open_channel(None).await.expect("channel");
        ch.queue_declare(QueueDeclareArguments::new("ext.q"))
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
        // RabbitMQ's fields of a TLS connection.
        let c = &list[0];
        assert_eq!(c["ssl"], true, "{c}");
        assert_eq!(c["auth_mechanism"], "EXTERNAL", "{c}");
        assert_eq!(c["port"], port, "{c}");
        assert_eq!(c["host"], "127.0.0.1", "{c}");
        assert_eq!(
            c["name"],
            format!("127.0.0.1:{} -> 127.0.0.1:{port}", c["peer_port"]),
            "{c}"
        );
        // The TLS listener passes the health check; EXTERNAL is offered there.
        let (check, node) = tokio::task::spawn_blocking(move || {
            let check = http::get(http_port, "/api/health/checks/protocol-listener/amqps");
            (check, http::get(http_port, "/api/nodes").json())
        })
        .await
        .expect("health check");
        assert_eq!(check.status, 200, "{}", check.body);
        let mechanisms = &node[0]["auth_mechanisms"];
        assert!(
            mechanisms
                .as_array()
                .expect("auth_mechanisms")
                .iter()
                .any(|m| m["name"] == "EXTERNAL" && m["enabled"] == true),
            "{node}"
        );
        conn.close().await.expect("close");
    })
    .await;
}

/// connection.update-secret on an EXTERNAL login (issue 24): answered update-secret-ok
/// whatever the secret, and the connection stays the certificate's user (CON-1011).
#[tokio::test]
async fn external_login_accepts_update_secret() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let alice = pki.client("alice");
    let (broker, port) = tls_broker(&pki, true, false);
    bounded(async {
        let conn = Connection::open(&amqprs_tls_args(
            port,
            &pki.ca_file(),
            Some((&alice.cert, &alice.key)),
            SecurityCredentials::new_external(),
        ))
        .await
        .expect("EXTERNAL login");
        conn.update_secret("new_secret", "Refresh")
            .await
            .expect("update-secret-ok");
        let ch = conn.open_channel(None).await.expect("channel");
        ch.queue_declare(QueueDeclareArguments::new("ext.secret"))
            .await
            .expect("declare after update-secret");
        let line = broker
            .wait_for_log("CON-1011 : Secret updated", Duration::from_secs(5))
            .expect("CON-1011");
        assert!(
            line.contains("(alice@127.0.0.1:")
                && line.contains(
                    "user 'alice' (EXTERNAL) keeps its identity and permissions : reason: Refresh"
                ),
            "{line}"
        );
        conn.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn external_with_an_unknown_cn_or_no_certificate_is_refused() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let mallory = pki.client("mallory");
    let (_broker, port) = tls_broker(&pki, true, false);
    let ca = pki.ca_file();
    // A certificate whose CN is no user.
    let refused = (
        "EXTERNAL PLAIN AMQPLAIN".to_owned(),
        Some((403, LOGIN_REFUSED_EXTERNAL.to_owned())),
    );
    let config = raw::client_config(&ca, Some((&mallory.cert, &mallory.key)));
    assert_eq!(try_external(port, config), refused);
    // No certificate at all (allowed by fail_if_no_peer_cert = false): no identity.
    assert_eq!(try_external(port, raw::client_config(&ca, None)), refused);
    // PLAIN still works on the same listener.
    let mut c = TlsAmqp::connect(port, raw::client_config(&ca, None)).expect("TLS connect");
    c.read_mechanisms().expect("start");
    c.send_start_ok("PLAIN", b"\0guest\0guest")
        .expect("start-ok");
    assert_eq!(c.read_login_reply().expect("tune"), None);
}

#[tokio::test]
async fn external_is_offered_only_where_peers_are_verified() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let alice = pki.client("alice");
    let ca = pki.ca_file();
    // Verification off: neither listener offers EXTERNAL, and it is refused.
    let (broker, port) = tls_broker(&pki, false, false);
    let config = raw::client_config(&ca, Some((&alice.cert, &alice.key)));
    // Chosen where `connection.start` did not offer it: no frame, the session ends
    // (the 0-9-1 spec's rule and RabbitMQ's reader, after its delay; CON-1012).
    let mut c = TlsAmqp::connect(port, config).expect("TLS connect");
    assert_eq!(c.read_mechanisms().expect("start"), "PLAIN AMQPLAIN");
    c.send_start_ok("EXTERNAL", b"").expect("start-ok");
    assert!(
        c.read_frame().is_err(),
        "a frame after an unoffered mechanism"
    );
    assert_eq!(c.read_after_close().ok(), Some(0), "no close_notify");
    let mut plain = RawConn::connect(&broker.addr());
    plain.send_protocol_header();
    assert_eq!(plain.read_start().mechanisms, "PLAIN AMQPLAIN");
    drop(broker);
    // Verification on: the TLS listener offers it, the plain one does not and refuses it.
    let (broker, port) = tls_broker(&pki, true, false);
    let config = raw::client_config(&ca, Some((&alice.cert, &alice.key)));
    let mut c = TlsAmqp::connect(port, config).expect("TLS connect");
    assert_eq!(
        c.read_mechanisms().expect("start"),
        "EXTERNAL PLAIN AMQPLAIN"
    );
    let mut plain = RawConn::connect(&broker.addr());
    plain.send_protocol_header();
    assert_eq!(plain.read_start().mechanisms, "PLAIN AMQPLAIN");
    plain.send_start_ok("EXTERNAL", b"");
    let (bytes, closed) = plain.read_to_eof(Duration::from_secs(10));
    assert!(closed && bytes.is_empty(), "{bytes:?} closed: {closed}");
}

#[tokio::test]
async fn fail_if_no_peer_cert_refuses_a_client_without_one() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let alice = pki.client("alice");
    let ca = pki.ca_file();
    let (broker, port) = tls_broker(&pki, true, true);
    // Without a certificate: the handshake fails (TLS 1.3 clients learn it at their
    // first read) and no AMQP byte arrives.
    let refused =
        TlsAmqp::connect(port, raw::client_config(&ca, None)).and_then(|mut c| c.read_mechanisms());
    assert!(refused.is_err(), "{refused:?}");
    let line = broker
        .wait_for_log(
            "CON-1010 : TLS handshake failed from 127.0.0.1:",
            Duration::from_secs(5),
        )
        .expect("CON-1010 line");
    assert!(line.to_lowercase().contains("certificate"), "{line}");
    // With one, the connection proceeds.
    let config = raw::client_config(&ca, Some((&alice.cert, &alice.key)));
    assert_eq!(
        try_external(port, config),
        ("EXTERNAL PLAIN AMQPLAIN".to_owned(), None)
    );
}

#[test]
fn a_missing_key_file_stops_the_broker_naming_it() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let server = pki.server();
    let missing = dir.path().join("no-such.key");
    let data = dir.path().join("data");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--tls-listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&server.cert)
        .arg("--tls-key")
        .arg(&missing)
        .arg("--data-dir")
        .arg(&data)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sluice");
    assert!(!out.status.success(), "{:?}", out.status);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("option 'tls.key_file'"), "{text}");
    assert!(text.contains(&missing.display().to_string()), "{text}");
    // A key that is not PEM is named as well.
    std::fs::write(&missing, "not a key").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--tls-listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&server.cert)
        .arg("--tls-key")
        .arg(&missing)
        .arg("--data-dir")
        .arg(&data)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sluice");
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("option 'tls.key_file'"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_client_over_amqps() {
    use sluice::client::{ConnectionOptions, QueueDeclareOptions, TlsOptions, NO_PROPERTIES};
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (_broker, port) = tls_broker(&pki, false, false);
    bounded(async {
        let url = format!("amqps://guest:guest@localhost:{port}/");
        // Without trust roots an amqps URL is refused, not connected unverified.
        let err = sluice::client::Connection::connect(&url)
            .await
            .err()
            .expect("amqps without roots must fail");
        assert!(err.to_string().contains("needs trust roots"), "{err}");
        let opts = ConnectionOptions {
            tls: Some(TlsOptions::from_ca_file(&pki.ca_file()).expect("ca")),
            ..ConnectionOptions::default()
        };
        let conn = sluice::client::Connection::connect_with(&url, opts)
            .await
            .expect("amqps connect");
        let ch = conn.open_channel().await.expect("channel");
        ch.queue_declare("client.q", QueueDeclareOptions::default())
            .await
            .expect("declare");
        let sent = body(200 * 1024 + 3, 9);
        ch.basic_publish(
            "",
            "client.q",
            false,
            NO_PROPERTIES,
            bytes::Bytes::from(sent.clone()),
        )
        .await
        .expect("publish");
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            if let Some(m) = ch.basic_get("client.q", true).await.expect("get") {
                break m;
            }
            assert!(Instant::now() < deadline, "no message");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(&got.body[..], &sent[..]);
        conn.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn a_flood_of_bad_handshakes_is_logged_at_a_bounded_rate() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (broker, port) = tls_broker(&pki, false, false);
    // 30 plain clients on the TLS port within one 10 s window, over 2 shards: one shard
    // took at least 15, so at least 10 lines; no shard logs more than 10.
    for _ in 0..30 {
        plain_header_to(port);
    }
    let count = || {
        broker
            .logs()
            .iter()
            .filter(|l| l.contains("CON-1010"))
            .count()
    };
    assert!(
        common::wait_until(Duration::from_secs(5), || count() >= 10),
        "{} lines",
        count()
    );
    // Give any further line time to appear before counting.
    std::thread::sleep(Duration::from_millis(300));
    assert!(count() <= 20, "{} CON-1010 lines for 30 failures", count());
    // The broker still serves TLS clients.
    bounded(async {
        let tls = open_tls_guest(port, &pki)
            .await
            .expect("amqps connection after the flood");
        tls.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn sigterm_closes_tls_connections_with_320_and_close_notify() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (mut broker, port) = tls_broker(&pki, false, false);
    let mut c = TlsAmqp::connect(port, raw::client_config(&pki.ca_file(), None)).expect("connect");
    c.open_as_guest().expect("open");
    broker.sigterm();
    let (code, text) = c.expect_close().expect("connection.close");
    assert_eq!(code, 320, "{text}");
    assert!(text.starts_with("CONNECTION_FORCED"), "{text}");
    // The TLS session ends with the broker's close_notify, not a bare TCP close.
    assert_eq!(c.read_after_close().expect("clean TLS close"), 0);
    let status = broker
        .wait_exit(Duration::from_secs(10))
        .expect("sluice still running 10 s after SIGTERM");
    assert_eq!(status.code(), Some(0), "{status}");
}

#[tokio::test]
async fn frames_read_with_the_close_notify_are_still_handled() {
    use common::wire::{content_header_payload, frame, method_payload, Enc, Props};
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (broker, port) = tls_broker(&pki, false, false);
    bounded(async move {
        let plain = broker.connect().await;
        let ch = plain.conn.open_channel(None).await.expect("channel");
        ch.queue_declare(QueueDeclareArguments::new("tls.last"))
            .await
            .expect("declare");
        let body = b"published just before close_notify";
        let mut frames = frame(
            1,
            1,
            &method_payload((20, 10), &Enc::new().shortstr("").done()),
        );
        let publish = Enc::new()
            .short(0)
            .shortstr("")
            .shortstr("tls.last")
            .bits(&[false, false])
            .done();
        frames.extend(frame(1, 1, &method_payload((60, 40), &publish)));
        frames.extend(frame(
            2,
            1,
            &content_header_payload(body.len() as u64, &Props::default()),
        ));
        frames.extend(frame(3, 1, body));
        let config = raw::client_config(&pki.ca_file(), None);
        tokio::task::spawn_blocking(move || {
            let mut c = TlsAmqp::connect(port, config).expect("connect");
            c.open_as_guest().expect("open");
            // The publish and the end of the TLS session arrive in one read.
            c.send_then_close_notify(&frames).expect("send");
        })
        .await
        .expect("client thread");
        // A plain TCP client's frames before its FIN are handled; so are a TLS
        // client's before its close_notify.
        assert_eq!(get_body(&ch, "tls.last").await, body.to_vec());
        plain.close().await;
    })
    .await;
}

/// A listener on `[::]` is dual-stack: an IPv4 client's address arrives IPv4-mapped
/// (`::ffff:127.0.0.1`). Loopback is still loopback (guest, a loopback user, logs in, as
/// in RabbitMQ), and the address is the IPv4 one for every limit and log line.
#[test]
fn ipv4_clients_of_a_dual_stack_listener_keep_their_ipv4_address() {
    let dir = TestDir::new("sluice-tls-v6");
    let pki = Pki::new(dir.path());
    let server = pki.server();
    let toml = format!(
        "[limits.connections]\n\
         per_ip = 1\n\
         [tls]\n\
         listen = [\"[::]:0\"]\n\
         cert_file = {cert:?}\n\
         key_file = {key:?}\n",
        cert = server.cert.display().to_string(),
        key = server.key.display().to_string(),
    );
    let broker = Broker::start_with_config(1, &toml);
    let marker = "BRK-1015 : Starting : Listening on TLS [::]:";
    let line = broker
        .wait_for_log(marker, Duration::from_secs(5))
        .expect("BRK-1015 line");
    let rest = &line[line.find(marker).expect("marker") + marker.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let port: u16 = digits.parse().expect("TLS port");
    let config = raw::client_config(&pki.ca_file(), None);
    let mut first = TlsAmqp::connect(port, config.clone()).expect("connect");
    first
        .open_as_guest()
        .expect("guest from 127.0.0.1 is a loopback client");
    // The per-address limit counts it as 127.0.0.1, as on the IPv4 listener.
    let mut plain = RawConn::connect(&broker.addr());
    plain.send_protocol_header();
    plain.read_start();
    plain.send_start_ok("PLAIN", b"\0guest\0guest");
    plain.read_method().expect("tune");
    plain.send_tune_ok(common::raw::Tune {
        channel_max: 2047,
        frame_max: 131072,
        heartbeat: 0,
    });
    plain.send_open("/");
    let close = plain.read_method().expect("close");
    let mut d = close.dec();
    let (code, text) = (d.short(), d.shortstr());
    assert_eq!(
        (code, text.as_str()),
        (
            530,
            "NOT_ALLOWED - connection refused for address 127.0.0.1: source address connection limit (1) is reached"
        )
    );
}

/// `/api/overview` lists the TLS listener beside the plain one, as RabbitMQ names it.
#[test]
fn the_overview_lists_tls_listeners_as_amqp_ssl() {
    let dir = TestDir::new("sluice-tls");
    let pki = Pki::new(dir.path());
    let (broker, port) = tls_broker(&pki, false, false);
    let overview = http::get(broker.http_port(), "/api/overview").json();
    let listeners: Vec<(String, u64)> = overview["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| {
            (
                l["protocol"].as_str().unwrap_or_default().to_owned(),
                l["port"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        listeners.contains(&("amqp".to_owned(), u64::from(broker.port()))),
        "{listeners:?}"
    );
    assert!(
        listeners.contains(&("amqp/ssl".to_owned(), u64::from(port))),
        "{listeners:?}"
    );
}
