//! Expiry: per-message expiration, x-message-ttl, and x-expires on idle and in-use queues.

use std::time::{Duration, Instant};

use amqprs::channel::{BasicCancelArguments, QueueDeclareArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};

use crate::common::{next_delivery, unique, Broker};

shard_tests!(
    per_message_expiration,
    queue_message_ttl,
    queue_expires,
    x_expires_not_while_in_use,
);

async fn per_message_expiration(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-expiration");
    ch.declare_queue(&q).await;
    ch.publish_props(
        "",
        &q,
        BasicProperties::default().with_expiration("100").finish(),
        b"short-lived",
    )
    .await;
    ch.publish("", &q, b"durable-ish").await;
    ch.publish_props(
        "",
        &q,
        BasicProperties::default().with_expiration("60000").finish(),
        b"long-lived",
    )
    .await;
    // A round trip on the same channel: the publishes have reached the broker.
    ch.message_count(&q).await;
    let enqueued = Instant::now();
    // Let the short TTL run out (this is the behaviour under test, not synchronisation).
    tokio::time::sleep(Duration::from_millis(300).saturating_sub(enqueued.elapsed())).await;
    let (_, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"durable-ish", "expired message delivered");
    let (_, _, body) = ch.get(&q, true).await.expect("unexpired message");
    assert_eq!(body, b"long-lived");
    assert!(
        ch.get(&q, true).await.is_none(),
        "expired message still in the queue"
    );

    // An expired message is not delivered to a consumer either.
    ch.publish_props(
        "",
        &q,
        BasicProperties::default().with_expiration("100").finish(),
        b"short-lived-2",
    )
    .await;
    ch.message_count(&q).await;
    let enqueued = Instant::now();
    tokio::time::sleep(Duration::from_millis(300).saturating_sub(enqueued.elapsed())).await;
    let (_, mut rx) = ch.consume_auto(&q).await;
    ch.publish("", &q, b"marker").await;
    assert_eq!(
        next_delivery(&mut rx).await.body,
        b"marker",
        "expired message delivered"
    );
}

async fn queue_message_ttl(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-ttl");
    let mut args = FieldTable::new();
    args.insert("x-message-ttl".try_into().unwrap(), FieldValue::I(100));
    ch.queue_declare(QueueDeclareArguments::new(&q).arguments(args).finish())
        .await
        .unwrap();
    ch.publish("", &q, b"a").await;
    ch.publish("", &q, b"b").await;
    ch.message_count(&q).await;
    let enqueued = Instant::now();
    tokio::time::sleep(Duration::from_millis(300).saturating_sub(enqueued.elapsed())).await;
    assert!(
        ch.get(&q, true).await.is_none(),
        "message outlived x-message-ttl 100 ms"
    );
    assert_eq!(ch.message_count(&q).await, 0);
}

async fn queue_expires(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-expires");
    let mut args = FieldTable::new();
    args.insert("x-expires".try_into().unwrap(), FieldValue::I(200));
    ch.queue_declare(QueueDeclareArguments::new(&q).arguments(args).finish())
        .await
        .unwrap();
    let declared = Instant::now();
    // Leave the queue untouched for longer than its expiry before probing, in case a
    // passive declare counts as use (the expiry itself is what is under test here).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = declared + Duration::from_secs(5);
    loop {
        let mut probe = conn.channel().await;
        let r = probe
            .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
            .await;
        if r.is_err() {
            let (code, text) = probe.expect_close().await;
            assert_eq!(code, 404, "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "unused queue with x-expires 200 ms still there after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn x_expires_not_while_in_use(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-expires-used");
    let mut args = FieldTable::new();
    args.insert("x-expires".try_into().unwrap(), FieldValue::I(300));
    ch.queue_declare(QueueDeclareArguments::new(&q).arguments(args).finish())
        .await
        .unwrap();
    let (tag, mut rx) = ch.consume_auto(&q).await;
    // Three expiry periods with a consumer attached (the passage of time is under test).
    tokio::time::sleep(Duration::from_millis(900)).await;
    ch.publish("", &q, b"still here").await;
    assert_eq!(next_delivery(&mut rx).await.body, b"still here");
    ch.basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    tokio::time::sleep(Duration::from_millis(400)).await;
    loop {
        let mut probe = conn.channel().await;
        let r = probe
            .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
            .await;
        if r.is_err() {
            assert_eq!(probe.expect_close().await.0, 404);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queue did not expire once unused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
