//! The basic class end to end through amqprs (plus one raw-socket check): ordering, prefetch,
//! acknowledgements, get, recover, returns, publisher confirms, transactions, cancel
//! notification, properties round trip, and message/queue expiry.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use amqprs::channel::{
    BasicAckArguments, BasicCancelArguments, BasicNackArguments, BasicPublishArguments,
    BasicQosArguments, BasicRejectArguments, ConfirmSelectArguments, QueueDeclareArguments,
    QueueDeleteArguments,
};
use amqprs::{
    BasicProperties, ByteArray, DecimalValue, FieldArray, FieldTable, FieldValue, LongStr,
};
use common::wire::{self, Props, Val};
use common::{assert_no_delivery, next_delivery, unique, Broker, Event};

shard_tests!(
    publish_consume_order,
    prefetch_count_respected,
    ack_nack_reject_requeue,
    ack_unknown_tag,
    get_and_get_empty,
    unacked_get_requeued_on_channel_close,
    recover_redelivers,
    mandatory_unroutable_returned,
    publisher_confirms,
    tx_publish_rollback_commit,
    tx_ack_rollback_commit,
    consumer_cancel,
    queue_delete_notifies_consumer,
    exclusive_consumer,
    properties_round_trip,
    properties_bytes_unchanged,
    per_message_expiration,
    queue_message_ttl,
    queue_expires,
    unacked_requeued_when_consumer_connection_drops,
    confirm_follows_return,
    empty_body,
    frame_boundary_body_sizes,
    interleaved_channels_content,
    missing_exchange_and_queue,
    many_channels_one_connection,
    ack_all_with_tag_zero,
    reject_and_nack_unknown_tag,
    requeue_preserves_order,
    tx_and_confirm_modes_exclusive,
    cancel_unknown_consumer_tag,
    auto_delete_when_consumer_connection_drops,
    exclusive_consumer_released_with_its_connection,
    x_expires_not_while_in_use,
    ack_after_queue_deleted,
    confirms_cover_every_queue,
    publishes_before_abrupt_disconnect_are_kept,
    ack_multiple_spans_queues,
);

async fn publish_consume_order(shards: usize) {
    let broker = Broker::start(shards);
    let sub = broker.connect().await;
    let pubc = broker.connect().await;
    let sch = sub.channel().await;
    let q = unique("q-order");
    sch.declare_queue(&q).await;
    let (_, mut rx) = sch.consume_auto(&q).await;
    let pch = pubc.channel().await;
    const N: u64 = 1000;
    for i in 0..N {
        pch.publish("", &q, format!("seq-{i}").as_bytes()).await;
    }
    let mut last_tag = 0;
    for i in 0..N {
        let d = next_delivery(&mut rx).await;
        assert_eq!(
            String::from_utf8_lossy(&d.body),
            format!("seq-{i}"),
            "out of order"
        );
        assert!(d.delivery_tag > last_tag, "delivery tags not increasing");
        assert!(!d.redelivered);
        last_tag = d.delivery_tag;
    }
    assert_eq!(last_tag, N, "delivery tags on a fresh channel run 1..=N");
    assert_no_delivery(&mut rx, Duration::from_millis(200)).await;
}

async fn prefetch_count_respected(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-prefetch");
    ch.declare_queue(&q).await;
    for i in 0..30 {
        ch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    ch.wait_message_count(&q, 30).await;

    let cch = conn.channel().await;
    cch.basic_qos(BasicQosArguments::new(0, 10, false))
        .await
        .unwrap();
    let (_, mut rx) = cch.consume_manual(&q).await;
    let mut tags = Vec::new();
    for i in 0..10 {
        let d = next_delivery(&mut rx).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
        tags.push(d.delivery_tag);
    }
    assert_no_delivery(&mut rx, Duration::from_millis(500)).await;

    // One ack frees exactly one slot.
    cch.basic_ack(BasicAckArguments::new(tags[0], false))
        .await
        .unwrap();
    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body, b"m10");
    tags.push(d.delivery_tag);
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;

    // A multiple ack frees all ten slots.
    cch.basic_ack(BasicAckArguments::new(*tags.last().unwrap(), true))
        .await
        .unwrap();
    for i in 11..21 {
        let d = next_delivery(&mut rx).await;
        assert_eq!(d.body, format!("m{i}").as_bytes());
    }
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
}

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

async fn get_and_get_empty(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-get");
    ch.declare_queue(&q).await;
    assert!(
        ch.get(&q, true).await.is_none(),
        "get on an empty queue returned a message"
    );
    for i in 0..3 {
        ch.publish("", &q, format!("m{i}").as_bytes()).await;
    }
    ch.wait_message_count(&q, 3).await;
    for i in 0..3u32 {
        let (get_ok, _, body) = ch.get(&q, false).await.expect("get-ok");
        assert_eq!(body, format!("m{i}").as_bytes());
        assert_eq!(get_ok.message_count(), 2 - i, "message-count after get {i}");
        assert!(!get_ok.redelivered());
        assert_eq!(get_ok.routing_key(), &q);
        ch.basic_ack(BasicAckArguments::new(get_ok.delivery_tag(), false))
            .await
            .unwrap();
    }
    assert!(ch.get(&q, true).await.is_none());
    ch.wait_message_count(&q, 0).await;
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

async fn mandatory_unroutable_returned(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let q = ch.declare_server_named().await;
    let mandatory = |x: &str, k: &str| BasicPublishArguments::new(x, k).mandatory(true).finish();
    // Routable: no return.
    ch.basic_publish(
        BasicProperties::default(),
        b"routed".to_vec(),
        mandatory("", &q),
    )
    .await
    .unwrap();
    // Unroutable through amq.direct and through the default exchange.
    ch.basic_publish(
        BasicProperties::default(),
        b"lost-1".to_vec(),
        mandatory("amq.direct", "nobody"),
    )
    .await
    .unwrap();
    let missing = unique("missing");
    ch.basic_publish(
        BasicProperties::default(),
        b"lost-2".to_vec(),
        mandatory("", &missing),
    )
    .await
    .unwrap();
    for (exchange, key, body) in [
        ("amq.direct", "nobody", "lost-1"),
        ("", missing.as_str(), "lost-2"),
    ] {
        match ch.next_event().await {
            Event::Return {
                code,
                text,
                exchange: x,
                routing_key,
                body: b,
            } => {
                assert_eq!(code, 312);
                assert_eq!(text, "NO_ROUTE");
                assert_eq!(x, exchange);
                assert_eq!(routing_key, key);
                assert_eq!(b, body.as_bytes());
            }
            other => panic!("expected basic.return, got {other:?}"),
        }
    }
    let (_, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"routed");
    assert!(
        ch.events.try_recv().is_err(),
        "a routable mandatory message was returned"
    );
}

async fn publisher_confirms(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let q = unique("q-confirm");
    ch.declare_queue(&q).await;
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    const N: u64 = 200;
    for i in 0..N {
        // Every tenth message is unroutable; it is confirmed all the same.
        let key = if i % 10 == 9 {
            "nobody-home".to_string()
        } else {
            q.clone()
        };
        ch.publish("", &key, format!("c{i}").as_bytes()).await;
    }
    ch.wait_acked(N).await;
    // Confirmed means enqueued.
    assert_eq!(ch.message_count(&q).await, (N - N / 10) as u32);
    // No stray confirms afterwards.
    if let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(200), ch.events.recv()).await {
        panic!("unexpected event after all confirms: {ev:?}");
    }
}

async fn tx_publish_rollback_commit(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-tx");
    let watcher = conn.channel().await;
    watcher.declare_queue(&q).await;
    let (_, mut rx) = watcher.consume_auto(&q).await;

    let tx = conn.channel().await;
    tx.tx_select().await.unwrap();
    tx.publish("", &q, b"rolled-back-1").await;
    tx.publish("", &q, b"rolled-back-2").await;
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    tx.tx_rollback().await.unwrap();
    tx.publish("", &q, b"committed-1").await;
    tx.publish("", &q, b"committed-2").await;
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    tx.tx_commit().await.unwrap();
    assert_eq!(next_delivery(&mut rx).await.body, b"committed-1");
    assert_eq!(next_delivery(&mut rx).await.body, b"committed-2");
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    // An empty commit is fine, and the channel stays transactional.
    tx.tx_commit().await.unwrap();
    tx.publish("", &q, b"later").await;
    assert_no_delivery(&mut rx, Duration::from_millis(200)).await;
    tx.tx_commit().await.unwrap();
    assert_eq!(next_delivery(&mut rx).await.body, b"later");
}

async fn tx_ack_rollback_commit(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-txack");
    ch.declare_queue(&q).await;
    ch.publish("", &q, b"m").await;
    ch.wait_message_count(&q, 1).await;

    // Ack inside a rolled-back transaction: the ack never happened.
    let t1 = conn.channel().await;
    t1.tx_select().await.unwrap();
    let (get_ok, _, _) = t1.get(&q, false).await.expect("get-ok");
    t1.basic_ack(BasicAckArguments::new(get_ok.delivery_tag(), false))
        .await
        .unwrap();
    t1.tx_rollback().await.unwrap();
    t1.ch.clone().close().await.unwrap();
    ch.wait_message_count(&q, 1).await;

    // Ack inside a committed transaction: gone for good.
    let t2 = conn.channel().await;
    t2.tx_select().await.unwrap();
    let (get_ok, _, body) = t2.get_eventually(&q, false).await;
    assert_eq!(body, b"m");
    assert!(get_ok.redelivered());
    t2.basic_ack(BasicAckArguments::new(get_ok.delivery_tag(), false))
        .await
        .unwrap();
    t2.tx_commit().await.unwrap();
    t2.ch.clone().close().await.unwrap();
    assert_eq!(ch.message_count(&q).await, 0);
}

async fn consumer_cancel(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-cancel");
    ch.declare_queue(&q).await;
    let (tag, mut rx) = ch.consume_auto(&q).await;
    ch.publish("", &q, b"before").await;
    assert_eq!(next_delivery(&mut rx).await.body, b"before");
    let cancelled = ch
        .basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .unwrap();
    assert_eq!(cancelled, tag);
    ch.publish("", &q, b"after").await;
    ch.wait_message_count(&q, 1).await;
    let (_, _, body) = ch.get(&q, true).await.expect("message kept for later");
    assert_eq!(body, b"after");
}

async fn queue_delete_notifies_consumer(shards: usize) {
    let broker = Broker::start(shards);
    let sub = broker.connect().await;
    let admin = broker.connect().await;
    let mut sch = sub.channel().await;
    let q = unique("q-doomed");
    sch.declare_queue(&q).await;
    let (tag, _rx) = sch.consume_auto(&q).await;
    let ach = admin.channel().await;
    ach.queue_delete(QueueDeleteArguments::new(&q))
        .await
        .unwrap();
    match sch.next_event().await {
        Event::Cancel { consumer_tag } => assert_eq!(consumer_tag, tag),
        other => panic!("expected basic.cancel from the broker, got {other:?}"),
    }
    // The subscriber's channel survives the cancel.
    assert!(sch.ch.is_open());
    sch.declare_server_named().await;
}

async fn exclusive_consumer(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-exclusive-consumer");
    let text = format!("ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use");

    let a = conn.channel().await;
    a.declare_queue(&q).await;
    let (_tag, _rx) = a.consume_auto(&q).await;
    // Exclusive consume while another consumer exists.
    let mut b = conn.channel().await;
    let args = amqprs::channel::BasicConsumeArguments::new(&q, "")
        .exclusive(true)
        .finish();
    let r = b.basic_consume_rx(args).await;
    assert!(
        r.is_err(),
        "exclusive consume next to another consumer succeeded"
    );
    let (code, t) = b.expect_close().await;
    assert_eq!((code, t.as_str()), (403, text.as_str()));

    // Any consume while an exclusive consumer exists.
    let q2 = unique("q-exclusive-consumer");
    let text2 = format!("ACCESS_REFUSED - queue '{q2}' in vhost '/' in exclusive use");
    let c = conn.channel().await;
    c.declare_queue(&q2).await;
    let args = amqprs::channel::BasicConsumeArguments::new(&q2, "")
        .exclusive(true)
        .finish();
    let _rx2 = c
        .basic_consume_rx(args)
        .await
        .expect("exclusive consume on an idle queue");
    let mut d = conn.channel().await;
    let r = d
        .basic_consume_rx(amqprs::channel::BasicConsumeArguments::new(&q2, ""))
        .await;
    assert!(
        r.is_err(),
        "consume next to an exclusive consumer succeeded"
    );
    let (code, t) = d.expect_close().await;
    assert_eq!((code, t.as_str()), (403, text2.as_str()));
}

fn full_headers() -> FieldTable {
    let mut inner = FieldTable::new();
    inner.insert("depth".try_into().unwrap(), FieldValue::l(2));
    let mut deeper = FieldTable::new();
    deeper.insert(
        "leaf".try_into().unwrap(),
        FieldValue::S("bottom".try_into().unwrap()),
    );
    inner.insert("deeper".try_into().unwrap(), FieldValue::F(deeper));

    let array = FieldArray::try_from(vec![
        FieldValue::I(1),
        FieldValue::S("two".try_into().unwrap()),
        FieldValue::t(false),
        FieldValue::A(FieldArray::try_from(vec![FieldValue::d(3.5)]).unwrap()),
    ])
    .unwrap();

    let mut h = FieldTable::new();
    let mut put = |k: &str, v: FieldValue| {
        h.insert(k.try_into().unwrap(), v);
    };
    put("bool", FieldValue::t(true));
    put("i8", FieldValue::b(-5));
    put("u8", FieldValue::B(200));
    put("i16", FieldValue::s(-300));
    put("u16", FieldValue::u(60000));
    put("i32", FieldValue::I(-70000));
    put("u32", FieldValue::i(4_000_000_000));
    put("i64", FieldValue::l(-5_000_000_000));
    put("f32", FieldValue::f(1.5));
    put("f64", FieldValue::d(-2.25e100));
    put("decimal", FieldValue::D(DecimalValue::new(2, 12345)));
    put(
        "longstr",
        FieldValue::S(LongStr::try_from("a long string ✓").unwrap()),
    );
    put(
        "bytes",
        FieldValue::x(ByteArray::try_from(vec![0u8, 1, 2, 254, 255]).unwrap()),
    );
    put("array", FieldValue::A(array));
    put("timestamp", FieldValue::T(1_700_000_000));
    put("table", FieldValue::F(inner));
    put("void", FieldValue::V);
    h
}

/// A structural rendering of a field value with table keys sorted, for comparison.
fn canon(v: &FieldValue) -> String {
    match v {
        FieldValue::F(t) => canon_table(t),
        FieldValue::A(a) => {
            let items: Vec<FieldValue> = a.clone().into();
            format!(
                "A[{}]",
                items.iter().map(canon).collect::<Vec<_>>().join(",")
            )
        }
        FieldValue::f(x) => format!("f{:08x}", x.to_bits()),
        FieldValue::d(x) => format!("d{:016x}", x.to_bits()),
        other => format!("{other:?}"),
    }
}

fn canon_table(t: &FieldTable) -> String {
    let mut entries: Vec<(String, String)> = t
        .as_ref()
        .iter()
        .map(|(k, v)| (k.to_string(), canon(v)))
        .collect();
    entries.sort();
    format!(
        "F{{{}}}",
        entries
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    )
}

async fn properties_round_trip(shards: usize) {
    let broker = Broker::start(shards);
    let sub = broker.connect().await;
    let pubc = broker.connect().await;
    let sch = sub.channel().await;
    let q = unique("q-props");
    sch.declare_queue(&q).await;
    let (_, mut rx) = sch.consume_auto(&q).await;

    let props = BasicProperties::default()
        .with_content_type("application/x-test")
        .with_content_encoding("identity")
        .with_headers(full_headers())
        .with_delivery_mode(2)
        .with_priority(7)
        .with_correlation_id("corr-1")
        .with_reply_to("reply-queue")
        .with_expiration("600000")
        .with_message_id("msg-42")
        .with_timestamp(1_650_000_000)
        .with_message_type("kind")
        .with_user_id("guest")
        .with_app_id("itests")
        .with_cluster_id("cluster-x")
        .finish();
    let pch = pubc.channel().await;
    pch.publish_props("", &q, props.clone(), b"payload").await;
    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body, b"payload");
    let got = &d.props;
    assert_eq!(got.content_type(), props.content_type());
    assert_eq!(got.content_encoding(), props.content_encoding());
    assert_eq!(got.delivery_mode(), Some(2));
    assert_eq!(got.priority(), Some(7));
    assert_eq!(got.correlation_id(), props.correlation_id());
    assert_eq!(got.reply_to(), props.reply_to());
    assert_eq!(got.expiration(), props.expiration());
    assert_eq!(got.message_id(), props.message_id());
    assert_eq!(got.timestamp(), Some(1_650_000_000));
    assert_eq!(got.message_type(), props.message_type());
    assert_eq!(got.user_id(), props.user_id());
    assert_eq!(got.app_id(), props.app_id());
    assert_eq!(got.cluster_id(), props.cluster_id());
    assert_eq!(
        canon_table(got.headers().expect("headers missing")),
        canon_table(&full_headers())
    );

    // A message with no properties at all stays that way.
    pch.publish("", &q, b"bare").await;
    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body, b"bare");
    assert!(d.props.headers().is_none() && d.props.content_type().is_none());
    assert!(d.props.delivery_mode().is_none() && d.props.timestamp().is_none());
}

/// The raw content header a consumer receives is byte-for-byte the one published (the
/// design relays properties without re-encoding them).
async fn properties_bytes_unchanged(shards: usize) {
    let broker = Broker::start(shards);
    let mut sub = broker.raw();
    sub.channel_open(1);
    let q = sub.queue_declare(1, "", false, true, false);
    sub.basic_consume(1, &q, true);
    let headers = vec![
        ("t".into(), Val::Bool(true)),
        ("b".into(), Val::I8(-1)),
        ("B".into(), Val::U8(255)),
        ("s".into(), Val::I16(-2)),
        ("u".into(), Val::U16(65535)),
        ("I".into(), Val::I32(i32::MIN)),
        ("i".into(), Val::U32(u32::MAX)),
        ("l".into(), Val::I64(i64::MIN)),
        ("f".into(), Val::F32(-0.0)),
        ("d".into(), Val::F64(f64::MAX)),
        ("D".into(), Val::Decimal(5, -1)),
        ("S".into(), Val::LongStr(vec![0, 1, 2, b'z'])),
        (
            "A".into(),
            Val::Array(vec![Val::Void, Val::Table(vec![]), Val::Array(vec![])]),
        ),
        ("T".into(), Val::Timestamp(u64::MAX)),
        (
            "F".into(),
            Val::Table(vec![(
                "n".into(),
                Val::Table(vec![("m".into(), Val::U8(1))]),
            )]),
        ),
        ("V".into(), Val::Void),
        ("x".into(), Val::Bytes(vec![0xCE, 0xCE, 0])),
    ];
    let props = Props {
        content_type: Some("text/plain".into()),
        content_encoding: Some("gzip".into()),
        headers: Some(headers),
        delivery_mode: Some(1),
        priority: Some(9),
        correlation_id: Some("c".into()),
        reply_to: Some("r".into()),
        expiration: Some("100000".into()),
        message_id: Some("m".into()),
        timestamp: Some(42),
        kind: Some("t".into()),
        user_id: Some("guest".into()),
        app_id: Some("a".into()),
        cluster_id: Some("cl".into()),
    };
    let mut publisher = broker.raw();
    publisher.channel_open(1);
    publisher.publish(1, "", &q, &props, b"raw body").unwrap();
    let d = sub.read_delivery(1);
    assert_eq!(d.body, b"raw body");
    assert_eq!(d.props, props, "decoded properties differ");
    assert_eq!(
        d.header_payload,
        wire::content_header_payload(8, &props),
        "content header bytes were re-encoded"
    );
}

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

/// The hand-written property codec used above agrees with the spec's flag layout.
#[test]
fn raw_property_codec_flag_layout() {
    let only = |p: Props| u16::from_be_bytes(p.encode()[..2].try_into().unwrap());
    assert_eq!(
        only(Props {
            content_type: Some("x".into()),
            ..Props::default()
        }),
        0x8000
    );
    assert_eq!(
        only(Props {
            headers: Some(vec![]),
            ..Props::default()
        }),
        0x2000
    );
    assert_eq!(
        only(Props {
            delivery_mode: Some(2),
            ..Props::default()
        }),
        0x1000
    );
    assert_eq!(
        only(Props {
            expiration: Some("1".into()),
            ..Props::default()
        }),
        0x0100
    );
    assert_eq!(
        only(Props {
            timestamp: Some(1),
            ..Props::default()
        }),
        0x0040
    );
    assert_eq!(
        only(Props {
            cluster_id: Some("c".into()),
            ..Props::default()
        }),
        0x0004
    );
    let full = Props {
        content_type: Some("a".into()),
        content_encoding: Some("b".into()),
        headers: Some(vec![("k".into(), Val::Array(vec![Val::U8(1), Val::Void]))]),
        delivery_mode: Some(2),
        priority: Some(3),
        correlation_id: Some("c".into()),
        reply_to: Some("d".into()),
        expiration: Some("5".into()),
        message_id: Some("e".into()),
        timestamp: Some(6),
        kind: Some("f".into()),
        user_id: Some("g".into()),
        app_id: Some("h".into()),
        cluster_id: Some("i".into()),
    };
    let bytes = full.encode();
    assert_eq!(&bytes[..2], &[0xFF, 0xFC]);
    let mut d = wire::Dec::new(&bytes);
    assert_eq!(Props::decode(&mut d), full);
    assert_eq!(d.remaining(), 0);
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

/// A mandatory, unroutable message in confirm mode: basic.return comes before its basic.ack.
async fn confirm_follows_return(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    ch.basic_publish(
        BasicProperties::default(),
        b"nowhere".to_vec(),
        BasicPublishArguments::new("amq.direct", "nobody")
            .mandatory(true)
            .finish(),
    )
    .await
    .unwrap();
    match ch.next_event().await {
        Event::Return { code, text, .. } => assert_eq!((code, text.as_str()), (312, "NO_ROUTE")),
        other => panic!("expected basic.return before the confirm, got {other:?}"),
    }
    match ch.next_event().await {
        Event::Ack { tag, .. } => assert_eq!(tag, 1),
        other => panic!("expected basic.ack for tag 1, got {other:?}"),
    }
}

async fn empty_body(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-empty");
    ch.declare_queue(&q).await;
    let (_, mut rx) = ch.consume_auto(&q).await;
    ch.publish_props(
        "",
        &q,
        BasicProperties::default().with_message_id("e").finish(),
        b"",
    )
    .await;
    ch.publish("", &q, b"after").await;
    let d = next_delivery(&mut rx).await;
    assert!(d.body.is_empty());
    assert_eq!(d.props.message_id().map(String::as_str), Some("e"));
    assert_eq!(next_delivery(&mut rx).await.body, b"after");

    // The same over raw frames: a header with body-size 0 and no body frame at all.
    let mut raw = broker.raw();
    raw.channel_open(1);
    let rq = raw.queue_declare(1, "", false, true, false);
    raw.basic_consume(1, &rq, true);
    raw.publish(1, "", &rq, &Props::default(), b"").unwrap();
    raw.publish(1, "", &rq, &Props::default(), b"next").unwrap();
    assert!(raw.read_delivery(1).body.is_empty());
    assert_eq!(raw.read_delivery(1).body, b"next");
}

async fn frame_boundary_body_sizes(shards: usize) {
    let broker = Broker::start(shards);
    let mut raw = broker.raw();
    raw.channel_open(1);
    let q = raw.queue_declare(1, "", false, true, false);
    raw.basic_consume(1, &q, true);
    let frame_max = raw.tune.unwrap().frame_max as usize;
    let max_payload = frame_max - 8;
    let sizes = [
        1,
        max_payload - 1,
        max_payload,
        max_payload + 1,
        2 * max_payload,
        2 * max_payload + 1,
    ];
    for (i, size) in sizes.iter().enumerate() {
        let body: Vec<u8> = (0..*size).map(|j| (j * 31 + i) as u8).collect();
        raw.publish(1, "", &q, &Props::default(), &body).unwrap();
        let d = raw.read_delivery(1);
        assert!(d.body == body, "body of {size} bytes changed in transit");
        assert!(
            d.frame_sizes.iter().all(|s| *s <= frame_max),
            "frame over frame_max for a {size}-byte body: {:?}",
            d.frame_sizes
        );
    }
}

/// Content frames of publishes on different channels may interleave on the wire; each
/// channel assembles its own message.
async fn interleaved_channels_content(shards: usize) {
    let broker = Broker::start(shards);
    let mut sub = broker.raw();
    sub.channel_open(1);
    let q = sub.queue_declare(1, "", false, true, false);
    sub.basic_consume(1, &q, true);

    let mut p = broker.raw();
    let channels: Vec<u16> = vec![1, 2, 3, 7];
    for ch in &channels {
        p.channel_open(*ch);
    }
    let max_payload = p.tune.unwrap().frame_max as usize - 8;
    let bodies: Vec<Vec<u8>> = channels
        .iter()
        .map(|ch| vec![*ch as u8; max_payload * 3 + 17])
        .collect();
    let mut bytes = Vec::new();
    for ch in &channels {
        bytes.extend(wire::frame(
            wire::FRAME_METHOD,
            *ch,
            &wire::method_payload(
                wire::m::BASIC_PUBLISH,
                &common::RawConn::publish_args("", &q, false, false),
            ),
        ));
    }
    for (ch, body) in channels.iter().zip(&bodies) {
        let props = Props {
            message_id: Some(format!("ch{ch}")),
            ..Props::default()
        };
        bytes.extend(wire::frame(
            wire::FRAME_HEADER,
            *ch,
            &wire::content_header_payload(body.len() as u64, &props),
        ));
    }
    for part in 0..4 {
        for (ch, body) in channels.iter().zip(&bodies) {
            let chunk = body.chunks(max_payload).nth(part).unwrap();
            bytes.extend(wire::frame(wire::FRAME_BODY, *ch, chunk));
        }
    }
    p.send(&bytes).unwrap();
    let mut got = std::collections::BTreeMap::new();
    for _ in &channels {
        let d = sub.read_delivery(1);
        got.insert(d.props.message_id.clone().unwrap(), d.body);
    }
    for (ch, body) in channels.iter().zip(&bodies) {
        assert!(
            got.get(&format!("ch{ch}")) == Some(body),
            "message from channel {ch} was assembled wrongly"
        );
    }
}

async fn missing_exchange_and_queue(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let x = unique("x-absent");
    let q = unique("q-absent");

    let mut ch = conn.channel().await;
    ch.publish(&x, "k", b"into the void").await;
    let (code, text) = ch.expect_close().await;
    assert_eq!(
        (code, text),
        (404, format!("NOT_FOUND - no exchange '{x}' in vhost '/'"))
    );

    let mut ch = conn.channel().await;
    let r = ch
        .basic_consume_rx(amqprs::channel::BasicConsumeArguments::new(&q, ""))
        .await;
    assert!(r.is_err(), "consume from a missing queue succeeded");
    let (code, text) = ch.expect_close().await;
    assert_eq!(
        (code, text),
        (404, format!("NOT_FOUND - no queue '{q}' in vhost '/'"))
    );

    let mut ch = conn.channel().await;
    ch.ch
        .basic_get(amqprs::channel::BasicGetArguments::new(&q))
        .await
        .ok();
    let (code, text) = ch.expect_close().await;
    assert_eq!(
        (code, text),
        (404, format!("NOT_FOUND - no queue '{q}' in vhost '/'"))
    );

    let mut ch = conn.channel().await;
    let r = ch
        .queue_purge(amqprs::channel::QueuePurgeArguments::new(&q))
        .await;
    assert!(r.is_err(), "purge of a missing queue succeeded");
    let (code, text) = ch.expect_close().await;
    assert_eq!(
        (code, text),
        (404, format!("NOT_FOUND - no queue '{q}' in vhost '/'"))
    );

    assert!(conn.conn.is_open(), "soft errors closed the connection");
}

async fn many_channels_one_connection(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut chans = Vec::new();
    for _ in 0..100 {
        let ch = conn.channel().await;
        let q = ch.declare_server_named().await;
        let (_, rx) = ch.consume_auto(&q).await;
        chans.push((ch, q, rx));
    }
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    for round in 0..5 {
        for (_, q, _) in &chans {
            pch.publish("", q, format!("{round}:{q}").as_bytes()).await;
        }
    }
    for (_, q, rx) in &mut chans {
        for round in 0..5 {
            assert_eq!(
                next_delivery(rx).await.body,
                format!("{round}:{q}").as_bytes()
            );
        }
    }
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

async fn tx_and_confirm_modes_exclusive(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;

    let mut ch = conn.channel().await;
    ch.tx_select().await.unwrap();
    let r = ch.confirm_select(ConfirmSelectArguments::default()).await;
    assert!(
        r.is_err(),
        "confirm.select on a transactional channel succeeded"
    );
    assert_eq!(ch.expect_close().await.0, 406);

    let mut ch = conn.channel().await;
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    let r = ch.tx_select().await;
    assert!(r.is_err(), "tx.select on a confirm-mode channel succeeded");
    assert_eq!(ch.expect_close().await.0, 406);

    let mut ch = conn.channel().await;
    let r = ch.tx_commit().await;
    assert!(
        r.is_err(),
        "tx.commit on a non-transactional channel succeeded"
    );
    assert_eq!(ch.expect_close().await.0, 406);
    assert!(conn.conn.is_open());
}

/// basic.cancel of a tag that is not (or no longer) a consumer is answered with cancel-ok.
async fn cancel_unknown_consumer_tag(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let tag = ch
        .basic_cancel(BasicCancelArguments::new("no-such-consumer"))
        .await
        .expect("cancel of an unknown consumer tag");
    assert_eq!(tag, "no-such-consumer");
    assert!(ch.ch.is_open());
    ch.declare_server_named().await;
}

async fn auto_delete_when_consumer_connection_drops(shards: usize) {
    let broker = Broker::start(shards);
    let admin = broker.connect().await;
    let ach = admin.channel().await;
    let q = unique("q-autodel-drop");
    ach.queue_declare(QueueDeclareArguments::transient_autodelete(&q))
        .await
        .unwrap();
    let mut raw = broker.raw();
    raw.channel_open(1);
    raw.basic_consume(1, &q, false);
    ach.publish("", &q, b"in flight").await;
    raw.read_delivery(1);
    // The consumer's connection vanishes without cancel or close.
    drop(raw);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut probe = admin.channel().await;
        let r = probe
            .queue_declare(QueueDeclareArguments::new(&q).passive(true).finish())
            .await;
        if r.is_err() {
            assert_eq!(probe.expect_close().await.0, 404);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "auto-delete queue {q} outlived its last consumer's connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn exclusive_consumer_released_with_its_connection(shards: usize) {
    let broker = Broker::start(shards);
    let admin = broker.connect().await;
    let ach = admin.channel().await;
    let q = unique("q-excl-release");
    ach.declare_queue(&q).await;
    let holder = broker.connect().await;
    let hch = holder.channel().await;
    let args = amqprs::channel::BasicConsumeArguments::new(&q, "")
        .exclusive(true)
        .finish();
    let _rx = hch.basic_consume_rx(args).await.unwrap();
    holder.close().await;
    // Once the holder is gone, a new consumer is accepted.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut ch = admin.channel().await;
        match ch
            .basic_consume_rx(amqprs::channel::BasicConsumeArguments::new(&q, ""))
            .await
        {
            Ok((_, mut rx)) => {
                ch.publish("", &q, b"free again").await;
                assert_eq!(next_delivery(&mut rx).await.body, b"free again");
                break;
            }
            Err(_) => {
                let (code, _) = ch.expect_close().await;
                assert_eq!(code, 403);
                assert!(
                    Instant::now() < deadline,
                    "exclusive consumer outlived its connection"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
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

/// In confirm mode, an ack for a message routed to many queues (on every shard) means every
/// one of those queues has it.
async fn confirms_cover_every_queue(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let x = unique("x-confirm-fan");
    ch.exchange_declare(amqprs::channel::ExchangeDeclareArguments::new(&x, "fanout"))
        .await
        .unwrap();
    let mut queues = Vec::new();
    for _ in 0..10 {
        let q = unique("q-confirm-fan");
        ch.declare_queue(&q).await;
        ch.queue_bind(amqprs::channel::QueueBindArguments::new(&q, &x, ""))
            .await
            .unwrap();
        queues.push(q);
    }
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    for i in 0..20 {
        ch.publish(&x, "", format!("{i}").as_bytes()).await;
    }
    ch.wait_acked(20).await;
    for q in &queues {
        assert_eq!(
            ch.message_count(q).await,
            20,
            "queue {q} lags behind its confirms"
        );
    }
}

/// Every publish the broker fully received before the publisher's socket vanished is
/// routed; nothing is lost with the connection.
async fn publishes_before_abrupt_disconnect_are_kept(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-abrupt");
    ch.declare_queue(&q).await;
    let mut p = broker.raw();
    p.channel_open(1);
    for i in 0..200 {
        p.publish(1, "", &q, &Props::default(), format!("{i}").as_bytes())
            .unwrap();
    }
    // A round trip after the publishes: the broker has read them all.
    p.channel_open(2);
    drop(p);
    ch.wait_message_count(&q, 200).await;
    for i in 0..200 {
        let (_, _, body) = ch.get(&q, true).await.expect("message");
        assert_eq!(body, format!("{i}").as_bytes());
    }
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
