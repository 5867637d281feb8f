//! Slow readers: a stuck subscriber stalls nobody, a backlogged one gets everything intact.

use crate::common::{next_delivery, Broker};
use crate::support::subscribe;

shard_tests!(
    stuck_subscriber_does_not_stall_others,
    backlogged_reader_gets_everything_intact,
);

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
