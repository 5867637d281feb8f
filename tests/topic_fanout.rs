//! Fan-out through amq.topic, amq.fanout and direct exchanges with many subscribers spread
//! over many connections (and so over both shards when there are two): every subscriber
//! gets exactly its messages, in publish order, and large bodies arrive intact.

#[macro_use]
mod common;

use std::time::Duration;

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments};
use common::wire::Props;
use common::{assert_no_delivery, next_delivery, unique, Broker, Chan, Conn};
use tokio::sync::mpsc::UnboundedReceiver;

/// Reference matcher for AMQP topic patterns: words split on '.', `*` is exactly one word,
/// `#` is zero or more words.
fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => (0..=k.len()).any(|skip| go(rest, &k[skip..])),
            Some((&"*", rest)) => !k.is_empty() && go(rest, &k[1..]),
            Some((word, rest)) => k.first() == Some(word) && go(rest, &k[1..]),
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    go(&p, &k)
}

#[test]
fn reference_matcher_agrees_with_the_spec_examples() {
    assert!(topic_matches("#", "a.b.c"));
    assert!(topic_matches("a.#", "a"));
    assert!(topic_matches("a.#", "a.b.c"));
    assert!(!topic_matches("a.*", "a"));
    assert!(topic_matches("a.*", "a.b"));
    assert!(!topic_matches("a.*", "a.b.c"));
    assert!(topic_matches("*.b", "x.b"));
    assert!(!topic_matches("*.b", "b"));
    assert!(topic_matches("#.b", "b"));
    assert!(topic_matches("a.#.c", "a.c"));
    assert!(topic_matches("a.#.c", "a.x.y.c"));
    assert!(!topic_matches("a.*.c", "a.c"));
    assert!(topic_matches("*.b.#", "a.b"));
    assert!(!topic_matches("a.b", "a.b.c"));
}

/// One subscriber queue: its bindings and its delivery stream.
struct Sub {
    patterns: Vec<&'static str>,
    queue: String,
    rx: UnboundedReceiver<amqprs::channel::ConsumerMessage>,
}

/// Opens `n_conns` connections and spreads `pattern_sets` over them round-robin, each as a
/// server-named exclusive queue bound to `exchange` and consumed with auto-ack.
async fn subscribe(
    broker: &Broker,
    n_conns: usize,
    exchange: &str,
    pattern_sets: &[Vec<&'static str>],
) -> (Vec<(Conn, Chan)>, Vec<Sub>) {
    let mut conns = Vec::new();
    for _ in 0..n_conns {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        conns.push((conn, ch));
    }
    let mut subs = Vec::new();
    for (i, patterns) in pattern_sets.iter().enumerate() {
        let (_, ch) = &conns[i % n_conns];
        let queue = ch.declare_server_named().await;
        for p in patterns {
            ch.queue_bind(QueueBindArguments::new(&queue, exchange, p))
                .await
                .unwrap();
        }
        let (_, rx) = ch.consume_auto(&queue).await;
        subs.push(Sub {
            patterns: patterns.clone(),
            queue,
            rx,
        });
    }
    (conns, subs)
}

shard_tests!(
    topic_patterns_sixteen_subscribers,
    fanout_sixteen_subscribers,
    direct_multicast,
    many_publishers_one_subscriber,
    large_body_fan_out,
    competing_consumers_across_connections,
    bindings_visible_everywhere_after_ok,
    headers_exchange_routing,
    wide_fan_out,
    fan_out_delivery_fields,
    stuck_subscriber_does_not_stall_others,
    shared_message_outlives_its_other_queues,
    backlogged_reader_gets_everything_intact,
);

async fn topic_patterns_sixteen_subscribers(shards: usize) {
    let broker = Broker::start(shards);
    let pattern_sets: Vec<Vec<&'static str>> = vec![
        vec!["#"],
        vec!["a.*"],
        vec!["a.#"],
        vec!["*.b"],
        vec!["a.b"],
        vec!["a"],
        vec!["*"],
        vec!["#.b"],
        vec!["a.*.c"],
        vec!["a.#.c"],
        vec!["*.*"],
        vec!["#.c"],
        vec!["x.y.b"],
        vec!["*.b.#"],
        vec!["nomatch.ever"],
        // Two overlapping bindings: one copy per message all the same.
        vec!["a.#", "#.c"],
    ];
    let (_conns, mut subs) = subscribe(&broker, 8, "amq.topic", &pattern_sets).await;

    let keys = [
        "a", "a.b", "a.b.c", "a.c", "b", "x.b", "x.y.b", "a.b.b", "a.x.y.c", "c", "a.b.c.d", "b.b",
    ];
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    let mut published = Vec::new();
    for round in 0..5 {
        for key in keys {
            let body = format!("{round}:{key}");
            pch.publish("amq.topic", key, body.as_bytes()).await;
            published.push((key, body));
        }
    }

    // Sanity on the expectations themselves.
    assert_eq!(
        published
            .iter()
            .filter(|(k, _)| topic_matches("#", k))
            .count(),
        published.len()
    );
    for sub in &mut subs {
        let expected: Vec<&String> = published
            .iter()
            .filter(|(k, _)| sub.patterns.iter().any(|p| topic_matches(p, k)))
            .map(|(_, b)| b)
            .collect();
        for want in &expected {
            let d = next_delivery(&mut sub.rx).await;
            assert_eq!(
                String::from_utf8_lossy(&d.body),
                want.as_str(),
                "subscriber {:?} ({}) got the wrong message",
                sub.patterns,
                sub.queue
            );
            assert_eq!(d.exchange, "amq.topic");
        }
    }
    // Nothing extra anywhere (checked after everyone got their last expected message).
    for sub in &mut subs {
        assert_no_delivery(&mut sub.rx, Duration::from_millis(100)).await;
    }
}

async fn fanout_sixteen_subscribers(shards: usize) {
    let broker = Broker::start(shards);
    let x = unique("x-fan");
    {
        let c = broker.connect().await;
        let ch = c.channel().await;
        ch.exchange_declare(ExchangeDeclareArguments::new(&x, "fanout"))
            .await
            .unwrap();
        c.close().await;
    }
    let sets: Vec<Vec<&'static str>> = (0..16).map(|i| vec![["", "ignored.key"][i % 2]]).collect();
    let (_c1, mut subs) = subscribe(&broker, 8, &x, &sets).await;
    let (_c2, mut amq_subs) = subscribe(&broker, 8, "amq.fanout", &sets[..4]).await;

    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    for i in 0..200 {
        pch.publish(&x, &format!("k{i}"), format!("f{i}").as_bytes())
            .await;
        pch.publish("amq.fanout", "any", format!("g{i}").as_bytes())
            .await;
    }
    for sub in &mut subs {
        for i in 0..200 {
            let d = next_delivery(&mut sub.rx).await;
            assert_eq!(d.body, format!("f{i}").as_bytes(), "queue {}", sub.queue);
            assert_eq!(d.routing_key, format!("k{i}"));
        }
    }
    for sub in &mut amq_subs {
        for i in 0..200 {
            assert_eq!(
                next_delivery(&mut sub.rx).await.body,
                format!("g{i}").as_bytes()
            );
        }
    }
    for sub in subs.iter_mut().chain(amq_subs.iter_mut()) {
        assert_no_delivery(&mut sub.rx, Duration::from_millis(100)).await;
    }
}

async fn direct_multicast(shards: usize) {
    let broker = Broker::start(shards);
    let sets: Vec<Vec<&'static str>> = vec![
        vec!["red"],
        vec!["red"],
        vec!["green"],
        vec!["red", "green"],
        vec!["blue"],
        vec!["red"],
        vec!["green"],
        vec!["nothing"],
    ];
    let (_conns, mut subs) = subscribe(&broker, 8, "amq.direct", &sets).await;
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    let colours = ["red", "green", "blue", "black"];
    for i in 0..40 {
        let c = colours[i % 4];
        pch.publish("amq.direct", c, format!("{i}-{c}").as_bytes())
            .await;
    }
    for sub in &mut subs {
        for i in 0..40 {
            let c = colours[i % 4];
            if sub.patterns.contains(&c) {
                let d = next_delivery(&mut sub.rx).await;
                assert_eq!(d.body, format!("{i}-{c}").as_bytes(), "{:?}", sub.patterns);
            }
        }
    }
    for sub in &mut subs {
        assert_no_delivery(&mut sub.rx, Duration::from_millis(100)).await;
    }
}

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

/// A binding is in force on every shard once queue.bind-ok arrives, and gone everywhere once
/// queue.unbind-ok arrives: mandatory publishes from eight other connections are routed
/// (or returned) accordingly, with no grace period.
async fn bindings_visible_everywhere_after_ok(shards: usize) {
    let broker = Broker::start(shards);
    let admin = broker.connect().await;
    let ach = admin.channel().await;
    let q = ach.declare_server_named().await;
    let (_, mut rx) = ach.consume_auto(&q).await;
    let mut publishers = Vec::new();
    for _ in 0..8 {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        publishers.push((conn, ch));
    }
    let mandatory = |key: &str| {
        amqprs::channel::BasicPublishArguments::new("amq.topic", key)
            .mandatory(true)
            .finish()
    };
    for round in 0..10 {
        let key = format!("round.{round}");
        ach.queue_bind(QueueBindArguments::new(&q, "amq.topic", &key))
            .await
            .unwrap();
        for (i, (_, ch)) in publishers.iter().enumerate() {
            ch.basic_publish(
                amqprs::BasicProperties::default(),
                format!("{round}/{i}").into_bytes(),
                mandatory(&key),
            )
            .await
            .unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..publishers.len() {
            got.push(String::from_utf8(next_delivery(&mut rx).await.body).unwrap());
        }
        got.sort();
        let mut want: Vec<String> = (0..publishers.len())
            .map(|i| format!("{round}/{i}"))
            .collect();
        want.sort();
        assert_eq!(
            got, want,
            "round {round}: publishes after bind-ok not all routed"
        );
        for (_, ch) in publishers.iter_mut() {
            if let Ok(ev) = ch.events.try_recv() {
                panic!("round {round}: unexpected event {ev:?} after bind-ok");
            }
        }

        ach.queue_unbind(amqprs::channel::QueueUnbindArguments::new(
            &q,
            "amq.topic",
            &key,
        ))
        .await
        .unwrap();
        for (i, (_, ch)) in publishers.iter().enumerate() {
            ch.basic_publish(
                amqprs::BasicProperties::default(),
                format!("{round}/{i} late").into_bytes(),
                mandatory(&key),
            )
            .await
            .unwrap();
        }
        for (i, (_, ch)) in publishers.iter_mut().enumerate() {
            match ch.next_event().await {
                common::Event::Return { code, routing_key, .. } => {
                    assert_eq!((code, routing_key.as_str()), (312, key.as_str()));
                }
                other => panic!("round {round}, publisher {i}: expected a return after unbind-ok, got {other:?}"),
            }
        }
        assert_no_delivery(&mut rx, Duration::from_millis(50)).await;
    }
}

async fn headers_exchange_routing(shards: usize) {
    use amqprs::{FieldTable, FieldValue};
    let broker = Broker::start(shards);
    let table = |pairs: &[(&str, FieldValue)]| {
        let mut t = FieldTable::new();
        for (k, v) in pairs {
            t.insert((*k).try_into().unwrap(), v.clone());
        }
        t
    };
    let s = |v: &str| FieldValue::S(v.try_into().unwrap());
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let bind = |q: String, args: FieldTable| {
        QueueBindArguments::new(&q, "amq.headers", "")
            .arguments(args)
            .finish()
    };
    let all = ch.declare_server_named().await;
    ch.queue_bind(bind(
        all.clone(),
        table(&[("x-match", s("all")), ("a", s("1")), ("b", s("2"))]),
    ))
    .await
    .unwrap();
    let any = ch.declare_server_named().await;
    ch.queue_bind(bind(
        any.clone(),
        table(&[("x-match", s("any")), ("a", s("1")), ("b", s("2"))]),
    ))
    .await
    .unwrap();
    let default_all = ch.declare_server_named().await;
    ch.queue_bind(bind(default_all.clone(), table(&[("c", s("x"))])))
        .await
        .unwrap();
    let (_, mut rx_all) = ch.consume_auto(&all).await;
    let (_, mut rx_any) = ch.consume_auto(&any).await;
    let (_, mut rx_default) = ch.consume_auto(&default_all).await;

    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    let msgs: Vec<(&str, FieldTable)> = vec![
        ("ab", table(&[("a", s("1")), ("b", s("2"))])),
        ("a", table(&[("a", s("1"))])),
        ("b-wrong", table(&[("a", s("9")), ("b", s("2"))])),
        ("none", table(&[("z", s("1"))])),
        ("c", table(&[("c", s("x")), ("a", s("1")), ("b", s("2"))])),
    ];
    for (body, headers) in &msgs {
        pch.publish_props(
            "amq.headers",
            "ignored",
            amqprs::BasicProperties::default()
                .with_headers(headers.clone())
                .finish(),
            body.as_bytes(),
        )
        .await;
    }
    for (rx, want) in [
        (&mut rx_all, vec!["ab", "c"]),
        (&mut rx_any, vec!["ab", "a", "b-wrong", "c"]),
        (&mut rx_default, vec!["c"]),
    ] {
        for w in want {
            assert_eq!(next_delivery(rx).await.body, w.as_bytes());
        }
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

/// A subscriber that never reads its socket (no-ack, so nothing ever holds it back but its
/// socket) must not hold up the publisher or the other subscribers of the same messages.
async fn stuck_subscriber_does_not_stall_others(shards: usize) {
    let broker = Broker::start(shards);
    let mut stuck = broker.raw();
    stuck.channel_open(1);
    let sq = stuck.queue_declare(1, "", false, true, false);
    stuck.queue_bind(1, &sq, "amq.topic", "s.#");
    stuck.basic_consume(1, &sq, true);
    // From here on the stuck subscriber reads nothing.

    let sets: Vec<Vec<&'static str>> = (0..3).map(|_| vec!["s.#"]).collect();
    let (_conns, mut subs) = subscribe(&broker, 3, "amq.topic", &sets).await;
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    const N: usize = 2000;
    let mut body = vec![b'#'; 10_000];
    let consumers = tokio::spawn(async move {
        for sub in &mut subs {
            for i in 0..N {
                let d = next_delivery(&mut sub.rx).await;
                assert_eq!(
                    &d.body[..8],
                    format!("{i:08}").as_bytes(),
                    "queue {}",
                    sub.queue
                );
            }
        }
    });
    for i in 0..N {
        body[..8].copy_from_slice(format!("{i:08}").as_bytes());
        pch.publish("amq.topic", "s.x", &body).await;
    }
    consumers
        .await
        .expect("fast subscribers starved by a stuck one");
    drop(stuck);
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

/// A no-ack consumer that falls behind (its socket fills while it is not reading) later
/// receives every message intact and in order, across many sizes.
async fn backlogged_reader_gets_everything_intact(shards: usize) {
    let broker = Broker::start(shards);
    let mut sub = broker.raw();
    sub.channel_open(1);
    let q = sub.queue_declare(1, "", false, true, false);
    sub.queue_bind(1, &q, "amq.topic", "backlog.#");
    sub.basic_consume(1, &q, true);
    let publisher = broker.connect().await;
    let pch = publisher.channel().await;
    const N: usize = 4000;
    let body = |i: usize| -> Vec<u8> {
        let len = 1 + (i * 7919) % 9000;
        (0..len).map(|j| (i + j * 13) as u8).collect()
    };
    // Publish everything before reading a single byte.
    for i in 0..N {
        pch.publish("amq.topic", "backlog.x", &body(i)).await;
    }
    let reader = std::thread::spawn(move || {
        for i in 0..N {
            let d = sub.read_delivery(1);
            assert!(d.body == body(i), "message {i} corrupted or out of order");
        }
    });
    tokio::task::spawn_blocking(move || reader.join())
        .await
        .unwrap()
        .expect("backlogged reader failed");
}
