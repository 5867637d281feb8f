//! Disk: the store quota (store_overfull_size / store_underfull_size) blocks and releases
//! the vhost's publishers, and segment GC gives the space back once consumers ack.

use std::time::Duration;

use amqprs::channel::BasicAckArguments;

use crate::common::raw::RawConn;
use crate::common::wire::Props;
use crate::common::{eventually, next_delivery, unique, Broker, EVENT_TIMEOUT};
use crate::support::*;

store_tests!(
    store_quota_blocks_and_releases_publishers,
    segment_gc_reclaims_acked_space
);

const SEGMENT: u64 = 65_536;
const SIZE: usize = 4096;
const OVERFULL: u64 = 1_048_576;
const UNDERFULL: u64 = 524_288;
/// The overshoot this suite accepts above store_overfull_size.
const OVERSHOOT: u64 = 1_048_576;

const CONNECTION_BLOCKED: (u16, u16) = (10, 60);
const CONNECTION_UNBLOCKED: (u16, u16) = (10, 61);

const OVERFULL_LINE: &str =
    "[vh(/)/ms(store)] MST-1008 : Store overfull, flow control will be enforced";
const CLEARED_LINE: &str = "[vh(/)/ms(store)] MST-1009 : Store overfull condition cleared";

/// A `sluice::ops` line that is the contract's `line`, optionally followed by Qpid-style
/// details (` : Size : …`): the contract gives the text without numbers.
fn is_line(l: &Line, line: &str) -> bool {
    l.target == "sluice::ops"
        && l.text
            .strip_prefix(line)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(" : "))
}

fn quota_config() -> String {
    format!(
        "[store]\nsegment_size = {SEGMENT}\n\n[vhost.\"/\"]\n\
         store_overfull_size = {OVERFULL}\nstore_underfull_size = {UNDERFULL}\n"
    )
}

/// The next connection-level method on a raw connection that announced
/// `connection.blocked`; panics after the raw read timeout.
fn raw_expect(raw: &mut RawConn, id: (u16, u16), what: &str) -> crate::common::raw::Method {
    let m = raw
        .read_method()
        .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
    assert_eq!((m.id, m.channel), (id, 0), "expected {what}");
    m
}

/// `[store] segment_size = 65536`, `[vhost."/"] store_overfull_size = 1 MiB,
/// store_underfull_size = 512 KiB`.
/// - a raw connection (announces `connection.blocked`) publishes one transient message
///   to a scratch queue: it is one of the vhost's publishers;
/// - an amqprs confirm channel (amqprs does not announce `connection.blocked`) publishes
///   persistent 4 KiB messages to a durable queue without consumers, eight at a time,
///   each batch confirmed, until it gets channel.flow(active=false);
/// - the log has `[vh(/)/ms(store)] MST-1008 : Store overfull, flow control will be
///   enforced` (details may follow after ` : `), exactly once; the raw connection gets connection.blocked "store overfull"; the
///   bytes under DIR are above store_overfull_size, by less than 1 MiB;
/// - a consumer on another connection receives every message, in order, and acks them;
///   then `[vh(/)/ms(store)] MST-1009 : Store overfull condition cleared` (after
///   MST-1008), channel.flow(active=true) to the publisher, connection.unblocked to the
///   raw connection; DIR is below store_underfull_size; a new persistent publish is
///   confirmed and delivered.
async fn store_quota_blocks_and_releases_publishers() {
    let node = Node::new(Some(&quota_config()));
    let broker = node.start(SHARDS);
    let (q, scratch) = (unique("store-quota"), unique("store-quota-scratch"));
    let admin = broker.connect().await;
    let ach = admin.channel().await;
    declare_durable(&ach, &q).await;
    ach.declare_queue(&scratch).await;

    let mut raw = broker.raw();
    raw.channel_open(1);
    raw.publish(1, "", &scratch, &Props::default(), b"raw publisher")
        .expect("raw publish");
    ach.wait_message_count(&scratch, 1).await;

    let pconn = broker.connect().await;
    let mut p = Publisher::open(&pconn).await;
    let mut i = 0u64;
    while !p.flows.contains(&false) {
        assert!(
            i < 1024,
            "no channel.flow(false) after {i} messages of {SIZE} bytes; {}; MST-1008 lines: {:?}",
            disk_report(node.data()),
            texts_with(&broker, "MST-1008")
        );
        for _ in 0..8 {
            p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
            i += 1;
        }
        p.wait_all().await;
    }
    let published = i;
    assert_eq!(p.flows, vec![false], "channel.flow sequence");
    wait_line(&broker, EVENT_TIMEOUT, "MST-1008", |l| {
        is_line(l, OVERFULL_LINE)
    });
    let blocked = raw_expect(&mut raw, CONNECTION_BLOCKED, "connection.blocked");
    assert_eq!(blocked.dec().shortstr(), "store overfull", "blocked reason");
    let used = tree_bytes(node.data());
    assert!(
        used > OVERFULL && used < OVERFULL + OVERSHOOT,
        "bytes under DIR when blocked: {used} (overfull {OVERFULL}, accepted overshoot \
         {OVERSHOOT}); {}",
        disk_report(node.data())
    );
    assert!(
        (published * SIZE as u64) < OVERFULL + OVERSHOOT,
        "{published} messages of {SIZE} bytes published before the block"
    );
    assert_eq!(ach.message_count(&q).await, published as u32);

    // Consume and ack everything.
    let cconn = broker.connect().await;
    let c = cconn.channel().await;
    let (_tag, mut rx) = c.consume_manual(&q).await;
    for n in 0..published {
        let d = next_delivery(&mut rx).await;
        assert_delivery(&d, &q, n, SIZE, false);
        if n % 16 == 15 || n + 1 == published {
            c.basic_ack(BasicAckArguments::new(d.delivery_tag, true))
                .await
                .expect("basic.ack");
        }
    }
    assert_eq!(c.message_count(&q).await, 0);

    wait_line(&broker, Duration::from_secs(15), "MST-1009", |l| {
        is_line(l, CLEARED_LINE)
    });
    p.wait_flow(true).await;
    assert_eq!(p.flows, vec![false, true], "channel.flow sequence");
    raw_expect(&mut raw, CONNECTION_UNBLOCKED, "connection.unblocked");
    let used = tree_bytes(node.data());
    assert!(
        used < UNDERFULL,
        "released at {used} bytes under DIR (underfull {UNDERFULL}); {}",
        disk_report(node.data())
    );
    assert_eq!(texts_with(&broker, "MST-1008").len(), 1, "one MST-1008");
    assert_eq!(texts_with(&broker, "MST-1009").len(), 1, "one MST-1009");
    let set = position(&broker, |t| t.contains("MST-1008")).unwrap();
    let cleared = position(&broker, |t| t.contains("MST-1009")).unwrap();
    assert!(set < cleared, "MST-1009 before MST-1008");

    // Publishing works again.
    p.publish("", &q, persistent(), &body(&q, published, SIZE))
        .await;
    p.wait_all().await;
    let d = next_delivery(&mut rx).await;
    assert_delivery(&d, &q, published, SIZE, false);
    c.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
        .await
        .expect("basic.ack");
    raw.publish(1, "", &scratch, &Props::default(), b"raw again")
        .expect("raw publish");
    ach.wait_message_count(&scratch, 2).await;
    close_all(broker, [admin, pconn, cconn]).await;
}

async fn close_all<const N: usize>(mut broker: Broker, conns: [crate::common::Conn; N]) {
    for c in conns {
        c.close().await;
    }
    stop(&mut broker);
}

/// `[store] segment_size = 65536`. Two durable queues, one homed on each shard, get 256
/// persistent 4 KiB messages each (2 MiB in all), published eight per queue at a time,
/// each batch confirmed before the next, so that one group commit holds at most one
/// batch. The segment files then hold at least that much, each shard has more than 2
/// segments, and every segment but the newest is at most segment_size plus one batch
/// (a segment rolls over once past segment_size). One queue is consumed with manual
/// acks, the other with auto-ack. Within 10 s the files under DIR/messages shrink to at
/// most 2 segments per shard and at most 2 x (segment_size + one batch) bytes per shard.
/// After a restart both queues exist and are empty.
async fn segment_gc_reclaims_acked_space() {
    const PER_QUEUE: u64 = 256;
    const BATCH: u64 = 8;
    /// The bytes one batch adds to a shard's segment, with generous room for the
    /// routing facts and record headers of each message.
    const BATCH_BYTES: u64 = BATCH * (SIZE as u64 + 1024);
    let node = Node::new(Some(&format!("[store]\nsegment_size = {SEGMENT}\n")));
    let mut broker = node.start(SHARDS);
    let qs = queues_on("store-gc", SHARDS, 1);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    for q in &qs {
        declare_durable(&p.ch, q).await;
    }
    for i in 0..PER_QUEUE {
        for q in &qs {
            p.publish("", q, persistent(), &body(q, i, SIZE)).await;
        }
        if i % BATCH == BATCH - 1 {
            p.wait_all().await;
        }
    }
    p.wait_all().await;

    let messages = node.data().join("messages");
    let before = tree_bytes(&messages);
    assert!(
        before >= 2 * PER_QUEUE * SIZE as u64,
        "{before} bytes under DIR/messages after {} bytes of bodies",
        2 * PER_QUEUE * SIZE as u64
    );
    for shard in 0..SHARDS {
        let segs = segments(node.data(), shard);
        assert!(
            segs.len() > 2,
            "shard {shard} has {} segments after 1 MiB with segment_size {SEGMENT}",
            segs.len()
        );
        for (_, path) in &segs[..segs.len() - 1] {
            let len = file_len(path);
            assert!(
                len <= SEGMENT + BATCH_BYTES,
                "{} is {len} bytes (segment_size {SEGMENT}, one batch {BATCH_BYTES})",
                path.display()
            );
        }
    }

    // Q0 with manual acks, Q1 with auto-ack.
    let c = conn.channel().await;
    let (_tag, mut rx) = c.consume_manual(&qs[0]).await;
    for i in 0..PER_QUEUE {
        let d = next_delivery(&mut rx).await;
        assert_delivery(&d, &qs[0], i, SIZE, false);
        c.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("basic.ack");
    }
    assert_eq!(c.message_count(&qs[0]).await, 0);
    let got = drain(&conn, &qs[1]).await;
    assert_series(&got, &qs[1], 0..PER_QUEUE, SIZE, |_| false);

    let per_shard_max = 2 * (SEGMENT + BATCH_BYTES);
    let shrunk = eventually(Duration::from_secs(10), || async {
        (0..SHARDS).all(|shard| {
            let segs = segments(node.data(), shard);
            segs.len() <= 2 && tree_bytes(&shard_dir(node.data(), shard)) <= per_shard_max
        })
    })
    .await;
    assert!(
        shrunk,
        "segments not collected within 10 s after every message was acked: {} (was {before} \
         bytes under DIR/messages; at most 2 segments and {per_shard_max} bytes per shard \
         expected)",
        disk_report(node.data())
    );
    assert!(
        tree_bytes(&messages) < before / 4,
        "DIR/messages did not go down"
    );
    conn.close().await;

    restart(&mut broker, &node, SHARDS);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    for q in &qs {
        assert_eq!(ch.message_count(q).await, 0, "{q} after the restart");
    }
    conn.close().await;
    stop(&mut broker);
}
