//! Consume and get: order, prefetch, bodies, channels, missing targets, abrupt publishers.

use std::time::Duration;

use amqprs::channel::{BasicAckArguments, BasicQosArguments};
use amqprs::BasicProperties;

use crate::common;
use crate::common::wire::{self, Props, Val};
use crate::common::{assert_no_delivery, next_delivery, unique, Broker};

shard_tests!(
    publish_consume_order,
    prefetch_count_respected,
    get_and_get_empty,
    empty_body,
    frame_boundary_body_sizes,
    interleaved_channels_content,
    missing_exchange_and_queue,
    many_channels_one_connection,
    publishes_before_abrupt_disconnect_are_kept,
    queued_small_messages_survive_buffer_reuse,
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

/// Small messages parked in a queue keep their own bytes while the publisher's connection
/// goes on to read megabytes of other traffic (its read buffers get reused).
async fn queued_small_messages_survive_buffer_reuse(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let parked = unique("q-parked");
    let busy = unique("q-busy");
    ch.declare_queue(&parked).await;
    ch.declare_queue(&busy).await;
    let (_, mut busy_rx) = ch.consume_auto(&busy).await;

    let mut p = broker.raw();
    p.channel_open(1);
    const N: usize = 3000;
    let props = |i: usize| Props {
        message_id: Some(format!("id-{i}")),
        headers: Some(vec![("n".into(), Val::I64(i as i64))]),
        ..Props::default()
    };
    for i in 0..N {
        p.publish(
            1,
            "",
            &parked,
            &props(i),
            format!("parked-{i:05}").as_bytes(),
        )
        .unwrap();
    }
    // Ten megabytes of other traffic through the same connection.
    let filler = vec![0xA5u8; 64 * 1024];
    for _ in 0..160 {
        p.publish(1, "", &busy, &Props::default(), &filler).unwrap();
    }
    for _ in 0..160 {
        assert!(next_delivery(&mut busy_rx).await.body == filler);
    }
    ch.wait_message_count(&parked, N as u32).await;
    let mut sub = broker.raw();
    sub.channel_open(1);
    sub.basic_consume(1, &parked, true);
    for i in 0..N {
        let d = sub.read_delivery(1);
        assert_eq!(
            d.body,
            format!("parked-{i:05}").as_bytes(),
            "parked message {i} changed"
        );
        assert_eq!(
            d.props,
            props(i),
            "properties of parked message {i} changed"
        );
    }
}
