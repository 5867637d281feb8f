//! Publish and consume: offsets from 0 with the `x-stream-offset` header on every
//! delivery, through any exchange, many readers of one log (reading takes nothing
//! away), the original exchange and routing key delivered. With two shards one stream
//! is homed on each, so readers on the stream's shard and on the other are both
//! exercised.

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments};

use crate::common::{next_delivery, Broker};
use crate::support::*;

shard_tests!(publish_then_read_from_first_and_next);

/// Each stream gets 20 confirmed messages; a reader from `first` receives offsets 0..20
/// in order with their bodies, a second reader too, a reader at `next` receives only
/// what is published after it attached — here through a topic exchange, delivered with
/// that exchange and routing key.
async fn publish_then_read_from_first_and_next(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let x = crate::common::unique("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "topic"))
        .await
        .expect("exchange.declare");
    for q in one_per_shard("stream", shards) {
        declare_stream(&ch, &q, &[]).await;
        let mut p = Publisher::open(&conn).await;
        p.publish_all(&q, &bodies("m", 0..20)).await;
        for _ in 0..2 {
            let c = conn.channel().await;
            prefetch(&c, 5).await;
            let (_, mut rx) = consume(&c, &q, "", &[("x-stream-offset", s("first"))]).await;
            assert_eq!(take(&c, &mut rx, 20).await, expected("m", 0..20));
        }
        let c = conn.channel().await;
        prefetch(&c, 5).await;
        let (_, mut rx) = consume(&c, &q, "", &[]).await;
        ch.queue_bind(QueueBindArguments::new(&q, &x, "a.#"))
            .await
            .expect("queue.bind");
        p.publish_props(&x, "a.b", Default::default(), b"m-20")
            .await;
        let d = next_delivery(&mut rx).await;
        assert_eq!((offset(&d), d.body.as_slice()), (20, &b"m-20"[..]));
        assert_eq!(
            (d.exchange.as_str(), d.routing_key.as_str()),
            (x.as_str(), "a.b")
        );
        assert!(!d.redelivered);
    }
    conn.close().await;
}
