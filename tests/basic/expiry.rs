//! Expiry: per-message expiration, x-message-ttl (a TTL of 0 among them), and x-expires
//! on idle and in-use queues.

use std::time::{Duration, Instant};

use amqprs::channel::{
    BasicAckArguments, BasicCancelArguments, BasicQosArguments, QueueDeclareArguments,
};
use amqprs::{BasicProperties, FieldTable, FieldValue};

use crate::common::{assert_no_delivery, next_delivery, unique, Broker};

shard_tests!(
    per_message_expiration,
    queue_message_ttl,
    queue_expires,
    x_expires_not_while_in_use,
    ttl_zero_reaches_only_a_consumer_that_can_take_it_at_once,
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

/// Declares `queue` with `x-message-ttl` = `ttl_ms`.
async fn declare_with_message_ttl(
    ch: &crate::common::amqprs_client::Chan,
    queue: &str,
    ttl_ms: i32,
) {
    let mut args = FieldTable::new();
    args.insert("x-message-ttl".try_into().unwrap(), FieldValue::I(ttl_ms));
    ch.queue_declare(QueueDeclareArguments::new(queue).arguments(args).finish())
        .await
        .unwrap();
}

async fn queue_message_ttl(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-ttl");
    declare_with_message_ttl(&ch, &q, 100).await;
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

/// RabbitMQ's TTL 0: a message with `expiration = "0"` (or in a queue with
/// `x-message-ttl = 0`) goes to a consumer that can take it when it arrives, and is
/// dropped otherwise: never got, never delivered later.
async fn ttl_zero_reaches_only_a_consumer_that_can_take_it_at_once(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let zero = || BasicProperties::default().with_expiration("0").finish();

    // No consumer: dropped, and basic.get never sees it.
    let q = unique("q-ttl0");
    ch.declare_queue(&q).await;
    ch.publish_props("", &q, zero(), b"nobody-waits").await;
    assert!(ch.get(&q, true).await.is_none(), "a TTL 0 message was got");
    ch.wait_message_count(&q, 0).await;

    // A consumer with room: delivered, in order with the messages around it.
    let (_, mut rx) = ch.consume_auto(&q).await;
    ch.publish("", &q, b"before").await;
    ch.publish_props("", &q, zero(), b"at-once").await;
    ch.publish("", &q, b"after").await;
    for expected in [&b"before"[..], b"at-once", b"after"] {
        assert_eq!(next_delivery(&mut rx).await.body, expected);
    }

    // A consumer at its prefetch limit: not delivered then, nor once it has room.
    let busy = conn.channel().await;
    let q2 = unique("q-ttl0-busy");
    busy.declare_queue(&q2).await;
    busy.ch
        .basic_qos(BasicQosArguments::new(0, 1, false))
        .await
        .expect("basic.qos");
    let (_, mut busy_rx) = busy.consume_manual(&q2).await;
    ch.publish("", &q2, b"holds-the-credit").await;
    let first = next_delivery(&mut busy_rx).await;
    assert_eq!(first.body, b"holds-the-credit");
    ch.publish_props("", &q2, zero(), b"too-late").await;
    ch.message_count(&q2).await;
    busy.ch
        .basic_ack(BasicAckArguments::new(first.delivery_tag, false))
        .await
        .expect("basic.ack");
    ch.publish("", &q2, b"marker").await;
    let next = next_delivery(&mut busy_rx).await;
    assert_eq!(next.body, b"marker", "the TTL 0 message was delivered late");
    busy.ch
        .basic_ack(BasicAckArguments::new(next.delivery_tag, false))
        .await
        .expect("basic.ack");
    assert_no_delivery(&mut busy_rx, Duration::from_millis(200)).await;

    // x-message-ttl = 0: the same for every message of the queue.
    let q3 = unique("q-ttl0-queue");
    declare_with_message_ttl(&ch, &q3, 0).await;
    ch.publish("", &q3, b"dropped").await;
    ch.wait_message_count(&q3, 0).await;
    let (_, mut rx3) = ch.consume_auto(&q3).await;
    ch.publish("", &q3, b"taken").await;
    assert_eq!(next_delivery(&mut rx3).await.body, b"taken");
    assert_no_delivery(&mut rx3, Duration::from_millis(200)).await;
}
