//! What a stream holds in memory: its tail cache (`stream.tail_cache_bytes`), and for
//! each reader behind it no more than its credit. 24 MiB in a stream with a 256 KiB
//! tail cache; 40 readers from `first`, prefetch 5, that never ack: the broker's message
//! memory stays within the cache plus 40 × 5 messages (plus read buffers, which the
//! ledger does not count), each reader holding exactly its five. Then every reader
//! acks on and reads the whole log, byte for byte.

use std::time::Duration;

use amqprs::channel::BasicAckArguments;
use amqprs::BasicProperties;

use crate::common::{assert_no_delivery, eventually, http, next_delivery, unique, Broker, Chan};
use crate::support::*;

shard_tests!(slow_readers_hold_no_more_than_their_credit);

const SIZE: usize = 64 * 1024;
const MESSAGES: u64 = 384;
const READERS: usize = 40;
const PREFETCH: u16 = 5;

fn body(i: u64) -> Vec<u8> {
    let mut b = vec![(i % 251) as u8; SIZE];
    b[..8].copy_from_slice(&i.to_be_bytes());
    b
}

fn memory(port: u16) -> f64 {
    let m = http::parse_openmetrics(&http::get(port, "/metrics").body);
    http::value(&m, "sluice_memory_messages_bytes", &[]).expect("memory figure")
}

async fn slow_readers_hold_no_more_than_their_credit(shards: usize) {
    let broker = Broker::start_with_config(shards, "[stream]\ntail_cache_bytes = 262144\n");
    let port = broker.http_port();
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    for i in 0..MESSAGES {
        p.ch.publish_props("", &q, BasicProperties::default(), &body(i))
            .await;
        p.published += 1;
        if p.published % 32 == 0 {
            p.wait_confirmed().await;
        }
    }
    p.wait_confirmed().await;
    // 24 MiB on disk; in memory the tail cache and little else.
    let idle_limit = 262_144.0 + 4.0 * SIZE as f64 + 1_048_576.0;
    assert!(
        eventually(Duration::from_secs(5), || async {
            memory(port) < idle_limit
        })
        .await,
        "message memory {} with no reader",
        memory(port)
    );
    let mut readers: Vec<(Chan, _)> = Vec::new();
    for _ in 0..READERS {
        let c = conn.channel().await;
        prefetch(&c, PREFETCH).await;
        let (_, rx) = consume(&c, &q, "", &[("x-stream-offset", s("first"))]).await;
        readers.push((c, rx));
    }
    let mut tags = Vec::new();
    for (_, rx) in readers.iter_mut() {
        let mut last = 0;
        for want in 0..u64::from(PREFETCH) {
            let d = next_delivery(rx).await;
            assert_eq!(offset(&d) as u64, want);
            last = d.delivery_tag;
        }
        tags.push(last);
    }
    for (_, rx) in readers.iter_mut().take(3) {
        assert_no_delivery(rx, Duration::from_millis(100)).await;
    }
    let credit_bound = (READERS * usize::from(PREFETCH) * (SIZE + 1024)) as f64;
    let held = memory(port);
    assert!(
        held <= idle_limit + credit_bound,
        "message memory {held}: more than the cache and {READERS} × {PREFETCH} messages"
    );
    // Everyone reads on to the end, acking as it goes.
    for ((c, rx), tag) in readers.iter_mut().zip(tags) {
        c.basic_ack(BasicAckArguments::new(tag, true))
            .await
            .expect("ack");
        for want in u64::from(PREFETCH)..MESSAGES {
            let d = next_delivery(rx).await;
            assert_eq!(offset(&d) as u64, want);
            assert_eq!(d.body, body(want), "offset {want}");
            c.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
                .await
                .expect("ack");
        }
    }
    conn.close().await;
}
