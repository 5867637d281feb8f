//! `cycle`: the queue is a ring that keeps exactly the newest messages within its count
//! (or depth) bound, in order, and never discards a delivery awaiting ack; discards are
//! logged as QUE-1005 with their count. The queue is never deleted.

use bytes::Bytes;
use sluice::client::NO_PROPERTIES;

use crate::common::{next_delivery, unique};
use crate::harness::*;

slow_tests!(
    ring_keeps_the_newest_count,
    ring_keeps_the_newest_depth,
    ring_never_discards_unacked_deliveries,
    ring_discards_by_age,
);

/// amqprs. max_count 10, no consumer, 100 confirmed publishes: exactly 91..=100 remain,
/// and the QUE-1005 lines count the 90 discards.
async fn ring_keeps_the_newest_count(shards: usize) {
    let broker = Cfg::default().start(shards);
    let (conn, ch) = publisher(&broker).await;
    let queue = declare_bound(
        &ch,
        &unique("ring-count"),
        false,
        &[(POLICY, Arg::Str("cycle")), (MAX_COUNT, Arg::Int(10))],
        "amq.topic",
        "ring.count",
    )
    .await;
    let (_c, mut cch) = confirming_publisher(&broker).await;
    publish_seqs(&cch, "amq.topic", "ring.count", 1..=100, 64).await;
    wait_all_acked(&mut cch, 1, 100).await;

    let got = get_all(&ch, &queue).await;
    let seqs: Vec<u32> = got.iter().map(|(s, _)| *s).collect();
    assert_seqs("ring of 10", &seqs, 91..=100);

    let lines = wait_reported(&broker, &queue, "QUE-1005", "Discarded : ", 90, ACT).await;
    for l in &lines {
        assert!(
            l.contains("messages since the last report, oldest first (slow-consumer cycle policy) : Count : "),
            "QUE-1005 line: {l}"
        );
    }
    assert!(queue_exists(&conn, &queue).await, "a ring is never deleted");
    assert_not_detected(&broker, &queue);
}

/// sluice's client. max_depth 1,000 bytes with 100-byte bodies: the ring keeps exactly
/// ten, the newest.
async fn ring_keeps_the_newest_depth(shards: usize) {
    let broker = Cfg::default().start(shards);
    let conn = own_connect(&broker).await;
    let ch = conn.open_channel().await.unwrap();
    let queue = own_declare_bound(
        &ch,
        &unique("ring-depth"),
        false,
        &[(POLICY, Arg::Str("Cycle")), (MAX_DEPTH, Arg::Int(1000))],
        "ring.depth",
    )
    .await;
    let pch = conn.open_channel().await.unwrap();
    pch.confirm_select().await.unwrap();
    for i in 1..=50 {
        pch.basic_publish(
            "amq.topic",
            "ring.depth",
            false,
            NO_PROPERTIES,
            Bytes::from(body(i, 100)),
        )
        .await
        .unwrap();
    }
    assert!(
        pch.wait_for_confirms().await.unwrap(),
        "a publish was nacked"
    );
    let mut seqs = Vec::new();
    while let Some(m) = ch.basic_get(&queue, true).await.unwrap() {
        seqs.push(seq_of(&m.body));
    }
    assert_seqs("ring of 1,000 bytes", &seqs, 41..=50);
    wait_reported(&broker, &queue, "QUE-1005", "Discarded : ", 40, ACT).await;
}

/// amqprs. max_count 10 and a consumer with prefetch 5 that does not ack: its five
/// deliveries are never discarded — the ring keeps the newest five ready — and when its
/// channel closes they come back, redelivered, ahead of the newest five.
async fn ring_never_discards_unacked_deliveries(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut holder = Sub::manual(
        &broker,
        &unique("ring-unacked"),
        false,
        &[(POLICY, Arg::Str("cycle")), (MAX_COUNT, Arg::Int(10))],
        "ring.unacked",
        5,
    )
    .await;
    let (conn, mut pch) = confirming_publisher(&broker).await;

    publish_seqs(&pch, "amq.topic", "ring.unacked", 1..=5, 64).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(seq_of(&next_delivery(&mut holder.rx).await.body));
    }
    assert_seqs("deliveries held unacked", &held, 1..=5);

    publish_seqs(&pch, "amq.topic", "ring.unacked", 6..=100, 64).await;
    wait_all_acked(&mut pch, 1, 100).await;
    // Five unacked plus five ready: the bound of ten, with the unacked ones counted.
    pch.wait_message_count(&holder.queue, 5).await;
    wait_reported(&broker, &holder.queue, "QUE-1005", "Discarded : ", 90, ACT).await;
    assert_no_close(&mut holder.ch, "ring consumer");
    assert!(buffered(&mut holder.rx).is_empty(), "prefetch 5 exceeded");

    holder.ch.ch.clone().close().await.expect("channel.close");
    pch.wait_message_count(&holder.queue, 10).await;
    let got = get_all(&pch, &holder.queue).await;
    let want: Vec<(u32, bool)> = (1..=5)
        .map(|s| (s, true))
        .chain((96..=100).map(|s| (s, false)))
        .collect();
    assert_eq!(
        got, want,
        "after the close: the five unacked (redelivered) then the newest five"
    );
    assert!(queue_exists(&conn, &holder.queue).await);
}

/// amqprs. cycle with max_age 500 ms and no consumer: the ready messages are discarded
/// once older than that (QUE-1005 counts them); fresh ones are there to get.
async fn ring_discards_by_age(shards: usize) {
    let broker = Cfg::default().start(shards);
    let (_c, mut ch) = confirming_publisher(&broker).await;
    let queue = declare_bound(
        &ch,
        &unique("ring-age"),
        false,
        &[(POLICY, Arg::Str("cycle")), (MAX_AGE, Arg::Int(500))],
        "amq.topic",
        "ring.age",
    )
    .await;
    publish_seqs(&ch, "amq.topic", "ring.age", 1..=5, 64).await;
    wait_all_acked(&mut ch, 1, 5).await;
    wait_reported(&broker, &queue, "QUE-1005", "Discarded : ", 5, ACT).await;
    ch.wait_message_count(&queue, 0).await;

    publish_seqs(&ch, "amq.topic", "ring.age", 6..=8, 64).await;
    wait_all_acked(&mut ch, 6, 8).await;
    let seqs: Vec<u32> = get_all(&ch, &queue)
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_seqs("fresh messages in an age ring", &seqs, 6..=8);
    assert_not_detected(&broker, &queue);
}
