//! Exchanges: declare, passive, redeclare, delete, auto-delete, predeclared and reserved names.

use std::time::Duration;

use amqprs::channel::{
    ExchangeDeclareArguments, ExchangeDeleteArguments, QueueBindArguments, QueueDeclareArguments,
    QueueUnbindArguments,
};

use crate::common::{unique, Broker, Conn};
use crate::support::soft_error;

shard_tests!(
    exchange_declare_all_types,
    exchange_passive_missing,
    exchange_redeclare_other_type,
    exchange_delete_if_unused,
    exchange_auto_delete,
    predeclared_exchanges,
    reserved_names,
    default_exchange_is_off_limits,
);

async fn exchange_exists(conn: &Conn, name: &str) -> bool {
    let mut ch = conn.channel().await;
    let r = ch
        .exchange_declare(
            ExchangeDeclareArguments::new(name, "direct")
                .passive(true)
                .finish(),
        )
        .await;
    match r {
        Ok(()) => true,
        Err(_) => {
            let (code, text) = ch.expect_close().await;
            assert_eq!(code, 404, "passive exchange.declare: {text}");
            false
        }
    }
}

async fn exchange_declare_all_types(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    for kind in ["direct", "fanout", "topic", "headers"] {
        for (durable, auto_delete, internal) in [
            (false, false, false),
            (true, false, false),
            (false, true, false),
            (false, false, true),
        ] {
            let name = unique(&format!("x-{kind}"));
            let args = ExchangeDeclareArguments::new(&name, kind)
                .durable(durable)
                .auto_delete(auto_delete)
                .internal(internal)
                .finish();
            ch.exchange_declare(args.clone())
                .await
                .unwrap_or_else(|e| panic!("declare {kind} {name}: {e}"));
            // Identical redeclare is a no-op; passive declare finds it.
            ch.exchange_declare(args)
                .await
                .expect("identical redeclare");
            ch.exchange_declare(
                ExchangeDeclareArguments::new(&name, kind)
                    .passive(true)
                    .finish(),
            )
            .await
            .expect("passive declare of an existing exchange");
            ch.exchange_delete(ExchangeDeleteArguments::new(&name))
                .await
                .expect("exchange.delete");
        }
    }
    assert!(ch.ch.is_open());
}

async fn exchange_passive_missing(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let name = unique("no-such-x");
    let r = ch
        .exchange_declare(
            ExchangeDeclareArguments::new(&name, "direct")
                .passive(true)
                .finish(),
        )
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 404);
    assert_eq!(
        text,
        format!("NOT_FOUND - no exchange '{name}' in vhost '/'")
    );
    // A soft error leaves the connection usable.
    let ch2 = conn.channel().await;
    ch2.declare_server_named().await;
    assert!(conn.conn.is_open());
}

async fn exchange_redeclare_other_type(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let name = unique("x-typed");
    ch.exchange_declare(ExchangeDeclareArguments::new(&name, "direct"))
        .await
        .unwrap();
    let r = ch
        .exchange_declare(ExchangeDeclareArguments::new(&name, "fanout"))
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        format!(
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/': \
             received 'fanout' but current is 'direct'"
        )
    );
    // The original is untouched.
    assert!(exchange_exists(&conn, &name).await);
}

async fn exchange_delete_if_unused(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let x = unique("x-used");
    let q = unique("q-used");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct"))
        .await
        .unwrap();
    ch.declare_queue(&q).await;
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k"))
        .await
        .unwrap();
    let r = ch
        .exchange_delete(ExchangeDeleteArguments::new(&x).if_unused(true).finish())
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - exchange '{x}' in vhost '/' in use")
    );
    assert!(
        exchange_exists(&conn, &x).await,
        "failed if-unused delete removed the exchange"
    );

    let ch = conn.channel().await;
    ch.queue_unbind(QueueUnbindArguments::new(&q, &x, "k"))
        .await
        .unwrap();
    ch.exchange_delete(ExchangeDeleteArguments::new(&x).if_unused(true).finish())
        .await
        .expect("if-unused delete of an unbound exchange");
    assert!(
        !exchange_exists(&conn, &x).await,
        "exchange survived its deletion"
    );
}

async fn exchange_auto_delete(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let x = unique("x-auto");
    let q = unique("q-auto");
    ch.exchange_declare(
        ExchangeDeclareArguments::new(&x, "fanout")
            .auto_delete(true)
            .finish(),
    )
    .await
    .unwrap();
    ch.declare_queue(&q).await;
    ch.queue_bind(QueueBindArguments::new(&q, &x, ""))
        .await
        .unwrap();
    assert!(exchange_exists(&conn, &x).await);
    ch.queue_unbind(QueueUnbindArguments::new(&q, &x, ""))
        .await
        .unwrap();
    // Losing its last binding deletes an auto-delete exchange.
    let mut gone = false;
    for _ in 0..100 {
        if !exchange_exists(&conn, &x).await {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        gone,
        "auto-delete exchange {x} survived the removal of its last binding"
    );
}

async fn predeclared_exchanges(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    for (name, kind) in [
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ] {
        ch.exchange_declare(
            ExchangeDeclareArguments::new(name, kind)
                .passive(true)
                .finish(),
        )
        .await
        .unwrap_or_else(|e| panic!("predeclared exchange {name} missing: {e}"));
    }
    // No firehose tracer, so no amq.rabbitmq.trace (issue 24): a passive declare is 404.
    let mut probe = conn.channel().await;
    let refused = probe
        .exchange_declare(
            ExchangeDeclareArguments::new("amq.rabbitmq.trace", "topic")
                .passive(true)
                .finish(),
        )
        .await;
    assert!(refused.is_err(), "amq.rabbitmq.trace is declared");
    assert_eq!(
        probe.expect_close().await,
        (
            404,
            "NOT_FOUND - no exchange 'amq.rabbitmq.trace' in vhost '/'".to_owned()
        )
    );
    // amq.direct really routes.
    let q = ch.declare_server_named().await;
    ch.queue_bind(QueueBindArguments::new(&q, "amq.direct", "rk"))
        .await
        .unwrap();
    ch.publish("amq.direct", "rk", b"via amq.direct").await;
    let (_, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"via amq.direct");
}

async fn reserved_names(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;

    let mut ch = conn.channel().await;
    let name = unique("amq.itest");
    let r = ch
        .exchange_declare(ExchangeDeclareArguments::new(&name, "direct"))
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 403);
    assert_eq!(
        text,
        format!("ACCESS_REFUSED - exchange name '{name}' contains reserved prefix 'amq.*'")
    );

    let mut ch = conn.channel().await;
    let r = ch.queue_declare(QueueDeclareArguments::new(&name)).await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 403);
    assert_eq!(
        text,
        format!("ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'")
    );
}

async fn default_exchange_is_off_limits(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let text_expected = "ACCESS_REFUSED - operation not permitted on the default exchange";

    let mut ch = conn.channel().await;
    let q = ch.declare_server_named().await;
    let r = ch
        .queue_bind(QueueBindArguments::new(&q, "", "other"))
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!((code, text.as_str()), (403, text_expected));

    let mut ch = conn.channel().await;
    let r = ch
        .exchange_declare(ExchangeDeclareArguments::new("", "direct"))
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!((code, text.as_str()), (403, text_expected));
}
