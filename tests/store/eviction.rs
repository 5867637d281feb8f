//! Eviction: under memory pressure the bodies of persistent messages on durable queues
//! leave memory (they are on disk) and are read back when they are delivered, by a
//! consumer or by `basic.get`, in order and intact.

use std::time::Duration;

use crate::common::eventually;
use crate::support::*;

store_tests!(
    bodies_leave_memory_and_come_back_in_order,
    recovered_messages_are_evicted_and_read_back,
    sparse_records_are_found_however_far_apart
);

const SIZE: usize = 4096;
const COUNT: u64 = 8192;

/// The message bytes of the newest `BRK-1010` memory report.
fn message_memory(broker: &crate::common::Broker) -> Option<u64> {
    texts_with(broker, "BRK-1010").last().and_then(|l| {
        // "... Messages : 12,345,678, Queue entries : ..." (thousands separated).
        let rest = &l[l.find("Messages : ")? + "Messages : ".len()..];
        rest[..rest.find(", ")?].replace(',', "").parse().ok()
    })
}

const CONFIG: &str = "[memory]\nhigh_watermark = 67108864\nreport_interval_ms = 100\n\
                      [store]\npage_out_fraction = 0.25\n";

/// Publishes `COUNT` persistent messages to a new durable queue, confirmed.
async fn fill(broker: &crate::common::Broker, prefix: &str) -> String {
    let q = queues_on(prefix, SHARDS, 1).remove(0);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, &q).await;
    for i in 0..COUNT {
        p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
        if i % 256 == 255 {
            p.wait_all().await;
        }
    }
    p.wait_all().await;
    conn.close().await;
    q
}

/// Waits for `q`'s MST-1012 line and message memory under 16 MiB.
async fn wait_evicted(broker: &crate::common::Broker, q: &str) {
    let line = format!("[vh(/)/qu({q})] MST-1012 : Evicted");
    let evicted = eventually(Duration::from_secs(10), || async {
        !texts_with(broker, &line).is_empty()
            && message_memory(broker).is_some_and(|m| m < 16 << 20)
    })
    .await;
    assert!(
        evicted,
        "no eviction within 10 s: {:?}, message memory {:?}",
        texts_with(broker, "MST-1012"),
        message_memory(broker)
    );
}

/// `[memory] high_watermark = 64 MiB`, `[store] page_out_fraction = 0.25` (evict above
/// 16 MiB of message memory), memory reports every 100 ms. 8,192 persistent 4 KiB
/// messages (32 MiB) go to one durable queue without consumers, confirmed. Then:
/// - `[vh(/)/qu(Q)] MST-1012 : Evicted` is logged, and message memory (BRK-1010) falls
///   below 16 MiB while the queue still counts all 8,192 messages;
/// - 1,500 `basic.get`s (more than the 1,024 entries kept in memory at the head) return
///   messages 0..1500 in order, intact;
/// - a consumer with manual acks receives 1500..8192 in order, intact, none redelivered;
/// - after a restart the queue is empty (every read-back message was acked, none lost).
async fn bodies_leave_memory_and_come_back_in_order() {
    let node = Node::new(Some(CONFIG));
    let mut broker = node.start(SHARDS);
    let q = &fill(&broker, "store-evict").await;
    wait_evicted(&broker, q).await;
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    assert_eq!(ch.message_count(q).await, COUNT as u32);

    for i in 0..1500 {
        let (_, _, b) = ch.get(q, true).await.expect("basic.get-ok");
        assert_eq!(parse_body(&b), (q.to_string(), i), "basic.get #{i}");
        assert_eq!(b, body(q, i, SIZE), "body of #{i}");
    }
    let got = drain(&conn, q).await;
    assert_series(&got, q, 1500..COUNT, SIZE, |_| false);
    conn.close().await;

    restart(&mut broker, &node, SHARDS);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    assert_eq!(ch.message_count(q).await, 0);
    conn.close().await;
    stop(&mut broker);
}

/// The same configuration; 8,192 messages are published and evicted, then the broker
/// restarts: recovery puts every message back in memory, the next eviction pass
/// releases them again (MST-1012 after the restart, message memory under 16 MiB), and
/// a consumer receives all 8,192 in order, intact, read back from the recovered
/// segments.
async fn recovered_messages_are_evicted_and_read_back() {
    let node = Node::new(Some(CONFIG));
    let mut broker = node.start(SHARDS);
    let q = &fill(&broker, "store-evict-rec").await;
    wait_evicted(&broker, q).await;
    restart(&mut broker, &node, SHARDS);
    wait_evicted(&broker, q).await;
    let conn = broker.connect().await;
    let got = drain(&conn, q).await;
    assert_series(&got, q, 0..COUNT, SIZE, |_| false);
    conn.close().await;
    stop(&mut broker);
}

/// `[memory] high_watermark = 8 MiB`, `page_out_fraction = 0.05` (evict above about
/// 400 KB). Two durable queues on one shard: `sparse` gets 1,024 persistent 1 KiB
/// messages, then 40 more, each followed by two 700 KB messages to `busy` that are
/// consumed and acked at once — so the records of `sparse`'s last 40 lie more than a
/// read-back chunk (1 MiB) apart in the segments. Once MST-1012 says those 40 are on
/// disk only, a consumer of `sparse` receives all 1,064 in order, intact (a read-back
/// that found nothing of its queue in a chunk once stalled there for ever).
async fn sparse_records_are_found_however_far_apart() {
    const DENSE: u64 = 1024;
    const SPARSE: u64 = 40;
    const SMALL: usize = 1024;
    const BIG: usize = 700 * 1024;
    let node = Node::new(Some(
        "[memory]\nhigh_watermark = 8388608\nreport_interval_ms = 100\n\
         [store]\npage_out_fraction = 0.05\n",
    ));
    let mut broker = node.start(SHARDS);
    let qs = queues_on("store-sparse", SHARDS, 2);
    let (sparse, busy) = (&qs[0], &qs[1]);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, sparse).await;
    declare_durable(&p.ch, busy).await;
    for i in 0..DENSE {
        p.publish("", sparse, persistent(), &body(sparse, i, SMALL))
            .await;
    }
    p.wait_all().await;
    for i in DENSE..DENSE + SPARSE {
        p.publish("", sparse, persistent(), &body(sparse, i, SMALL))
            .await;
        p.publish("", busy, persistent(), &body(busy, 2 * i, BIG))
            .await;
        p.publish("", busy, persistent(), &body(busy, 2 * i + 1, BIG))
            .await;
        p.wait_all().await;
        let got = drain(&conn, busy).await;
        assert_eq!(got.len(), 2);
    }
    let line = format!("[vh(/)/qu({sparse})] MST-1012 : Evicted");
    let all_evicted = eventually(Duration::from_secs(10), || async {
        texts_with(&broker, &line)
            .last()
            .is_some_and(|l| l.ends_with(&format!(": {SPARSE} on disk only")))
    })
    .await;
    assert!(
        all_evicted,
        "the {SPARSE} sparse entries were not evicted: {:?}",
        texts_with(&broker, "MST-1012")
    );
    let got = drain(&conn, sparse).await;
    assert_series(&got, sparse, 0..DENSE + SPARSE, SMALL, |_| false);
    conn.close().await;
    stop(&mut broker);
}
