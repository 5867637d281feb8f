//! Publish and consume: offsets from 0 with the `x-stream-offset` header on every
//! delivery, through any exchange, on one shard and two (the stream's home and the
//! reader's shard differ), many readers of one log, nothing taken away by reading.

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments};

use crate::common::unique;
use crate::support::*;

shard_tests!(publish_then_read_from_first_and_next);

/// A stream gets 20 confirmed messages; a reader from `first` receives offsets 0..20 in
/// order with their bodies, a second reader too (reading takes nothing), a reader at
/// `next` receives only what is published after it attached.
async fn publish_then_read_from_first_and_next(shards: usize) {
    let broker = crate::common::Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("stream");
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
    // Through an exchange too.
    let x = unique("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "topic"))
        .await
        .expect("exchange.declare");
    ch.queue_bind(QueueBindArguments::new(&q, &x, "a.#"))
        .await
        .expect("queue.bind");
    p.publish_props(&x, "a.b", Default::default(), b"m-20")
        .await;
    assert_eq!(take(&c, &mut rx, 1).await, vec![(20, "m-20".to_owned())]);
    conn.close().await;
}
