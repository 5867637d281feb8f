//! Exact `message_stats` counts: a queue's, an exchange's (`publish_in`/`publish_out`),
//! the channels' and the overview's, after a known sequence of publishes, consumer
//! deliveries with manual acks, rejects with requeue (redelivered), and gets with and
//! without ack; on one shard, and with the publisher and the consumer on two shards.

use amqprs::channel::{
    BasicAckArguments, BasicRejectArguments, ExchangeDeclareArguments, QueueBindArguments,
};
use serde_json::Value;

use super::common::{bounded, next_delivery, Broker, Chan};
use super::{api_json, connect_on, eventually};

const Q: &str = "stats.q";
const Q2: &str = "stats.q2";
const FAN: &str = "stats.fan";

/// Publishes to the default exchange (to `Q`, and once to no queue) and to a fanout
/// bound to `Q` and `Q2`; `Q` then has 10 messages, `Q2` 4.
async fn publish_all(ch: &Chan) {
    for i in 0..6u8 {
        ch.publish("", Q, &[b'd', i]).await;
    }
    ch.publish("", "stats.nowhere", b"lost").await;
    for i in 0..4u8 {
        ch.publish(FAN, "", &[b'f', i]).await;
    }
    ch.wait_message_count(Q, 10).await;
    ch.wait_message_count(Q2, 4).await;
}

/// Takes from `Q`: 2 gets with ack (acked), 1 get without ack, then a manual-ack consumer:
/// 7 deliveries, the first 2 rejected with requeue and delivered again (redelivered),
/// 7 acks. Queue totals: deliver 9, get 2, get_no_ack 1, ack 9, redeliver 2.
async fn take_all(ch: &Chan) {
    for _ in 0..2 {
        let m = ch.get_eventually(Q, false).await;
        let tag = m.0.delivery_tag();
        ch.basic_ack(BasicAckArguments::new(tag, false))
            .await
            .expect("basic.ack");
    }
    let _ = ch.get_eventually(Q, true).await;
    let (_tag, mut rx) = ch.consume_manual(Q).await;
    let mut rejected = 0;
    let mut acked = 0;
    while acked < 7 {
        let d = next_delivery(&mut rx).await;
        if rejected < 2 && !d.redelivered {
            rejected += 1;
            ch.basic_reject(BasicRejectArguments::new(d.delivery_tag, true))
                .await
                .expect("basic.reject");
        } else {
            acked += 1;
            ch.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
                .await
                .expect("basic.ack");
        }
    }
    ch.wait_message_count(Q, 0).await;
}

fn stats(v: &Value) -> &Value {
    &v["message_stats"]
}

async fn counts_exact(shards: usize) {
    let broker = Broker::start(shards);
    let port = broker.http_port();
    let setup = broker.connect().await;
    let ch = setup.channel().await;
    ch.declare_queue(Q).await;
    ch.declare_queue(Q2).await;
    ch.exchange_declare(ExchangeDeclareArguments::new(FAN, "fanout"))
        .await
        .expect("exchange.declare");
    for q in [Q, Q2] {
        ch.queue_bind(QueueBindArguments::new(q, FAN, ""))
            .await
            .expect("queue.bind");
    }
    setup.close().await;
    let (publisher, consumer) = if shards == 1 {
        (broker.connect().await, broker.connect().await)
    } else {
        let home = api_json(port, "/api/queues/%2F/stats.q").await["home_shard"]
            .as_u64()
            .expect("home_shard");
        // The publisher away from the queue's home, the consumer at it: each on its shard.
        let (p, _) = connect_on(&broker, 1 - home).await;
        let (c, _) = connect_on(&broker, home).await;
        (p, c)
    };
    // Each side's channel stays open to the end: its stats are listed while it is.
    let (pch, cch) = (publisher.channel().await, consumer.channel().await);
    publish_all(&pch).await;
    take_all(&cch).await;

    let path = "/api/queues/%2F/stats.q";
    let q = eventually(port, path, |q| stats(q)["ack"] == 9).await;
    let s = stats(&q);
    for (field, want) in [
        ("publish", 10),
        ("deliver_get", 12),
        ("deliver", 9),
        ("deliver_no_ack", 0),
        ("get", 2),
        ("get_no_ack", 1),
        ("ack", 9),
        ("redeliver", 2),
    ] {
        assert_eq!(s[field], want, "{field} of {Q}: {q}");
        assert!(s[format!("{field}_details")]["rate"].is_number(), "{q}");
    }
    let q2 = api_json(port, "/api/queues/%2F/stats.q2").await;
    assert_eq!(stats(&q2)["publish"], 4, "{q2}");
    assert_eq!(stats(&q2)["deliver_get"], 0, "{q2}");

    let fan = api_json(port, "/api/exchanges/%2F/stats.fan").await;
    assert_eq!(stats(&fan)["publish_in"], 4, "{fan}");
    assert_eq!(stats(&fan)["publish_out"], 8, "{fan}");
    assert!(
        stats(&fan)["publish_in_details"]["rate"].is_number(),
        "{fan}"
    );
    let listed = api_json(port, "/api/exchanges/%2F").await;
    let entry = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|e| e["name"] == FAN)
        .cloned()
        .expect("the fanout listed");
    assert_eq!(stats(&entry)["publish_in"], 4, "{entry}");
    assert_eq!(stats(&entry)["publish_out"], 8, "{entry}");
    let default = api_json(port, "/api/exchanges/%2F/amq.default").await;
    assert_eq!(stats(&default)["publish_in"], 7, "{default}");
    assert_eq!(stats(&default)["publish_out"], 6, "{default}");
    let direct = api_json(port, "/api/exchanges/%2F/amq.direct").await;
    // As RabbitMQ's: no message_stats for an exchange nothing was published to.
    assert!(direct.get("message_stats").is_none(), "{direct}");

    // The overview: what the exchanges took in; what the queues delivered and were acked.
    let o = api_json(port, "/api/overview").await;
    let s = stats(&o);
    for (field, want) in [
        ("publish", 11),
        ("deliver_get", 12),
        ("deliver", 9),
        ("get", 2),
        ("get_no_ack", 1),
        ("ack", 9),
        ("redeliver", 2),
    ] {
        assert_eq!(s[field], want, "overview {field}: {o}");
    }

    // The channels: the publisher's published 11, the consumer's took what the queue gave.
    let channels = api_json(port, "/api/channels").await;
    let list = channels.as_array().expect("a list");
    assert_eq!(list.len(), 2, "{channels}");
    let by = |field: &str, n: u64| list.iter().find(|c| stats(c)[field] == n).cloned();
    let p = by("publish", 11).unwrap_or_else(|| panic!("no publishing channel: {channels}"));
    assert_eq!(stats(&p)["deliver_get"], 0, "{p}");
    let c = by("ack", 9).unwrap_or_else(|| panic!("no consuming channel: {channels}"));
    for (field, want) in [
        ("publish", 0),
        ("deliver_get", 12),
        ("deliver", 9),
        ("get", 2),
        ("get_no_ack", 1),
        ("redeliver", 2),
    ] {
        assert_eq!(stats(&c)[field], want, "channel {field}: {c}");
    }
    publisher.close().await;
    consumer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_exact_on_one_shard() {
    bounded(counts_exact(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_exact_with_publisher_and_consumer_on_two_shards() {
    bounded(counts_exact(2)).await;
}
