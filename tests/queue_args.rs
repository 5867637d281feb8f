//! Queue types and queue.declare arguments as RabbitMQ checks them (issue 12, item 11),
//! end to end against a child sluice with one and two shards, through raw frames (exact
//! field types) and amqprs.
//!
//! - `x-queue-type`: `classic` (or none, `""`) is accepted (and `stream`, whose rules
//!   `tests/streams.rs` covers); `quorum` is 406 `unsupported queue type '…': sluice has
//!   classic queues and streams only`; anything else is
//!   RabbitMQ's 406 `unsupported queue type '…'`; an existing queue redeclared with
//!   another type is 406 `inequivalent arg 'x-queue-type'`.
//! - The arguments RabbitMQ validates get RabbitMQ's texts, byte for byte:
//!   `invalid arg '<arg>' for queue '<q>' in vhost '/': <Erlang term>`
//!   (`rabbit_amqqueue:check_arguments_type_and_value`), and for a non-string
//!   `x-dead-letter-exchange` `rabbit_channel`'s `invalid type '<t>' for arg
//!   'x-dead-letter-exchange' in queue '<q>' in vhost '/'`.
//! - Valid values are accepted, `x-dead-letter-*` and `reject-publish-dlx` included
//!   (dead-lettering itself is not done yet); unknown arguments are ignored.
//! - An existing queue is checked for equivalence, not validated (RabbitMQ's order).

#[macro_use]
mod common;

use amqprs::channel::QueueDeclareArguments;
use amqprs::{FieldTable, FieldValue};

use common::wire::{m, Enc, Props, Table, Val};
use common::{unique, Broker, RawConn};

shard_tests!(
    classic_queue_type_is_accepted,
    quorum_is_refused,
    rabbitmq_texts_for_bad_values,
    valid_values_and_unknown_arguments_are_accepted,
    existing_queue_is_checked_for_equivalence_only,
);

/// queue.declare's class and method ids, echoed in the close.
const QUEUE_DECLARE: (u16, u16) = (50, 10);

/// What the broker answered a queue.declare with.
#[derive(Debug, PartialEq)]
enum Answer {
    Ok,
    /// channel.close: code, text, class id, method id.
    Closed(u16, String, u16, u16),
}

/// Declares `queue` on `channel` with `args` and reads the answer; a close is answered
/// with close-ok and the channel reopened.
fn declare(c: &mut RawConn, channel: u16, queue: &str, args: &Table) -> Answer {
    let frame = Enc::new()
        .short(0)
        .shortstr(queue)
        .bits(&[false, false, false, false, false])
        .table(args)
        .done();
    c.send_method(channel, m::QUEUE_DECLARE, &frame)
        .expect("send queue.declare");
    let mth = c.read_method().expect("answer to queue.declare");
    match mth.id {
        m::QUEUE_DECLARE_OK => Answer::Ok,
        m::CHANNEL_CLOSE => {
            let mut d = mth.dec();
            let closed = Answer::Closed(d.short(), d.shortstr(), d.short(), d.short());
            c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
                .expect("send channel.close-ok");
            c.channel_open(channel);
            closed
        }
        other => panic!("unexpected answer {other:?} to queue.declare"),
    }
}

/// Whether `queue` exists (passive declare on `channel`).
fn exists(c: &mut RawConn, channel: u16, queue: &str) -> bool {
    let frame = Enc::new()
        .short(0)
        .shortstr(queue)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(channel, m::QUEUE_DECLARE, &frame)
        .expect("send passive queue.declare");
    let mth = c.read_method().expect("answer to passive declare");
    match mth.id {
        m::QUEUE_DECLARE_OK => true,
        m::CHANNEL_CLOSE => {
            assert_eq!(mth.dec().short(), 404);
            c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
                .expect("send channel.close-ok");
            c.channel_open(channel);
            false
        }
        other => panic!("unexpected answer {other:?} to a passive declare"),
    }
}

fn s(v: &str) -> Val {
    Val::LongStr(v.as_bytes().to_vec())
}

fn arg(name: &str, v: Val) -> (String, Val) {
    (name.to_owned(), v)
}

/// `PRECONDITION_FAILED - invalid arg '<arg>' for queue '<q>' in vhost '/': <term>`.
fn invalid(argument: &str, queue: &str, term: &str) -> String {
    format!(
        "PRECONDITION_FAILED - invalid arg '{argument}' for queue '{queue}' in vhost '/': {term}"
    )
}

/// Expects the declare to be refused with 406 and `text`, and no queue left behind.
fn refused(c: &mut RawConn, args: &Table, text: impl Fn(&str) -> String) {
    let q = unique("q-arg");
    let answer = declare(c, 1, &q, args);
    assert_eq!(
        answer,
        Answer::Closed(406, text(&q), QUEUE_DECLARE.0, QUEUE_DECLARE.1),
        "arguments {args:?}"
    );
    assert!(!exists(c, 1, &q), "{args:?}: the queue was created");
}

/// `x-queue-type = classic` (and `""`, RabbitMQ's "default type") declares a queue;
/// redeclaring it without the argument, or with `classic`, is equivalent.
async fn classic_queue_type_is_accepted(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let q = unique("q-classic");
    assert_eq!(
        declare(&mut c, 1, &q, &vec![arg("x-queue-type", s("classic"))]),
        Answer::Ok
    );
    assert_eq!(declare(&mut c, 1, &q, &vec![]), Answer::Ok);
    let q2 = unique("q-default-type");
    assert_eq!(
        declare(&mut c, 1, &q2, &vec![arg("x-queue-type", s(""))]),
        Answer::Ok
    );
    assert_eq!(
        declare(&mut c, 1, &q2, &vec![arg("x-queue-type", s("classic"))]),
        Answer::Ok
    );
    broker.assert_healthy();
}

/// amqprs: quorum queues are refused with a 406 saying sluice does not have them, an
/// unknown type as RabbitMQ refuses it; the connection stays usable and no queue is
/// created.
async fn quorum_is_refused(shards: usize) {
    let mut broker = Broker::start(shards);
    let conn = broker.connect().await;
    let cases = [
        (
            FieldValue::S("quorum".try_into().unwrap()),
            "\"unsupported queue type 'quorum': sluice has classic queues and streams only\"",
        ),
        (
            FieldValue::S("lazy".try_into().unwrap()),
            "\"unsupported queue type 'lazy'\"",
        ),
        (FieldValue::I(2), "{unacceptable_type,signedint}"),
    ];
    for (value, term) in cases {
        let q = unique("q-type");
        let mut args = FieldTable::new();
        args.insert("x-queue-type".try_into().unwrap(), value.clone());
        let mut ch = conn.channel().await;
        let r = ch
            .queue_declare(QueueDeclareArguments::new(&q).arguments(args).finish())
            .await;
        assert!(r.is_err(), "x-queue-type {value:?} accepted");
        let (code, text) = ch.expect_close().await;
        assert_eq!(code, 406, "{value:?}");
        assert_eq!(text, invalid("x-queue-type", &q, term));
        let mut probe = conn.channel().await;
        let r = probe
            .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
            .await;
        assert!(r.is_err(), "{value:?}: queue {q} was created");
        assert_eq!(probe.expect_close().await.0, 404);
    }
    // The connection is fine.
    let ch = conn.channel().await;
    ch.declare_queue(&unique("q-after")).await;
    conn.close().await;
    broker.assert_healthy();
}

/// Raw frames, so that each value has the field type RabbitMQ's message names. Every bad
/// value is a 406 with RabbitMQ's text, queue.declare's ids, and no queue.
async fn rabbitmq_texts_for_bad_values(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let cases: Vec<(Table, &str, &str)> = vec![
        (
            vec![arg("x-message-ttl", s("10"))],
            "x-message-ttl",
            "\"expected integer, got longstr\"",
        ),
        (
            vec![arg("x-message-ttl", Val::I32(-1))],
            "x-message-ttl",
            "{value_negative,-1}",
        ),
        (
            vec![arg("x-message-ttl", Val::I64(315_360_000_001))],
            "x-message-ttl",
            "{value_too_large,315360000001}",
        ),
        (
            vec![arg("x-expires", Val::I32(0))],
            "x-expires",
            "{value_zero,0}",
        ),
        (
            vec![arg("x-expires", Val::I64(-5))],
            "x-expires",
            "{value_negative,-5}",
        ),
        (
            vec![arg("x-expires", Val::F64(1.5))],
            "x-expires",
            "\"expected integer, got double\"",
        ),
        (
            vec![arg("x-max-length", Val::I16(-1))],
            "x-max-length",
            "{value_negative,-1}",
        ),
        (
            vec![arg("x-max-length", s("5"))],
            "x-max-length",
            "\"expected integer, got longstr\"",
        ),
        (
            vec![arg("x-max-length-bytes", Val::I64(-1))],
            "x-max-length-bytes",
            "{value_negative,-1}",
        ),
        (
            vec![arg("x-max-length-bytes", Val::Bool(true))],
            "x-max-length-bytes",
            "\"expected integer, got bool\"",
        ),
        (
            vec![arg("x-max-priority", Val::I32(256))],
            "x-max-priority",
            "{max_value_exceeded,256}",
        ),
        (
            vec![arg("x-max-priority", Val::I8(-1))],
            "x-max-priority",
            "{value_negative,-1}",
        ),
        (
            vec![arg("x-overflow", s("drop-tail"))],
            "x-overflow",
            "invalid_overflow",
        ),
        (
            vec![arg("x-overflow", s("Reject-Publish"))],
            "x-overflow",
            "invalid_overflow",
        ),
        (
            vec![arg("x-overflow", Val::I32(1))],
            "x-overflow",
            "{unacceptable_type,signedint}",
        ),
        (
            vec![arg("x-dead-letter-routing-key", s("rk"))],
            "x-dead-letter-routing-key",
            "routing_key_but_no_dlx_defined",
        ),
        (
            vec![
                arg("x-dead-letter-exchange", s("dlx")),
                arg("x-dead-letter-routing-key", Val::I32(5)),
            ],
            "x-dead-letter-routing-key",
            "{unacceptable_type,signedint}",
        ),
        // RabbitMQ's order: x-expires is checked before x-message-ttl.
        (
            vec![
                arg("x-message-ttl", Val::I32(-1)),
                arg("x-expires", Val::I32(0)),
            ],
            "x-expires",
            "{value_zero,0}",
        ),
    ];
    for (args, argument, term) in &cases {
        refused(&mut c, args, |q| invalid(argument, q, term));
    }
    // rabbit_channel checks the dead-letter exchange's type first, in its own words.
    refused(
        &mut c,
        &vec![
            arg("x-message-ttl", Val::I32(-1)),
            arg("x-dead-letter-exchange", Val::I32(1)),
        ],
        |q| {
            format!(
                "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue '{q}' in vhost '/'"
            )
        },
    );
    // A server-named queue's text names the generated name.
    let args = vec![arg("x-max-length", Val::I32(-1))];
    match declare(&mut c, 1, "", &args) {
        Answer::Closed(406, text, 50, 10) => {
            let prefix = "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue 'amq.gen-";
            assert!(text.starts_with(prefix), "{text}");
            assert!(
                text.ends_with("' in vhost '/': {value_negative,-1}"),
                "{text}"
            );
        }
        other => panic!("server-named declare with a bad argument: {other:?}"),
    }
    broker.assert_healthy();
}

/// Every argument RabbitMQ validates, with valid values, declares a queue. The
/// dead-letter arguments and `reject-publish-dlx` are accepted although dead-lettering
/// is not done yet (reject-publish-dlx refuses as reject-publish does); unknown `x-`
/// and other arguments are ignored.
async fn valid_values_and_unknown_arguments_are_accepted(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let q = unique("q-valid");
    let args: Table = vec![
        arg("x-queue-type", s("classic")),
        arg("x-message-ttl", Val::I32(60_000)),
        arg("x-expires", Val::I64(315_360_000_000)),
        arg("x-max-length", Val::I32(1)),
        arg("x-max-length-bytes", Val::U32(1_000_000)),
        arg("x-max-priority", Val::U8(255)),
        arg("x-overflow", s("reject-publish-dlx")),
        arg("x-dead-letter-exchange", s("no-such-exchange")),
        arg("x-dead-letter-routing-key", s("rk")),
        arg("x-no-such-argument", Val::Table(vec![arg("a", Val::Void)])),
        arg("x-queue-mode", s("lazy")),
        arg("not-an-x-argument", Val::F32(1.5)),
    ];
    assert_eq!(declare(&mut c, 1, &q, &args), Answer::Ok);
    assert_eq!(
        declare(&mut c, 1, &q, &args),
        Answer::Ok,
        "identical redeclare"
    );

    // reject-publish-dlx with x-max-length 1 keeps the first message (drop-head would
    // keep the last).
    c.channel_open(2);
    for body in [b"first".as_slice(), b"second", b"third"] {
        c.publish(2, "", &q, &Props::default(), body)
            .expect("publish");
    }
    let get = Enc::new().short(0).shortstr(&q).bits(&[true]).done();
    c.send_method(2, m::BASIC_GET, &get).expect("basic.get");
    let d = c.read_delivery(2);
    assert_eq!(d.body, b"first");
    c.send_method(2, m::BASIC_GET, &get).expect("basic.get");
    c.expect_method(2, m::BASIC_GET_EMPTY);

    // Unknown arguments alone.
    let q2 = unique("q-unknown-args");
    let unknown: Table = vec![
        arg("x-delivery-limit-not-really", Val::I32(-1)),
        arg("x-whatever", s("")),
    ];
    assert_eq!(declare(&mut c, 1, &q2, &unknown), Answer::Ok);
    broker.assert_healthy();
}

/// RabbitMQ checks a redeclare for equivalence and does not validate it again: a bad
/// value for an existing queue is `inequivalent arg`, and so is another dead-letter
/// exchange or queue type.
async fn existing_queue_is_checked_for_equivalence_only(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let q = unique("q-existing");
    let args = vec![
        arg("x-message-ttl", Val::I32(1000)),
        arg("x-dead-letter-exchange", s("dlx-a")),
    ];
    assert_eq!(declare(&mut c, 1, &q, &args), Answer::Ok);
    let cases: Vec<(Table, &str)> = vec![
        (
            vec![
                arg("x-message-ttl", s("soon")),
                arg("x-dead-letter-exchange", s("dlx-a")),
            ],
            "inequivalent arg 'x-message-ttl'",
        ),
        (
            vec![
                arg("x-message-ttl", Val::I32(1000)),
                arg("x-dead-letter-exchange", s("dlx-b")),
            ],
            "inequivalent arg 'x-dead-letter-exchange'",
        ),
        (
            vec![
                arg("x-message-ttl", Val::I32(1000)),
                arg("x-dead-letter-exchange", s("dlx-a")),
                arg("x-queue-type", s("quorum")),
            ],
            "inequivalent arg 'x-queue-type'",
        ),
    ];
    for (redeclare, what) in cases {
        match declare(&mut c, 1, &q, &redeclare) {
            Answer::Closed(406, text, 50, 10) => assert!(
                text.starts_with(&format!("PRECONDITION_FAILED - {what} for queue '{q}'")),
                "{redeclare:?}: {text}"
            ),
            other => panic!("{redeclare:?}: expected 406 {what}, got {other:?}"),
        }
    }
    // Integers of another width are the same value.
    let same = vec![
        arg("x-message-ttl", Val::I64(1000)),
        arg("x-dead-letter-exchange", s("dlx-a")),
        arg("x-queue-type", s("classic")),
    ];
    assert_eq!(declare(&mut c, 1, &q, &same), Answer::Ok);
    assert!(exists(&mut c, 1, &q));
    broker.assert_healthy();
}
