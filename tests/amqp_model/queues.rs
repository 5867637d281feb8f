//! Queues: server-named, passive, exclusive and inequivalent declares, counts, delete, purge.

use std::time::Duration;

use amqprs::channel::{QueueDeclareArguments, QueueDeleteArguments, QueuePurgeArguments};

use crate::common;
use crate::common::{unique, Broker};
use crate::support::{queue_exists, soft_error};

shard_tests!(
    queue_server_named,
    queue_passive_missing,
    queue_exclusive_locked,
    queue_exclusive_locked_plain_declare,
    queue_inequivalent_flags,
    purge_returns_count,
    queue_delete_conditions,
    queue_auto_delete,
    declare_ok_counts,
    purge_spares_unacked,
);

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
        format!("PRECONDITION_FAILED - queue '{q}' in vhost '/' not empty")
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
