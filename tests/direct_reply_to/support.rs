//! Helpers of the direct reply-to suites: placing a requester and a replier on
//! different shards, the reply consumer, publishing with `mandatory`, reading deliveries,
//! returns and acks, and learning a channel's reply address.

use crate::common::raw::RawDelivery;
use crate::common::wire::{self, m, Enc, Props};
use crate::common::{Broker, RawConn};

pub const PSEUDO: &str = "amq.rabbitmq.reply-to";
pub const PREFIX: &str = "amq.rabbitmq.reply-to.";

/// Queue home = fnv1a(vhost, name) mod shards (ARCHITECTURE.md), re-derived here.
pub fn home_shard(name: &str, shards: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in "/".as_bytes().iter().chain(&[0u8]).chain(name.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % shards as u64) as usize
}

/// A handshaken connection with channel 1 open, and the shard it was accepted on.
pub fn conn_with_shard(broker: &Broker, shards: usize) -> (RawConn, usize) {
    let mut c = broker.raw();
    c.channel_open(1);
    let q = c.queue_declare(1, "", false, true, true);
    (c, home_shard(&q, shards))
}

/// A requester and a replier: on different shards when there are two.
pub fn requester_and_replier(broker: &Broker, shards: usize) -> (RawConn, RawConn) {
    let (requester, at) = conn_with_shard(broker, shards);
    for _ in 0..200 {
        let (replier, on) = conn_with_shard(broker, shards);
        if shards == 1 || on != at {
            return (requester, replier);
        }
    }
    panic!("no connection landed on the other shard in 200 tries");
}

/// `basic.consume` on the pseudo-queue (`no_ack` as given, server-named tag unless
/// `tag`), without waiting for the answer.
pub fn send_reply_consume(c: &mut RawConn, channel: u16, tag: &str, no_ack: bool) {
    let args = Enc::new()
        .short(0)
        .shortstr(PSEUDO)
        .shortstr(tag)
        .bits(&[false, no_ack, false, false])
        .table(&vec![])
        .done();
    c.send_method(channel, m::BASIC_CONSUME, &args)
        .expect("send basic.consume");
}

/// The reply consumer on `channel`; returns its tag.
pub fn reply_consume(c: &mut RawConn, channel: u16) -> String {
    send_reply_consume(c, channel, "", true);
    c.expect_method(channel, m::BASIC_CONSUME_OK)
        .dec()
        .shortstr()
}

/// basic.publish to the default exchange with `mandatory`, header and one body frame.
pub fn publish_flags(
    c: &mut RawConn,
    channel: u16,
    key: &str,
    mandatory: bool,
    props: &Props,
    body: &[u8],
) {
    publish_to(c, channel, ("", key), mandatory, props, body);
}

/// basic.publish to (exchange, routing key) with `mandatory`, header and one body frame.
pub fn publish_to(
    c: &mut RawConn,
    channel: u16,
    (exchange, key): (&str, &str),
    mandatory: bool,
    props: &Props,
    body: &[u8],
) {
    let mut bytes = wire::frame(
        wire::FRAME_METHOD,
        channel,
        &wire::method_payload(
            m::BASIC_PUBLISH,
            &RawConn::publish_args(exchange, key, mandatory, false),
        ),
    );
    bytes.extend(wire::frame(
        wire::FRAME_HEADER,
        channel,
        &wire::content_header_payload(body.len() as u64, props),
    ));
    bytes.extend(wire::frame(wire::FRAME_BODY, channel, body));
    c.send(&bytes).expect("publish");
}

pub fn request_props(correlation: &str) -> Props {
    Props {
        reply_to: Some(PSEUDO.to_owned()),
        correlation_id: Some(correlation.to_owned()),
        ..Props::default()
    }
}

/// A basic.deliver's (consumer tag, delivery tag, redelivered, exchange, routing key).
pub fn deliver_fields(d: &RawDelivery) -> (String, u64, bool, String, String) {
    let mut dec = d.method.dec();
    let tag = dec.shortstr();
    let delivery_tag = dec.longlong();
    let redelivered = dec.bits(1)[0];
    (
        tag,
        delivery_tag,
        redelivered,
        dec.shortstr(),
        dec.shortstr(),
    )
}

/// Reads a basic.return and its content: (code, text, exchange, routing key, body).
pub fn read_return(c: &mut RawConn, channel: u16) -> (u16, String, String, String, Vec<u8>) {
    let method = c.expect_method(channel, m::BASIC_RETURN);
    let mut d = method.dec();
    let fields = (d.short(), d.shortstr(), d.shortstr(), d.shortstr());
    let (ty, _, header) = c.read_frame().expect("content header");
    assert_eq!(ty, wire::FRAME_HEADER);
    let size = wire::Dec::new(&header[4..12]).longlong() as usize;
    let mut body = Vec::new();
    while body.len() < size {
        let (ty, _, chunk) = c.read_frame().expect("body");
        assert_eq!(ty, wire::FRAME_BODY);
        body.extend_from_slice(&chunk);
    }
    (fields.0, fields.1, fields.2, fields.3, body)
}

/// Under confirms: publish `seq` was returned, and its ack comes after the return (acks
/// of earlier publishes may come before it). Returns the return's fields.
pub fn return_then_ack(c: &mut RawConn, seq: u64) -> (u16, String, String, String, Vec<u8>) {
    loop {
        let (ty, _, payload) = c.read_frame().expect("frame");
        assert_eq!(ty, wire::FRAME_METHOD);
        let mut d = wire::Dec::new(&payload);
        let id = (d.short(), d.short());
        if id == m::BASIC_RETURN {
            let fields = (d.short(), d.shortstr(), d.shortstr(), d.shortstr());
            let (_, _, header) = c.read_frame().expect("content header");
            let size = wire::Dec::new(&header[4..12]).longlong() as usize;
            let mut body = Vec::new();
            while body.len() < size {
                body.extend_from_slice(&c.read_frame().expect("body").2);
            }
            loop {
                let ack = c.expect_method(1, m::BASIC_ACK);
                if ack.dec().longlong() >= seq {
                    return (fields.0, fields.1, fields.2, fields.3, body);
                }
            }
        }
        assert_eq!(id, m::BASIC_ACK, "expected a return or an ack");
        assert!(d.longlong() < seq, "publish {seq} acked before its return");
    }
}

/// The requester's reply address, learnt by sending itself a request through `queue`
/// (consumed on channel `via`).
pub fn address_of(c: &mut RawConn, channel: u16, via: u16, queue: &str) -> String {
    c.publish(channel, "", queue, &request_props("probe"), b"probe")
        .expect("publish");
    let d = c.read_delivery(via);
    d.props.reply_to.expect("reply_to")
}

/// queue.declare-ok's (name, messages, consumers).
pub fn declare_ok(c: &mut RawConn, channel: u16) -> (String, u32, u32) {
    let ok = c.expect_method(channel, m::QUEUE_DECLARE_OK);
    let mut d = ok.dec();
    (d.shortstr(), d.long(), d.long())
}
