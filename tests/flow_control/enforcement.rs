//! Clients that ignore channel.flow: held within the documented margin, never taken for
//! dead while held, and — when they also hold unacknowledged deliveries — released by
//! closing the offending channel after the enforcement timeout rather than deadlocked.

use std::time::{Duration, Instant};

use amqprs::channel::BasicConsumeArguments;

use crate::common::raw::READ_TIMEOUT;
use crate::common::wire::{self, m};
use crate::common::{unique, wait_until, Broker};
use crate::support::*;

shard_tests!(
    ignoring_client_is_held_within_margin_and_kept_alive,
    publishing_consumer_is_not_deadlocked,
    held_connection_whose_peer_vanished_is_dropped,
);

/// Defaults from config/sluice.toml that make up the margin.
const GRACE: u64 = 262_144;
const READ_BUFFER: u64 = 131_072;
const INBOX_BYTES: u64 = 4_194_304;

/// A raw client that never reads (so never sees channel.flow) floods a queue of capacity
/// 64 KiB with 16 MiB. The broker logs CON-1003 with the grace, and while it holds the
/// connection (over 3 s, three times the negotiated 1 s heartbeat) the queue never holds
/// more than capacity + inbox_bytes + (grace + read buffer) for the one connection. Then
/// the queue is drained: every message arrives once, in order, the connection was never
/// closed (no CON-1002), and it still answers a request.
async fn ignoring_client_is_held_within_margin_and_kept_alive(shards: usize) {
    const SIZE: u64 = 4096;
    const TOTAL: u64 = 4096;
    const CAPACITY: u64 = 65_536;
    const MARGIN: u64 = CAPACITY + INBOX_BYTES + GRACE + READ_BUFFER;
    let broker = Broker::start(shards);
    let (observer, och) = conn_and_channel(&broker).await;
    let q = unique("ignorer");
    declare_with(&och, &q, capacity_args(CAPACITY as i64, None)).await;

    let mut raw = crate::common::RawConn::connect(&broker.addr());
    raw.handshake_with(1);
    raw.channel_open(1);
    let subject = raw_subject(&broker, &raw);
    // Control: the same heartbeat on a connection that is merely silent, not held.
    let mut silent = crate::common::RawConn::connect(&broker.addr());
    silent.handshake_with(1);
    let silent_subject = raw_subject(&broker, &silent);
    let writer = flood(&raw, 1, &q, SIZE as usize, TOTAL);

    let suspended = wait_ops(&broker, Duration::from_secs(10), |l| {
        l.starts_with(&format!(
            "[{subject}] CON-1003 : Reading suspended : channel 1 published "
        ))
    })
    .unwrap_or_else(|| {
        panic!(
            "no CON-1003 for {subject}; log:\n{}",
            broker.logs().join("\n")
        )
    });
    let excess = suspended
        .split(" published ")
        .nth(1)
        .and_then(|s| {
            s.strip_suffix(&format!(
                " bytes after it was told to stop (grace {} bytes)",
                thousands(GRACE)
            ))
        })
        .and_then(parse_thousands)
        .unwrap_or_else(|| panic!("CON-1003 line not in the contract's format: {suspended}"));
    assert!(
        excess > GRACE && excess <= GRACE + SIZE,
        "suspended at {excess} bytes past the signal, grace {GRACE}, messages of {SIZE}"
    );

    // Held for more than three heartbeat intervals; the queue stays within the margin.
    let held_since = Instant::now();
    let mut samples = 0;
    while held_since.elapsed() < Duration::from_millis(3500) {
        let count = u64::from(och.message_count(&q).await);
        assert!(
            count * SIZE <= MARGIN,
            "queue holds {count} x {SIZE} bytes, margin {MARGIN}"
        );
        samples += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(samples >= 10);
    assert!(
        writer.written() < TOTAL,
        "the client could hand all {TOTAL} publishes to the socket: the test proves nothing"
    );
    assert_alive(&broker, &subject);
    let silent_closed = lines_containing(&broker, &format!("[{silent_subject}] CON-1002"));
    assert!(
        !silent_closed.is_empty(),
        "control: a silent connection with the same 1 s heartbeat was not closed in 3.5 s"
    );
    drop(silent);

    // Drain: everything the client wrote arrives exactly once, in order.
    let args = BasicConsumeArguments::new(&q, "").auto_ack(true).finish();
    let (_, mut rx) = och.basic_consume_rx(args).await.expect("consume");
    let drain = tokio::spawn(async move {
        let mut next = 0u64;
        while next < TOTAL {
            let msg = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no delivery after {next}"))
                .expect("consumer stream");
            let body = msg.content.expect("content");
            assert_eq!(body.len() as u64, SIZE);
            assert_eq!(number_of(&body), next, "lost, duplicated or reordered");
            next += 1;
        }
    });
    tokio::task::spawn_blocking(move || writer.finish())
        .await
        .expect("writer");
    // The connection is alive and in sync: a request on it is answered. Everything the
    // broker sent meanwhile is still unread in the socket: its heartbeats kept coming
    // while it held the connection (else the client would take the broker for dead).
    raw.send_heartbeat().expect("heartbeat");
    raw_send_passive_declare(&mut raw, 1, &q);
    let mut heartbeats = 0;
    loop {
        let (ty, channel, payload) = raw
            .read_frame()
            .unwrap_or_else(|e| panic!("waiting for queue.declare-ok: {e}"));
        if ty == wire::FRAME_HEARTBEAT {
            heartbeats += 1;
            continue;
        }
        assert_eq!(ty, wire::FRAME_METHOD, "unexpected frame type {ty}");
        let id = (
            u16::from_be_bytes([payload[0], payload[1]]),
            u16::from_be_bytes([payload[2], payload[3]]),
        );
        match (id, channel) {
            (m::QUEUE_DECLARE_OK, 1) => break,
            (CHANNEL_FLOW, 1) => continue,
            other => panic!("unexpected {other:?} on the held connection"),
        }
    }
    assert!(
        heartbeats >= 3,
        "{heartbeats} heartbeats from the broker in over 3.5 s of a 1 s heartbeat"
    );
    drain.await.expect("every message drained");
    expect_line(&broker, &format!("[{subject}] CON-1004 : Reading resumed"));
    assert_alive(&broker, &subject);
    raw_close(&mut raw);
    observer.close().await;
}

/// No CON-1002 (close, e.g. for missed heartbeats) for this connection so far.
fn assert_alive(broker: &Broker, subject: &str) {
    let closes = lines_containing(broker, &format!("[{subject}] CON-1002"));
    assert!(
        closes.is_empty(),
        "the held connection was closed: {closes:?}"
    );
}

/// One socket consumes with manual ack (prefetch 3, all three unacked) on channel 1 and
/// floods an overfull queue on channel 2, ignoring channel.flow. After the enforcement
/// timeout (1 s here) channel 2 is closed with 506 and the contract's text, reading
/// resumes, the held deliveries can be acked and more deliveries arrive.
async fn publishing_consumer_is_not_deadlocked(shards: usize) {
    const SIZE: u64 = 4096;
    let broker = Broker::start_with_config(shards, "[flow]\nenforcement_timeout_ms = 1000\n");
    let (observer, och) = conn_and_channel(&broker).await;
    let (qc, qf) = (unique("held-consume"), unique("held-flood"));
    och.declare_queue(&qc).await;
    declare_with(&och, &qf, capacity_args(8192, None)).await;
    for n in 1..=3 {
        och.publish("", &qc, &numbered(n)).await;
    }

    let mut raw = broker.raw();
    let subject = raw_subject(&broker, &raw);
    raw.channel_open(1);
    raw.channel_open(2);
    raw_qos(&mut raw, 1, 3);
    raw.basic_consume(1, &qc, false);
    for n in 1..=3 {
        let d = raw.read_delivery(1);
        assert_eq!(number_of(&d.body), n);
    }

    // 8 MiB: more than can get through before the signal arrives (up to the 4 MiB
    // inbox across shards) plus the grace, so the connection is surely held.
    let started = Instant::now();
    let writer = flood(&raw, 2, &qf, SIZE as usize, 2048);
    assert!(!raw_expect_flow(&mut raw, 2), "channel 2 is stopped");
    let close = next_method(&mut raw, "channel.close of the flooding channel");
    let waited = started.elapsed();
    assert_eq!(
        (close.id, close.channel),
        (m::CHANNEL_CLOSE, 2),
        "expected channel.close on channel 2"
    );
    let mut d = close.dec();
    let (code, text) = (d.short(), d.shortstr());
    assert_eq!(code, 506);
    assert_eq!(
        text,
        "RESOURCE_ERROR - channel kept publishing for 1000 ms after flow control stopped it; \
         publish and consume on separate connections"
    );
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(1000 + 4000),
        "closed after {waited:?}; the enforcement timeout is 1000 ms"
    );
    expect_line(
        &broker,
        &format!("[{subject}/ch:2] CHN-1003 : Close : 506 {text}"),
    );
    assert_eq!(
        lines_containing(
            &broker,
            &format!("[{subject}] CON-1003 : Reading suspended")
        )
        .len(),
        1
    );

    // Reading resumed: the rest of the flood is read (and dropped with the channel).
    tokio::task::spawn_blocking(move || writer.finish())
        .await
        .expect("writer");
    raw.send_method(2, m::CHANNEL_CLOSE_OK, &[])
        .expect("close-ok");
    raw_ack(&mut raw, 1, 3, true);
    for n in 4..=5 {
        och.publish("", &qc, &numbered(n)).await;
    }
    for n in 4..=5 {
        let d = raw.read_delivery(1);
        assert_eq!(number_of(&d.body), n, "the consumer channel keeps working");
        let mut args = d.method.dec();
        let _consumer_tag = args.shortstr();
        let tag = args.longlong();
        assert_eq!(tag, n, "delivery tags continue on the channel");
        raw_ack(&mut raw, 1, tag, false);
    }
    och.wait_message_count(&qc, 0).await;
    assert_alive(&broker, &subject);
    raw_close(&mut raw);
    observer.close().await;
}

/// A held connection whose client goes away is dropped (CON-1002), not kept forever.
async fn held_connection_whose_peer_vanished_is_dropped(shards: usize) {
    let broker = Broker::start(shards);
    let (observer, och) = conn_and_channel(&broker).await;
    let q = unique("vanish");
    declare_with(&och, &q, capacity_args(8192, None)).await;
    let mut raw = broker.raw();
    raw.channel_open(1);
    let subject = raw_subject(&broker, &raw);
    let writer = flood(&raw, 1, &q, 4096, 4096);
    assert!(
        wait_ops(&broker, Duration::from_secs(10), |l| l.starts_with(
            &format!("[{subject}] CON-1003 : Reading suspended")
        ))
        .is_some(),
        "the connection was not held"
    );
    raw.stream
        .shutdown(std::net::Shutdown::Both)
        .expect("shutdown");
    drop(raw);
    let closed = wait_until(READ_TIMEOUT, || {
        !lines_containing(&broker, &format!("[{subject}] CON-1002")).is_empty()
    });
    assert!(closed, "no CON-1002 for the vanished held connection");
    let _ = tokio::task::spawn_blocking(move || writer.finish_ignoring_errors()).await;
    observer.close().await;
}
