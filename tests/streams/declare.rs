//! Declaring a stream, through raw frames (exact field types, the table's order and
//! RabbitMQ's 406 texts byte for byte): a durable, non-exclusive, non-auto-delete queue
//! with `x-queue-type = stream` and its own arguments is accepted; every other
//! combination, every argument of another queue type, and a bad value of the stream's
//! own arguments is refused as RabbitMQ refuses it, and nothing is created; a redeclare
//! compares the stream's arguments.

use crate::common::{unique, Broker};
use crate::support::*;

shard_tests!(
    a_stream_is_declared_and_reports_its_messages,
    properties_are_refused_with_rabbitmqs_texts,
    other_types_arguments_are_refused,
    bad_values_of_the_streams_own_arguments,
    a_redeclare_compares_the_streams_arguments,
);

fn closed(code: u16, text: String) -> Answer {
    // queue.declare is (50, 10).
    Answer::ChannelClosed(code, text, 50, 10)
}

/// Whether `queue` exists (a passive declare on channel 2, opened by the caller).
fn exists(c: &mut crate::common::RawConn, queue: &str) -> bool {
    c.send_passive_declare(2, queue);
    match answer(c, 2, m::QUEUE_DECLARE_OK) {
        Answer::Ok => true,
        Answer::ChannelClosed(404, ..) => false,
        other => panic!("passive declare of {queue}: {other:?}"),
    }
}

/// A stream with its retention arguments is declared; declare-ok and a passive
/// declare report its messages and, as RabbitMQ's stream `stat/1`, no consumers.
async fn a_stream_is_declared_and_reports_its_messages(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(
        &ch,
        &q,
        &[
            ("x-max-length-bytes", amqprs::FieldValue::l(1 << 30)),
            ("x-max-age", s("7D")),
            (
                "x-stream-max-segment-size-bytes",
                amqprs::FieldValue::I(1 << 20),
            ),
        ],
    )
    .await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..7)).await;
    let c = conn.channel().await;
    prefetch(&c, 10).await;
    let (_, _rx) = consume(&c, &q, "", &[("x-stream-offset", s("first"))]).await;
    let (name, messages, consumers) = ch
        .queue_declare(
            amqprs::channel::QueueDeclareArguments::new(&q)
                .passive(true)
                .finish(),
        )
        .await
        .expect("passive declare")
        .expect("declare-ok");
    assert_eq!((name.as_str(), messages, consumers), (q.as_str(), 7, 0));
    conn.close().await;
}

/// Non-durable, exclusive and auto-delete streams: RabbitMQ's texts, checked in its
/// order (auto-delete, then exclusive, then durable), after the arguments.
async fn properties_are_refused_with_rabbitmqs_texts(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    c.channel_open(2);
    let q = unique("s");
    let rs = format!("queue '{q}' in vhost '/'");
    let cases = [
        (
            [false, false, false],
            format!("invalid property 'non-durable' for {rs}"),
        ),
        (
            [true, true, false],
            format!("invalid property 'exclusive-owner' for {rs}"),
        ),
        (
            [true, false, true],
            format!("invalid property 'auto-delete' for {rs}"),
        ),
        (
            [false, true, true],
            format!("invalid property 'auto-delete' for {rs}"),
        ),
        (
            [false, true, false],
            format!("invalid property 'exclusive-owner' for {rs}"),
        ),
    ];
    for (flags, text) in cases {
        assert_eq!(
            raw_declare(&mut c, 1, &q, flags, &stream_args(&[])),
            closed(406, format!("PRECONDITION_FAILED - {text}")),
            "{flags:?}"
        );
        assert!(!exists(&mut c, &q), "{flags:?} created the stream");
    }
    // An invalid argument is reported before the properties.
    assert_eq!(
        raw_declare(
            &mut c,
            1,
            &q,
            [false, false, false],
            &stream_args(&[arg("x-max-age", ls("1x"))])
        ),
        closed(
            406,
            format!("PRECONDITION_FAILED - invalid arg 'x-max-age' for {rs}: invalid_max_age")
        )
    );
    assert_eq!(
        raw_declare(&mut c, 1, &q, [true, false, false], &stream_args(&[])),
        Answer::Ok
    );
    broker.assert_healthy();
}

/// Every argument of another queue type is refused with RabbitMQ's `check_arguments_key`
/// text, the first one in the table's order, whatever its value.
async fn other_types_arguments_are_refused(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    c.channel_open(2);
    let q = unique("s");
    let text = |a: &str| {
        format!(
            "PRECONDITION_FAILED - invalid arg '{a}' for queue '{q}' in vhost '/' of queue type rabbit_stream_queue"
        )
    };
    let refused = [
        arg("x-message-ttl", Val::I32(1000)),
        arg("x-expires", Val::I32(1000)),
        arg("x-dead-letter-exchange", ls("dlx")),
        arg("x-dead-letter-routing-key", ls("k")),
        arg("x-max-length", Val::I32(10)),
        arg("x-max-priority", Val::U8(5)),
        arg("x-overflow", ls("reject-publish")),
        arg("x-single-active-consumer", Val::Bool(true)),
        arg("x-queue-mode", ls("lazy")),
        arg("x-delivery-limit", Val::I32(3)),
    ];
    for a in &refused {
        assert_eq!(
            raw_declare(
                &mut c,
                1,
                &q,
                [true, false, false],
                &stream_args(std::slice::from_ref(a))
            ),
            closed(406, text(&a.0)),
        );
    }
    // The first in the table's order; and only after the stream's own validators.
    assert_eq!(
        raw_declare(
            &mut c,
            1,
            &q,
            [true, false, false],
            &stream_args(&[
                arg("x-max-length", Val::I32(-1)),
                arg("x-message-ttl", Val::I32(1000)),
            ])
        ),
        closed(406, text("x-max-length"))
    );
    assert_eq!(
        raw_declare(
            &mut c,
            1,
            &q,
            [true, false, false],
            &stream_args(&[
                arg("x-overflow", ls("drop-head")),
                arg("x-max-length-bytes", Val::I64(-5)),
            ])
        ),
        closed(
            406,
            format!(
                "PRECONDITION_FAILED - invalid arg 'x-max-length-bytes' for queue '{q}' in vhost '/': {{value_negative,-5}}"
            )
        )
    );
    // rabbit_channel checks the dead-letter exchange's type before anything else.
    assert_eq!(
        raw_declare(
            &mut c,
            1,
            &q,
            [true, false, false],
            &stream_args(&[arg("x-dead-letter-exchange", Val::I32(1))])
        ),
        closed(
            406,
            format!(
                "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue '{q}' in vhost '/'"
            )
        )
    );
    assert!(!exists(&mut c, &q));
    // Arguments no queue type knows are ignored.
    assert_eq!(
        raw_declare(
            &mut c,
            1,
            &q,
            [true, false, false],
            &stream_args(&[arg("x-custom", ls("x"))])
        ),
        Answer::Ok
    );
    broker.assert_healthy();
}

/// The stream's own arguments with values RabbitMQ refuses.
async fn bad_values_of_the_streams_own_arguments(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    c.channel_open(2);
    let q = unique("s");
    let invalid = |a: &str, reason: &str| {
        format!("PRECONDITION_FAILED - invalid arg '{a}' for queue '{q}' in vhost '/': {reason}")
    };
    let cases: Vec<((String, Val), String)> = vec![
        (
            arg("x-max-age", ls("7d")),
            invalid("x-max-age", "invalid_max_age"),
        ),
        (
            arg("x-max-age", ls("0s")),
            invalid("x-max-age", "invalid_max_age"),
        ),
        (
            arg("x-max-age", Val::I32(60)),
            invalid("x-max-age", "{unacceptable_type,signedint}"),
        ),
        (
            arg("x-max-length-bytes", ls("10")),
            invalid("x-max-length-bytes", "\"expected integer, got longstr\""),
        ),
        (
            arg("x-stream-max-segment-size-bytes", Val::I64(-1)),
            invalid("x-stream-max-segment-size-bytes", "{value_negative,-1}"),
        ),
        (
            arg("x-initial-cluster-size", Val::I32(0)),
            invalid("x-initial-cluster-size", "{value_zero,0}"),
        ),
        (
            arg("x-queue-leader-locator", ls("nearest")),
            invalid("x-queue-leader-locator", "invalid_queue_locator_arg"),
        ),
        (
            arg("x-stream-max-segment-size-bytes", Val::I64(3_000_000_001)),
            "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes"
                .to_owned(),
        ),
        (
            arg("x-stream-filter-size-bytes", Val::I32(300)),
            "PRECONDITION_FAILED - Invalid value for x-stream-filter-size-bytes".to_owned(),
        ),
    ];
    for (a, text) in cases {
        assert_eq!(
            raw_declare(
                &mut c,
                1,
                &q,
                [true, false, false],
                &stream_args(std::slice::from_ref(&a))
            ),
            closed(406, text),
            "{a:?}"
        );
        assert!(!exists(&mut c, &q), "{a:?} created the stream");
    }
    broker.assert_healthy();
}

/// A redeclare with the same arguments is fine; another retention, or a classic
/// redeclare of a stream (and the reverse), is RabbitMQ's inequivalent arg.
async fn a_redeclare_compares_the_streams_arguments(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let q = unique("s");
    let args = stream_args(&[arg("x-max-age", ls("1h"))]);
    assert_eq!(
        raw_declare(&mut c, 1, &q, [true, false, false], &args),
        Answer::Ok
    );
    assert_eq!(
        raw_declare(&mut c, 1, &q, [true, false, false], &args),
        Answer::Ok
    );
    assert_eq!(
        raw_declare(
            &mut c,
            1,
            &q,
            [true, false, false],
            &stream_args(&[arg("x-max-age", ls("2h"))])
        ),
        closed(
            406,
            format!(
                "PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue '{q}' in vhost '/': received '2h' but current is '1h'"
            )
        )
    );
    assert_eq!(
        raw_declare(&mut c, 1, &q, [true, false, false], &vec![arg("x-max-age", ls("1h"))]),
        closed(
            406,
            format!(
                "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received 'none' but current is 'stream'"
            )
        )
    );
    // A stream's properties are checked before it is found to exist.
    assert_eq!(
        raw_declare(&mut c, 1, &q, [false, false, false], &args),
        closed(
            406,
            format!(
                "PRECONDITION_FAILED - invalid property 'non-durable' for queue '{q}' in vhost '/'"
            )
        )
    );
    let classic = unique("classic");
    assert_eq!(
        raw_declare(&mut c, 1, &classic, [true, false, false], &vec![]),
        Answer::Ok
    );
    assert_eq!(
        raw_declare(&mut c, 1, &classic, [true, false, false], &stream_args(&[])),
        closed(
            406,
            format!(
                "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{classic}' in vhost '/': received 'stream' but current is 'classic'"
            )
        )
    );
    broker.assert_healthy();
}
