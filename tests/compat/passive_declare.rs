//! Bug 1: a passive exchange.declare only checks that the exchange exists. RabbitMQ's
//! `rabbit_channel:handle_method(#'exchange.declare'{passive = true})` looks the name up
//! (`rabbit_exchange:lookup_or_die`) and nothing else: type — including amqplib's empty
//! one — durable, auto-delete, internal and arguments are ignored; a missing exchange is
//! `404 NOT_FOUND - no exchange 'x' in vhost '/'` as a channel close.

use amqprs::channel::ExchangeDeclareArguments;

use crate::common::wire::Val;
use crate::common::{unique, Broker};
use crate::support::*;

shard_tests!(
    passive_ignores_type_flags_and_arguments,
    passive_missing_is_404_channel_close,
    passive_through_amqprs,
);

const PASSIVE: XFlags = XFlags {
    passive: true,
    durable: false,
    auto_delete: false,
    internal: false,
    nowait: false,
};

/// An existing exchange answers declare-ok to passive declares whatever their type, flags
/// and arguments say, and is not changed by them.
async fn passive_ignores_type_flags_and_arguments(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    let x = unique("x-passive");
    send_exchange_declare(&mut c, 1, &x, "fanout", XFlags::default(), &vec![]);
    c.expect_method(1, EXCHANGE_DECLARE_OK);

    let every_flag = XFlags {
        passive: true,
        durable: true,
        auto_delete: true,
        internal: true,
        nowait: false,
    };
    let args = vec![
        ("x-anything".to_owned(), Val::LongStr(b"ignored".to_vec())),
        (
            "alternate-exchange".to_owned(),
            Val::LongStr(b"no-such-exchange".to_vec()),
        ),
    ];
    let variants: [(&str, XFlags, &crate::common::wire::Table); 6] = [
        // amqplib's checkExchange: passive with an empty type.
        ("", PASSIVE, &vec![]),
        ("", every_flag, &args),
        ("topic", PASSIVE, &vec![]),
        ("headers", every_flag, &vec![]),
        ("x-no-such-type", PASSIVE, &args),
        ("fanout", every_flag, &args),
    ];
    for (kind, flags, arguments) in variants {
        send_exchange_declare(&mut c, 1, &x, kind, flags, arguments);
        let got = c.read_method().expect("an answer to the passive declare");
        assert_eq!(
            (got.channel, got.id),
            (1, EXCHANGE_DECLARE_OK),
            "passive declare of an existing exchange with type {kind:?} and {flags:?}: \
             expected declare-ok, got {:?} on channel {} ({})",
            got.id,
            got.channel,
            close_text(&got)
        );
    }
    // Predeclared exchanges too.
    for name in [
        "amq.direct",
        "amq.fanout",
        "amq.topic",
        "amq.headers",
        "amq.match",
    ] {
        send_exchange_declare(&mut c, 1, name, "", PASSIVE, &vec![]);
        c.expect_method(1, EXCHANGE_DECLARE_OK);
    }
    // nowait: no answer, and the channel is still open afterwards.
    send_exchange_declare(
        &mut c,
        1,
        &x,
        "",
        XFlags {
            nowait: true,
            ..PASSIVE
        },
        &vec![],
    );
    assert_channel_usable(&mut c, 1);
    // Nothing was changed: the exchange is still a non-durable fanout.
    send_exchange_declare(&mut c, 1, &x, "fanout", XFlags::default(), &vec![]);
    c.expect_method(1, EXCHANGE_DECLARE_OK);
    broker.assert_healthy();
}

/// A passive declare of a missing exchange closes the channel with 404 and RabbitMQ's
/// text, whatever its type; the connection and its other channels stay.
async fn passive_missing_is_404_channel_close(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut c = broker.raw();
    c.channel_open(1);
    c.channel_open(2);
    let x = unique("x-missing");
    for (kind, flags) in [
        ("", PASSIVE),
        ("direct", PASSIVE),
        ("x-no-such-type", PASSIVE),
        (
            "",
            XFlags {
                durable: true,
                nowait: true,
                ..PASSIVE
            },
        ),
    ] {
        send_exchange_declare(&mut c, 1, &x, kind, flags, &vec![]);
        let closed = expect_channel_close(&mut c, 1);
        assert_eq!(
            closed,
            Closed {
                code: 404,
                text: format!("NOT_FOUND - no exchange '{x}' in vhost '/'"),
                class_id: 40,
                method_id: 10,
            },
            "passive declare of a missing exchange with type {kind:?}"
        );
        assert_channel_usable(&mut c, 2);
        c.channel_open(1);
    }
    assert_channel_usable(&mut c, 1);
    broker.assert_healthy();
}

/// The same through a client library: amqprs with an empty type.
async fn passive_through_amqprs(shards: usize) {
    let mut broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let x = unique("x-amqprs");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "topic"))
        .await
        .expect("declare");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "").passive(true).finish())
        .await
        .expect("passive declare with an empty type");

    let mut missing = conn.channel().await;
    let gone = unique("x-gone");
    let r = missing
        .exchange_declare(
            ExchangeDeclareArguments::new(&gone, "")
                .passive(true)
                .finish(),
        )
        .await;
    assert!(
        r.is_err(),
        "passive declare of a missing exchange succeeded"
    );
    assert_eq!(
        missing.expect_close().await,
        (
            404,
            format!("NOT_FOUND - no exchange '{gone}' in vhost '/'")
        )
    );
    assert!(conn.conn.is_open(), "a 404 closed the connection");
    // Not even a passive declare may name the default exchange (RabbitMQ's
    // check_not_default_exchange).
    let mut default = conn.channel().await;
    let r = default
        .exchange_declare(ExchangeDeclareArguments::new("", "").passive(true).finish())
        .await;
    assert!(
        r.is_err(),
        "passive declare of the default exchange succeeded"
    );
    assert_eq!(
        default.expect_close().await,
        (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange".to_owned()
        )
    );
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "").passive(true).finish())
        .await
        .expect("the other channel goes on");
    conn.close().await;
    broker.assert_healthy();
}
