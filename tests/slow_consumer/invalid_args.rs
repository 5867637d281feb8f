//! A bad policy argument refuses the declare: channel.close 406 with
//! `PRECONDITION_FAILED - invalid arg '<name>': <reason>`, naming the argument, and
//! no queue is created. Redeclaring with other values is 406 `inequivalent arg`.

use amqprs::channel::QueueDeclareArguments;
use sluice::client::{ClientError, QueueDeclareOptions};

use crate::common::{unique, Conn, Event};
use crate::harness::*;

slow_tests!(
    invalid_arguments_are_refused_with_406,
    redeclare_with_other_limits_is_406
);

/// queue.declare's class and method ids, echoed in the close.
const QUEUE_DECLARE: (u16, u16) = (50, 10);

/// sluice's own policy arguments. RabbitMQ's (`x-max-length`, `x-overflow`, …) get
/// RabbitMQ's texts instead: `tests/queue_args.rs`.
const CASES: [(&str, Arg); 8] = [
    (MAX_COUNT, Arg::Int(-5)),
    (MAX_DEPTH, Arg::Str("ten")),
    (MAX_AGE, Arg::Str("1s")),
    (POLICY, Arg::Str("drop")),
    (MIN_RATE, Arg::Float(-1.0)),
    (MIN_RATE, Arg::Str("fast")),
    (INCLUDE_DURABLE, Arg::Int(1)),
    (INCLUDE_PERSISTENT, Arg::Str("yes")),
];

/// Declares `queue` with one bad argument on a fresh amqprs channel and returns the
/// channel.close (code, text, class, method).
async fn refused(conn: &Conn, queue: &str, arg: (&str, Arg)) -> (u16, String, u16, u16) {
    let mut ch = conn.channel().await;
    let r = ch
        .queue_declare(
            QueueDeclareArguments::new(queue)
                .arguments(amqprs_table(&[arg]))
                .finish(),
        )
        .await;
    assert!(r.is_err(), "declare with {arg:?} succeeded: {r:?}");
    match next_chan_event(&mut ch).await {
        Event::ChannelClose {
            code,
            text,
            class_id,
            method_id,
        } => (code, text, class_id, method_id),
        other => panic!("expected channel.close for {arg:?}, got {other:?}"),
    }
}

/// amqprs for every case, sluice's client for two; the connection stays open and no
/// queue is left behind.
async fn invalid_arguments_are_refused_with_406(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut conn = broker.connect().await;
    for (name, value) in CASES {
        let queue = unique("bad-arg");
        let (code, text, class_id, method_id) = refused(&conn, &queue, (name, value)).await;
        assert_eq!(code, 406, "{name} = {value:?}: {text}");
        assert!(
            text.starts_with(&format!("PRECONDITION_FAILED - invalid arg '{name}': ")),
            "{name} = {value:?}: the text must name the argument: {text}"
        );
        assert_eq!((class_id, method_id), QUEUE_DECLARE, "{name}: {text}");
        assert!(
            !queue_exists(&conn, &queue).await,
            "{name}: the queue was created"
        );
    }
    assert_usable(&mut conn).await;

    let own = own_connect(&broker).await;
    for (name, value) in [(MAX_COUNT, Arg::Float(2.5)), (POLICY, Arg::Int(1))] {
        let ch = own.open_channel().await.unwrap();
        let r = ch
            .queue_declare(
                &unique("bad-arg"),
                QueueDeclareOptions {
                    arguments: own_table(&[(name, value)]),
                    ..Default::default()
                },
            )
            .await;
        match r {
            Err(ClientError::ChannelClosed {
                code: 406, text, ..
            }) => assert!(
                text.starts_with(&format!("PRECONDITION_FAILED - invalid arg '{name}': ")),
                "{text}"
            ),
            other => panic!("{name} = {value:?}: expected 406, got {other:?}"),
        }
    }
    assert!(own.error().is_none());
}

/// amqprs. A queue declared with max_count 10 cannot be redeclared with 11, nor with a
/// policy added; an identical redeclare is fine.
async fn redeclare_with_other_limits_is_406(shards: usize) {
    let broker = Cfg::default().start(shards);
    let conn = broker.connect().await;
    let queue = unique("redeclare");
    let ch = conn.channel().await;
    declare_bound(
        &ch,
        &queue,
        false,
        &[(MAX_COUNT, Arg::Int(10))],
        "amq.topic",
        "re.x",
    )
    .await;
    declare_bound(
        &ch,
        &queue,
        false,
        &[(MAX_COUNT, Arg::Int(10))],
        "amq.topic",
        "re.x",
    )
    .await;
    for other in [
        vec![(MAX_COUNT, Arg::Int(11))],
        vec![(MAX_COUNT, Arg::Int(10)), (POLICY, Arg::Str("cycle"))],
    ] {
        let mut ch = conn.channel().await;
        let r = ch
            .queue_declare(
                QueueDeclareArguments::new(&queue)
                    .arguments(amqprs_table(&other))
                    .finish(),
            )
            .await;
        assert!(r.is_err(), "redeclare with {other:?} succeeded");
        let (code, text) = ch.expect_close().await;
        assert_eq!(code, 406, "{text}");
        assert!(
            text.starts_with("PRECONDITION_FAILED - inequivalent arg 'x-slow-consumer-"),
            "{text}"
        );
    }
    assert!(queue_exists(&conn, &queue).await);
}
