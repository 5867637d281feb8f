//! Items 9, 11 and 12: bad values of `x-max-priority`, `x-single-active-consumer` (on
//! queue.declare) and `x-priority` (on basic.consume) close the channel with RabbitMQ's
//! 406 text, `invalid arg 'A' for queue 'Q' in vhost '/': TERM`, where TERM is the Erlang
//! term `rabbit_amqqueue` returns (`check_max_priority_arg/2`, `check_bool_arg/2`,
//! `check_int_arg/2`); a refused declare creates nothing. A redeclare that changes either
//! queue argument is 406 inequivalent, as RabbitMQ's `assert_args_equivalence` does
//! (integer types compare by value).

use amqprs::channel::QueueDeclareArguments;
use amqprs::{FieldTable, FieldValue};

use crate::common::{unique, Broker};
use crate::support::*;

shard_tests!(
    invalid_queue_arguments_get_rabbitmq_texts,
    invalid_consumer_priority_gets_rabbitmq_text,
    redeclare_with_other_values_is_inequivalent,
);

async fn invalid_queue_arguments_get_rabbitmq_texts(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let cases = [
        (
            "x-max-priority",
            FieldValue::I(256),
            "{max_value_exceeded,256}",
        ),
        ("x-max-priority", FieldValue::l(-1), "{value_negative,-1}"),
        (
            "x-max-priority",
            longstr("10"),
            "\"expected integer, got longstr\"",
        ),
        (
            "x-max-priority",
            FieldValue::t(true),
            "\"expected integer, got bool\"",
        ),
        (
            "x-single-active-consumer",
            longstr("true"),
            "{unacceptable_type,longstr}",
        ),
        (
            "x-single-active-consumer",
            FieldValue::b(1),
            "{unacceptable_type,byte}",
        ),
    ];
    for (arg, value, term) in cases {
        let mut ch = conn.channel().await;
        let q = unique("q-bad-arg");
        let r = declare(&ch, &q, table(&[(arg, value)])).await;
        assert!(r.is_err(), "{arg}: declare succeeded");
        assert_eq!(
            expect_close(&mut ch).await,
            (406, invalid_arg(arg, &q, term), 50, 10),
            "{arg}"
        );
        // Nothing was declared.
        let mut check = conn.channel().await;
        let r = check
            .ch
            .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
            .await;
        assert!(r.is_err(), "{q} exists");
        assert_eq!(expect_close(&mut check).await.0, 404);
    }
    // The edges are accepted: 0 (two levels, as RabbitMQ) and 255, any integer type.
    let ch = conn.channel().await;
    for value in [FieldValue::B(0), FieldValue::u(255), FieldValue::l(10)] {
        declare_ok(&ch, &unique("q-edge"), table(&[("x-max-priority", value)])).await;
    }
    declare_ok(
        &ch,
        &unique("q-sac"),
        table(&[("x-single-active-consumer", FieldValue::t(false))]),
    )
    .await;
    conn.close().await;
}

async fn invalid_consumer_priority_gets_rabbitmq_text(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-cprio");
    declare_ok(&ch, &q, FieldTable::new()).await;
    for (value, term) in [
        (longstr("high"), "\"expected integer, got longstr\""),
        (FieldValue::d(1.5), "\"expected integer, got double\""),
    ] {
        let mut cch = conn.channel().await;
        let r = consume_with(&cch, &q, 1, table(&[("x-priority", value)]), false).await;
        assert!(r.is_err(), "consume succeeded");
        assert_eq!(
            expect_close(&mut cch).await,
            (406, invalid_arg("x-priority", &q, term), 60, 20)
        );
    }
    // Any integer is a priority, negative too.
    let cch = conn.channel().await;
    consume_with(
        &cch,
        &q,
        1,
        table(&[("x-priority", FieldValue::l(-3))]),
        false,
    )
    .await
    .expect("negative priority");
    conn.close().await;
}

async fn redeclare_with_other_values_is_inequivalent(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-redeclare");
    declare_ok(&ch, &q, max_priority(5)).await;
    // The same value as another integer type is the same setting.
    declare_ok(&ch, &q, table(&[("x-max-priority", FieldValue::B(5))])).await;

    let cases = [
        (q.clone(), max_priority(10), "x-max-priority", "10", "5"),
        (q.clone(), FieldTable::new(), "x-max-priority", "none", "5"),
    ];
    let plain = unique("q-plain");
    declare_ok(&ch, &plain, FieldTable::new()).await;
    let sac = unique("q-sac");
    let sac_on = table(&[("x-single-active-consumer", FieldValue::t(true))]);
    declare_ok(&ch, &sac, sac_on.clone()).await;
    declare_ok(&ch, &sac, sac_on).await;
    let more = [
        (
            plain.clone(),
            max_priority(3),
            "x-max-priority",
            "3",
            "none",
        ),
        (
            sac.clone(),
            table(&[("x-single-active-consumer", FieldValue::t(false))]),
            "x-single-active-consumer",
            "false",
            "true",
        ),
        (
            plain.clone(),
            table(&[("x-single-active-consumer", FieldValue::t(true))]),
            "x-single-active-consumer",
            "true",
            "none",
        ),
    ];
    for (name, args, arg, received, current) in cases.into_iter().chain(more) {
        let mut rch = conn.channel().await;
        let r = declare(&rch, &name, args).await;
        assert!(
            r.is_err(),
            "redeclare of {name} with {arg}={received} succeeded"
        );
        assert_eq!(
            expect_close(&mut rch).await,
            (406, inequivalent(arg, &name, received, current), 50, 10)
        );
    }
    conn.close().await;
}
