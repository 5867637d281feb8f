//! Awkwardly shaped good input: pipelined methods, byte-by-byte frames, one big write.

use crate::common;
use crate::common::raw::Tune;
use crate::common::wire::{self, m, Enc, Props};
use crate::common::{Broker, RawConn};
use crate::support::queue_declare_args;

shard_tests!(
    pipelined_methods_answered_in_order,
    byte_by_byte_frames,
    many_frames_in_one_write,
);

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
