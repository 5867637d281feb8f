//! Retention, per segment and oldest first, never the segment being written:
//! `x-max-length-bytes` keeps the newest segments that fit, `x-max-age` removes
//! segments whose newest message is older (checked every `stream.retention_check_ms`).
//! A reader whose position retention removes goes on at the first offset left, with
//! STR-1002 naming it; STR-1001 warns before, when it is predicted; STR-1004 counts the
//! segments deleted. Their files are gone from the data directory.

use std::time::Duration;

use amqprs::channel::BasicAckArguments;
use amqprs::FieldValue;

use crate::common::{eventually, http, next_delivery, unique, Broker};
use crate::support::*;

shard_tests!(by_bytes_with_a_reader_left_behind, by_age);

/// The stream's figures from the management API.
fn stream_json(broker: &Broker, q: &str) -> serde_json::Value {
    let r = http::get(broker.http_port(), &format!("/api/queues/%2F/{q}"));
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["stream"].clone()
}

fn segment_files(data: &std::path::Path) -> usize {
    std::fs::read_dir(data.join("streams"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "seg"))
        .count()
}

const BODY: usize = 500;

fn body(i: u64) -> String {
    format!("{i:06}-{}", "x".repeat(BODY - 7))
}

async fn by_bytes_with_a_reader_left_behind(shards: usize) {
    let node = Node::new(Some(
        "[stream]\nretention_check_ms = 100\n[policy]\nwarn_horizon_ms = 60000\n",
    ));
    let broker = node.start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(
        &ch,
        &q,
        &[
            ("x-max-length-bytes", FieldValue::I(30_000)),
            ("x-stream-max-segment-size-bytes", FieldValue::I(8_000)),
        ],
    )
    .await;
    // A reader at `first` that takes one message and keeps it unacked: it stays at 1.
    let slow = conn.channel().await;
    prefetch(&slow, 1).await;
    let (_, mut slow_rx) = consume(&slow, &q, "slow", &[("x-stream-offset", s("first"))]).await;
    let mut p = Publisher::open(&conn).await;
    let mut first_delivery = None;
    // Five messages every 100 ms: the publish rate the prediction sees.
    for batch in 0..40u64 {
        let bodies: Vec<String> = (batch * 5..batch * 5 + 5).map(body).collect();
        p.publish_all(&q, &bodies).await;
        if first_delivery.is_none() {
            first_delivery = Some(next_delivery(&mut slow_rx).await);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = first_delivery.expect("the slow reader's first delivery");
    assert_eq!(offset(&d), 0);
    // What is kept: the newest segments within the limit (plus the one being written).
    let st = stream_json(&broker, &q);
    let first = st["first_offset"].as_u64().expect("first_offset");
    assert_eq!(st["committed_offset"], 200);
    assert!(first > 0, "{st}");
    assert!(
        st["disk_bytes"].as_u64().expect("bytes") <= 30_000 + 8_000 + 2 * (BODY as u64 + 100),
        "{st}"
    );
    let segments = st["segments"].as_u64().expect("segments") as usize;
    assert!(
        eventually(Duration::from_secs(5), || async {
            segment_files(node.data()) == segments
        })
        .await,
        "{} segment files, {segments} segments",
        segment_files(node.data())
    );
    // The slow reader was warned about, then moved on.
    let falling = broker
        .wait_for_log("STR-1001", Duration::from_secs(5))
        .expect("STR-1001");
    assert!(falling.contains("reader 'slow'"), "{falling}");
    let lost = broker
        .wait_for_log("STR-1002", Duration::from_secs(5))
        .expect("STR-1002");
    assert!(
        lost.contains("reader 'slow'") && lost.contains("was at offset 1"),
        "{lost}"
    );
    let logs = broker.logs();
    let at = |code: &str| logs.iter().position(|l| l.contains(code)).expect(code);
    assert!(at("STR-1001") < at("STR-1002"), "the warning comes first");
    assert!(broker.count_logs("STR-1004") > 0);
    // Its next message is the first one left (or later, if retention ran again).
    slow.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
        .await
        .expect("ack");
    let next = offset(&next_delivery(&mut slow_rx).await);
    assert!(next as u64 >= first, "{next} < {first}");
    // A new reader from `first` reads the first offset left, and everything after.
    let c = conn.channel().await;
    prefetch(&c, 250).await;
    let (_, mut rx) = consume(&c, &q, "", &[("x-stream-offset", s("first"))]).await;
    let now_first = stream_json(&broker, &q)["first_offset"]
        .as_u64()
        .expect("first");
    let got = take(&c, &mut rx, (200 - now_first) as usize).await;
    let want: Vec<(i64, String)> = (now_first..200).map(|i| (i as i64, body(i))).collect();
    assert_eq!(got, want);
    conn.close().await;
}

async fn by_age(shards: usize) {
    let node = Node::new(Some("[stream]\nretention_check_ms = 50\n"));
    let broker = node.start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(
        &ch,
        &q,
        &[
            ("x-max-age", s("1s")),
            ("x-stream-max-segment-size-bytes", FieldValue::I(2_000)),
        ],
    )
    .await;
    let mut p = Publisher::open(&conn).await;
    for batch in 0..6u64 {
        let bodies: Vec<String> = (batch * 5..batch * 5 + 5).map(body).collect();
        p.publish_all(&q, &bodies).await;
    }
    let st = stream_json(&broker, &q);
    assert_eq!(st["first_offset"], 0);
    assert!(st["segments"].as_u64().expect("segments") > 2, "{st}");
    // Once every segment but the newest is older than a second, only it is left.
    assert!(
        eventually(Duration::from_secs(5), || async {
            stream_json(&broker, &q)["segments"] == 1
        })
        .await,
        "{}",
        stream_json(&broker, &q)
    );
    let st = stream_json(&broker, &q);
    let first = st["first_offset"].as_u64().expect("first");
    assert!(first > 0 && first < 30, "{st}");
    // The files go a moment after the index lets them go.
    assert!(
        eventually(Duration::from_secs(5), || async {
            segment_files(node.data()) == 1
        })
        .await,
        "{} segment files",
        segment_files(node.data())
    );
    assert!(broker.count_logs("STR-1004") > 0);
    let c = conn.channel().await;
    prefetch(&c, 50).await;
    let (_, mut rx) = consume(&c, &q, "", &[("x-stream-offset", s("first"))]).await;
    let got = take(&c, &mut rx, (30 - first) as usize).await;
    let want: Vec<(i64, String)> = (first..30).map(|i| (i as i64, body(i))).collect();
    assert_eq!(got, want);
    conn.close().await;
}
