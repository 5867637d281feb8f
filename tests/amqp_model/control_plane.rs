//! The model as a whole: isolated virtual hosts, and concurrent changes kept consistent.

use std::time::Duration;

use amqprs::channel::{
    ExchangeDeclareArguments, QueueBindArguments, QueueDeleteArguments, QueueUnbindArguments,
};

use crate::common::{unique, Broker, Conn};
use crate::support::{queue_exists, soft_error};

shard_tests!(vhosts_are_isolated, concurrent_control_plane);

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
