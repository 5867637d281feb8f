//! Bursts far larger than one dispatch's worth (`shard.dispatch_budget` 16 here) to a
//! few no-ack subscribers, with small bodies (encoded by the write pass) and 1 KiB ones
//! (encoded at once, the body its own slice) interleaved: every subscriber gets every
//! message once, whole and in order, whether its queue is dispatched when the write
//! pass reaches its connection (`shard.dispatch_at_write`, the default) or at the end of
//! each turn. With few connections the write pass meets a connection again within one
//! batch of sends when a pull left more to dispatch; its bytes must be offered once (a
//! connection offered twice in one batch sent them twice: a corrupted stream that
//! amqprs closes the connection over). Every fifth message carries an `expiration` of its
//! own (far away): a queue pulled by the write pass hands its plain messages over as one
//! run and stops at such a message, which the general dispatch takes, so the stream
//! switches between the two paths many times per run. And a consumer cancelled
//! mid-burst got only what came before cancel-ok; the rest stays for the next consumer,
//! nothing lost or twice.

use std::time::Duration;

use bytes::Bytes;
use sluice::client::{Consumer, NO_PROPERTIES};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::common::{http, Broker};
use crate::support::*;

const KEY: &str = "burst.tick";
/// Messages per run: bursts of unconfirmed publishes, many per socket read.
const MESSAGES: u32 = 3_000;
/// Every third message carries this many bytes (above `inline_body_max`).
const LARGE: usize = 1024;

/// Message `seq`'s properties: every fifth one an `expiration` of ten minutes (none
/// expires during the test), the others none.
fn burst_properties(seq: u32) -> Bytes {
    if seq % 5 != 2 {
        return NO_PROPERTIES;
    }
    sluice::protocol::BasicProperties {
        expiration: Some("600000".into()),
        ..Default::default()
    }
    .to_bytes()
}

/// Message `seq`'s body: [`body`] (64 bytes), or every third one padded to [`LARGE`].
fn burst_body(seq: u32) -> Bytes {
    let small = body(seq);
    if seq % 3 != 0 {
        return small;
    }
    let mut b = small.to_vec();
    b.resize(LARGE, b'#');
    Bytes::from(b)
}

/// Checks one delivered body against what message `seq_of(body)` was; returns its
/// sequence number.
fn check_body(body: &[u8]) -> Result<u32, String> {
    let seq = seq_of(body).ok_or_else(|| format!("unexpected body {:?}", show(body)))?;
    if body != &burst_body(seq)[..] {
        return Err(format!(
            "message {seq}: {} bytes, not the {} published",
            body.len(),
            burst_body(seq).len()
        ));
    }
    Ok(seq)
}

async fn drain_sluice(consumer: &mut Consumer, deadline: Instant) -> Result<Vec<u32>, String> {
    let mut seqs = Vec::new();
    loop {
        let d = next_sluice(consumer, deadline, seqs.len()).await?;
        if &d.body[..] == END {
            return Ok(seqs);
        }
        seqs.push(check_body(&d.body)?);
    }
}

async fn drain_amqprs(
    rx: &mut mpsc::UnboundedReceiver<amqprs::channel::ConsumerMessage>,
    deadline: Instant,
) -> Result<Vec<u32>, String> {
    let mut seqs = Vec::new();
    loop {
        let m = next_amqprs(rx, deadline, seqs.len()).await?;
        let body = m.content.unwrap_or_default();
        if body == END {
            return Ok(seqs);
        }
        seqs.push(check_body(&body)?);
    }
}

async fn bursts_reach_every_subscriber_whole_and_in_order(shards: usize, at_write: bool) {
    let broker = Broker::start_with_config(
        shards,
        &format!("[shard]\ndispatch_budget = 16\ndispatch_at_write = {at_write}\n"),
    );
    let mut sluice_subs = Vec::new();
    let mut amqprs_subs = Vec::new();
    for _ in 0..2 {
        sluice_subs.push(sluice_subscriber(&broker, KEY, Ack::None).await);
        amqprs_subs.push(amqprs_subscriber(&broker, KEY, Ack::None).await);
    }
    let publisher = connect(&broker).await;
    let pch = publisher.open_channel().await.expect("open channel");
    pch.confirm_select().await.expect("confirm.select");
    for seq in 1..=MESSAGES {
        pch.basic_publish(
            "amq.topic",
            KEY,
            false,
            burst_properties(seq),
            burst_body(seq),
        )
        .await
        .expect("basic.publish");
    }
    let end = pch
        .basic_publish_confirmed(
            "amq.topic",
            KEY,
            false,
            NO_PROPERTIES,
            Bytes::from_static(END),
        )
        .await
        .expect("basic.publish");
    assert!(end.await.expect("confirm"), "end marker nacked");

    let deadline = Instant::now() + Duration::from_secs(60);
    let mode = if at_write { "at the write" } else { "per turn" };
    for (i, (_conn, _ch, consumer, _queue)) in sluice_subs.iter_mut().enumerate() {
        let got = drain_sluice(consumer, deadline).await;
        let who = format!("sluice subscriber {i} ({shards} shards, dispatch {mode})");
        if let Err(e) = got.and_then(|seqs| check_sequence(&who, &seqs, MESSAGES)) {
            panic!("{who}: {e}");
        }
    }
    for (i, (_conn, _ch, rx, _queue)) in amqprs_subs.iter_mut().enumerate() {
        let got = drain_amqprs(rx, deadline).await;
        let who = format!("amqprs subscriber {i} ({shards} shards, dispatch {mode})");
        if let Err(e) = got.and_then(|seqs| check_sequence(&who, &seqs, MESSAGES)) {
            panic!("{who}: {e}");
        }
    }
    let queues = sluice_subs
        .iter()
        .map(|s| &s.3)
        .chain(amqprs_subs.iter().map(|s| &s.3));
    for queue in queues {
        counted_and_released(&broker, queue, mode).await;
    }
}

/// Once its subscriber has everything, a queue counts every delivery once (the
/// management API's `deliver_no_ack`: the end marker too) and holds nothing: every
/// no-ack delivery was reported written (`message_bytes` 0), so a run handed over at
/// the write settles as the same deliveries one by one do.
async fn counted_and_released(broker: &Broker, queue: &str, mode: &str) {
    let path = format!("/api/queues/%2F/{queue}");
    let want = u64::from(MESSAGES) + 1;
    let settled = |q: &serde_json::Value| {
        q["message_stats"]["deliver_no_ack"].as_u64() == Some(want)
            && q["messages"].as_u64() == Some(0)
            && q["message_bytes"].as_u64() == Some(0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut q = http::get(broker.http_port(), &path).json();
    while !settled(&q) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        q = http::get(broker.http_port(), &path).json();
    }
    assert!(settled(&q), "{queue} (dispatch {mode}): {q}");
}

#[tokio::test]
async fn bursts_reach_every_subscriber_whole_and_in_order_one_shard() {
    bursts_reach_every_subscriber_whole_and_in_order(1, true).await;
}

#[tokio::test]
async fn bursts_reach_every_subscriber_whole_and_in_order_two_shards() {
    bursts_reach_every_subscriber_whole_and_in_order(2, true).await;
}

#[tokio::test]
async fn bursts_reach_every_subscriber_whole_and_in_order_dispatched_per_turn() {
    bursts_reach_every_subscriber_whole_and_in_order(2, false).await;
}

/// A no-ack consumer cancelled while a burst flows (its queue waiting for the write pass,
/// or dispatched per turn): everything it got came before cancel-ok, and what it did
/// not get stays in the queue for the next consumer — nothing lost, nothing twice, in
/// order.
async fn cancel_mid_burst_loses_nothing(shards: usize, at_write: bool) {
    let broker = Broker::start_with_config(
        shards,
        &format!("[shard]\ndispatch_budget = 16\ndispatch_at_write = {at_write}\n"),
    );
    let (_conn, ch, mut consumer, queue) = sluice_subscriber(&broker, KEY, Ack::None).await;
    let publisher = connect(&broker).await;
    let pch = publisher.open_channel().await.expect("open channel");
    pch.confirm_select().await.expect("confirm.select");
    let publish = async {
        let mut pending = Vec::new();
        for seq in 1..=MESSAGES {
            pending.push(
                pch.basic_publish_confirmed(
                    "amq.topic",
                    KEY,
                    false,
                    burst_properties(seq),
                    burst_body(seq),
                )
                .await
                .expect("basic.publish"),
            );
        }
        for c in pending {
            assert!(c.await.expect("confirm"), "publish nacked");
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let take_some_then_cancel = async {
        let mut seqs = Vec::new();
        while seqs.len() < 100 {
            let d = next_sluice(&mut consumer, deadline, seqs.len()).await;
            seqs.push(
                d.and_then(|d| check_body(&d.body))
                    .expect("delivery before the cancel"),
            );
        }
        let tag = consumer.tag().to_string();
        // Deliveries keep coming until cancel-ok: drained while the cancel is under way.
        let (cancelled, rest) = tokio::join!(ch.basic_cancel(&tag), async {
            let mut more = Vec::new();
            while let Ok(d) = next_sluice(&mut consumer, deadline, 0).await {
                more.push(check_body(&d.body).expect("delivery before cancel-ok"));
            }
            more
        });
        cancelled.expect("basic.cancel");
        seqs.extend(rest);
        seqs
    };
    let ((), mut seqs) = tokio::join!(publish, take_some_then_cancel);
    let first = seqs.len();
    let mut again = ch
        .basic_consume(
            &queue,
            sluice::client::ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .await
        .expect("basic.consume again");
    while seqs.len() < MESSAGES as usize {
        let d = next_sluice(&mut again, deadline, seqs.len()).await;
        seqs.push(
            d.and_then(|d| check_body(&d.body))
                .unwrap_or_else(|e| panic!("second consumer ({first} went to the first): {e}")),
        );
    }
    let mode = if at_write { "at the write" } else { "per turn" };
    let who = format!("{shards} shards, dispatch {mode}; {first} before the cancel");
    if let Err(e) = check_sequence(&who, &seqs, MESSAGES) {
        panic!("{e}");
    }
}

#[tokio::test]
async fn a_cancel_mid_burst_loses_nothing() {
    cancel_mid_burst_loses_nothing(1, true).await;
    cancel_mid_burst_loses_nothing(2, true).await;
    cancel_mid_burst_loses_nothing(2, false).await;
}
