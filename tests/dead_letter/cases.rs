//! The dead-letter cases: each reason (rejected by reject and by nack, expired by
//! per-message and per-queue TTL, maxlen by drop-head and by reject-publish-dlx), the
//! routing-key override, the count of a repeated death, cycle detection and the RPC
//! reply timeout pattern; slow-consumer Cycle discards (only with
//! `x-slow-consumer-dead-letter`). With two shards the target queue is on the other shard.

use std::time::Duration;

use amqprs::channel::{BasicNackArguments, BasicRejectArguments};
use amqprs::{BasicProperties, FieldValue};

use crate::common::{next_delivery, Broker};
use crate::support::*;

shard_tests!(
    reject_without_requeue_dead_letters,
    nack_without_requeue_dead_letters,
    per_message_ttl_dead_letters_without_expiration,
    per_queue_ttl_dead_letters,
    max_length_drop_head_dead_letters_maxlen,
    reject_publish_dlx_dead_letters_the_refused_message,
    dead_letter_routing_key_overrides,
    death_count_increments_for_the_same_queue_and_reason,
    automatic_cycle_is_dropped,
    rpc_reply_times_out_to_the_requester,
    slow_consumer_cycle_discards_only_when_asked,
    slow_consumer_cycle_by_age_dead_letters_on_the_policy_tick,
    slow_consumer_dead_letter_must_be_a_boolean_and_equivalent,
);

/// How long "nothing more arrives" is watched.
const QUIET: Duration = Duration::from_millis(300);

/// basic.reject(requeue=false) into a direct DLX; no x-dead-letter-routing-key, so the
/// message keeps its routing key (the source queue's name, published through "").
async fn reject_without_requeue_dead_letters(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = source_and_target(shards);
    let x = crate::common::unique("dlx");
    exchange(&ch, &x, "direct").await;
    declare(&ch, &dst, table(&[])).await;
    bind(&ch, &dst, &x, &src).await;
    declare(&ch, &src, dlx(&x, None, &[])).await;

    let mut props = BasicProperties::default();
    props.with_correlation_id("c-1").with_message_type("t");
    ch.publish_props("", &src, props.finish(), b"m1").await;
    let (_, mut rx) = ch.consume_manual(&src).await;
    let d = next_delivery(&mut rx).await;
    ch.basic_reject(BasicRejectArguments::new(d.delivery_tag, false))
        .await
        .expect("basic.reject");

    let (ok, props, body) = ch.get_eventually(&dst, true).await;
    assert_eq!(body, b"m1");
    assert_eq!(ok.exchange(), &x, "delivered from the dead-letter exchange");
    assert_eq!(ok.routing_key(), &src, "the original routing key");
    assert_eq!(props.correlation_id().map(|s| s.as_str()), Some("c-1"));
    assert_eq!(props.message_type().map(|s| s.as_str()), Some("t"));
    assert_eq!(
        deaths(&props),
        vec![death(1, "rejected", &src, "", &[&src], None)]
    );
    assert_first_last(&props, ("rejected", &src, ""), ("rejected", &src, ""));
    assert_eq!(ch.message_count(&src).await, 0);
}

/// basic.nack(multiple, requeue=false) dead-letters every message it covers.
async fn nack_without_requeue_dead_letters(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = source_and_target(shards);
    declare(&ch, &dst, table(&[])).await;
    declare(&ch, &src, dlx("", Some(&dst), &[])).await;
    ch.publish("", &src, b"a").await;
    ch.publish("", &src, b"b").await;
    let (_, mut rx) = ch.consume_manual(&src).await;
    let _ = next_delivery(&mut rx).await;
    let second = next_delivery(&mut rx).await;
    ch.basic_nack(BasicNackArguments::new(second.delivery_tag, true, false))
        .await
        .expect("basic.nack");
    ch.wait_message_count(&dst, 2).await;
    for body in [&b"a"[..], b"b"] {
        let (ok, props, got) = ch.get_eventually(&dst, true).await;
        assert_eq!(got, body);
        assert_eq!(ok.exchange(), "");
        assert_eq!(ok.routing_key(), &dst);
        assert_eq!(
            deaths(&props),
            vec![death(1, "rejected", &src, "", &[&src], None)]
        );
    }
}

/// A message's own `expiration`: dead-lettered as expired, the property removed and kept
/// as `original-expiration`; the publisher's other headers stay.
async fn per_message_ttl_dead_letters_without_expiration(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = source_and_target(shards);
    declare(&ch, &dst, table(&[])).await;
    declare(&ch, &src, dlx("", Some(&dst), &[])).await;
    let mut props = BasicProperties::default();
    props
        .with_expiration("50")
        .with_headers(table(&[("app", s("kept"))]));
    ch.publish_props("", &src, props.finish(), b"ttl").await;

    let (_, props, body) = ch.get_eventually(&dst, true).await;
    assert_eq!(body, b"ttl");
    assert_eq!(props.expiration(), None, "expiration removed");
    assert_eq!(headers(&props).get("app"), Some(&V::Str("kept".into())));
    assert_eq!(
        deaths(&props),
        vec![death(1, "expired", &src, "", &[&src], Some("50"))]
    );
    assert_first_last(&props, ("expired", &src, ""), ("expired", &src, ""));
}

/// `x-message-ttl` on the queue: expired, no `original-expiration`.
async fn per_queue_ttl_dead_letters(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = source_and_target(shards);
    declare(&ch, &dst, table(&[])).await;
    declare(
        &ch,
        &src,
        dlx("", Some(&dst), &[("x-message-ttl", FieldValue::I(50))]),
    )
    .await;
    ch.publish("", &src, b"q-ttl").await;
    let (_, props, body) = ch.get_eventually(&dst, true).await;
    assert_eq!(body, b"q-ttl");
    assert_eq!(
        deaths(&props),
        vec![death(1, "expired", &src, "", &[&src], None)]
    );
    assert_eq!(ch.message_count(&src).await, 0);
}

/// `x-max-length` 1 drop-head: the older message is dead-lettered with reason maxlen.
async fn max_length_drop_head_dead_letters_maxlen(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = source_and_target(shards);
    declare(&ch, &dst, table(&[])).await;
    declare(
        &ch,
        &src,
        dlx("", Some(&dst), &[("x-max-length", FieldValue::I(1))]),
    )
    .await;
    ch.publish("", &src, b"old").await;
    ch.publish("", &src, b"new").await;
    let (_, props, body) = ch.get_eventually(&dst, true).await;
    assert_eq!(body, b"old");
    assert_eq!(
        deaths(&props),
        vec![death(1, "maxlen", &src, "", &[&src], None)]
    );
    let (_, _, kept) = ch.get_eventually(&src, true).await;
    assert_eq!(kept, b"new");
}

/// `x-overflow = reject-publish-dlx`: the refused (new) message is dead-lettered; the
/// queue keeps the old one.
async fn reject_publish_dlx_dead_letters_the_refused_message(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = source_and_target(shards);
    declare(&ch, &dst, table(&[])).await;
    declare(
        &ch,
        &src,
        dlx(
            "",
            Some(&dst),
            &[
                ("x-max-length", FieldValue::I(1)),
                ("x-overflow", s("reject-publish-dlx")),
            ],
        ),
    )
    .await;
    ch.publish("", &src, b"first").await;
    ch.publish("", &src, b"refused").await;
    let (_, props, body) = ch.get_eventually(&dst, true).await;
    assert_eq!(body, b"refused");
    assert_eq!(
        deaths(&props),
        vec![death(1, "maxlen", &src, "", &[&src], None)]
    );
    assert_eq!(ch.message_count(&src).await, 1);
    let (_, _, kept) = ch.get_eventually(&src, true).await;
    assert_eq!(kept, b"first");
}

/// `x-dead-letter-routing-key` replaces the routing key; x-death keeps the original.
async fn dead_letter_routing_key_overrides(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = source_and_target(shards);
    let x = crate::common::unique("dlx-topic");
    exchange(&ch, &x, "topic").await;
    declare(&ch, &dst, table(&[])).await;
    bind(&ch, &dst, &x, "dead.#").await;
    declare(&ch, &src, dlx(&x, Some("dead.letters"), &[])).await;
    ch.publish("", &src, b"m").await;
    let (_, mut rx) = ch.consume_manual(&src).await;
    let d = next_delivery(&mut rx).await;
    ch.basic_reject(BasicRejectArguments::new(d.delivery_tag, false))
        .await
        .expect("basic.reject");
    let (ok, props, _) = ch.get_eventually(&dst, true).await;
    assert_eq!(ok.exchange(), &x);
    assert_eq!(ok.routing_key(), "dead.letters");
    assert_eq!(
        deaths(&props),
        vec![death(1, "rejected", &src, "", &[&src], None)]
    );
}

/// A queue dead-lettering to itself through "": rejected twice, the one x-death entry
/// counts 2 (a rejection is no automatic cycle). Then rejected into another queue with
/// a per-queue TTL that expires it back: two entries, most recent first.
async fn death_count_increments_for_the_same_queue_and_reason(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, _) = source_and_target(shards);
    declare(&ch, &src, dlx("", Some(&src), &[])).await;
    ch.publish("", &src, b"again").await;
    let (_, mut rx) = ch.consume_manual(&src).await;
    let first = next_delivery(&mut rx).await;
    assert!(first.props.headers().is_none());
    ch.basic_reject(BasicRejectArguments::new(first.delivery_tag, false))
        .await
        .expect("basic.reject");
    let second = next_delivery(&mut rx).await;
    assert_eq!(second.exchange, "");
    assert_eq!(
        deaths(&second.props),
        vec![death(1, "rejected", &src, "", &[&src], None)]
    );
    ch.basic_reject(BasicRejectArguments::new(second.delivery_tag, false))
        .await
        .expect("basic.reject");
    let third = next_delivery(&mut rx).await;
    assert_eq!(third.body, b"again");
    assert_eq!(
        deaths(&third.props),
        vec![death(2, "rejected", &src, "", &[&src], None)]
    );
    assert_first_last(&third.props, ("rejected", &src, ""), ("rejected", &src, ""));
    ch.basic_ack(amqprs::channel::BasicAckArguments::new(
        third.delivery_tag,
        false,
    ))
    .await
    .expect("basic.ack");
}

/// An expired message whose DLX routes back to its own queue is dropped there (an
/// automatic cycle), while the other queue the fanout DLX reaches gets it once.
async fn automatic_cycle_is_dropped(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, observer) = source_and_target(shards);
    let x = crate::common::unique("dlx-fan");
    exchange(&ch, &x, "fanout").await;
    declare(&ch, &observer, table(&[])).await;
    declare(
        &ch,
        &src,
        dlx(&x, None, &[("x-message-ttl", FieldValue::I(50))]),
    )
    .await;
    bind(&ch, &src, &x, "").await;
    bind(&ch, &observer, &x, "").await;
    ch.publish("", &src, b"loop").await;
    ch.wait_message_count(&observer, 1).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(ch.message_count(&observer).await, 1, "dead-lettered once");
    assert_eq!(ch.message_count(&src).await, 0, "not back in its own queue");
    let (_, props, _) = ch.get_eventually(&observer, true).await;
    assert_eq!(
        deaths(&props),
        vec![death(1, "expired", &src, "", &[&src], None)]
    );
}

/// The RPC timeout pattern: the reply queue holds replies with a per-message TTL and
/// dead-letters them to a timeout queue the requester consumes; an unclaimed reply
/// reaches the requester there, with its correlation id and why it died.
async fn rpc_reply_times_out_to_the_requester(shards: usize) {
    let broker = Broker::start(shards);
    let requester = broker.connect().await;
    let server = broker.connect().await;
    let rch = requester.channel().await;
    let sch = server.channel().await;
    let (reply_queue, timeouts) = source_and_target(shards);
    declare(&rch, &timeouts, table(&[])).await;
    declare(&rch, &reply_queue, dlx("", Some(&timeouts), &[])).await;
    let (_, mut rx) = rch.consume_auto(&timeouts).await;

    let mut props = BasicProperties::default();
    props.with_correlation_id("req-42").with_expiration("100");
    sch.publish_props("", &reply_queue, props.finish(), b"late reply")
        .await;

    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body, b"late reply");
    assert_eq!(d.routing_key, timeouts);
    assert_eq!(d.props.correlation_id().map(|s| s.as_str()), Some("req-42"));
    assert_eq!(d.props.expiration(), None);
    assert_eq!(
        deaths(&d.props),
        vec![death(
            1,
            "expired",
            &reply_queue,
            "",
            &[&reply_queue],
            Some("100")
        )]
    );
    assert_eq!(rch.message_count(&reply_queue).await, 0);
}

/// Two slow-consumer Cycle rings of 2 messages bound to the same topic key, both with a
/// DLX to one queue: only the one declared with `x-slow-consumer-dead-letter = true`
/// dead-letters what its ring discards (reason maxlen); the default is off.
async fn slow_consumer_cycle_discards_only_when_asked(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (ring, dst) = source_and_target(shards);
    let plain_ring = name_on("dl-ring-off", 0, shards);
    let key = crate::common::unique("cyc");
    declare(&ch, &dst, table(&[])).await;
    let ring_args = |on: bool| {
        let mut more = vec![
            ("x-slow-consumer-policy", s("cycle")),
            ("x-slow-consumer-max-count", FieldValue::I(2)),
        ];
        if on {
            more.push(("x-slow-consumer-dead-letter", FieldValue::t(true)));
        }
        dlx("", Some(&dst), &more)
    };
    declare(&ch, &ring, ring_args(true)).await;
    declare(&ch, &plain_ring, ring_args(false)).await;
    bind(&ch, &ring, "amq.topic", &key).await;
    bind(&ch, &plain_ring, "amq.topic", &key).await;
    for body in ["m1", "m2", "m3"] {
        ch.publish("amq.topic", &key, body.as_bytes()).await;
    }
    ch.wait_message_count(&ring, 2).await;
    ch.wait_message_count(&plain_ring, 2).await;
    ch.wait_message_count(&dst, 1).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(ch.message_count(&dst).await, 1, "only the ring that asked");
    let (ok, props, body) = ch.get_eventually(&dst, true).await;
    assert_eq!(body, b"m1");
    assert_eq!(ok.routing_key(), &dst);
    assert_eq!(
        deaths(&props),
        vec![death(1, "maxlen", &ring, "amq.topic", &[&key], None)]
    );
}

/// A Cycle ring bounded by age (`x-slow-consumer-max-age`) discards on the queue's
/// periodic policy check, not on an enqueue: those discards are dead-lettered too.
async fn slow_consumer_cycle_by_age_dead_letters_on_the_policy_tick(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (ring, dst) = source_and_target(shards);
    let key = crate::common::unique("cyc-age");
    declare(&ch, &dst, table(&[])).await;
    declare(
        &ch,
        &ring,
        dlx(
            "",
            Some(&dst),
            &[
                ("x-slow-consumer-policy", s("cycle")),
                ("x-slow-consumer-max-age", FieldValue::I(200)),
                ("x-slow-consumer-dead-letter", FieldValue::t(true)),
            ],
        ),
    )
    .await;
    bind(&ch, &ring, "amq.topic", &key).await;
    ch.publish("amq.topic", &key, b"aged").await;
    let (_, props, body) = ch.get_eventually(&dst, true).await;
    assert_eq!(body, b"aged");
    assert_eq!(
        deaths(&props),
        vec![death(1, "maxlen", &ring, "amq.topic", &[&key], None)]
    );
    assert_eq!(ch.message_count(&ring).await, 0);
}

/// `x-slow-consumer-dead-letter` is sluice's own argument: a non-boolean is a 406 with
/// sluice's text, and a redeclare that changes it is 406 inequivalent.
async fn slow_consumer_dead_letter_must_be_a_boolean_and_equivalent(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let (q, _) = source_and_target(shards);
    let mut ch = conn.channel().await;
    let bad = table(&[("x-slow-consumer-dead-letter", s("yes"))]);
    let r = ch
        .ch
        .queue_declare(
            amqprs::channel::QueueDeclareArguments::new(&q)
                .arguments(bad)
                .finish(),
        )
        .await;
    assert!(r.is_err());
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - invalid arg 'x-slow-consumer-dead-letter': expected a boolean, got 'yes'"
    );

    let mut ch = conn.channel().await;
    declare(
        &ch,
        &q,
        table(&[("x-slow-consumer-dead-letter", FieldValue::t(true))]),
    )
    .await;
    let r = ch
        .ch
        .queue_declare(amqprs::channel::QueueDeclareArguments::new(&q).finish())
        .await;
    assert!(r.is_err());
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 406);
    assert!(
        text.starts_with("PRECONDITION_FAILED - inequivalent arg 'x-slow-consumer-dead-letter'"),
        "{text}"
    );
}
