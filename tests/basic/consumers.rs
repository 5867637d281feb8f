//! Consumers: cancel and its notification, exclusive consumers, auto-delete on the last one.

use std::time::{Duration, Instant};

use amqprs::channel::{BasicCancelArguments, QueueDeclareArguments, QueueDeleteArguments};

use crate::common::{next_delivery, unique, Broker, Event};

shard_tests!(
    consumer_cancel,
    queue_delete_notifies_consumer,
    exclusive_consumer,
    cancel_unknown_consumer_tag,
    auto_delete_when_consumer_connection_drops,
    exclusive_consumer_released_with_its_connection,
);

async fn consumer_cancel(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-cancel");
    ch.declare_queue(&q).await;
    let (tag, mut rx) = ch.consume_auto(&q).await;
    ch.publish("", &q, b"before").await;
    assert_eq!(next_delivery(&mut rx).await.body, b"before");
    let cancelled = ch
        .basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .unwrap();
    assert_eq!(cancelled, tag);
    ch.publish("", &q, b"after").await;
    ch.wait_message_count(&q, 1).await;
    let (_, _, body) = ch.get(&q, true).await.expect("message kept for later");
    assert_eq!(body, b"after");
}

async fn queue_delete_notifies_consumer(shards: usize) {
    let broker = Broker::start(shards);
    let sub = broker.connect().await;
    let admin = broker.connect().await;
    let mut sch = sub.channel().await;
    let q = unique("q-doomed");
    sch.declare_queue(&q).await;
    let (tag, _rx) = sch.consume_auto(&q).await;
    let ach = admin.channel().await;
    ach.queue_delete(QueueDeleteArguments::new(&q))
        .await
        .unwrap();
    match sch.next_event().await {
        Event::Cancel { consumer_tag } => assert_eq!(consumer_tag, tag),
        other => panic!("expected basic.cancel from the broker, got {other:?}"),
    }
    // The subscriber's channel survives the cancel.
    assert!(sch.ch.is_open());
    sch.declare_server_named().await;
}

async fn exclusive_consumer(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-exclusive-consumer");
    let text = format!("ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use");

    let a = conn.channel().await;
    a.declare_queue(&q).await;
    let (_tag, _rx) = a.consume_auto(&q).await;
    // Exclusive consume while another consumer exists.
    let mut b = conn.channel().await;
    let args = amqprs::channel::BasicConsumeArguments::new(&q, "")
        .exclusive(true)
        .finish();
    let r = b.basic_consume_rx(args).await;
    assert!(
        r.is_err(),
        "exclusive consume next to another consumer succeeded"
    );
    let (code, t) = b.expect_close().await;
    assert_eq!((code, t.as_str()), (403, text.as_str()));

    // Any consume while an exclusive consumer exists.
    let q2 = unique("q-exclusive-consumer");
    let text2 = format!("ACCESS_REFUSED - queue '{q2}' in vhost '/' in exclusive use");
    let c = conn.channel().await;
    c.declare_queue(&q2).await;
    let args = amqprs::channel::BasicConsumeArguments::new(&q2, "")
        .exclusive(true)
        .finish();
    let _rx2 = c
        .basic_consume_rx(args)
        .await
        .expect("exclusive consume on an idle queue");
    let mut d = conn.channel().await;
    let r = d
        .basic_consume_rx(amqprs::channel::BasicConsumeArguments::new(&q2, ""))
        .await;
    assert!(
        r.is_err(),
        "consume next to an exclusive consumer succeeded"
    );
    let (code, t) = d.expect_close().await;
    assert_eq!((code, t.as_str()), (403, text2.as_str()));
}

/// basic.cancel of a tag that is not (or no longer) a consumer is answered with cancel-ok.
async fn cancel_unknown_consumer_tag(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let tag = ch
        .basic_cancel(BasicCancelArguments::new("no-such-consumer"))
        .await
        .expect("cancel of an unknown consumer tag");
    assert_eq!(tag, "no-such-consumer");
    assert!(ch.ch.is_open());
    ch.declare_server_named().await;
}

async fn auto_delete_when_consumer_connection_drops(shards: usize) {
    let broker = Broker::start(shards);
    let admin = broker.connect().await;
    let ach = admin.channel().await;
    let q = unique("q-autodel-drop");
    ach.queue_declare(QueueDeclareArguments::transient_autodelete(&q))
        .await
        .unwrap();
    let mut raw = broker.raw();
    raw.channel_open(1);
    raw.basic_consume(1, &q, false);
    ach.publish("", &q, b"in flight").await;
    raw.read_delivery(1);
    // The consumer's connection vanishes without cancel or close.
    drop(raw);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut probe = admin.channel().await;
        let r = probe
            .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
            .await;
        if r.is_err() {
            assert_eq!(probe.expect_close().await.0, 404);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "auto-delete queue {q} outlived its last consumer's connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn exclusive_consumer_released_with_its_connection(shards: usize) {
    let broker = Broker::start(shards);
    let admin = broker.connect().await;
    let ach = admin.channel().await;
    let q = unique("q-excl-release");
    ach.declare_queue(&q).await;
    let holder = broker.connect().await;
    let hch = holder.channel().await;
    let args = amqprs::channel::BasicConsumeArguments::new(&q, "")
        .exclusive(true)
        .finish();
    let _rx = hch.basic_consume_rx(args).await.unwrap();
    holder.close().await;
    // Once the holder is gone, a new consumer is accepted.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut ch = admin.channel().await;
        match ch
            .basic_consume_rx(amqprs::channel::BasicConsumeArguments::new(&q, ""))
            .await
        {
            Ok((_, mut rx)) => {
                ch.publish("", &q, b"free again").await;
                assert_eq!(next_delivery(&mut rx).await.body, b"free again");
                break;
            }
            Err(_) => {
                let (code, _) = ch.expect_close().await;
                assert_eq!(code, 403);
                assert!(
                    Instant::now() < deadline,
                    "exclusive consumer outlived its connection"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
