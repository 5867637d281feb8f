//! Item 9: priority queues. A queue declared with `x-max-priority` delivers the highest
//! `priority` first and FIFO within a priority; a priority above the maximum counts as
//! the maximum and no property as 0. Requeued messages go back to their place (by
//! original order within their priority). As in RabbitMQ's `rabbit_priority_queue`,
//! TTL expires messages only at the head (an expired low-priority message waits behind a
//! live high-priority one, and is counted meanwhile), and `x-max-length` drop-head drops
//! the head, i.e. the highest-priority message.

use std::time::Duration;

use amqprs::channel::BasicRejectArguments;
use amqprs::{BasicProperties, FieldValue};

use crate::common::{unique, Broker};
use crate::support::*;

shard_tests!(
    highest_priority_first_fifo_within_capped_at_max,
    requeue_returns_to_its_place_within_its_priority,
    ttl_expires_only_at_the_head,
    max_length_drop_head_drops_the_head,
);

/// Published before anyone consumes, then consumed: order by priority (9 and 7 count as
/// the maximum 5, in arrival order), FIFO within a priority, no property as 0.
async fn highest_priority_first_fifo_within_capped_at_max(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-prio");
    declare_ok(&ch, &q, max_priority(5)).await;
    let published = [
        ("d3", Some(3)),
        ("a9", Some(9)),
        ("b5", Some(5)),
        ("c7", Some(7)),
        ("e-none", None),
        ("f1", Some(1)),
        ("g0", Some(0)),
        ("h3", Some(3)),
    ];
    for (body, p) in published {
        publish(&ch, &q, body, p).await;
    }
    ch.wait_message_count(&q, 8).await;

    let cch = conn.channel().await;
    let mut rx = consumer(&cch, &q, 100, None).await;
    let got = bodies(&take(&mut rx, 8).await);
    assert_eq!(
        got,
        ["a9", "b5", "c7", "d3", "h3", "f1", "e-none", "g0"],
        "priority order, FIFO within a priority"
    );

    // The same through basic.get, with a maximum of 2 and a priority far above it.
    let q2 = unique("q-prio-get");
    declare_ok(&ch, &q2, max_priority(2)).await;
    for (body, p) in [
        ("x0", None),
        ("y200", Some(200)),
        ("z1", Some(1)),
        ("w2", Some(2)),
    ] {
        publish(&ch, &q2, body, p).await;
    }
    ch.wait_message_count(&q2, 4).await;
    assert_eq!(drain(&ch, &q2).await, ["y200", "w2", "z1", "x0"]);
    conn.close().await;
}

/// Rejected (requeue) messages and those of a closed channel go back to their place
/// within their priority, ahead of later messages of the same priority, marked
/// redelivered.
async fn requeue_returns_to_its_place_within_its_priority(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-prio-requeue");
    declare_ok(&ch, &q, max_priority(5)).await;
    for (body, p) in [
        ("a0", Some(0)),
        ("b5", Some(5)),
        ("c5", Some(5)),
        ("d0", None),
    ] {
        publish(&ch, &q, body, p).await;
    }
    ch.wait_message_count(&q, 4).await;

    // basic.get (manual ack) takes b5 then c5.
    let (b, _, body) = ch.get(&q, false).await.expect("get b5");
    assert_eq!(body, b"b5");
    let (c, _, body) = ch.get(&q, false).await.expect("get c5");
    assert_eq!(body, b"c5");
    publish(&ch, &q, "e5", Some(5)).await;
    ch.wait_message_count(&q, 3).await;
    for tag in [c.delivery_tag(), b.delivery_tag()] {
        ch.basic_reject(BasicRejectArguments::new(tag, true))
            .await
            .expect("basic.reject");
    }
    ch.wait_message_count(&q, 5).await;

    // A consumer on another connection takes the first two; its connection closes and
    // they are requeued again.
    let other = broker.connect().await;
    let och = other.channel().await;
    let mut rx = consumer(&och, &q, 2, None).await;
    let first = take(&mut rx, 2).await;
    assert_eq!(bodies(&first), ["b5", "c5"]);
    assert!(first.iter().all(|d| d.redelivered), "rejected: redelivered");
    other.close().await;
    ch.wait_message_count(&q, 5).await;

    let mut got = Vec::new();
    while let Some((ok, _, body)) = ch.get(&q, true).await {
        got.push((String::from_utf8(body).expect("utf-8"), ok.redelivered()));
    }
    let expect = [
        ("b5", true),
        ("c5", true),
        ("e5", false),
        ("a0", false),
        ("d0", false),
    ];
    let expect: Vec<(String, bool)> = expect.iter().map(|(b, r)| (b.to_string(), *r)).collect();
    assert_eq!(got, expect);
    conn.close().await;
}

/// A low-priority message whose TTL has passed stays (and is counted) while a
/// high-priority message without TTL is ahead of it; it is dropped once it is the head.
async fn ttl_expires_only_at_the_head(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-prio-ttl");
    declare_ok(&ch, &q, max_priority(5)).await;
    // The low one is the head for the moment between the two publishes (well under its
    // TTL of 1 s), then the high one is.
    let mut low = BasicProperties::default();
    low.with_priority(0).with_expiration("1000");
    ch.publish_props("", &q, low.finish(), b"low-expiring")
        .await;
    publish(&ch, &q, "high", Some(5)).await;
    ch.wait_message_count(&q, 2).await;
    // Past the low message's TTL (the queue's timer fired meanwhile): still two.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(
        ch.message_count(&q).await,
        2,
        "expired, but not at the head"
    );
    assert_eq!(drain(&ch, &q).await, ["high"], "dropped once at the head");
    assert_eq!(ch.message_count(&q).await, 0);

    conn.close().await;
}

/// `x-max-length` 2 (drop-head) on a priority queue: the message dropped to make room is
/// the head — the highest-priority one — as RabbitMQ does (`BQ:drop` takes the head of
/// the highest non-empty priority).
async fn max_length_drop_head_drops_the_head(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-prio-maxlen");
    let args = crate::support::table(&[
        ("x-max-priority", FieldValue::I(5)),
        ("x-max-length", FieldValue::I(2)),
    ]);
    declare_ok(&ch, &q, args).await;
    for (body, p) in [("a0", Some(0)), ("b0", Some(0)), ("c5", Some(5))] {
        publish(&ch, &q, body, p).await;
    }
    ch.wait_message_count(&q, 2).await;
    assert_eq!(drain(&ch, &q).await, ["a0", "b0"], "c5 was the head");

    for (body, p) in [("d1", Some(1)), ("e5", Some(5)), ("f0", None)] {
        publish(&ch, &q, body, p).await;
    }
    ch.wait_message_count(&q, 2).await;
    assert_eq!(drain(&ch, &q).await, ["d1", "f0"], "e5 was the head");
    conn.close().await;
}
