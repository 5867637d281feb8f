//! Consuming a stream as RabbitMQ's AMQP 0-9-1 consumers do: a consumer prefetch is
//! required (406 without), no-ack and a global prefetch are 540 (the connection closes),
//! another type's consumer argument and a bad `x-stream-offset` are 406, `basic.get`
//! and `queue.purge` are 540 — RabbitMQ's texts byte for byte, through raw frames. An
//! ack returns credit; nack and reject return credit and redeliver nothing.

use std::time::Duration;

use amqprs::channel::{BasicAckArguments, BasicNackArguments, BasicRejectArguments};

use crate::common::{assert_no_delivery, next_delivery, unique, Broker};
use crate::support::*;

shard_tests!(
    consumer_refusals_are_rabbitmqs,
    get_and_purge_are_refused_with_540,
    an_ack_returns_credit,
    nack_and_reject_return_credit_and_redeliver_nothing,
);

/// A raw connection with channel 1 open and stream `q` declared on it.
fn with_stream(broker: &mut Broker, q: &str) -> crate::common::RawConn {
    let mut c = broker.raw();
    c.channel_open(1);
    assert_eq!(
        raw_declare(&mut c, 1, q, [true, false, false], &stream_args(&[])),
        Answer::Ok
    );
    c
}

fn consume_closed(code: u16, text: String) -> Answer {
    Answer::ChannelClosed(code, text, 60, 20)
}

async fn consumer_refusals_are_rabbitmqs(shards: usize) {
    let mut broker = Broker::start(shards);
    let q = unique("s");
    let rs = format!("queue '{q}' in vhost '/'");
    let mut c = with_stream(&mut broker, &q);
    // No basic.qos: 406, the channel closes, the connection stays.
    assert_eq!(
        raw_consume(&mut c, 1, &q, false, &vec![]),
        consume_closed(
            406,
            format!("PRECONDITION_FAILED - consumer prefetch count is not set for stream {rs}")
        )
    );
    // Arguments are checked first: another type's, and a bad offset.
    raw_qos(&mut c, 1, 10, false);
    assert_eq!(
        raw_consume(&mut c, 1, &q, false, &vec![arg("x-priority", Val::I32(5))]),
        consume_closed(
            406,
            format!(
                "PRECONDITION_FAILED - invalid arg 'x-priority' for {rs} of queue type rabbit_stream_queue"
            )
        )
    );
    raw_qos(&mut c, 1, 10, false);
    assert_eq!(
        raw_consume(
            &mut c,
            1,
            &q,
            false,
            &vec![arg("x-stream-offset", ls("yesterday"))]
        ),
        consume_closed(
            406,
            format!(
                "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for {rs}: {{invalid_stream_offset_arg,{{longstr,<<\"yesterday\">>}}}}"
            )
        )
    );
    raw_qos(&mut c, 1, 10, false);
    assert_eq!(
        raw_consume(
            &mut c,
            1,
            &q,
            false,
            &vec![
                arg("x-stream-offset", ls("first")),
                arg("x-consumer-timeout", Val::I32(1000)),
            ]
        ),
        consume_closed(
            406,
            format!(
                "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for {rs} of queue type rabbit_stream_queue"
            )
        )
    );
    // With a prefetch, no-ack is 540: the connection closes.
    raw_qos(&mut c, 1, 10, false);
    assert_eq!(
        raw_consume(&mut c, 1, &q, true, &vec![]),
        Answer::ConnectionClosed(
            540,
            format!("NOT_IMPLEMENTED - automatic acknowledgement not supported by stream {rs}")
        )
    );
    // A global prefetch: 540.
    let mut c = broker.raw();
    c.channel_open(1);
    raw_qos(&mut c, 1, 10, false);
    raw_qos(&mut c, 1, 100, true);
    assert_eq!(
        raw_consume(&mut c, 1, &q, false, &vec![]),
        Answer::ConnectionClosed(
            540,
            format!("NOT_IMPLEMENTED - {rs} does not support global qos")
        )
    );
    // And a good one.
    let mut c = broker.raw();
    c.channel_open(1);
    raw_qos(&mut c, 1, 10, false);
    assert_eq!(raw_consume(&mut c, 1, &q, false, &vec![]), Answer::Ok);
    broker.assert_healthy();
}

async fn get_and_purge_are_refused_with_540(shards: usize) {
    let mut broker = Broker::start(shards);
    let q = unique("s");
    let rs = format!("queue '{q}' in vhost '/'");
    let mut c = with_stream(&mut broker, &q);
    let get = Enc::new().short(0).shortstr(&q).bits(&[false]).done();
    c.send_method(1, m::BASIC_GET, &get)
        .expect("send basic.get");
    assert_eq!(
        answer(&mut c, 1, m::BASIC_GET_OK),
        Answer::ConnectionClosed(
            540,
            format!("NOT_IMPLEMENTED - basic.get not supported by stream queues {rs}")
        )
    );
    let mut c = broker.raw();
    c.channel_open(1);
    let purge = Enc::new().short(0).shortstr(&q).bits(&[false]).done();
    c.send_method(1, (50, 30), &purge)
        .expect("send queue.purge");
    assert_eq!(
        answer(&mut c, 1, (50, 31)),
        Answer::ConnectionClosed(
            540,
            format!("NOT_IMPLEMENTED - queue.purge not supported by stream queues {rs}")
        )
    );
    broker.assert_healthy();
}

/// Prefetch 3 of 10 messages: three deliveries, then nothing until an ack, which lets
/// exactly one more through; acking the rest delivers the rest, in order.
async fn an_ack_returns_credit(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("s");
    let ch = conn.channel().await;
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..10)).await;
    prefetch(&ch, 3).await;
    let (_, mut rx) = consume(&ch, &q, "", &[("x-stream-offset", s("first"))]).await;
    let mut tags = Vec::new();
    for i in 0..3 {
        let d = next_delivery(&mut rx).await;
        assert_eq!(offset(&d), i);
        assert!(!d.redelivered);
        tags.push(d.delivery_tag);
    }
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    ch.basic_ack(BasicAckArguments::new(tags[0], false))
        .await
        .expect("ack");
    assert_eq!(offset(&next_delivery(&mut rx).await), 3);
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    ch.basic_ack(BasicAckArguments::new(0, true))
        .await
        .expect("ack all");
    let rest = take(&ch, &mut rx, 6).await;
    assert_eq!(rest, expected("m", 4..10));
    conn.close().await;
}

/// Nack (requeue or not) and reject return credit like an ack: the next offsets come,
/// none again, none marked redelivered.
async fn nack_and_reject_return_credit_and_redeliver_nothing(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("s");
    let ch = conn.channel().await;
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..6)).await;
    prefetch(&ch, 1).await;
    let (_, mut rx) = consume(&ch, &q, "", &[("x-stream-offset", s("first"))]).await;
    let mut seen = Vec::new();
    for i in 0..6 {
        let d = next_delivery(&mut rx).await;
        assert!(!d.redelivered);
        seen.push(offset(&d));
        match i % 3 {
            0 => ch
                .basic_nack(BasicNackArguments::new(d.delivery_tag, false, true))
                .await
                .expect("nack requeue"),
            1 => ch
                .basic_reject(BasicRejectArguments::new(d.delivery_tag, true))
                .await
                .expect("reject requeue"),
            _ => ch
                .basic_nack(BasicNackArguments::new(d.delivery_tag, false, false))
                .await
                .expect("nack"),
        }
    }
    assert_eq!(seen, (0..6).collect::<Vec<i64>>());
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    conn.close().await;
}
