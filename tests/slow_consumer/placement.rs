//! A subscriber whose channel is on another shard than its queue: the breach is found on
//! the queue's home shard and the 506 close travels to the channel's shard as a message.
//! A connection's shard is found from a server-named queue (those are created on the
//! declaring connection's shard); a named queue's home is fnv1a(vhost, name) mod shards,
//! so names are picked to place each queue where the test wants it.

use crate::common::Conn;
use crate::harness::*;

slow_tests!(subscriber_on_another_shard_than_its_queue);

/// amqprs. On every shard, two never-acking subscribers with max_count 10 on their own
/// connections: one consuming from a queue homed on the same shard, one from a queue
/// homed on another shard (with two shards). 30 messages: all four (two with one shard)
/// are closed with 506, their queues are gone, their connections usable; a fast
/// subscriber gets everything.
async fn subscriber_on_another_shard_than_its_queue(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut fast = Sub::fast(&broker, "xs.tick").await;

    // Two connections per shard (the kernel spreads connections over the shards'
    // SO_REUSEPORT listeners; keep connecting until each shard has two).
    let mut by_shard: Vec<Vec<Conn>> = (0..shards).map(|_| Vec::new()).collect();
    for _ in 0..128 {
        if by_shard.iter().all(|c| c.len() == 2) {
            break;
        }
        let conn = broker.connect().await;
        let s = shard_of(&conn, shards).await as usize;
        if by_shard[s].len() < 2 {
            by_shard[s].push(conn);
        } else {
            conn.close().await;
        }
    }

    let mut subs = Vec::new();
    for (s, conns) in by_shard.into_iter().enumerate() {
        assert_eq!(conns.len(), 2, "too few connections landed on shard {s}");
        for (conn, queue_home) in conns.into_iter().zip([(s + 1) % shards, s]) {
            let queue = name_on_shard("xs-slow", queue_home as u16, shards);
            assert_eq!(home(&queue, shards) as usize, queue_home);
            let ch = conn.channel().await;
            declare_bound(
                &ch,
                &queue,
                false,
                &[(MAX_COUNT, Arg::Int(10))],
                "amq.topic",
                "xs.tick",
            )
            .await;
            let (_, rx) = ch.consume_manual(&queue).await;
            subs.push(Sub {
                conn,
                ch,
                queue,
                rx,
            });
        }
    }

    let (_p, pch) = publisher(&broker).await;
    publish_seqs(&pch, "amq.topic", "xs.tick", 1..=30, 64).await;
    publish_end(&pch, "amq.topic", "xs.tick").await;
    fast.expect_all(30).await;

    for sub in &mut subs {
        assert_slow_deleted(&broker, sub, "count").await;
        assert_prefix("never-acking reader", &buffered(&mut sub.rx));
    }
    assert_delete_logged(&broker, &subs[0].queue, "count", subs.len()).await;
}
