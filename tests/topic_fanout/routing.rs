//! Who gets what: topic (against a reference matcher), fanout, direct, headers, bindings.

use std::time::Duration;

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments};

use crate::common;
use crate::common::{assert_no_delivery, next_delivery, unique, Broker};
use crate::support::subscribe;

shard_tests!(
    topic_patterns_sixteen_subscribers,
    fanout_sixteen_subscribers,
    direct_multicast,
    bindings_visible_everywhere_after_ok,
    headers_exchange_routing,
);

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
