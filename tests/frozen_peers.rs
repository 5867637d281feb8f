//! Frozen peers (issue 18, item 6): a client whose process stops — it neither reads its
//! socket nor sends heartbeats — is dead after two heartbeat intervals, even though the
//! broker's writes to it are blocked. Its socket is closed, its unacknowledged
//! deliveries go to the healthy consumers of the queue (redelivered), and its exclusive
//! queues are deleted. At the socket a frozen process looks exactly like the test's
//! peer here: its kernel still acknowledges what fits in its receive buffer, and the
//! application reads and sends nothing.

#[macro_use]
mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::http;
use common::raw::RawConn;
use common::wire::{m, Enc, Props};
use common::{unique, wait_until, Broker};

shard_tests!(
    frozen_manual_ack_consumer_is_dropped_and_its_deliveries_requeued,
    frozen_no_ack_subscriber_is_cut_off_and_its_exclusive_queue_deleted,
);

/// The frozen client's heartbeat interval, seconds.
const HEARTBEAT: u16 = 3;
/// Messages the frozen consumer takes and never acks.
const PREFETCH: u16 = 200;
/// Messages published in all.
const MESSAGES: usize = 300;
const BODY: usize = 64 * 1024;
/// How long the test waits for the outcome (two intervals and the close grace are
/// 8 s; the rest is room for a slow machine).
const OUTCOME: Duration = Duration::from_secs(40);

fn basic_qos(c: &mut RawConn, prefetch: u16) {
    let args = Enc::new().long(0).short(prefetch).bits(&[false]).done();
    c.send_method(1, m::BASIC_QOS, &args).expect("send qos");
    c.expect_method(1, m::BASIC_QOS_OK);
}

fn body(i: usize) -> Vec<u8> {
    let mut b = format!("{i:08}").into_bytes();
    b.resize(BODY, b'x');
    b
}

fn connection_count(broker: &Broker) -> usize {
    let list = http::get(broker.http_port(), "/api/connections").json();
    list.as_array().map_or(0, Vec::len)
}

/// A manual-ack consumer with heartbeat 3 s takes 200 messages of 64 KiB and freezes.
/// Within two intervals (and the close grace) it is gone from `/api/connections`, the
/// missed-heartbeat close is logged, and a healthy consumer on the same queue receives
/// all 300 messages, the frozen one's 200 marked redelivered — none lost, none twice
/// apart from those redeliveries.
async fn frozen_manual_ack_consumer_is_dropped_and_its_deliveries_requeued(shards: usize) {
    let broker = Broker::start(shards);
    let queue = unique("work");
    let mut publisher = RawConn::connect(&broker.addr());
    publisher.handshake();
    publisher.channel_open(1);
    publisher.queue_declare(1, &queue, false, false, false);

    let mut frozen = RawConn::connect(&broker.addr());
    frozen.handshake_with(HEARTBEAT);
    frozen.channel_open(1);
    basic_qos(&mut frozen, PREFETCH);
    frozen.basic_consume(1, &queue, false);
    for i in 0..MESSAGES {
        publisher
            .publish(1, "", &queue, &Props::default(), &body(i))
            .expect("publish");
    }
    // The frozen consumer holds its prefetch; the rest waits in the queue.
    let ready = wait_until(Duration::from_secs(20), || {
        publisher.send_queue_declare(1, &queue, [false, false, false]);
        let ok = publisher.expect_method(1, m::QUEUE_DECLARE_OK);
        let mut d = ok.dec();
        let _ = d.shortstr();
        d.long() == (MESSAGES - PREFETCH as usize) as u32
    });
    assert!(ready, "the frozen consumer never took its prefetch");
    let frozen_at = Instant::now();
    assert_eq!(connection_count(&broker), 2);

    let mut healthy = RawConn::connect(&broker.addr());
    healthy.handshake();
    healthy.channel_open(1);
    basic_qos(&mut healthy, 50);
    healthy.basic_consume(1, &queue, false);
    // The redeliveries come only once the frozen consumer is dropped.
    healthy
        .stream
        .set_read_timeout(Some(OUTCOME))
        .expect("read timeout");
    let mut seen = HashSet::new();
    let mut redelivered = 0;
    let deadline = Instant::now() + OUTCOME;
    while seen.len() < MESSAGES && Instant::now() < deadline {
        let d = healthy.read_delivery(1);
        let mut dec = d.method.dec();
        let _tag_name = dec.shortstr();
        let tag = dec.longlong();
        if dec.bits(1)[0] {
            redelivered += 1;
        }
        let index: usize = std::str::from_utf8(&d.body[..8])
            .expect("index")
            .parse()
            .expect("index");
        assert_eq!(d.body, body(index), "message {index} intact");
        assert!(seen.insert(index), "message {index} delivered twice");
        let ack = Enc::new().longlong(tag).bits(&[false]).done();
        healthy.send_method(1, m::BASIC_ACK, &ack).expect("ack");
    }
    assert_eq!(
        seen.len(),
        MESSAGES,
        "the healthy consumer got {} of {MESSAGES} messages within {OUTCOME:?}; log:\n{}",
        seen.len(),
        broker.logs().join("\n")
    );
    assert_eq!(redelivered, PREFETCH as usize);
    eprintln!(
        "frozen consumer dropped, its deliveries redelivered, {:?} after it froze",
        frozen_at.elapsed()
    );
    let line = broker
        .wait_for_log(
            &format!("missed heartbeats from client, timeout: {HEARTBEAT}s"),
            Duration::from_secs(1),
        )
        .expect("the missed-heartbeat close is logged");
    assert!(line.contains("CONNECTION_FORCED") || line.contains("missed heartbeats"));
    assert!(
        frozen_at.elapsed() >= Duration::from_secs(u64::from(HEARTBEAT)),
        "dropped before one heartbeat interval passed"
    );
    // Its socket is cut off within the close grace (2 s) of the close.
    let listed = wait_until(Duration::from_secs(10), || connection_count(&broker) == 2);
    assert!(listed, "the frozen connection is still listed");
    let (_, ended) = frozen.read_to_eof(Duration::from_secs(10));
    assert!(ended, "the broker left the frozen consumer's socket open");
    drop(frozen);
}

/// A no-ack subscriber of a topic, with its exclusive server-named queue and heartbeat
/// 3 s, freezes while 1 KiB messages keep coming. Its socket is closed by the broker (the
/// frozen side, reading at last, finds the end of the stream), and its exclusive queue
/// is deleted.
async fn frozen_no_ack_subscriber_is_cut_off_and_its_exclusive_queue_deleted(shards: usize) {
    let broker = Broker::start(shards);
    let topic = unique("ticks");
    let mut frozen = RawConn::connect(&broker.addr());
    frozen.handshake_with(HEARTBEAT);
    frozen.channel_open(1);
    let queue = frozen.queue_declare(1, "", false, true, false);
    frozen.queue_bind(1, &queue, "amq.topic", &topic);
    frozen.basic_consume(1, &queue, true);

    let mut publisher = RawConn::connect(&broker.addr());
    publisher.handshake();
    publisher.channel_open(1);
    let payload = vec![b't'; 1024];
    let deadline = Instant::now() + OUTCOME;
    let mut gone = false;
    let mut published = 0u64;
    while Instant::now() < deadline {
        for _ in 0..200 {
            publisher
                .publish(1, "amq.topic", &topic, &Props::default(), &payload)
                .expect("publish");
            published += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
        if published % 2000 == 0 && connection_count(&broker) == 1 {
            gone = true;
            break;
        }
    }
    assert!(
        gone,
        "the frozen subscriber is still listed after {OUTCOME:?} ({published} published); log:\n{}",
        broker.logs().join("\n")
    );
    broker
        .wait_for_log(
            &format!("missed heartbeats from client, timeout: {HEARTBEAT}s"),
            Duration::from_secs(1),
        )
        .expect("the missed-heartbeat close is logged");
    // The exclusive queue went with its connection.
    let passive = Enc::new()
        .short(0)
        .shortstr(&queue)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    publisher
        .send_method(1, m::QUEUE_DECLARE, &passive)
        .expect("send passive declare");
    let (code, text) = publisher.expect_channel_close(1);
    assert_eq!(code, 404, "{text}");
    assert_eq!(text, format!("NOT_FOUND - no queue '{queue}' in vhost '/'"));
    // The frozen side thaws: what the broker had written is there, then the end.
    let (_, ended) = frozen.read_to_eof(Duration::from_secs(10));
    assert!(ended, "the broker left the frozen subscriber's socket open");
}
