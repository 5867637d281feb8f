//! Offenders and neighbours: repeated and uncoded offences, their unacked messages, churn.

use std::time::Duration;

use crate::common;
use crate::common::raw::Ending;
use crate::common::wire::{self, m, Enc, Props};
use crate::common::{Broker, Bystanders, RawConn};
use crate::support::{queue_declare_args, BYSTANDERS};

shard_tests!(
    offender_unacked_messages_requeued,
    repeated_offenders,
    other_illegal_input,
    connection_churn,
);

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
