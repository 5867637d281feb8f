//! Hard errors over a raw socket: every malformed or illegal input closes the offending
//! connection with the exact reply code (and text), and the bystanders — connections opened
//! before the bad one, each consuming from its own queue — keep receiving messages.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::raw::{Ending, Tune};
use common::wire::{self, m, Enc, Props};
use common::{Broker, Bystanders, RawConn};

/// How many healthy connections watch each misbehaviour. With two shards, four random
/// connections share the bad connection's shard with probability 15/16.
const BYSTANDERS: usize = 4;

/// What the offender must receive.
enum Expect {
    Exact(u16, &'static str),
    Prefix(u16, &'static str),
}

fn check(code: u16, text: &str, expect: &Expect) {
    match expect {
        Expect::Exact(c, t) => {
            assert_eq!(code, *c, "reply code (text {text:?})");
            assert_eq!(text, *t);
        }
        Expect::Prefix(c, p) => {
            assert_eq!(code, *c, "reply code (text {text:?})");
            assert!(
                text.starts_with(p),
                "reply text {text:?} does not start with {p:?}"
            );
        }
    }
}

/// Starts a broker and bystanders, runs `offend` on a fresh handshaken raw connection,
/// expects connection.close as `expect`, then checks the bystanders.
async fn hard_error(shards: usize, expect: Expect, offend: impl FnOnce(&mut RawConn)) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = broker.raw();
    offend(&mut c);
    let (code, text) = c.expect_connection_close();
    check(code, &text, &expect);
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

shard_tests!(
    bad_frame_end,
    frame_larger_than_frame_max,
    ten_megabyte_frame_header,
    body_frame_without_publish,
    header_frame_without_publish,
    method_inside_content,
    method_instead_of_content_header,
    offender_unacked_messages_requeued,
    method_on_unopened_channel,
    method_on_closed_channel,
    channel_open_twice,
    truncated_method_payload,
    publish_immediate,
    unknown_vhost,
    bad_password,
    wrong_protocol_header,
    garbage_before_handshake,
    garbage_after_handshake,
    client_vanishes_mid_frame,
    client_vanishes_mid_handshake,
    repeated_offenders,
    other_illegal_input,
    connection_churn,
    pipelined_methods_answered_in_order,
    byte_by_byte_frames,
    many_frames_in_one_write,
);

async fn bad_frame_end(shards: usize) {
    hard_error(shards, Expect::Prefix(501, "FRAME_ERROR - "), |c| {
        let mut f = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(m::CHANNEL_OPEN, &Enc::new().shortstr("").done()),
        );
        *f.last_mut().unwrap() = 0x00;
        c.send(&f).unwrap();
    })
    .await
}

async fn frame_larger_than_frame_max(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = c.read_tune();
    c.send_tune_ok(Tune {
        frame_max: 4096,
        heartbeat: 0,
        ..offer
    });
    c.send_open("/");
    c.read_open_ok();
    c.channel_open(1);
    // A well-formed publish whose single body frame is 6000 bytes, over the agreed 4096.
    let body = vec![b'x'; 6000];
    let mut bytes = wire::frame(
        wire::FRAME_METHOD,
        1,
        &wire::method_payload(
            m::BASIC_PUBLISH,
            &RawConn::publish_args("", "nowhere", false, false),
        ),
    );
    bytes.extend(wire::frame(
        wire::FRAME_HEADER,
        1,
        &wire::content_header_payload(body.len() as u64, &Props::default()),
    ));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, &body));
    let _ = c.send(&bytes);
    let (code, text) = c.expect_connection_close();
    check(code, &text, &Expect::Prefix(501, "FRAME_ERROR - "));
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn ten_megabyte_frame_header(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = broker.raw();
    c.channel_open(1);
    // Only the 7-byte header of a method frame announcing 10 MB: the broker must not wait
    // for the payload.
    let size: u32 = 10 * 1024 * 1024;
    let mut hdr = vec![wire::FRAME_METHOD, 0, 1];
    hdr.extend_from_slice(&size.to_be_bytes());
    c.send(&hdr).unwrap();
    let sent = Instant::now();
    let (code, text) = c.expect_connection_close();
    check(code, &text, &Expect::Prefix(501, "FRAME_ERROR - "));
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "oversize frame rejected only after {:?}",
        sent.elapsed()
    );
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

async fn body_frame_without_publish(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        c.send_frame(wire::FRAME_BODY, 1, b"orphan body").unwrap();
    })
    .await
}

async fn header_frame_without_publish(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        let payload = wire::content_header_payload(5, &Props::default());
        c.send_frame(wire::FRAME_HEADER, 1, &payload).unwrap();
    })
    .await
}

fn queue_declare_args(name: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done()
}

/// The spec's channel-error (504): "the client attempted to work with a channel that had
/// not been correctly opened" — RabbitMQ answers the same.
async fn method_on_unopened_channel(shards: usize) {
    hard_error(
        shards,
        Expect::Prefix(504, "CHANNEL_ERROR - expected 'channel.open'"),
        |c| {
            c.send_method(5, m::QUEUE_DECLARE, &queue_declare_args("never-opened"))
                .unwrap();
        },
    )
    .await
}

async fn method_on_closed_channel(shards: usize) {
    hard_error(
        shards,
        Expect::Prefix(504, "CHANNEL_ERROR - expected 'channel.open'"),
        |c| {
            c.channel_open(1);
            let args = Enc::new()
                .short(200)
                .shortstr("done")
                .short(0)
                .short(0)
                .done();
            c.send_method(1, m::CHANNEL_CLOSE, &args).unwrap();
            c.expect_method(1, m::CHANNEL_CLOSE_OK);
            c.send_method(1, m::QUEUE_DECLARE, &queue_declare_args("after-close"))
                .unwrap();
        },
    )
    .await
}

async fn channel_open_twice(shards: usize) {
    hard_error(shards, Expect::Prefix(504, "CHANNEL_ERROR - "), |c| {
        c.channel_open(1);
        c.send_method(1, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
            .unwrap();
    })
    .await
}

async fn truncated_method_payload(shards: usize) {
    hard_error(shards, Expect::Prefix(502, "SYNTAX_ERROR"), |c| {
        c.channel_open(1);
        // queue.declare: ticket, then a shortstr announcing 40 bytes of which 3 follow.
        let args = Enc::new().short(0).octet(40).raw(b"abc").done();
        c.send_method(1, m::QUEUE_DECLARE, &args).unwrap();
    })
    .await
}

async fn publish_immediate(shards: usize) {
    hard_error(
        shards,
        Expect::Exact(540, "NOT_IMPLEMENTED - immediate=true"),
        |c| {
            c.channel_open(1);
            let mut bytes = wire::frame(
                wire::FRAME_METHOD,
                1,
                &wire::method_payload(
                    m::BASIC_PUBLISH,
                    &RawConn::publish_args("", "q", false, true),
                ),
            );
            bytes.extend(wire::frame(
                wire::FRAME_HEADER,
                1,
                &wire::content_header_payload(2, &Props::default()),
            ));
            bytes.extend(wire::frame(wire::FRAME_BODY, 1, b"hi"));
            c.send(&bytes).unwrap();
        },
    )
    .await
}

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

/// Every offence, one after another on the same broker, then the bystanders.
async fn repeated_offenders(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    for round in 0..3 {
        let mut c = broker.raw();
        // The contract names no single code for a body frame on a channel never opened:
        // "unexpected frame" (505), "command invalid" (503) and "channel error" (504, as
        // RabbitMQ does) all describe it.
        c.send_frame(wire::FRAME_BODY, 1, b"x").unwrap();
        let (code, _) = c.expect_connection_close();
        assert!(
            (503..=505).contains(&code),
            "round {round}: body on unopened channel gave {code}"
        );

        let mut c = broker.raw();
        c.channel_open(1);
        c.send_method(1, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
            .unwrap();
        assert_eq!(c.expect_connection_close().0, 504, "round {round}");

        let mut c = broker.raw();
        let mut hdr = vec![wire::FRAME_METHOD, 0, 0];
        hdr.extend_from_slice(&u32::MAX.to_be_bytes());
        c.send(&hdr).unwrap();
        assert_eq!(c.expect_connection_close().0, 501, "round {round}");

        bystanders.assert_unharmed(&broker).await;
        broker.assert_healthy();
    }
}

async fn method_inside_content(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        let mut bytes = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &RawConn::publish_args("", "q", false, false),
            ),
        );
        bytes.extend(wire::frame(
            wire::FRAME_HEADER,
            1,
            &wire::content_header_payload(10, &Props::default()),
        ));
        bytes.extend(wire::frame(wire::FRAME_BODY, 1, b"half!"));
        // The other five body bytes never come; a method arrives instead.
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_QOS,
                &Enc::new().long(0).short(1).bits(&[false]).done(),
            ),
        ));
        c.send(&bytes).unwrap();
    })
    .await
}

async fn method_instead_of_content_header(shards: usize) {
    hard_error(shards, Expect::Prefix(505, "UNEXPECTED_FRAME - "), |c| {
        c.channel_open(1);
        let mut bytes = wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &RawConn::publish_args("", "q", false, false),
            ),
        );
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_QOS,
                &Enc::new().long(0).short(1).bits(&[false]).done(),
            ),
        ));
        c.send(&bytes).unwrap();
    })
    .await
}

/// Messages delivered to the offender and not yet acknowledged go back to the queue and
/// reach another consumer, flagged redelivered: a hard error loses no data.
async fn offender_unacked_messages_requeued(shards: usize) {
    let mut broker = Broker::start(shards);
    let q = common::unique("q-offender");
    let mut offender = broker.raw();
    offender.channel_open(1);
    offender.queue_declare(1, &q, false, false, false);
    offender.basic_consume(1, &q, false);
    let mut publisher = broker.raw();
    publisher.channel_open(1);
    for i in 0..3 {
        publisher
            .publish(1, "", &q, &Props::default(), format!("m{i}").as_bytes())
            .unwrap();
    }
    for i in 0..3 {
        let d = offender.read_delivery(1);
        assert_eq!(d.body, format!("m{i}").as_bytes());
    }
    offender.send_frame(wire::FRAME_BODY, 1, b"orphan").unwrap();
    let (code, _) = offender.expect_connection_close();
    assert_eq!(code, 505);

    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (_, mut rx) = ch.consume_auto(&q).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        let d = common::next_delivery(&mut rx).await;
        assert!(d.redelivered, "requeued message not flagged redelivered");
        got.push(String::from_utf8(d.body).unwrap());
    }
    got.sort();
    assert_eq!(got, ["m0", "m1", "m2"]);
    broker.assert_healthy();
}

/// Inputs the contract gives no exact code for: each must end the offender's connection with
/// a hard error and a reason, and nothing else.
async fn other_illegal_input(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    type Offence = Box<dyn Fn(&mut RawConn)>;
    let cases: Vec<(&str, Offence)> = vec![
        (
            "queue.declare on channel 0",
            Box::new(|c| {
                c.send_method(0, m::QUEUE_DECLARE, &queue_declare_args("zero"))
                    .unwrap();
            }),
        ),
        (
            "unknown class and method",
            Box::new(|c| {
                c.channel_open(1);
                c.send_method(1, (99, 99), &[1, 2, 3]).unwrap();
            }),
        ),
        (
            "channel number above channel-max",
            Box::new(|c| {
                c.send_method(4000, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
                    .unwrap();
            }),
        ),
        (
            "unknown frame type",
            Box::new(|c| {
                c.send_frame(42, 0, b"what").unwrap();
            }),
        ),
        (
            "second connection.open",
            Box::new(|c| {
                c.send_method(
                    0,
                    m::CONNECTION_OPEN,
                    &Enc::new().shortstr("/").shortstr("").bits(&[false]).done(),
                )
                .unwrap();
            }),
        ),
    ];
    for (name, offend) in cases {
        let mut c = broker.raw();
        offend(&mut c);
        match c.read_until_closed(Duration::from_secs(5)) {
            Some(Ending::Close { code, text, .. }) => {
                assert!(
                    code >= 500,
                    "{name}: closed with non-hard code {code} {text}"
                );
                assert!(!text.is_empty(), "{name}: empty reply text");
            }
            other => panic!("{name}: expected a connection.close, got {other:?}"),
        }
        broker.assert_healthy();
    }
    bystanders.assert_unharmed(&broker).await;
}

/// Many connections at once from several threads, closed cleanly, dropped mid-handshake or
/// dropped with open channels; the broker keeps serving.
async fn connection_churn(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let addr = broker.addr();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let mut c = RawConn::connect(&addr);
                    match (t + i) % 3 {
                        0 => {
                            c.handshake();
                            c.channel_open(1);
                            let args = Enc::new().short(200).shortstr("").short(0).short(0).done();
                            c.send_method(0, m::CONNECTION_CLOSE, &args).unwrap();
                            c.expect_method(0, m::CONNECTION_CLOSE_OK);
                        }
                        1 => {
                            c.send_protocol_header();
                            c.read_start();
                        }
                        _ => {
                            c.handshake();
                            for ch in 1..=5 {
                                c.channel_open(ch);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a churn thread failed");
    }
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

/// Methods sent back to back without waiting are answered in order, even when their queues
/// live on different shards.
async fn pipelined_methods_answered_in_order(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let prefix = common::unique("pipe");
    let mut bytes = Vec::new();
    for i in 0..50 {
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::QUEUE_DECLARE,
                &queue_declare_args(&format!("{prefix}-{i}")),
            ),
        ));
    }
    for i in 0..50 {
        let args = Enc::new()
            .short(0)
            .shortstr(&format!("{prefix}-{i}"))
            .shortstr("amq.topic")
            .shortstr(&format!("pipe.{i}"))
            .bits(&[false])
            .table(&vec![])
            .done();
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(m::QUEUE_BIND, &args),
        ));
    }
    bytes.extend(wire::frame(
        wire::FRAME_METHOD,
        1,
        &wire::method_payload(
            m::BASIC_QOS,
            &Enc::new().long(0).short(10).bits(&[false]).done(),
        ),
    ));
    c.send(&bytes).unwrap();
    for i in 0..50 {
        let ok = c.expect_method(1, m::QUEUE_DECLARE_OK);
        assert_eq!(
            ok.dec().shortstr(),
            format!("{prefix}-{i}"),
            "declare-ok out of order"
        );
    }
    for _ in 0..50 {
        c.expect_method(1, m::QUEUE_BIND_OK);
    }
    c.expect_method(1, m::BASIC_QOS_OK);
    // And the bindings work.
    c.publish(1, "amq.topic", "pipe.17", &Props::default(), b"17")
        .unwrap();
    c.basic_consume(1, &format!("{prefix}-17"), true);
    assert_eq!(c.read_delivery(1).body, b"17");
    broker.assert_healthy();
}

/// A client whose bytes trickle in one at a time is served like any other.
async fn byte_by_byte_frames(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = RawConn::connect(&broker.addr());
    for b in wire::PROTOCOL_HEADER {
        c.send(&[*b]).unwrap();
    }
    c.read_start();
    let args = Enc::new()
        .table(&common::raw::client_properties())
        .shortstr("PLAIN")
        .longstr(b"\0guest\0guest")
        .shortstr("en_US")
        .done();
    let trickle = |c: &mut RawConn, bytes: Vec<u8>| {
        for b in bytes {
            c.send(&[b]).unwrap();
        }
    };
    trickle(
        &mut c,
        wire::frame(
            wire::FRAME_METHOD,
            0,
            &wire::method_payload(m::CONNECTION_START_OK, &args),
        ),
    );
    let tune = c.read_tune();
    c.send_tune_ok(Tune {
        heartbeat: 0,
        ..tune
    });
    c.send_open("/");
    c.read_open_ok();
    trickle(
        &mut c,
        wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(m::CHANNEL_OPEN, &Enc::new().shortstr("").done()),
        ),
    );
    c.expect_method(1, m::CHANNEL_OPEN_OK);
    let q = c.queue_declare(1, "", false, true, false);
    c.basic_consume(1, &q, true);
    let body = b"trickled body".to_vec();
    let mut bytes = wire::frame(
        wire::FRAME_METHOD,
        1,
        &wire::method_payload(
            m::BASIC_PUBLISH,
            &RawConn::publish_args("", &q, false, false),
        ),
    );
    bytes.extend(wire::frame(
        wire::FRAME_HEADER,
        1,
        &wire::content_header_payload(body.len() as u64, &Props::default()),
    ));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, &body));
    trickle(&mut c, bytes);
    assert_eq!(c.read_delivery(1).body, body);
    broker.assert_healthy();
}

/// A thousand publishes in one write are all routed, in order.
async fn many_frames_in_one_write(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut sub = broker.raw();
    sub.channel_open(1);
    let q = sub.queue_declare(1, "", false, true, false);
    sub.basic_consume(1, &q, true);
    let mut p = broker.raw();
    p.channel_open(1);
    let mut bytes = Vec::new();
    for i in 0..1000 {
        let body = format!("{i}");
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            1,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &RawConn::publish_args("", &q, false, false),
            ),
        ));
        bytes.extend(wire::frame(
            wire::FRAME_HEADER,
            1,
            &wire::content_header_payload(body.len() as u64, &Props::default()),
        ));
        bytes.extend(wire::frame(wire::FRAME_BODY, 1, body.as_bytes()));
    }
    p.send(&bytes).unwrap();
    for i in 0..1000 {
        assert_eq!(sub.read_delivery(1).body, format!("{i}").as_bytes());
    }
    broker.assert_healthy();
}
