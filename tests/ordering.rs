//! Causality across shards: what a connection did before a request is visible to that
//! request, even when the queue lives on another shard and the two travel through
//! different inboxes there (publishes through the bounded one, requests through the
//! control one).

mod common;

use amqprs::channel::{BasicGetArguments, ConfirmSelectArguments};
use common::{bounded, unique, Broker};

/// Publish then immediately `basic.get` on the same channel, for many queues (so that,
/// with two shards, most live on the other shard): every get returns the message.
async fn get_sees_preceding_publish(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queues: Vec<String> = (0..24).map(|i| unique(&format!("order-{i}"))).collect();
    for q in &queues {
        ch.declare_queue(q).await;
    }
    for round in 0..5 {
        for q in &queues {
            let body = format!("{q}/{round}");
            ch.publish("", q, body.as_bytes()).await;
            let got = ch
                .ch
                .basic_get(BasicGetArguments::new(q).no_ack(true).finish())
                .await
                .expect("basic.get");
            let (_, _, content) = got.unwrap_or_else(|| {
                panic!("get-empty right after a publish to {q} (round {round})")
            });
            assert_eq!(content, body.as_bytes());
        }
    }
    conn.close().await;
}

/// A confirmed publish is visible to a passive declare from another connection.
async fn confirmed_publish_is_counted(shards: usize) {
    let broker = Broker::start(shards);
    let publisher = broker.connect().await;
    let observer = broker.connect().await;
    let pch = publisher.channel().await;
    let och = observer.channel().await;
    pch.ch
        .confirm_select(ConfirmSelectArguments::default())
        .await
        .expect("confirm.select");
    let queues: Vec<String> = (0..16).map(|i| unique(&format!("count-{i}"))).collect();
    for q in &queues {
        pch.declare_queue(q).await;
    }
    for q in &queues {
        pch.publish("", q, b"x").await;
        // A round trip on the publishing channel after the publish: the queue has it.
        let _ = pch.message_count(q).await;
        assert_eq!(och.message_count(q).await, 1, "queue {q}");
    }
    publisher.close().await;
    observer.close().await;
}

#[tokio::test]
async fn get_sees_preceding_publish_shards_1() {
    bounded(get_sees_preceding_publish(1)).await;
}

#[tokio::test]
async fn get_sees_preceding_publish_shards_2() {
    bounded(get_sees_preceding_publish(2)).await;
}

#[tokio::test]
async fn confirmed_publish_is_counted_shards_2() {
    bounded(confirmed_publish_is_counted(2)).await;
}
