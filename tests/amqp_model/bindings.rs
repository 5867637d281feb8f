//! Bindings: bind and unbind, missing targets, and the default exchange routing by name.

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments, QueueUnbindArguments};

use crate::common::{unique, Broker};
use crate::support::soft_error;

shard_tests!(
    bind_and_unbind,
    bind_missing_targets,
    default_exchange_routes_by_queue_name,
);

async fn bind_and_unbind(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let x = unique("x-bind");
    let q = unique("q-bind");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct"))
        .await
        .unwrap();
    ch.declare_queue(&q).await;
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k1"))
        .await
        .unwrap();
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k2"))
        .await
        .unwrap();
    // Binding twice is idempotent: one copy per publish.
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k1"))
        .await
        .unwrap();

    ch.publish(&x, "k1", b"one").await;
    ch.publish(&x, "k2", b"two").await;
    ch.publish(&x, "k3", b"unbound key").await;
    ch.wait_message_count(&q, 2).await;
    assert_eq!(ch.get_eventually(&q, true).await.2, b"one");
    assert_eq!(ch.get_eventually(&q, true).await.2, b"two");

    ch.queue_unbind(QueueUnbindArguments::new(&q, &x, "k1"))
        .await
        .unwrap();
    ch.publish(&x, "k1", b"after unbind").await;
    ch.publish(&x, "k2", b"still bound").await;
    let (_, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(
        body, b"still bound",
        "a message routed through a removed binding"
    );
    assert_eq!(ch.message_count(&q).await, 0);
}

async fn bind_missing_targets(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-real");
    let x = unique("x-missing");
    let mut ch = conn.channel().await;
    ch.declare_queue(&q).await;
    let r = ch.queue_bind(QueueBindArguments::new(&q, &x, "k")).await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 404);
    assert_eq!(text, format!("NOT_FOUND - no exchange '{x}' in vhost '/'"));

    let missing_q = unique("q-missing");
    let mut ch = conn.channel().await;
    let r = ch
        .queue_bind(QueueBindArguments::new(&missing_q, "amq.direct", "k"))
        .await;
    let (code, text) = soft_error(&mut ch, r).await;
    assert_eq!(code, 404);
    assert_eq!(
        text,
        format!("NOT_FOUND - no queue '{missing_q}' in vhost '/'")
    );
}

async fn default_exchange_routes_by_queue_name(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let mut queues = Vec::new();
    for _ in 0..6 {
        let q = unique("q-default");
        ch.declare_queue(&q).await;
        queues.push(q);
    }
    for q in &queues {
        ch.publish("", q, q.as_bytes()).await;
    }
    // Unroutable without mandatory: silently dropped, channel stays open.
    ch.publish("", &unique("nobody"), b"lost").await;
    for q in &queues {
        ch.wait_message_count(q, 1).await;
        let (get_ok, _, body) = ch.get_eventually(q, true).await;
        assert_eq!(body, q.as_bytes());
        assert_eq!(get_ok.routing_key(), q);
        assert_eq!(get_ok.exchange(), "");
    }
    assert!(ch.ch.is_open());
}
