//! Bug 6, kept on purpose: a client's `channel.flow(active=false)` pauses deliveries to
//! that channel, as AMQP 0-9-1 says, and `active=true` resumes them. RabbitMQ refuses
//! `active=false` with 540 NOT_IMPLEMENTED (`rabbit_channel`: `protocol_error(
//! not_implemented, "active=false")`); sluice answers flow-ok. Pausing stops new credit
//! to the channel's consumers: a consumer whose credit is used up (prefetch reached) or
//! that starts on a paused channel gets nothing until the channel is resumed. Other
//! channels of the connection go on.

use std::time::Duration;

use crate::common::raw::is_timeout;
use crate::common::wire::{m, Dec, Enc, Props};
use crate::common::{unique, Broker, RawConn};

shard_tests!(
    flow_off_pauses_a_consumer_and_flow_on_resumes_it,
    consumer_started_on_a_paused_channel_waits,
);

const CHANNEL_FLOW: (u16, u16) = (20, 20);
const CHANNEL_FLOW_OK: (u16, u16) = (20, 21);

/// How long "nothing arrives" is watched.
const QUIET: Duration = Duration::from_millis(500);

/// Sends channel.flow and expects flow-ok with the same `active`.
fn flow(c: &mut RawConn, channel: u16, active: bool) {
    c.send_method(channel, CHANNEL_FLOW, &Enc::new().bits(&[active]).done())
        .expect("send channel.flow");
    let ok = c.expect_method(channel, CHANNEL_FLOW_OK);
    assert_eq!(ok.dec().bits(1), vec![active], "flow-ok echoes active");
}

fn qos(c: &mut RawConn, channel: u16, prefetch: u16) {
    let args = Enc::new().long(0).short(prefetch).bits(&[false]).done();
    c.send_method(channel, m::BASIC_QOS, &args)
        .expect("send basic.qos");
    c.expect_method(channel, m::BASIC_QOS_OK);
}

fn ack(c: &mut RawConn, channel: u16, tag: u64) {
    let args = Enc::new().longlong(tag).bits(&[false]).done();
    c.send_method(channel, m::BASIC_ACK, &args)
        .expect("send basic.ack");
}

fn publish(c: &mut RawConn, channel: u16, queue: &str, body: &[u8]) {
    c.publish(channel, "", queue, &Props::default(), body)
        .expect("publish");
}

/// The delivery tag and body of the next delivery on `channel`.
fn delivered(c: &mut RawConn, channel: u16) -> (u64, Vec<u8>) {
    let d = c.read_delivery(channel);
    let mut dec = Dec::new(&d.method.args);
    dec.shortstr();
    (dec.longlong(), d.body)
}

/// Nothing at all arrives on the connection for [`QUIET`].
fn assert_quiet(c: &mut RawConn, what: &str) {
    match c.read_frame_within(QUIET) {
        Err(e) if is_timeout(&e) => {}
        Err(e) => panic!("{what}: connection failed: {e}"),
        Ok((ty, channel, payload)) => {
            let id = (payload.len() >= 4).then(|| {
                let mut d = Dec::new(&payload);
                (d.short(), d.short())
            });
            panic!("{what}: got frame type {ty} on channel {channel} ({id:?}) while paused")
        }
    }
}

/// Ready messages in `queue` (passive declare on `channel`).
fn ready(c: &mut RawConn, channel: u16, queue: &str) -> u32 {
    let args = Enc::new()
        .short(0)
        .shortstr(queue)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(channel, m::QUEUE_DECLARE, &args)
        .expect("send passive queue.declare");
    let ok = c.expect_method(channel, m::QUEUE_DECLARE_OK);
    let mut d = ok.dec();
    d.shortstr();
    d.long()
}

/// Channel 1 consumes with prefetch 1. After flow(false) and the ack of its one
/// outstanding delivery, two new messages stay in the queue (while channel 3 of the same
/// connection keeps receiving from another queue); flow(true) delivers them in order.
async fn flow_off_pauses_a_consumer_and_flow_on_resumes_it(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    for ch in 1..=3 {
        c.channel_open(ch);
    }
    let q = unique("q-flow");
    let other = unique("q-flow-other");
    c.queue_declare(2, &q, false, false, false);
    c.queue_declare(2, &other, false, false, false);
    qos(&mut c, 1, 1);
    c.basic_consume(1, &q, false);
    c.basic_consume(3, &other, true);

    publish(&mut c, 2, &q, b"m1");
    let (tag1, body) = delivered(&mut c, 1);
    assert_eq!(body, b"m1");

    flow(&mut c, 1, false);
    ack(&mut c, 1, tag1);
    publish(&mut c, 2, &q, b"m2");
    publish(&mut c, 2, &q, b"m3");
    assert_quiet(&mut c, "prefetch-1 consumer after flow(false)");
    assert_eq!(ready(&mut c, 2, &q), 2, "m2 and m3 wait in the queue");

    // Channel 3 is not paused.
    publish(&mut c, 2, &other, b"elsewhere");
    assert_eq!(delivered(&mut c, 3).1, b"elsewhere");

    flow(&mut c, 1, true);
    let (tag2, body) = delivered(&mut c, 1);
    assert_eq!(body, b"m2");
    ack(&mut c, 1, tag2);
    let (tag3, body) = delivered(&mut c, 1);
    assert_eq!(body, b"m3");
    ack(&mut c, 1, tag3);
    assert_eq!(ready(&mut c, 2, &q), 0);
    broker.assert_healthy();
}

/// The spec's "open the channel, then pause it": a no-ack consumer started on a paused
/// channel receives nothing until flow(true), then everything in order.
async fn consumer_started_on_a_paused_channel_waits(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    c.channel_open(2);
    let q = unique("q-paused");
    c.queue_declare(2, &q, false, false, false);
    flow(&mut c, 1, false);
    c.basic_consume(1, &q, true);
    for i in 0..5u8 {
        publish(&mut c, 2, &q, &[b'0' + i]);
    }
    assert_quiet(&mut c, "no-ack consumer started on a paused channel");
    assert_eq!(ready(&mut c, 2, &q), 5);

    flow(&mut c, 1, true);
    for i in 0..5u8 {
        assert_eq!(delivered(&mut c, 1).1, vec![b'0' + i]);
    }
    broker.assert_healthy();
}
