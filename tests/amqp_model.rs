//! Exchanges, queues and bindings through amqprs: declare/redeclare/delete rules and the
//! exact soft-error replies (channel.close code and text).

#[macro_use]
mod common;

use std::fmt::Debug;
use std::time::Duration;

use amqprs::channel::{
    ExchangeDeclareArguments, ExchangeDeleteArguments, QueueBindArguments, QueueDeclareArguments,
    QueueDeleteArguments, QueuePurgeArguments, QueueUnbindArguments,
};
use common::{unique, Broker, Chan, Conn};

/// Asserts that `r` failed and that the server closed the channel; returns (code, text).
async fn soft_error<T: Debug>(
    chan: &mut Chan,
    r: Result<T, amqprs::error::Error>,
) -> (u16, String) {
    assert!(
        r.is_err(),
        "operation succeeded ({r:?}) where a channel error was expected"
    );
    chan.expect_close().await
}

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

async fn queue_exists(conn: &Conn, name: &str) -> bool {
    let mut ch = conn.channel().await;
    let r = ch
        .queue_declare(QueueDeclareArguments::new(name).passive(true).finish())
        .await;
    match r {
        Ok(_) => true,
        Err(_) => {
            let (code, text) = ch.expect_close().await;
            assert_eq!(code, 404, "passive queue.declare: {text}");
            false
        }
    }
}

shard_tests!(
    exchange_declare_all_types,
    exchange_passive_missing,
    exchange_redeclare_other_type,
    exchange_delete_if_unused,
    exchange_auto_delete,
    predeclared_exchanges,
    reserved_names,
    default_exchange_is_off_limits,
    queue_server_named,
    queue_passive_missing,
    queue_exclusive_locked,
    queue_exclusive_locked_plain_declare,
    queue_inequivalent_flags,
    bind_and_unbind,
    bind_missing_targets,
    purge_returns_count,
    queue_delete_conditions,
    queue_auto_delete,
    default_exchange_routes_by_queue_name,
    declare_ok_counts,
    purge_spares_unacked,
    vhosts_are_isolated,
    concurrent_control_plane,
);

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

async fn queue_server_named(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let mut names = Vec::new();
    for _ in 0..10 {
        let (name, messages, consumers) = ch
            .queue_declare(QueueDeclareArguments::exclusive_server_named())
            .await
            .unwrap()
            .unwrap();
        assert!(
            name.starts_with("amq.gen-"),
            "server-named queue called {name:?}"
        );
        assert_eq!((messages, consumers), (0, 0));
        names.push(name);
    }
    let mut dedup = names.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(
        dedup.len(),
        names.len(),
        "server-generated names repeat: {names:?}"
    );
    // Every one of them is a working queue.
    for name in &names {
        ch.publish("", name, name.as_bytes()).await;
    }
    for name in &names {
        let (_, _, body) = ch.get_eventually(name, true).await;
        assert_eq!(body, name.as_bytes());
    }
}

async fn queue_passive_missing(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let q = unique("no-such-q");
    let r = ch
        .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 404);
    assert_eq!(text, format!("NOT_FOUND - no queue '{q}' in vhost '/'"));
}

async fn queue_exclusive_locked(shards: usize) {
    let broker = Broker::start(shards);
    let owner = broker.connect().await;
    let other = broker.connect().await;
    let q = unique("q-excl");
    let och = owner.channel().await;
    och.queue_declare(QueueDeclareArguments::new(&q).exclusive(true).finish())
        .await
        .unwrap();
    let locked = format!(
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'"
    );

    let mut ch = other.channel().await;
    let r = ch
        .queue_declare(QueueDeclareArguments::new(&q).exclusive(true).finish())
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!((code, text.as_str()), (405, locked.as_str()));

    let mut ch = other.channel().await;
    let r = ch
        .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!((code, text.as_str()), (405, locked.as_str()));

    // The owner still uses it.
    och.publish("", &q, b"mine").await;
    let (_, _, body) = och.get_eventually(&q, true).await;
    assert_eq!(body, b"mine");

    // When the owner goes, so does the queue (405 while it still exists, then 404).
    owner.close().await;
    let mut gone = false;
    for _ in 0..100 {
        let mut ch = other.channel().await;
        let r = ch
            .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
            .await;
        assert!(
            r.is_err(),
            "passive declare of another connection's exclusive queue succeeded"
        );
        let (code, text) = ch.expect_close().await;
        if code == 404 {
            gone = true;
            break;
        }
        assert_eq!((code, text.as_str()), (405, locked.as_str()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "exclusive queue {q} outlived its connection");
}

/// A plain (non-exclusive) declare of another connection's exclusive queue is refused with
/// the lock error, before any argument equivalence is considered.
async fn queue_exclusive_locked_plain_declare(shards: usize) {
    let broker = Broker::start(shards);
    let owner = broker.connect().await;
    let other = broker.connect().await;
    let q = unique("q-excl-plain");
    let och = owner.channel().await;
    och.queue_declare(QueueDeclareArguments::new(&q).exclusive(true).finish())
        .await
        .unwrap();
    let mut ch = other.channel().await;
    let r = ch.queue_declare(QueueDeclareArguments::new(&q)).await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(
        (code, text.as_str()),
        (
            405,
            format!(
                "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'"
            )
            .as_str()
        )
    );
}

async fn queue_inequivalent_flags(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-flags");
    let ch = conn.channel().await;
    ch.declare_queue(&q).await;
    for flag in ["durable", "exclusive", "auto_delete"] {
        let mut args = QueueDeclareArguments::new(&q);
        match flag {
            "durable" => args.durable(true),
            "exclusive" => args.exclusive(true),
            _ => args.auto_delete(true),
        };
        let mut ch = conn.channel().await;
        let r = ch.queue_declare(args.finish()).await;
        let (code, text) = soft_error(&mut ch, r).await;
        assert_eq!(code, 406, "{flag}: {text}");
        assert_eq!(
            text,
            format!(
                "PRECONDITION_FAILED - inequivalent arg '{flag}' for queue '{q}' in vhost '/': \
                 received 'true' but current is 'false'"
            )
        );
    }
    // Identical redeclare is fine.
    let ch = conn.channel().await;
    ch.declare_queue(&q).await;
}

async fn bind_and_unbind(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let x = unique("x-bind");
    let q = unique("q-bind");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct"))
        .await
        .unwrap();
    ch.declare_queue(&q).await;
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k1"))
        .await
        .unwrap();
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k2"))
        .await
        .unwrap();
    // Binding twice is idempotent: one copy per publish.
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k1"))
        .await
        .unwrap();

    ch.publish(&x, "k1", b"one").await;
    ch.publish(&x, "k2", b"two").await;
    ch.publish(&x, "k3", b"unbound key").await;
    ch.wait_message_count(&q, 2).await;
    assert_eq!(ch.get_eventually(&q, true).await.2, b"one");
    assert_eq!(ch.get_eventually(&q, true).await.2, b"two");

    ch.queue_unbind(QueueUnbindArguments::new(&q, &x, "k1"))
        .await
        .unwrap();
    ch.publish(&x, "k1", b"after unbind").await;
    ch.publish(&x, "k2", b"still bound").await;
    let (_, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(
        body, b"still bound",
        "a message routed through a removed binding"
    );
    assert_eq!(ch.message_count(&q).await, 0);
}

async fn bind_missing_targets(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-real");
    let x = unique("x-missing");
    let mut ch = conn.channel().await;
    ch.declare_queue(&q).await;
    let r = ch.queue_bind(QueueBindArguments::new(&q, &x, "k")).await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 404);
    assert_eq!(text, format!("NOT_FOUND - no exchange '{x}' in vhost '/'"));

    let missing_q = unique("q-missing");
    let mut ch = conn.channel().await;
    let r = ch
        .queue_bind(QueueBindArguments::new(&missing_q, "amq.direct", "k"))
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 404);
    assert_eq!(
        text,
        format!("NOT_FOUND - no queue '{missing_q}' in vhost '/'")
    );
}

async fn purge_returns_count(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-purge");
    ch.declare_queue(&q).await;
    for i in 0..5 {
        ch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    ch.wait_message_count(&q, 5).await;
    let purged = ch.queue_purge(QueuePurgeArguments::new(&q)).await.unwrap();
    assert_eq!(purged, Some(5));
    assert!(ch.get(&q, true).await.is_none(), "message left after purge");
    let purged = ch.queue_purge(QueuePurgeArguments::new(&q)).await.unwrap();
    assert_eq!(purged, Some(0));
}

async fn queue_delete_conditions(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-del");
    let setup = conn.channel().await;
    setup.declare_queue(&q).await;

    // if-unused with a consumer attached.
    let consumer = conn.channel().await;
    let (tag, _rx) = consumer.consume_manual(&q).await;
    let mut ch = conn.channel().await;
    let r = ch
        .queue_delete(QueueDeleteArguments::new(&q).if_unused(true).finish())
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - queue '{q}' in vhost '/' in use")
    );
    consumer
        .basic_cancel(amqprs::channel::BasicCancelArguments::new(&tag))
        .await
        .unwrap();

    // if-empty with messages in it.
    for i in 0..3 {
        setup.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    setup.wait_message_count(&q, 3).await;
    let mut ch = conn.channel().await;
    let r = ch
        .queue_delete(QueueDeleteArguments::new(&q).if_empty(true).finish())
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - queue '{q}' in vhost '/' is not empty")
    );

    // Both conditions now hold for if-unused; plain delete reports the message count.
    let ch = conn.channel().await;
    let deleted = ch
        .queue_delete(QueueDeleteArguments::new(&q).if_unused(true).finish())
        .await
        .unwrap();
    assert_eq!(deleted, Some(3));
    assert!(!queue_exists(&conn, &q).await);

    // if-empty on an empty queue succeeds with 0.
    let q2 = unique("q-del-empty");
    ch.declare_queue(&q2).await;
    let deleted = ch
        .queue_delete(QueueDeleteArguments::new(&q2).if_empty(true).finish())
        .await
        .unwrap();
    assert_eq!(deleted, Some(0));
}

async fn queue_auto_delete(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-autodel");
    ch.queue_declare(QueueDeclareArguments::transient_autodelete(&q))
        .await
        .unwrap();
    let (tag, _rx) = ch.consume_auto(&q).await;
    assert!(queue_exists(&conn, &q).await);
    ch.basic_cancel(amqprs::channel::BasicCancelArguments::new(&tag))
        .await
        .unwrap();
    let mut gone = false;
    for _ in 0..100 {
        if !queue_exists(&conn, &q).await {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        gone,
        "auto-delete queue {q} survived the cancel of its last consumer"
    );
}

async fn default_exchange_routes_by_queue_name(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let mut queues = Vec::new();
    for _ in 0..6 {
        let q = unique("q-default");
        ch.declare_queue(&q).await;
        queues.push(q);
    }
    for q in &queues {
        ch.publish("", q, q.as_bytes()).await;
    }
    // Unroutable without mandatory: silently dropped, channel stays open.
    ch.publish("", &unique("nobody"), b"lost").await;
    for q in &queues {
        ch.wait_message_count(q, 1).await;
        let (get_ok, _, body) = ch.get_eventually(q, true).await;
        assert_eq!(body, q.as_bytes());
        assert_eq!(get_ok.routing_key(), q);
        assert_eq!(get_ok.exchange(), "");
    }
    assert!(ch.ch.is_open());
}

async fn declare_ok_counts(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-counts");
    ch.declare_queue(&q).await;
    for i in 0..7 {
        ch.publish("", &q, format!("{i}").as_bytes()).await;
    }
    ch.wait_message_count(&q, 7).await;
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let c = broker.connect().await;
        let cch = c.channel().await;
        cch.basic_qos(amqprs::channel::BasicQosArguments::new(0, 1, false))
            .await
            .unwrap();
        let (_, rx) = cch.consume_manual(&q).await;
        consumers.push((c, cch, rx));
    }
    // Three consumers with prefetch 1 hold three messages unacked; four remain ready.
    for (_, _, rx) in &mut consumers {
        common::next_delivery(rx).await;
    }
    let mut ok = false;
    for _ in 0..100 {
        let (_, messages, consumer_count) = ch
            .queue_declare(QueueDeclareArguments::new(&q))
            .await
            .unwrap()
            .unwrap();
        if (messages, consumer_count) == (4, 3) {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        ok,
        "declare-ok never reported 4 ready messages and 3 consumers"
    );
}

/// queue.purge removes ready messages only; one delivered and unacked survives and can be
/// requeued.
async fn purge_spares_unacked(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-purge-unacked");
    ch.declare_queue(&q).await;
    for i in 0..4 {
        ch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    ch.wait_message_count(&q, 4).await;
    let holder = conn.channel().await;
    let (get_ok, _, body) = holder.get(&q, false).await.expect("get-ok");
    assert_eq!(body, b"m0");
    let purged = ch.queue_purge(QueuePurgeArguments::new(&q)).await.unwrap();
    assert_eq!(purged, Some(3));
    holder
        .basic_reject(amqprs::channel::BasicRejectArguments::new(
            get_ok.delivery_tag(),
            true,
        ))
        .await
        .unwrap();
    let (get_ok, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"m0");
    assert!(get_ok.redelivered());
}

/// The same names in two virtual hosts are two different things.
async fn vhosts_are_isolated(shards: usize) {
    let broker = Broker::start_with_config(shards, "[vhosts]\nnames = [\"/\", \"v2\"]\n");
    let root = broker.connect().await;
    let mut args = broker.amqprs_args();
    args.virtual_host("v2");
    let v2conn = amqprs::connection::Connection::open(&args)
        .await
        .expect("open vhost v2");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    drop(tx);
    let v2 = Conn {
        conn: v2conn,
        events: rx,
    };

    let q = unique("q-shared-name");
    let x = unique("x-only-in-root");
    let rch = root.channel().await;
    rch.declare_queue(&q).await;
    rch.exchange_declare(ExchangeDeclareArguments::new(&x, "fanout"))
        .await
        .unwrap();
    let vch = v2.channel().await;
    vch.declare_queue(&q).await;

    rch.publish("", &q, b"root").await;
    vch.publish("", &q, b"v2-a").await;
    vch.publish("", &q, b"v2-b").await;
    rch.wait_message_count(&q, 1).await;
    vch.wait_message_count(&q, 2).await;
    assert_eq!(rch.get_eventually(&q, true).await.2, b"root");
    assert_eq!(vch.get_eventually(&q, true).await.2, b"v2-a");

    let mut vch = v2.channel().await;
    let r = vch
        .exchange_declare(
            ExchangeDeclareArguments::new(&x, "fanout")
                .passive(true)
                .finish(),
        )
        .await;
    let (code, text) = soft_error(&mut vch, r).await;
    assert_eq!(code, 404);
    assert_eq!(text, format!("NOT_FOUND - no exchange '{x}' in vhost 'v2'"));

    // Deleting v2's queue leaves the root one alone.
    let vch = v2.channel().await;
    vch.queue_delete(QueueDeleteArguments::new(&q))
        .await
        .unwrap();
    assert!(queue_exists(&root, &q).await);
}

/// Declares, binds, unbinds and deletes from several connections at once leave one
/// consistent routing table: each key reaches exactly the queues still bound to it.
async fn concurrent_control_plane(shards: usize) {
    let broker = Broker::start(shards);
    const TASKS: usize = 6;
    const EACH: usize = 60;
    let prefix = unique("cp");
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let conn = broker.connect().await;
        let prefix = prefix.clone();
        handles.push(tokio::spawn(async move {
            let ch = conn.channel().await;
            for k in 0..EACH {
                let q = format!("{prefix}-{t}-{k}");
                ch.declare_queue(&q).await;
                ch.queue_bind(QueueBindArguments::new(
                    &q,
                    "amq.topic",
                    &format!("cp.{t}.{k}"),
                ))
                .await
                .unwrap();
                // Every queue also listens to its task's wildcard.
                ch.queue_bind(QueueBindArguments::new(
                    &q,
                    "amq.topic",
                    &format!("all.{t}.#"),
                ))
                .await
                .unwrap();
                if k % 2 == 1 {
                    ch.queue_unbind(QueueUnbindArguments::new(
                        &q,
                        "amq.topic",
                        &format!("cp.{t}.{k}"),
                    ))
                    .await
                    .unwrap();
                }
                if k % 3 == 0 {
                    ch.queue_delete(QueueDeleteArguments::new(&q))
                        .await
                        .unwrap();
                }
            }
            conn
        }));
    }
    let mut conns = Vec::new();
    for h in handles {
        conns.push(h.await.expect("control-plane task failed"));
    }
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    for t in 0..TASKS {
        for k in 0..EACH {
            pch.publish("amq.topic", &format!("cp.{t}.{k}"), b"direct")
                .await;
        }
        pch.publish("amq.topic", &format!("all.{t}.x"), b"wildcard")
            .await;
    }
    let ch = conns[0].channel().await;
    for t in 0..TASKS {
        for k in 0..EACH {
            let q = format!("{prefix}-{t}-{k}");
            if k % 3 == 0 {
                assert!(
                    !queue_exists(&conns[0], &q).await,
                    "deleted queue {q} exists"
                );
                continue;
            }
            let want = if k % 2 == 1 { 1 } else { 2 };
            ch.wait_message_count(&q, want).await;
        }
    }
    // No stragglers arrive later.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for t in 0..TASKS {
        for k in (0..EACH).filter(|k| k % 3 != 0) {
            let q = format!("{prefix}-{t}-{k}");
            let want = if k % 2 == 1 { 1 } else { 2 };
            assert_eq!(ch.message_count(&q).await, want, "queue {q}");
        }
    }
}
