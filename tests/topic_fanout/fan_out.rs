//! Fan-out at scale: many publishers, large and wide fan-out, delivery fields, shared messages.

use std::time::Duration;

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments};

use crate::common;
use crate::common::wire::Props;
use crate::common::{assert_no_delivery, next_delivery, unique, Broker};
use crate::support::subscribe;

shard_tests!(
    many_publishers_one_subscriber,
    large_body_fan_out,
    competing_consumers_across_connections,
    wide_fan_out,
    fan_out_delivery_fields,
    shared_message_outlives_its_other_queues,
);

async fn many_publishers_one_subscriber(shards: usize) {
    let broker = Broker::start(shards);
    let (_conns, mut subs) = subscribe(&broker, 1, "amq.topic", &[vec!["pub.#"]]).await;
    const PUBLISHERS: usize = 8;
    const EACH: usize = 250;
    let mut tasks = Vec::new();
    for p in 0..PUBLISHERS {
        let conn = broker.connect().await;
        tasks.push(tokio::spawn(async move {
            let ch = conn.channel().await;
            for i in 0..EACH {
                ch.publish(
                    "amq.topic",
                    &format!("pub.{p}"),
                    format!("{p}:{i}").as_bytes(),
                )
                .await;
            }
            // channel.close/close-ok is a round trip behind every publish on the channel.
            ch.ch.clone().close().await.unwrap();
            conn.close().await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut next = [0usize; PUBLISHERS];
    for _ in 0..PUBLISHERS * EACH {
        let d = next_delivery(&mut subs[0].rx).await;
        let s = String::from_utf8(d.body).unwrap();
        let (p, i) = s.split_once(':').unwrap();
        let (p, i): (usize, usize) = (p.parse().unwrap(), i.parse().unwrap());
        assert_eq!(i, next[p], "publisher {p}'s messages out of order");
        next[p] += 1;
    }
    assert_eq!(next, [EACH; PUBLISHERS]);
    assert_no_delivery(&mut subs[0].rx, Duration::from_millis(100)).await;
}

fn big_body(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn large_body_fan_out(shards: usize) {
    let broker = Broker::start(shards);
    let sets: Vec<Vec<&'static str>> = (0..6).map(|_| vec!["big.#"]).collect();
    let (_conns, mut subs) = subscribe(&broker, 6, "amq.topic", &sets).await;
    // A raw subscriber too, to look at the frames themselves.
    let mut raw = broker.raw();
    raw.channel_open(1);
    let rq = raw.queue_declare(1, "", false, true, false);
    raw.queue_bind(1, &rq, "amq.topic", "big.#");
    raw.basic_consume(1, &rq, true);

    let body = big_body(1 << 20);
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    pch.publish("amq.topic", "big.one", &body).await;
    pch.publish("amq.topic", "big.two", b"small after big")
        .await;
    for sub in &mut subs {
        let d = next_delivery(&mut sub.rx).await;
        assert_eq!(d.body.len(), body.len(), "queue {}", sub.queue);
        assert!(
            d.body == body,
            "1 MiB body corrupted for queue {}",
            sub.queue
        );
        assert_eq!(next_delivery(&mut sub.rx).await.body, b"small after big");
    }
    let d = raw.read_delivery(1);
    assert!(
        d.body == body,
        "1 MiB body corrupted for the raw subscriber"
    );
    let frame_max = raw.tune.unwrap().frame_max as usize;
    assert!(
        d.frame_sizes.iter().all(|s| *s <= frame_max),
        "a frame exceeds frame_max {frame_max}: {:?}",
        d.frame_sizes
    );
    assert!(
        d.frame_sizes.len() > (1 << 20) / frame_max,
        "too few body frames"
    );
    assert_eq!(raw.read_delivery(1).body, b"small after big");

    // And the same from a raw publisher splitting into small frames (frame_max 4096).
    let mut rp = common::RawConn::connect(&broker.addr());
    rp.send_protocol_header();
    rp.read_start();
    rp.send_start_ok("PLAIN", b"\0guest\0guest");
    let offer = rp.read_tune();
    rp.send_tune_ok(common::raw::Tune {
        frame_max: 4096,
        heartbeat: 0,
        ..offer
    });
    rp.send_open("/");
    rp.read_open_ok();
    rp.channel_open(1);
    rp.publish(1, "amq.topic", "big.raw", &Props::default(), &body)
        .unwrap();
    for sub in &mut subs {
        let d = next_delivery(&mut sub.rx).await;
        assert!(
            d.body == body,
            "1 MiB body from 4 KiB frames corrupted for {}",
            sub.queue
        );
    }
}

/// One named queue, consumers on eight connections: every message is delivered exactly once,
/// each consumer sees its share in queue order, and every consumer gets some.
async fn competing_consumers_across_connections(shards: usize) {
    let broker = Broker::start(shards);
    let q = unique("q-shared");
    let mut consumers = Vec::new();
    for i in 0..8 {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        if i == 0 {
            ch.declare_queue(&q).await;
        }
        ch.basic_qos(amqprs::channel::BasicQosArguments::new(0, 5, false))
            .await
            .unwrap();
        let (_, rx) = ch.consume_manual(&q).await;
        consumers.push((conn, ch, rx));
    }
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    const N: usize = 800;
    for i in 0..N {
        pch.publish("", &q, format!("{i}").as_bytes()).await;
    }
    let mut seen = vec![false; N];
    let mut per_consumer = vec![0usize; consumers.len()];
    let mut last = vec![None::<usize>; consumers.len()];
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while total < N {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {total} of {N} messages delivered"
        );
        let mut progressed = false;
        for (idx, (_, ch, rx)) in consumers.iter_mut().enumerate() {
            while let Ok(msg) = rx.try_recv() {
                let d = common::Delivery::from(msg);
                let n: usize = String::from_utf8_lossy(&d.body).parse().unwrap();
                assert!(!seen[n], "message {n} delivered twice");
                seen[n] = true;
                if let Some(prev) = last[idx] {
                    assert!(n > prev, "consumer {idx} got {n} after {prev}");
                }
                last[idx] = Some(n);
                per_consumer[idx] += 1;
                total += 1;
                progressed = true;
                ch.basic_ack(amqprs::channel::BasicAckArguments::new(
                    d.delivery_tag,
                    false,
                ))
                .await
                .unwrap();
            }
        }
        if !progressed {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(seen.iter().all(|s| *s));
    assert!(
        per_consumer.iter().all(|c| *c > 0),
        "some consumer got nothing: {per_consumer:?}"
    );
    for (_, _, rx) in &mut consumers {
        assert_no_delivery(rx, Duration::from_millis(100)).await;
    }
}

/// One publisher, 64 subscriber queues on 16 connections, 300 messages: 19 200 deliveries,
/// each queue in publish order.
async fn wide_fan_out(shards: usize) {
    let broker = Broker::start(shards);
    let sets: Vec<Vec<&'static str>> = (0..64).map(|_| vec!["wide.#"]).collect();
    let (_conns, mut subs) = subscribe(&broker, 16, "amq.topic", &sets).await;
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    const N: usize = 300;
    for i in 0..N {
        pch.publish(
            "amq.topic",
            &format!("wide.{}", i % 7),
            format!("{i}").as_bytes(),
        )
        .await;
    }
    let mut handles = Vec::new();
    for mut sub in subs.drain(..) {
        handles.push(tokio::spawn(async move {
            for i in 0..N {
                let d = next_delivery(&mut sub.rx).await;
                assert_eq!(d.body, format!("{i}").as_bytes(), "queue {}", sub.queue);
            }
            assert_no_delivery(&mut sub.rx, Duration::from_millis(100)).await;
        }));
    }
    for h in handles {
        h.await.expect("a subscriber failed");
    }
}

/// Per-delivery fields stay per delivery under fan-out: consumer tag, channel-scoped delivery
/// tags (unique, dense, increasing), routing key, exchange and the redelivered flag, for small
/// and larger bodies alike; requeueing one subscriber's copy leaves the others alone.
async fn fan_out_delivery_fields(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    // Channel A: four consumers; channel B: two consumers; all on "f.#".
    let a = conn.channel().await;
    let b = conn.channel().await;
    let mut streams = Vec::new();
    for (ch, name, tag) in [
        (&a, "A", "ca0"),
        (&a, "A", "ca1"),
        (&a, "A", "ca2"),
        (&a, "A", "ca3"),
        (&b, "B", "cb0"),
        (&b, "B", "cb1"),
    ] {
        let q = ch.declare_server_named().await;
        ch.queue_bind(QueueBindArguments::new(&q, "amq.topic", "f.#"))
            .await
            .unwrap();
        let args = amqprs::channel::BasicConsumeArguments::new(&q, tag)
            .manual_ack(true)
            .finish();
        let (got_tag, rx) = ch.basic_consume_rx(args).await.unwrap();
        assert_eq!(got_tag, tag);
        streams.push((name, tag, rx));
    }
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    const N: usize = 50;
    let body = |i: usize| -> Vec<u8> {
        let len = if i % 5 == 4 { 10_000 } else { 10 };
        let mut v = format!("{i:04}").into_bytes();
        v.resize(len, b'.');
        v
    };
    for i in 0..N {
        pch.publish("amq.topic", &format!("f.{i}"), &body(i)).await;
    }
    let mut tags_by_channel: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    let mut first_of: Vec<u64> = Vec::new();
    for (name, tag, rx) in &mut streams {
        let mut last = 0;
        for i in 0..N {
            let d = next_delivery(rx).await;
            assert_eq!(d.consumer_tag, *tag);
            assert_eq!(d.body, body(i), "consumer {tag}");
            assert_eq!(d.routing_key, format!("f.{i}"));
            assert_eq!(d.exchange, "amq.topic");
            assert!(!d.redelivered);
            assert!(d.delivery_tag > last, "consumer {tag}: tags not increasing");
            last = d.delivery_tag;
            if i == 0 {
                first_of.push(d.delivery_tag);
            }
            tags_by_channel
                .entry(*name)
                .or_default()
                .push(d.delivery_tag);
        }
    }
    for (name, tags) in &mut tags_by_channel {
        tags.sort();
        let n = tags.len() as u64;
        assert_eq!(
            *tags,
            (1..=n).collect::<Vec<_>>(),
            "channel {name}: delivery tags not 1..={n}"
        );
    }

    // Requeue message 0 for consumer ca1 only: it comes back flagged, nobody else sees it.
    a.basic_nack(amqprs::channel::BasicNackArguments::new(
        first_of[1],
        false,
        true,
    ))
    .await
    .unwrap();
    let d = next_delivery(&mut streams[1].2).await;
    assert_eq!(d.body, body(0));
    assert!(d.redelivered, "requeued copy not flagged redelivered");
    assert!(
        d.delivery_tag > 4 * N as u64,
        "requeued copy reused an old delivery tag"
    );
    for (idx, (_, tag, rx)) in streams.iter_mut().enumerate() {
        if idx != 1 {
            if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                let d = common::Delivery::from(m);
                panic!(
                    "consumer {tag} got an extra delivery {:?}",
                    String::from_utf8_lossy(&d.body)
                );
            }
        }
    }
}

/// One published message shared by many queues (on every shard) stays intact for the
/// queues that still hold it after the others were deleted, purged or consumed.
async fn shared_message_outlives_its_other_queues(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let x = unique("x-shared");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "fanout"))
        .await
        .unwrap();
    let mut queues = Vec::new();
    for _ in 0..8 {
        let q = unique("q-shared");
        ch.declare_queue(&q).await;
        ch.queue_bind(QueueBindArguments::new(&q, &x, ""))
            .await
            .unwrap();
        queues.push(q);
    }
    let body = |i: usize, len: usize| -> Vec<u8> { (0..len).map(|j| (i * 7 + j) as u8).collect() };
    const N: usize = 60;
    for i in 0..N {
        // Alternate small bodies and bodies above any inline-copy threshold.
        let len = if i % 2 == 0 { 100 } else { 4096 };
        ch.publish(&x, "", &body(i, len)).await;
    }
    for q in &queues {
        ch.wait_message_count(q, N as u32).await;
    }
    // Three queues deleted, two purged, one drained by a consumer.
    for q in &queues[..3] {
        ch.queue_delete(amqprs::channel::QueueDeleteArguments::new(q))
            .await
            .unwrap();
    }
    for q in &queues[3..5] {
        ch.queue_purge(amqprs::channel::QueuePurgeArguments::new(q))
            .await
            .unwrap();
    }
    let (_, mut rx) = ch.consume_auto(&queues[5]).await;
    for i in 0..N {
        let len = if i % 2 == 0 { 100 } else { 4096 };
        assert!(next_delivery(&mut rx).await.body == body(i, len));
    }
    // The last two still have every message, byte for byte.
    for q in &queues[6..] {
        for i in 0..N {
            let len = if i % 2 == 0 { 100 } else { 4096 };
            let (_, _, got) = ch.get(q, true).await.expect("message");
            assert!(got == body(i, len), "message {i} in {q} corrupted");
        }
    }
}
