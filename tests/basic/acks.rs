//! Ack, nack, reject, recover and requeue, unknown tags, and unacked messages of closed channels.

use std::collections::BTreeSet;
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicNackArguments, BasicRejectArguments, QueueDeleteArguments,
};

use crate::common::{assert_no_delivery, next_delivery, unique, Broker, Event};

shard_tests!(
    ack_nack_reject_requeue,
    ack_unknown_tag,
    unacked_get_requeued_on_channel_close,
    recover_redelivers,
    unacked_requeued_when_consumer_connection_drops,
    ack_all_with_tag_zero,
    reject_and_nack_unknown_tag,
    requeue_preserves_order,
    ack_after_queue_deleted,
    ack_multiple_spans_queues,
);

async fn ack_nack_reject_requeue(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-acks");
    ch.declare_queue(&q).await;
    for i in 0..4 {
        ch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    ch.wait_message_count(&q, 4).await;
    let cch = conn.channel().await;
    let (_, mut rx) = cch.consume_manual(&q).await;
    let mut first = Vec::new();
    for i in 0..4 {
        let d = next_delivery(&mut rx).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
        assert!(!d.redelivered, "first delivery flagged redelivered");
        first.push(d.delivery_tag);
    }

    // reject m0 with requeue: it comes back, flagged.
    cch.basic_reject(BasicRejectArguments::new(first[0], true))
        .await
        .unwrap();
    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body, b"m0");
    assert!(d.redelivered, "requeued message not flagged redelivered");
    let m0_again = d.delivery_tag;

    // nack m1 and m2 in one go (multiple up to m2's tag) with requeue.
    cch.basic_nack(BasicNackArguments::new(first[2], true, true))
        .await
        .unwrap();
    let mut back = BTreeSet::new();
    let mut redelivered_tags = Vec::new();
    for _ in 0..2 {
        let d = next_delivery(&mut rx).await;
        assert!(d.redelivered, "nacked message not flagged redelivered");
        back.insert(String::from_utf8(d.body).unwrap());
        redelivered_tags.push(d.delivery_tag);
    }
    assert_eq!(back, BTreeSet::from(["m1".to_string(), "m2".to_string()]));
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;

    // reject m3 without requeue: gone. nack m0 without requeue: gone.
    cch.basic_reject(BasicRejectArguments::new(first[3], false))
        .await
        .unwrap();
    cch.basic_nack(BasicNackArguments::new(m0_again, false, false))
        .await
        .unwrap();
    // ack the rest with one multiple ack.
    cch.basic_ack(BasicAckArguments::new(
        *redelivered_tags.iter().max().unwrap(),
        true,
    ))
    .await
    .unwrap();
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    ch.wait_message_count(&q, 0).await;
    // Closing the consumer channel must not bring anything back.
    cch.ch.clone().close().await.unwrap();
    ch.wait_message_count(&q, 0).await;
}

async fn ack_unknown_tag(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    ch.basic_ack(BasicAckArguments::new(999, false))
        .await
        .unwrap();
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 406);
    assert_eq!(text, "PRECONDITION_FAILED - unknown delivery tag 999");
    // A tag acked twice is unknown the second time.
    let mut ch = conn.channel().await;
    let q = unique("q-double-ack");
    ch.declare_queue(&q).await;
    ch.publish("", &q, b"x").await;
    let (get_ok, _, _) = ch.get_eventually(&q, false).await;
    let tag = get_ok.delivery_tag();
    ch.basic_ack(BasicAckArguments::new(tag, false))
        .await
        .unwrap();
    ch.basic_ack(BasicAckArguments::new(tag, false))
        .await
        .unwrap();
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - unknown delivery tag {tag}")
    );
    assert!(conn.conn.is_open());
}

async fn unacked_get_requeued_on_channel_close(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-requeue");
    ch.declare_queue(&q).await;
    ch.publish("", &q, b"keep me").await;
    let getter = conn.channel().await;
    let (get_ok, _, _) = getter.get_eventually(&q, false).await;
    assert!(!get_ok.redelivered());
    getter.ch.clone().close().await.unwrap();
    let (get_ok, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"keep me");
    assert!(
        get_ok.redelivered(),
        "requeued-on-close message not flagged redelivered"
    );
}

async fn recover_redelivers(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-recover");
    ch.declare_queue(&q).await;
    let (_, mut rx) = ch.consume_manual(&q).await;
    ch.publish("", &q, b"a").await;
    ch.publish("", &q, b"b").await;
    for body in [b"a", b"b"] {
        let d = next_delivery(&mut rx).await;
        assert_eq!(&d.body, body);
        assert!(!d.redelivered);
    }
    ch.basic_recover(true).await.unwrap();
    let mut again = BTreeSet::new();
    for _ in 0..2 {
        let d = next_delivery(&mut rx).await;
        assert!(d.redelivered, "recovered message not flagged redelivered");
        again.insert(d.body);
        ch.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .unwrap();
    }
    assert_eq!(again, BTreeSet::from([b"a".to_vec(), b"b".to_vec()]));
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
}

async fn unacked_requeued_when_consumer_connection_drops(shards: usize) {
    let broker = Broker::start(shards);
    let q = unique("q-orphaned");
    let first = broker.connect().await;
    let fch = first.channel().await;
    fch.declare_queue(&q).await;
    let (_, mut frx) = fch.consume_manual(&q).await;
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    for i in 0..5 {
        pch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    let mut tags = Vec::new();
    for i in 0..5 {
        let d = next_delivery(&mut frx).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
        tags.push(d.delivery_tag);
    }
    // Ack two, leave three unacked, then the consumer's connection goes away.
    fch.basic_ack(BasicAckArguments::new(tags[1], true))
        .await
        .unwrap();
    first.close().await;

    let second = broker.connect().await;
    let sch = second.channel().await;
    let (_, mut srx) = sch.consume_manual(&q).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        let d = next_delivery(&mut srx).await;
        assert!(
            d.redelivered,
            "message requeued from a closed connection not flagged"
        );
        got.push(String::from_utf8(d.body).unwrap());
    }
    got.sort();
    assert_eq!(
        got,
        ["m2", "m3", "m4"],
        "acked messages came back or unacked ones were lost"
    );
    assert_no_delivery(&mut srx, Duration::from_millis(200)).await;
}

/// basic.ack with multiple=1 and delivery-tag 0 acknowledges everything outstanding.
async fn ack_all_with_tag_zero(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-ack-all");
    ch.declare_queue(&q).await;
    let (_, mut rx) = ch.consume_manual(&q).await;
    for i in 0..5 {
        ch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    for _ in 0..5 {
        next_delivery(&mut rx).await;
    }
    ch.basic_ack(BasicAckArguments::new(0, true)).await.unwrap();
    // Nothing is outstanding any more: closing the channel requeues nothing.
    ch.ch.clone().close().await.unwrap();
    let ch2 = conn.channel().await;
    assert_eq!(
        ch2.message_count(&q).await,
        0,
        "ack of tag 0 (multiple) left messages unacked"
    );
}

async fn reject_and_nack_unknown_tag(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    ch.basic_reject(BasicRejectArguments::new(77, true))
        .await
        .unwrap();
    let (code, text) = ch.expect_close().await;
    assert_eq!(
        (code, text.as_str()),
        (406, "PRECONDITION_FAILED - unknown delivery tag 77")
    );
    let mut ch = conn.channel().await;
    ch.basic_nack(BasicNackArguments::new(78, false, true))
        .await
        .unwrap();
    let (code, text) = ch.expect_close().await;
    assert_eq!(
        (code, text.as_str()),
        (406, "PRECONDITION_FAILED - unknown delivery tag 78")
    );
}

/// Messages requeued by a channel close come back in their original order, flagged.
async fn requeue_preserves_order(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-order-requeue");
    ch.declare_queue(&q).await;
    for i in 0..5 {
        ch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    ch.wait_message_count(&q, 5).await;
    let taker = conn.channel().await;
    for i in 0..5 {
        let (_, _, body) = taker.get(&q, false).await.expect("get-ok");
        assert_eq!(body, format!("m{i}").as_bytes());
    }
    taker.ch.clone().close().await.unwrap();
    ch.wait_message_count(&q, 5).await;
    for i in 0..5 {
        let (get_ok, _, body) = ch.get(&q, true).await.expect("requeued message");
        assert_eq!(
            body,
            format!("m{i}").as_bytes(),
            "requeued messages out of order"
        );
        assert!(get_ok.redelivered());
    }
}

/// Acknowledging deliveries whose queue has since been deleted is not an error.
async fn ack_after_queue_deleted(shards: usize) {
    let broker = Broker::start(shards);
    let sub = broker.connect().await;
    let mut sch = sub.channel().await;
    let q = unique("q-gone");
    sch.declare_queue(&q).await;
    let (tag, mut rx) = sch.consume_manual(&q).await;
    for i in 0..3 {
        sch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    let mut last = 0;
    for _ in 0..3 {
        last = next_delivery(&mut rx).await.delivery_tag;
    }
    let admin = broker.connect().await;
    let ach = admin.channel().await;
    let deleted = ach
        .queue_delete(QueueDeleteArguments::new(&q))
        .await
        .unwrap();
    assert_eq!(deleted, Some(0), "unacked messages counted as ready");
    match sch.next_event().await {
        Event::Cancel { consumer_tag } => assert_eq!(consumer_tag, tag),
        other => panic!("expected basic.cancel, got {other:?}"),
    }
    sch.basic_ack(BasicAckArguments::new(last, true))
        .await
        .unwrap();
    // A synchronous round trip proves the channel survived the ack.
    sch.declare_server_named().await;
    assert!(
        sch.events.try_recv().is_err(),
        "the ack provoked a channel event"
    );
}

/// A multiple ack settles every delivery up to its tag on the channel, whichever queue (and
/// shard) each came from; the rest are requeued to their own queues when the channel closes.
async fn ack_multiple_spans_queues(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queues: Vec<String> = (0..4).map(|_| unique("q-span")).collect();
    let mut rxs = Vec::new();
    for q in &queues {
        ch.declare_queue(q).await;
        rxs.push(ch.consume_manual(q).await.1);
    }
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    for i in 0..10 {
        for q in &queues {
            pch.publish("", q, format!("{i}").as_bytes()).await;
        }
    }
    // (tag, queue index)
    let mut deliveries = Vec::new();
    for (qi, rx) in rxs.iter_mut().enumerate() {
        for _ in 0..10 {
            deliveries.push((next_delivery(rx).await.delivery_tag, qi));
        }
    }
    deliveries.sort();
    let tags: Vec<u64> = deliveries.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        tags,
        (1..=40).collect::<Vec<u64>>(),
        "channel delivery tags"
    );
    let cut = 23u64;
    ch.basic_ack(BasicAckArguments::new(cut, true))
        .await
        .unwrap();
    ch.ch.clone().close().await.unwrap();
    let check = conn.channel().await;
    for (qi, q) in queues.iter().enumerate() {
        let unacked = deliveries
            .iter()
            .filter(|(t, i)| *i == qi && *t > cut)
            .count() as u32;
        check.wait_message_count(q, unacked).await;
    }
}
