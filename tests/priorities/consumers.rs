//! Item 12, RabbitMQ 3.10 semantics. Consumer priorities (`x-priority` on basic.consume):
//! the highest-priority consumers receive while they have credit (prefetch), in rotation
//! among equals; lower ones only while every higher one is blocked. Single active
//! consumer (`x-single-active-consumer` on queue.declare): only the earliest registered
//! consumer receives; when it is cancelled or its connection goes, the next in
//! registration order takes over (consumer priority does not choose it in 3.10), and the
//! gone consumer's unacknowledged messages are requeued for it. An exclusive consume on
//! such a queue is refused (`exclusive_consume_unavailable`: 403 in exclusive use).
//!
//! Each consumer's credit is at the queue before anything is published (`barrier`), and
//! acks are followed by a barrier too, so who receives what does not depend on timing.

use amqprs::channel::{BasicAckArguments, BasicCancelArguments};
use amqprs::{FieldTable, FieldValue};

use crate::common::{assert_no_delivery, unique, Broker};
use crate::support::*;

shard_tests!(
    higher_priority_consumers_first_while_they_have_credit,
    equal_priorities_take_turns,
    single_active_consumer_fails_over_on_cancel,
    single_active_consumer_fails_over_on_connection_close,
);

async fn higher_priority_consumers_first_while_they_have_credit(shards: usize) {
    let broker = Broker::start(shards);
    let consumers = broker.connect().await;
    let publisher = broker.connect().await;
    let p = publisher.channel().await;
    let q = unique("q-cprio");
    declare_ok(&p, &q, FieldTable::new()).await;
    // The low one registers first: registration order does not matter.
    let lo = consumers.channel().await;
    let mut lo_rx = consumer(&lo, &q, 10, Some(FieldValue::s(1))).await;
    let hi = consumers.channel().await;
    let mut hi_rx = consumer(&hi, &q, 2, Some(FieldValue::I(10))).await;

    for m in ["m0", "m1"] {
        publish(&p, &q, m, None).await;
    }
    let first = take(&mut hi_rx, 2).await;
    assert_eq!(bodies(&first), ["m0", "m1"]);
    assert_no_delivery(&mut lo_rx, QUIET).await;

    // The high one is blocked (two unacked, prefetch 2): the low one receives.
    for m in ["m2", "m3", "m4"] {
        publish(&p, &q, m, None).await;
    }
    assert_eq!(bodies(&take(&mut lo_rx, 3).await), ["m2", "m3", "m4"]);
    assert_no_delivery(&mut hi_rx, QUIET).await;

    // One ack gives the high one credit again: it is served first.
    hi.ch
        .basic_ack(BasicAckArguments::new(first[0].delivery_tag, false))
        .await
        .expect("basic.ack");
    barrier(&hi, &q).await;
    publish(&p, &q, "m5", None).await;
    assert_eq!(bodies(&take(&mut hi_rx, 1).await), ["m5"]);
    assert_no_delivery(&mut lo_rx, QUIET).await;
    consumers.close().await;
    publisher.close().await;
}

async fn equal_priorities_take_turns(shards: usize) {
    let broker = Broker::start(shards);
    let consumers = broker.connect().await;
    let publisher = broker.connect().await;
    let p = publisher.channel().await;
    let q = unique("q-cprio-rr");
    declare_ok(&p, &q, FieldTable::new()).await;
    let lo = consumers.channel().await;
    let mut lo_rx = consumer(&lo, &q, 10, None).await;
    let a = consumers.channel().await;
    let mut a_rx = consumer(&a, &q, 10, Some(FieldValue::I(5))).await;
    let b = consumers.channel().await;
    let mut b_rx = consumer(&b, &q, 10, Some(FieldValue::l(5))).await;

    for i in 0..6 {
        publish(&p, &q, &format!("m{i}"), None).await;
    }
    let got_a = bodies(&take(&mut a_rx, 3).await);
    let got_b = bodies(&take(&mut b_rx, 3).await);
    let mut all: Vec<String> = got_a.iter().chain(&got_b).cloned().collect();
    all.sort();
    assert_eq!(all, ["m0", "m1", "m2", "m3", "m4", "m5"]);
    assert_no_delivery(&mut lo_rx, QUIET).await;
    assert_no_delivery(&mut a_rx, QUIET).await;
    assert_no_delivery(&mut b_rx, QUIET).await;
    consumers.close().await;
    publisher.close().await;
}

fn sac() -> FieldTable {
    table(&[("x-single-active-consumer", FieldValue::t(true))])
}

async fn single_active_consumer_fails_over_on_cancel(shards: usize) {
    let broker = Broker::start(shards);
    let publisher = broker.connect().await;
    let p = publisher.channel().await;
    let q = unique("q-sac-cancel");
    declare_ok(&p, &q, sac()).await;

    // Exclusive consume is refused on a single-active-consumer queue, even when empty.
    let mut ex = publisher.channel().await;
    let r = consume_with(&ex, &q, 1, FieldTable::new(), true).await;
    assert!(r.is_err(), "exclusive consume succeeded");
    let closed = expect_close(&mut ex).await;
    assert_eq!(
        (closed.0, closed.1.as_str()),
        (
            403,
            format!("ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use").as_str()
        )
    );

    let first = broker.connect().await;
    let a = first.channel().await;
    let (a_tag, mut a_rx) = consume_with(&a, &q, 10, FieldTable::new(), false)
        .await
        .expect("consume a");
    barrier(&a, &q).await;
    // A higher priority does not take over (RabbitMQ 3.10).
    let second = broker.connect().await;
    let b = second.channel().await;
    let mut b_rx = consumer(&b, &q, 10, Some(FieldValue::I(9))).await;

    for i in 0..3 {
        publish(&p, &q, &format!("m{i}"), None).await;
    }
    let got = take(&mut a_rx, 3).await;
    assert_eq!(bodies(&got), ["m0", "m1", "m2"]);
    assert_no_delivery(&mut b_rx, QUIET).await;
    a.ch.basic_ack(BasicAckArguments::new(got[0].delivery_tag, false))
        .await
        .expect("ack");

    // Cancelled: the next in registration order is active. m1 and m2 stay unacked on
    // a's channel (a cancel does not requeue), until it closes.
    a.ch.basic_cancel(BasicCancelArguments::new(&a_tag))
        .await
        .expect("basic.cancel");
    publish(&p, &q, "m3", None).await;
    assert_eq!(bodies(&take(&mut b_rx, 1).await), ["m3"]);
    assert_no_delivery(&mut b_rx, QUIET).await;
    a.ch.close().await.expect("channel.close");
    let back = take(&mut b_rx, 2).await;
    assert_eq!(bodies(&back), ["m1", "m2"]);
    assert!(back.iter().all(|d| d.redelivered));
    first.close().await;
    second.close().await;
    publisher.close().await;
}

async fn single_active_consumer_fails_over_on_connection_close(shards: usize) {
    let broker = Broker::start(shards);
    let publisher = broker.connect().await;
    let p = publisher.channel().await;
    let q = unique("q-sac-close");
    declare_ok(&p, &q, sac()).await;
    let conns = [
        broker.connect().await,
        broker.connect().await,
        broker.connect().await,
    ];
    let mut chans = Vec::new();
    let mut rxs = Vec::new();
    for c in &conns {
        let ch = c.channel().await;
        rxs.push(consumer(&ch, &q, 10, None).await);
        chans.push(ch);
    }

    for i in 0..3 {
        publish(&p, &q, &format!("m{i}"), None).await;
    }
    assert_eq!(bodies(&take(&mut rxs[0], 3).await), ["m0", "m1", "m2"]);
    assert_no_delivery(&mut rxs[1], QUIET).await;
    assert_no_delivery(&mut rxs[2], QUIET).await;

    // The active consumer's connection goes without acking: the second consumer gets
    // the three back, in order, and then the new ones; the third gets nothing.
    let [c0, c1, c2] = conns;
    c0.close().await;
    let back = take(&mut rxs[1], 3).await;
    assert_eq!(bodies(&back), ["m0", "m1", "m2"]);
    assert!(back.iter().all(|d| d.redelivered));
    publish(&p, &q, "m3", None).await;
    assert_eq!(bodies(&take(&mut rxs[1], 1).await), ["m3"]);
    assert_no_delivery(&mut rxs[2], QUIET).await;

    // And again: the third takes over with all four.
    c1.close().await;
    let back = take(&mut rxs[2], 4).await;
    assert_eq!(bodies(&back), ["m0", "m1", "m2", "m3"]);
    assert!(back.iter().all(|d| d.redelivered));
    c2.close().await;
    publisher.close().await;
}
