//! Exemptions from `delete`: a durable queue (a durable subscription) unless
//! include-durable is true; with include-persistent false, a queue holding a persistent
//! (delivery-mode 2) message — but not one holding only transient messages. An exempt
//! queue over a threshold is logged (SUB-1005) and left alone: queue and consumer carry on.

use amqprs::BasicProperties;
use bytes::Bytes;
use sluice::client::{NO_PROPERTIES, PERSISTENT_PROPERTIES};

use crate::common::{next_delivery, unique, Broker, Chan};
use crate::harness::*;

slow_tests!(
    durable_subscription_exempt_unless_included,
    persistent_messages_exempt_when_excluded
);

/// amqprs. Two durable queues with max_count 5 and never-acking consumers: the default
/// one is exempt (SUB-1005, still consuming afterwards), the include-durable one is
/// deleted.
async fn durable_subscription_exempt_unless_included(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut exempt = Sub::manual(
        &broker,
        &unique("durable-exempt"),
        true,
        &[(MAX_COUNT, Arg::Int(5))],
        "dur.tick",
        0,
    )
    .await;
    let mut included = Sub::manual(
        &broker,
        &unique("durable-included"),
        true,
        &[(MAX_COUNT, Arg::Int(5)), (INCLUDE_DURABLE, Arg::Bool(true))],
        "dur.tick",
        0,
    )
    .await;
    let (_p, pch) = publisher(&broker).await;
    publish_seqs(&pch, "amq.topic", "dur.tick", 1..=10, 64).await;

    // Included: deleted as any subscription.
    assert_slow_deleted(&broker, &mut included, "count").await;

    // Exempt: logged with its reason, and nothing else happens.
    let (_, line) = wait_line(&broker, &queue_line(&exempt.queue, "SUB-1005"), ACT).await;
    assert!(
        line.contains(&format!("Slow consumer exempt : queue={} ", exempt.queue))
            && line.contains("threshold=count (limit 5)")
            && line.ends_with("reason=durable subscription (include-durable is false)"),
        "SUB-1005 line: {line}"
    );
    assert_exempt_carries_on(&broker, &pch, &mut exempt, "dur.tick").await;
}

/// After SUB-1005: the consumer got all ten messages, is still open, receives the next
/// one and can ack; the queue exists and nothing was detected.
async fn assert_exempt_carries_on(broker: &Broker, pch: &Chan, sub: &mut Sub, key: &str) {
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(seq_of(&next_delivery(&mut sub.rx).await.body));
    }
    assert_seqs("exempt consumer", &got, 1..=10);
    publish_seqs(pch, "amq.topic", key, 11..=11, 64).await;
    let d = next_delivery(&mut sub.rx).await;
    assert_eq!(seq_of(&d.body), 11, "the exempt consumer still consumes");
    sub.ack_upto(d.delivery_tag).await;
    assert_no_close(&mut sub.ch, "exempt consumer");
    assert!(
        queue_exists(&sub.conn, &sub.queue).await,
        "exempt queue deleted"
    );
    assert_not_detected(broker, &sub.queue);
}

/// sluice's client publishes; include-persistent false, max_count 5, never-acking
/// consumers: the queue holding persistent messages is exempt, the one holding transient
/// messages is deleted.
async fn persistent_messages_exempt_when_excluded(shards: usize) {
    let broker = Cfg::default().start(shards);
    let args = [
        (MAX_COUNT, Arg::Int(5)),
        (INCLUDE_PERSISTENT, Arg::Bool(false)),
    ];
    let mut persistent = Sub::never_acking(&broker, &unique("pers"), &args, "pers.durable").await;
    let mut transient = Sub::never_acking(&broker, &unique("trans"), &args, "pers.transient").await;

    let pconn = own_connect(&broker).await;
    let pch = pconn.open_channel().await.unwrap();
    for i in 1..=10 {
        pch.basic_publish(
            "amq.topic",
            "pers.durable",
            false,
            PERSISTENT_PROPERTIES,
            Bytes::from(body(i, 64)),
        )
        .await
        .unwrap();
        pch.basic_publish(
            "amq.topic",
            "pers.transient",
            false,
            NO_PROPERTIES,
            Bytes::from(body(i, 64)),
        )
        .await
        .unwrap();
    }

    assert_slow_deleted(&broker, &mut transient, "count").await;

    let (_, line) = wait_line(&broker, &queue_line(&persistent.queue, "SUB-1005"), ACT).await;
    assert!(
        line.ends_with("reason=holds persistent messages (include-persistent is false)"),
        "SUB-1005 line: {line}"
    );
    // The persistent flag arrived intact.
    let mut got = Vec::new();
    for _ in 0..10 {
        let d = next_delivery(&mut persistent.rx).await;
        assert_eq!(d.props.delivery_mode(), Some(2));
        got.push(seq_of(&d.body));
    }
    assert_seqs("exempt consumer", &got, 1..=10);
    let (_q, qch) = publisher(&broker).await;
    qch.publish_props(
        "amq.topic",
        "pers.durable",
        BasicProperties::default().with_delivery_mode(2).finish(),
        &body(11, 64),
    )
    .await;
    let d = next_delivery(&mut persistent.rx).await;
    assert_eq!(seq_of(&d.body), 11, "the exempt consumer still consumes");
    persistent.ack_upto(d.delivery_tag).await;
    assert_no_close(&mut persistent.ch, "exempt consumer");
    assert!(queue_exists(&persistent.conn, &persistent.queue).await);
    assert_not_detected(&broker, &persistent.queue);
}
