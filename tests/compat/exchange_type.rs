//! Bug 2: an exchange.declare naming a type the broker does not have is
//! `406 PRECONDITION_FAILED - unknown exchange type 'T'` as a channel close, as RabbitMQ
//! answers since 3.13.3 (`rabbit_exchange:check_type`, commit b6aacb7 "Declaring an
//! exchange with an invalid type is a precondition failure"; pika's suite expects the 406).
//! The type is checked first, so redeclaring an existing exchange with an unknown type is
//! the same 406. The connection's other channels are not disturbed.

use amqprs::channel::{ExchangeDeclareArguments, QueueDeclareArguments};

use crate::common::wire::{m, Props};
use crate::common::{unique, Broker};
use crate::support::*;

shard_tests!(
    unknown_type_closes_only_the_channel,
    unknown_type_through_amqprs,
);

fn unknown_type(kind: &str) -> String {
    format!("PRECONDITION_FAILED - unknown exchange type '{kind}'")
}

/// Channel 1 declares an exchange of an unknown type while channel 2 of the same
/// connection consumes: channel 1 gets the 406, channel 2 keeps receiving, and channel 1
/// can be opened again. Nothing is created.
async fn unknown_type_closes_only_the_channel(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    c.channel_open(2);
    c.channel_open(3);
    let q = unique("q-bystander");
    c.queue_declare(2, &q, false, false, false);
    c.basic_consume(2, &q, true);

    let x = unique("x-bad-type");
    send_exchange_declare(&mut c, 1, &x, "x-no-such-type", XFlags::default(), &vec![]);
    assert_eq!(
        expect_channel_close(&mut c, 1),
        Closed {
            code: 406,
            text: unknown_type("x-no-such-type"),
            class_id: 40,
            method_id: 10,
        }
    );
    // The connection's other channels go on: a publish on 3 reaches the consumer on 2.
    c.publish(3, "", &q, &Props::default(), b"after the 406")
        .expect("publish");
    assert_eq!(c.read_delivery(2).body, b"after the 406");

    // Nothing was declared.
    c.channel_open(1);
    send_exchange_declare(
        &mut c,
        1,
        &x,
        "",
        XFlags {
            passive: true,
            ..XFlags::default()
        },
        &vec![],
    );
    assert_eq!(expect_channel_close(&mut c, 1).code, 404);

    // An existing exchange redeclared with an unknown type: the type is checked first.
    c.channel_open(1);
    send_exchange_declare(&mut c, 1, &x, "direct", XFlags::default(), &vec![]);
    c.expect_method(1, EXCHANGE_DECLARE_OK);
    send_exchange_declare(
        &mut c,
        1,
        &x,
        "x-consistent-hash",
        XFlags::default(),
        &vec![],
    );
    assert_eq!(
        expect_channel_close(&mut c, 1),
        Closed {
            code: 406,
            text: unknown_type("x-consistent-hash"),
            class_id: 40,
            method_id: 10,
        }
    );

    // An empty type is not a type either when the declare is not passive (nowait too:
    // the error is still a channel close).
    c.channel_open(1);
    send_exchange_declare(
        &mut c,
        1,
        &unique("x-empty-type"),
        "",
        XFlags {
            nowait: true,
            ..XFlags::default()
        },
        &vec![],
    );
    let closed = expect_channel_close(&mut c, 1);
    assert_eq!(
        (closed.code, closed.class_id, closed.method_id),
        (406, 40, 10)
    );

    // Still one healthy connection with channel 2 consuming.
    c.publish(3, "", &q, &Props::default(), b"still here")
        .expect("publish");
    assert_eq!(c.read_delivery(2).body, b"still here");
    c.channel_open(1);
    assert_channel_usable(&mut c, 1);
    c.send_method(0, m::CONNECTION_CLOSE, &close_args())
        .expect("send connection.close");
    c.expect_method(0, m::CONNECTION_CLOSE_OK);
    broker.assert_healthy();
}

fn close_args() -> Vec<u8> {
    crate::common::wire::Enc::new()
        .short(200)
        .shortstr("bye")
        .short(0)
        .short(0)
        .done()
}

/// Through amqprs: the declare fails with the 406 channel close, the connection and its
/// other channels stay open.
async fn unknown_type_through_amqprs(shards: usize) {
    let mut broker = Broker::start(shards);
    let conn = broker.connect().await;
    let other = conn.channel().await;
    let mut ch = conn.channel().await;
    let r = ch
        .exchange_declare(ExchangeDeclareArguments::new(
            &unique("x-bad"),
            "x-delayed-message",
        ))
        .await;
    assert!(r.is_err(), "declare of an unknown type succeeded");
    assert_eq!(
        ch.expect_close().await,
        (406, unknown_type("x-delayed-message"))
    );
    assert!(conn.conn.is_open(), "the 406 closed the connection");
    other
        .queue_declare(QueueDeclareArguments::exclusive_server_named())
        .await
        .expect("the other channel goes on");
    let again = conn.channel().await;
    again
        .exchange_declare(ExchangeDeclareArguments::new(&unique("x-good"), "topic"))
        .await
        .expect("a new channel declares");
    conn.close().await;
    broker.assert_healthy();
}
