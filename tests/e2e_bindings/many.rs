//! Many bindings of one queue (issue 18, item 13): a destination with more than a few
//! bindings keeps them indexed by routing key (`model::exchange::dest`). Binding,
//! unbinding and rebinding hundreds of distinct keys (and one key twice, with different
//! arguments) on a direct and a topic exchange must route exactly as before: counts are
//! exact because every publish waits for its confirm.

use amqprs::channel::{QueueBindArguments, QueueDeleteArguments, QueueUnbindArguments};
use amqprs::{FieldTable, FieldValue};

use crate::common::{unique, Broker, Chan};
use crate::support::*;

shard_tests!(bind_unbind_rebind_many_keys_of_one_queue);

/// Keys per exchange: well above the size at which a destination's bindings get their
/// index, and through several of the index's growths.
const KEYS: usize = 300;

fn key(i: usize) -> String {
    format!("k.{i}")
}

fn arg_x(v: i64) -> FieldTable {
    let mut t = FieldTable::new();
    t.insert("x".try_into().expect("field name"), FieldValue::l(v));
    t
}

async fn bind_with(ch: &Chan, queue: &str, exchange: &str, key: &str, args: FieldTable) {
    ch.queue_bind(
        QueueBindArguments::new(queue, exchange, key)
            .arguments(args)
            .finish(),
    )
    .await
    .unwrap_or_else(|e| panic!("queue.bind {queue} to {exchange} ({key}): {e}"));
}

async fn unbind(ch: &Chan, queue: &str, exchange: &str, key: &str) {
    ch.queue_unbind(QueueUnbindArguments::new(queue, exchange, key))
        .await
        .unwrap_or_else(|e| panic!("queue.unbind {queue} from {exchange} ({key}): {e}"));
}

async fn bind_unbind_rebind_many_keys_of_one_queue(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (direct, topic) = (unique("many-d"), unique("many-t"));
    declare_exchange(&ch, &direct, "direct").await;
    declare_exchange(&ch, &topic, "topic").await;
    // The queue lives on the last shard, the coordinator is shard 0.
    let q = queue_on("many-q", shards - 1, shards);
    let other = unique("many-other");
    ch.declare_queue(&q).await;
    ch.declare_queue(&other).await;
    for i in 0..KEYS {
        bind_queue(&ch, &q, &direct, &key(i)).await;
        bind_queue(&ch, &q, &topic, &key(i)).await;
    }
    // The same pair again is no new binding; the same key with other arguments is.
    bind_queue(&ch, &q, &direct, &key(5)).await;
    bind_with(&ch, &q, &direct, &key(0), arg_x(1)).await;
    bind_queue(&ch, &other, &direct, &key(7)).await;

    let mut p = Publisher::new(conn.channel().await).await;
    for i in 0..KEYS {
        p.publish(&direct, &key(i)).await;
    }
    // One copy per key (k.0's two bindings lead to one queue: one copy), and k.7 to
    // the other queue too.
    assert_counts(&ch, &[(&q, KEYS as u32), (&other, 1)]).await;
    ch.queue_purge(amqprs::channel::QueuePurgeArguments::new(&q))
        .await
        .expect("queue.purge");

    // Unbind the even keys from both exchanges (k.0 without arguments only).
    for i in (0..KEYS).step_by(2) {
        unbind(&ch, &q, &direct, &key(i)).await;
        unbind(&ch, &q, &topic, &key(i)).await;
    }
    // Unbinding again is ok and changes nothing.
    unbind(&ch, &q, &topic, &key(2)).await;
    for i in 0..KEYS {
        p.publish(&direct, &key(i)).await;
        p.publish(&topic, &key(i)).await;
    }
    // Direct: the odd keys, and k.0 through its binding with arguments; topic: the odd.
    let odd = (KEYS / 2) as u32;
    assert_counts(&ch, &[(&q, 2 * odd + 1), (&other, 2)]).await;

    // Rebind the even keys on the topic exchange: every key routes there again.
    for i in (0..KEYS).step_by(2) {
        bind_queue(&ch, &q, &topic, &key(i)).await;
    }
    for i in 0..KEYS {
        p.publish(&topic, &key(i)).await;
    }
    assert_counts(&ch, &[(&q, 2 * odd + 1 + KEYS as u32), (&other, 2)]).await;

    // Deleting the queue takes every binding with it: a queue of the same name
    // declared afterwards is bound to nothing.
    ch.queue_delete(QueueDeleteArguments::new(&q))
        .await
        .expect("queue.delete");
    ch.declare_queue(&q).await;
    for i in 0..KEYS {
        let returned = p.publish_mandatory(&topic, &key(i)).await;
        assert_eq!(
            returned.map(|r| (r.0, r.1)),
            Some((312, "NO_ROUTE".to_owned())),
            "publish to {topic} with {}",
            key(i)
        );
    }
    p.publish(&direct, &key(7)).await;
    assert_counts(&ch, &[(&q, 0), (&other, 3)]).await;
    conn.close().await;
}
