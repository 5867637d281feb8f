//! Flow control is per channel: a stopped channel leaves the rest of its connection alone,
//! a channel stopped by several queues waits for all of them, and a publisher that honours
//! the signal loses and duplicates nothing across block/unblock cycles.

use std::time::Duration;

use amqprs::channel::{BasicAckArguments, BasicQosArguments};
use bytes::Bytes;
use sluice::client::{ConsumeOptions, FlowOptions, QueueDeclareOptions, NO_PROPERTIES};

use crate::common::{next_delivery, unique, Broker};
use crate::support::*;

shard_tests!(
    blocked_channel_leaves_the_connection_alone,
    stopped_until_every_queue_is_underfull,
    nothing_lost_or_duplicated_across_block_cycles,
);

/// Channel A of a connection is stopped by an overfull queue. Meanwhile channel B of the
/// same connection publishes to another queue (all of it arrives) and channel C consumes
/// with prefetch 1 (each delivery needs the previous ack, so acks are processed too).
/// None of that releases A; draining its queue does.
async fn blocked_channel_leaves_the_connection_alone(shards: usize) {
    let broker = Broker::start(shards);
    let (observer, och) = conn_and_channel(&broker).await;
    let (qa, qb, qc) = (unique("indep-a"), unique("indep-b"), unique("indep-c"));
    declare_with(&och, &qa, capacity_args(1000, Some(500))).await;
    och.declare_queue(&qb).await;
    och.declare_queue(&qc).await;
    for n in 1..=5 {
        och.publish("", &qc, &numbered(n)).await;
    }

    let conn = broker.connect().await;
    let mut a = conn.channel().await;
    let mut b = conn.channel().await;
    let mut c = conn.channel().await;
    for n in 1..=11 {
        a.publish("", &qa, &numbered(n)).await;
    }
    assert!(!expect_flow(&mut a).await, "channel A is stopped");
    expect_channel_line(&broker, a.channel_id(), &enforced_queue(&qa));

    for n in 1..=20 {
        b.publish("", &qb, &numbered(n)).await;
    }
    och.wait_message_count(&qb, 20).await;

    c.basic_qos(BasicQosArguments::new(0, 1, false))
        .await
        .expect("basic.qos");
    let (_, mut deliveries) = c.consume_manual(&qc).await;
    for n in 1..=5 {
        let d = next_delivery(&mut deliveries).await;
        assert_eq!(number_of(&d.body), n, "deliveries in order");
        c.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("basic.ack");
    }
    och.wait_message_count(&qc, 0).await;

    assert_no_event(&mut b, Duration::from_millis(50), "channel B").await;
    assert_no_event(&mut c, Duration::from_millis(50), "channel C").await;
    assert_no_event(
        &mut a,
        Duration::from_millis(50),
        "channel A is still stopped",
    )
    .await;
    assert_eq!(purge(&och, &qa).await, 11);
    assert!(expect_flow(&mut a).await, "channel A is released");
    expect_line(&broker, &underfull_line(&qa, 0, 500));
    conn.close().await;
    observer.close().await;
}

/// One channel stopped by two overfull queues (CHN-1005 for each, one channel.flow):
/// the first queue going underfull does not release it, the second does.
async fn stopped_until_every_queue_is_underfull(shards: usize) {
    let broker = Broker::start(shards);
    let (observer, och) = conn_and_channel(&broker).await;
    let (q1, q2) = (unique("two-1"), unique("two-2"));
    declare_with(&och, &q1, capacity_args(500, None)).await;
    declare_with(&och, &q2, capacity_args(500, None)).await;
    let (conn, mut pch) = conn_and_channel(&broker).await;
    let channel = pch.channel_id();
    for n in 1..=6 {
        pch.publish("", &q1, &numbered(n)).await;
    }
    assert!(!expect_flow(&mut pch).await);
    expect_channel_line(&broker, channel, &enforced_queue(&q1));
    // Still publishing (within the grace), now to the second queue.
    for n in 1..=6 {
        pch.publish("", &q2, &numbered(n)).await;
    }
    expect_line(&broker, &overfull_line(&q2, 600, 500));
    expect_channel_line(&broker, channel, &enforced_queue(&q2));

    assert_eq!(purge(&och, &q1).await, 6);
    expect_line(&broker, &underfull_line(&q1, 0, 500));
    assert_no_event(
        &mut pch,
        Duration::from_millis(300),
        "still stopped by the second queue",
    )
    .await;
    assert!(
        conn_lines(&broker, REMOVED).is_empty(),
        "CHN-1006 too early"
    );

    assert_eq!(purge(&och, &q2).await, 6);
    expect_line(&broker, &underfull_line(&q2, 0, 500));
    assert!(expect_flow(&mut pch).await);
    expect_channel_line(&broker, channel, REMOVED);
    assert_eq!(conn_lines(&broker, REMOVED).len(), 1);
    conn.close().await;
    observer.close().await;
}

/// sluice's client, with confirms and `honour_flow`, publishes N numbered messages into
/// a queue of capacity 2,000 bytes drained by a slow consumer: every publish is acked, the
/// consumer gets exactly 1..=N in order, and the publisher was stopped at least once.
async fn nothing_lost_or_duplicated_across_block_cycles(shards: usize) {
    const N: u64 = 300;
    let broker = Broker::start(shards);
    let flow = FlowOptions {
        notify_period: Duration::from_secs(1),
        wait_failure: Duration::from_secs(15),
        honour_flow: true,
    };
    let consumer_conn = sluice_connect(&broker, flow).await;
    let cch = consumer_conn.open_channel().await.expect("channel");
    let q = unique("noloss");
    cch.queue_declare(
        &q,
        QueueDeclareOptions {
            arguments: sluice_capacity_args(2000, Some(1000)),
            ..Default::default()
        },
    )
    .await
    .expect("declare");
    cch.basic_qos(5, false).await.expect("qos");
    let mut consumer = cch
        .basic_consume(&q, ConsumeOptions::default())
        .await
        .expect("consume");
    let slow_consumer = tokio::spawn(async move {
        let mut got = Vec::new();
        while (got.len() as u64) < N {
            let d = consumer.recv().await.expect("delivery");
            got.push(number_of(&d.body));
            tokio::time::sleep(Duration::from_millis(2)).await;
            cch.basic_ack(d.delivery_tag, false).await.expect("ack");
        }
        (got, cch, consumer_conn)
    });

    let pconn = sluice_connect(&broker, flow).await;
    let pch = pconn.open_channel().await.expect("channel");
    pch.confirm_select().await.expect("confirm.select");
    // Confirms are awaited ten at a time, so the publisher sees channel.flow between
    // publishes instead of queueing all N before the first signal arrives.
    let mut confirms = Vec::new();
    for n in 1..=N {
        let c = pch
            .basic_publish_confirmed(
                "",
                q.as_str(),
                false,
                NO_PROPERTIES,
                Bytes::from(numbered(n)),
            )
            .await
            .unwrap_or_else(|e| panic!("publish {n}: {e}"));
        confirms.push((n, c));
        if n % 10 == 0 {
            for (n, c) in confirms.drain(..) {
                assert!(c.await.expect("confirm"), "publish {n} was nacked");
            }
        }
    }
    for (n, c) in confirms {
        assert!(c.await.expect("confirm"), "publish {n} was nacked");
    }
    let (got, cch, consumer_conn) = slow_consumer.await.expect("consumer task");
    assert_eq!(got, (1..=N).collect::<Vec<_>>(), "exactly 1..=N, in order");
    let stats = pch.flow_stats();
    assert!(
        stats.channel_flow_stops >= 1 && stats.waits >= 1,
        "the publisher was never held: {stats:?}"
    );
    assert_eq!(stats.timeouts, 0, "{stats:?}");
    assert!(
        !conn_lines(&broker, &enforced_queue(&q)).is_empty()
            && !conn_lines(&broker, REMOVED).is_empty(),
        "CHN-1005 / CHN-1006 not logged"
    );
    let info = cch
        .queue_declare(
            &q,
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .await
        .expect("passive declare");
    assert_eq!(info.message_count, 0, "nothing left over");
    pconn.close().await.expect("close publisher");
    consumer_conn.close().await.expect("close consumer");
}
