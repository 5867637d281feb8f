//! Around the handshake: bad vhost, password or header, garbage, clients that vanish.

use std::time::Duration;

use crate::common;
use crate::common::raw::{Ending, Tune};
use crate::common::wire::{self, m, Enc, Props};
use crate::common::{Broker, Bystanders, RawConn};
use crate::support::{check, Expect, BYSTANDERS};

shard_tests!(
    unknown_vhost,
    bad_password,
    wrong_protocol_header,
    garbage_before_handshake,
    garbage_after_handshake,
    client_vanishes_mid_frame,
    client_vanishes_mid_handshake,
);

async fn unknown_vhost(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        heartbeat: 0,
        ..offer
    });
    c.send_open("nosuch");
    let (code, text) = c.expect_connection_close();
    check(
        code,
        &text,
        &Expect::Exact(530, "NOT_ALLOWED - vhost 'nosuch' not found"),
    );
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn bad_password(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0not-the-password");
    let (code, text) = c.expect_connection_close();
    check(
        code,
        &text,
        &Expect::Exact(
            403,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
             For details see the broker logfile.",
        ),
    );
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn wrong_protocol_header(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    for header in [&b"AMQP\x00\x00\x08\x00"[..], &b"HTTP/1.1"[..]] {
        let mut c = RawConn::connect(&broker.addr());
        c.send(header).unwrap();
        let (bytes, closed) = c.read_to_eof(Duration::from_secs(5));
        assert_eq!(bytes, wire::PROTOCOL_HEADER.to_vec());
        assert!(closed, "socket left open after a wrong protocol header");
    }
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

/// Deterministic pseudo-random bytes (a 64-bit LCG), so failures reproduce.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

async fn garbage_before_handshake(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    for seed in 1..=4 {
        let mut c = RawConn::connect(&broker.addr());
        // Exactly a header's length, so the broker has consumed everything we sent when it
        // closes (unread input would turn its close into a reset and lose the answer).
        let mut bytes = garbage(seed, 8);
        bytes[0] = b'G'; // never accidentally "AMQP"
        let _ = c.send(&bytes);
        let (answer, closed) = c.read_to_eof(Duration::from_secs(5));
        assert_eq!(answer, wire::PROTOCOL_HEADER.to_vec(), "seed {seed}");
        assert!(closed, "seed {seed}: socket left open");
    }
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn garbage_after_handshake(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    for seed in 1..=6 {
        let mut c = broker.raw();
        c.channel_open(1);
        let _ = c.send(&garbage(seed, 8192));
        match c.read_until_closed(Duration::from_secs(5)) {
            Some(Ending::Close { code, text, .. }) => {
                assert!(
                    (501..=505).contains(&code),
                    "seed {seed}: garbage closed with {code} {text}"
                );
                assert!(
                    c.wait_eof(Duration::from_secs(5)),
                    "seed {seed}: socket left open"
                );
            }
            Some(Ending::Eof) => {}
            None => panic!("seed {seed}: 8 KiB of garbage did not close the connection"),
        }
    }
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn client_vanishes_mid_frame(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    for cut in [3usize, 7, 20, 60] {
        let mut c = broker.raw();
        c.channel_open(1);
        let q = c.queue_declare(1, "", false, true, false);
        let body = vec![7u8; 100];
        let mut bytes = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &RawConn::publish_args("", &q, false, false),
            ),
        );
        let method_len = bytes.len();
        bytes.extend(wire::frame(
            wire::FRAME_HEADER,
            1,
            &wire::content_header_payload(body.len() as u64, &Props::default()),
        ));
        bytes.extend(wire::frame(wire::FRAME_BODY, 1, &body));
        // Cut inside the method frame for small cuts, inside the content otherwise.
        let end = if cut < method_len {
            cut
        } else {
            bytes.len() - cut
        };
        c.send(&bytes[..end]).unwrap();
        drop(c);
    }
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
    // New connections are accepted, and a full publish still works.
    let mut c = broker.raw();
    c.channel_open(1);
    let q = c.queue_declare(1, "", false, true, false);
    c.basic_consume(1, &q, true);
    c.publish(1, "", &q, &Props::default(), b"whole").unwrap();
    assert_eq!(c.read_delivery(1).body, b"whole");
}

async fn client_vanishes_mid_handshake(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    // After 4 of the 8 header bytes.
    let mut c = RawConn::connect(&broker.addr());
    c.send(b"AMQP").unwrap();
    drop(c);
    // After the header, before start-ok.
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    drop(c);
    // Half a start-ok frame.
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    let args = Enc::new()
        .table(&common::raw::client_properties())
        .shortstr("PLAIN")
        .longstr(b"\0guest\0guest")
        .shortstr("en_US")
        .done();
    let f = wire::frame(
        wire::FRAME_METHOD,
        0,
        &wire::method_payload(m::CONNECTION_START_OK, &args),
    );
    c.send(&f[..f.len() / 2]).unwrap();
    drop(c);
    // Connected and silent, then gone.
    drop(RawConn::connect(&broker.addr()));
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}
