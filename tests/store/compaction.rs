//! Segment life cycle: compaction — one old message that nobody consumes (a durable
//! subscription whose subscriber is away) must not keep every later segment on disk;
//! the store copies the few live entries of the oldest segment forward and deletes it,
//! and the copies are what a restart finds — and recycling — a deleted segment's file
//! is overwritten as a later segment, and nothing of its earlier life comes back.

use std::time::Duration;

use crate::common::eventually;
use crate::support::*;

store_tests!(
    an_old_message_does_not_pin_the_segments_after_it,
    recycled_segments_bring_nothing_back,
    a_copied_delivered_message_comes_back_redelivered
);

const SEGMENT: u64 = 65_536;
const SIZE: usize = 4096;

/// `[store] segment_size = 65536`. Two durable queues on the same shard: `pinned` gets
/// messages 0 and 1 and is never consumed; `busy` then gets 256 persistent 4 KiB messages
/// (1 MiB, about 16 segments), which are consumed and acked. Within 10 s the shard is
/// down to at most 2 segments (without compaction, the first segment would hold
/// `pinned`'s messages and keep all 16). After a restart `pinned` still holds messages 0
/// and 1, intact, not redelivered, and `busy` is empty.
async fn an_old_message_does_not_pin_the_segments_after_it() {
    let node = Node::new(Some(&format!("[store]\nsegment_size = {SEGMENT}\n")));
    let mut broker = node.start(SHARDS);
    // Both queues on shard 0: names from `queues_on` until two share it.
    let qs = queues_on("store-pin", SHARDS, 2);
    let (pinned, busy) = (&qs[0], &qs[1]);
    assert_eq!(home(pinned, SHARDS), home(busy, SHARDS));
    let shard = home(pinned, SHARDS);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, pinned).await;
    declare_durable(&p.ch, busy).await;
    for i in 0..2 {
        p.publish("", pinned, persistent(), &body(pinned, i, SIZE))
            .await;
    }
    p.wait_all().await;
    for i in 0..256 {
        p.publish("", busy, persistent(), &body(busy, i, SIZE))
            .await;
        if i % 8 == 7 {
            p.wait_all().await;
        }
    }
    p.wait_all().await;
    let before = segments(node.data(), shard).len();
    assert!(
        before > 8,
        "{before} segments after 1 MiB with segment_size {SEGMENT}"
    );

    let got = drain(&conn, busy).await;
    assert_series(&got, busy, 0..256, SIZE, |_| false);
    let compacted = eventually(Duration::from_secs(10), || async {
        segments(node.data(), shard).len() <= 2
    })
    .await;
    assert!(
        compacted,
        "the oldest segment still pins the others 10 s after they were acked: {}",
        disk_report(node.data())
    );
    conn.close().await;

    restart(&mut broker, &node, SHARDS);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    assert_eq!(ch.message_count(busy).await, 0);
    let got = drain(&conn, pinned).await;
    assert_series(&got, pinned, 0..2, SIZE, |_| false);
    conn.close().await;
    stop(&mut broker);
}

/// `[store] segment_size = 65536`, one durable queue. Four rounds of 64 persistent 4 KiB
/// messages, each drained with acks before the next: segments fill, are deleted and
/// their files recycled (a `spare` is overwritten from its start as a later segment, its
/// old records still behind the new ones). Then 24 keepers (96 KiB, more than a segment,
/// so at least one roll takes the spare) are published and confirmed, and the broker is
/// killed (SIGKILL). After the restart the queue holds exactly the 24 keepers, in order, and recovery logged no damage (no MST-1010): the old records of a
/// recycled file are neither taken for messages nor for a torn tail.
async fn recycled_segments_bring_nothing_back() {
    let node = Node::new(Some(&format!("[store]\nsegment_size = {SEGMENT}\n")));
    let mut broker = node.start(SHARDS);
    let q = &queues_on("store-recycle", SHARDS, 1)[0];
    let shard = home(q, SHARDS);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, q).await;
    for round in 0..4u64 {
        for i in 0..64 {
            p.publish("", q, persistent(), &body(q, round * 64 + i, SIZE))
                .await;
        }
        p.wait_all().await;
        let got = drain(&conn, q).await;
        assert_series(&got, q, round * 64..round * 64 + 64, SIZE, |_| false);
    }
    let recycled = eventually(Duration::from_secs(10), || async {
        shard_dir(node.data(), shard).join("spare").is_file()
    })
    .await;
    assert!(
        recycled,
        "no spare segment file: {}",
        disk_report(node.data())
    );
    for i in 1000..1024 {
        p.publish("", q, persistent(), &body(q, i, SIZE)).await;
    }
    p.wait_all().await;
    crash(&mut broker, &node, SHARDS);
    let conn = broker.connect().await;
    let got = drain(&conn, q).await;
    assert_series(&got, q, 1000..1024, SIZE, |_| false);
    let damage = texts_with(&broker, "MST-1010");
    assert!(damage.is_empty(), "recovery reported damage: {damage:?}");
    conn.close().await;
    stop(&mut broker);
}

/// `[store] segment_size = 65536`. Two durable queues on one shard: `held` gets message
/// 0, which a channel takes with `basic.get` and never acks; `busy` then gets 1 MiB that
/// is consumed and acked, so compaction copies `held`'s message forward and the old
/// segments go (at most 2 remain). After kill -9 and a restart, message 0 comes back
/// with redelivered=true: the copy keeps the delivered mark of the segment it left.
async fn a_copied_delivered_message_comes_back_redelivered() {
    let node = Node::new(Some(&format!("[store]\nsegment_size = {SEGMENT}\n")));
    let mut broker = node.start(SHARDS);
    let qs = queues_on("store-mark", SHARDS, 2);
    let (held, busy) = (&qs[0], &qs[1]);
    let shard = home(held, SHARDS);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, held).await;
    declare_durable(&p.ch, busy).await;
    p.publish("", held, persistent(), &body(held, 0, SIZE))
        .await;
    p.wait_all().await;
    let getter = conn.channel().await;
    let (_, _, b) = getter.get(held, false).await.expect("basic.get-ok");
    assert_eq!(b, body(held, 0, SIZE));
    for i in 0..256 {
        p.publish("", busy, persistent(), &body(busy, i, SIZE))
            .await;
        if i % 8 == 7 {
            p.wait_all().await;
        }
    }
    p.wait_all().await;
    let got = drain(&conn, busy).await;
    assert_eq!(got.len(), 256);
    let compacted = eventually(Duration::from_secs(10), || async {
        segments(node.data(), shard).len() <= 2
    })
    .await;
    assert!(compacted, "no compaction: {}", disk_report(node.data()));
    crash(&mut broker, &node, SHARDS);
    let conn = broker.connect().await;
    let got = drain(&conn, held).await;
    assert_series(&got, held, 0..1, SIZE, |_| true);
    conn.close().await;
    stop(&mut broker);
}
