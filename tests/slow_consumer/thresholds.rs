//! Each threshold alone (count, depth, age, rate) fires `delete` for a lagging subscriber
//! while a fast subscriber on the same topic receives every message in order. The
//! deleted subscriber's channel gets 506 `Consuming too slow.` (class 0, method 0), its
//! connection stays usable, its queue is gone, and SUB-1003, CHN-1003 and QUE-1002 are
//! logged. A subscriber that reads but never acks (manual ack, prefetch 0) is caught by
//! count and by depth: what it holds includes its unacked deliveries.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice::client::{ConsumeOptions, NO_PROPERTIES};

use crate::common::unique;
use crate::harness::*;

slow_tests!(
    count_catches_a_reader_that_never_acks,
    depth_catches_a_reader_that_never_acks,
    age_catches_a_stuck_consumer,
    rate_catches_a_consumer_below_the_minimum,
    depth_catches_a_no_ack_reader_that_stopped_reading,
);

/// amqprs. max_count 20, two never-acking consumers (on two connections) sharing the
/// subscription. Twenty messages, all delivered and none acked, are allowed; the 21st
/// (one ready plus twenty unacked) fires, and both consuming channels are closed.
async fn count_catches_a_reader_that_never_acks(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut fast = Sub::fast(&broker, "count.tick").await;
    let mut slow = Sub::never_acking(
        &broker,
        &unique("count-slow"),
        &[(MAX_COUNT, Arg::Int(20))],
        "count.*",
    )
    .await;
    let mut second = broker.connect().await;
    let mut second_ch = second.channel().await;
    let (_, mut second_rx) = second_ch.consume_manual(&slow.queue).await;
    let (_p, pch) = publisher(&broker).await;

    // Twenty held, all of them delivered and unacked: at the limit, left alone.
    publish_seqs(&pch, "amq.topic", "count.tick", 1..=20, 64).await;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let all_delivered = crate::common::eventually(ACT, || {
        a.extend(buffered(&mut slow.rx));
        b.extend(buffered(&mut second_rx));
        let n = a.len() + b.len();
        async move { n >= 20 }
    })
    .await;
    assert!(all_delivered, "only {} of 20 delivered", a.len() + b.len());
    assert_not_detected(&broker, &slow.queue);

    // The 21st: held = 20 unacked + 1 ready.
    publish_seqs(&pch, "amq.topic", "count.tick", 21..=21, 64).await;
    wait_line(&broker, &queue_line(&slow.queue, "SUB-1003"), ACT).await;
    publish_seqs(&pch, "amq.topic", "count.tick", 22..=60, 64).await;
    publish_end(&pch, "amq.topic", "count.tick").await;
    fast.expect_all(60).await;
    let sub = assert_slow_deleted(&broker, &mut slow, "count").await;
    assert!(
        sub.contains(" count=21 ") && sub.contains("threshold=count (limit 20)"),
        "SUB-1003 fires at the 21st message held: {sub}"
    );
    expect_too_slow(&mut second_ch).await;
    assert_usable(&mut second).await;
    assert_delete_logged(&broker, &slow.queue, "count", 2).await;
    // Each reader got its share in order; together, a prefix of the topic, no more than
    // the subscription could hold.
    a.extend(buffered(&mut slow.rx));
    b.extend(buffered(&mut second_rx));
    assert!(a.windows(2).all(|w| w[0] < w[1]), "out of order: {a:?}");
    assert!(b.windows(2).all(|w| w[0] < w[1]), "out of order: {b:?}");
    let mut both = [a, b].concat();
    both.sort_unstable();
    assert_prefix("never-acking readers together", &both);
    assert!(both.len() <= 21, "the readers held {} messages", both.len());
}

/// sluice's client. max_depth 2,048 bytes with 256-byte bodies: eight messages
/// (exactly 2,048 bytes) are allowed, the ninth fires.
async fn depth_catches_a_reader_that_never_acks(shards: usize) {
    let broker = Cfg::default().start(shards);
    let fast_conn = own_connect(&broker).await;
    let fast_ch = fast_conn.open_channel().await.unwrap();
    let fast_q = own_declare_bound(&fast_ch, "", false, &[], "depth.tick").await;
    let mut fast = fast_ch
        .basic_consume(
            &fast_q,
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let slow_conn = own_connect(&broker).await;
    let slow_ch = slow_conn.open_channel().await.unwrap();
    let slow_q = own_declare_bound(
        &slow_ch,
        &unique("depth-slow"),
        false,
        &[(MAX_DEPTH, Arg::Int(2048))],
        "depth.#",
    )
    .await;
    let mut slow = slow_ch
        .basic_consume(&slow_q, ConsumeOptions::default())
        .await
        .unwrap();

    let pub_conn = own_connect(&broker).await;
    let pch = pub_conn.open_channel().await.unwrap();

    // Exactly at the limit: the reader holds 8 x 256 = 2,048 bytes and is left alone.
    own_publish_seqs(&pch, "amq.topic", "depth.tick", 1..=8, 256).await;
    for want in 1..=8 {
        let d = slow.recv().await.expect("delivery within the depth limit");
        assert_eq!(seq_of(&d.body), want);
    }
    assert_not_detected(&broker, &slow_q);
    assert!(
        slow_ch.error().is_none(),
        "closed at the limit: {:?}",
        slow_ch.error()
    );

    // The ninth: 256 bytes ready on top of 2,048 unacked.
    own_publish_seqs(&pch, "amq.topic", "depth.tick", 9..=9, 256).await;
    wait_line(&broker, &queue_line(&slow_q, "SUB-1003"), ACT).await;
    own_publish_seqs(&pch, "amq.topic", "depth.tick", 10..=40, 256).await;
    pch.basic_publish(
        "amq.topic",
        "depth.tick",
        false,
        NO_PROPERTIES,
        Bytes::from_static(END),
    )
    .await
    .unwrap();

    // The fast subscriber: every message, in order.
    let mut got = Vec::new();
    loop {
        let d = fast.recv().await.expect("fast delivery");
        if &d.body[..] == END {
            break;
        }
        got.push(seq_of(&d.body));
    }
    assert_seqs("fast subscriber", &got, 1..=40);

    let rest = own_read_until_too_slow(&mut slow).await;
    let rest: Vec<u32> = rest.iter().map(|d| seq_of(&d.body)).collect();
    assert_seqs(
        "slow reader after the limit",
        &rest,
        9..9 + rest.len() as u32,
    );
    own_assert_usable_and_gone(&slow_conn, &slow_q).await;
    let sub = assert_delete_logged(&broker, &slow_q, "depth", 1).await;
    assert!(
        sub.contains("threshold=depth (limit 2,048 bytes)") && sub.contains(" depth=2,304 bytes "),
        "SUB-1003 fires at the ninth 256-byte message: {sub}"
    );
}

/// amqprs. max_age 300 ms: a consumer that takes one message (prefetch 1) and never acks
/// holds it past the age limit.
async fn age_catches_a_stuck_consumer(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut fast = Sub::fast(&broker, "age.tick").await;
    let mut slow = Sub::manual(
        &broker,
        "",
        false,
        &[(MAX_AGE, Arg::Int(300))],
        "age.tick",
        1,
    )
    .await;
    let (_p, pch) = publisher(&broker).await;

    publish_seqs(&pch, "amq.topic", "age.tick", 1..=5, 64).await;
    publish_end(&pch, "amq.topic", "age.tick").await;
    fast.expect_all(5).await;

    let sub = assert_slow_deleted(&broker, &mut slow, "age").await;
    assert!(sub.contains("threshold=age (limit 300 ms)"), "{sub}");
    let age = number_after(&sub, " age=");
    assert!(
        age > 300,
        "fired at age {age} ms, the limit is 300 ms: {sub}"
    );
    assert_prefix("stuck consumer", &buffered(&mut slow.rx));
}

/// sluice's client. min_rate 20 msg/s over 500 ms windows; the publisher sends about
/// 100 msg/s; the slow consumer (prefetch 1) acks about 5 msg/s, so its queue always has
/// a backlog and it is judged, and cut off. The fast subscriber gets everything.
async fn rate_catches_a_consumer_below_the_minimum(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut fast = Sub::fast(&broker, "rate.tick").await;

    let slow_conn = own_connect(&broker).await;
    let slow_ch = Arc::new(slow_conn.open_channel().await.unwrap());
    let slow_q = own_declare_bound(
        &slow_ch,
        "",
        false,
        &[(MIN_RATE, Arg::Int(20))],
        "rate.tick",
    )
    .await;
    slow_ch.basic_qos(1, false).await.unwrap();
    let mut slow = slow_ch
        .basic_consume(&slow_q, ConsumeOptions::default())
        .await
        .unwrap();
    let acker = {
        let ch = Arc::clone(&slow_ch);
        tokio::spawn(async move {
            let mut seqs = Vec::new();
            loop {
                match slow.recv().await {
                    Ok(d) => {
                        seqs.push(seq_of(&d.body));
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        if let Err(e) = ch.basic_ack(d.delivery_tag, false).await {
                            return (seqs, e);
                        }
                    }
                    Err(e) => return (seqs, e),
                }
            }
        })
    };

    let (_p, pch) = publisher(&broker).await;
    let pacer = Pacer::start(&pch, "rate.tick", 10, Duration::from_millis(100));

    let (seqs, err) = tokio::time::timeout(ACT, acker)
        .await
        .expect("the slow consumer was not closed in time")
        .unwrap();
    assert_too_slow_error(&err);
    assert_prefix("slow consumer", &seqs);
    let sent = pacer.stop().await;
    publish_end(&pch, "amq.topic", "rate.tick").await;
    fast.expect_all(sent).await;

    own_assert_usable_and_gone(&slow_conn, &slow_q).await;
    let sub = assert_delete_logged(&broker, &slow_q, "rate", 1).await;
    assert!(sub.contains("threshold=rate (limit 20.0 msg/s)"), "{sub}");
}

/// A no-ack subscriber (raw socket) that stops reading: its socket buffers and the
/// broker's outbound window (`no_ack_window_bytes`, 1 MiB) fill, the backlog stays in
/// its queue, and max_depth 3 MiB fires. Reading again, it finds an in-order prefix of the messages, then the 506 close
/// on its channel; the connection still answers on a new channel, where the queue is
/// gone.
async fn depth_catches_a_no_ack_reader_that_stopped_reading(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut fast = Sub::fast(&broker, "noack.tick").await;
    let (_a, admin) = publisher(&broker).await;
    let queue = declare_bound(
        &admin,
        &unique("noack-slow"),
        false,
        &[(MAX_DEPTH, Arg::Int(3 << 20))],
        "amq.topic",
        "noack.tick",
    )
    .await;
    let mut raw = broker.raw();
    raw.channel_open(1);
    raw.basic_consume(1, &queue, true);

    let (_p, pch) = publisher(&broker).await;
    publish_seqs(&pch, "amq.topic", "noack.tick", 1..=1000, 16 * 1024).await;
    publish_end(&pch, "amq.topic", "noack.tick").await;
    fast.expect_all(1000).await;
    let sub = assert_delete_logged(&broker, &queue, "depth", 1).await;
    assert!(
        sub.contains("threshold=depth (limit 3,145,728 bytes)"),
        "{sub}"
    );

    let q = queue.clone();
    let got = tokio::task::spawn_blocking(move || raw_read_until_too_slow(&mut raw, &q))
        .await
        .unwrap();
    assert_prefix("no-ack reader", &got);
    assert!(
        got.len() < 1000,
        "the reader got everything ({}): nothing was held back",
        got.len()
    );
}

/// Reads deliveries on channel 1 until the broker's channel.close, checks it is 506
/// `Consuming too slow.` and answers close-ok; then checks on channel 2 that the queue is
/// gone. Returns the sequence numbers delivered.
fn raw_read_until_too_slow(raw: &mut crate::common::RawConn, queue: &str) -> Vec<u32> {
    use crate::common::wire::{self, m, Dec};
    let mut got = Vec::new();
    loop {
        let (ty, channel, payload) = raw.read_frame().expect("read while draining");
        if ty == wire::FRAME_HEARTBEAT {
            continue;
        }
        assert_eq!(
            (ty, channel),
            (wire::FRAME_METHOD, 1),
            "expected a method on channel 1"
        );
        let mut d = Dec::new(&payload);
        match (d.short(), d.short()) {
            m::BASIC_DELIVER => {
                let (ty, _, header) = raw.read_frame().expect("content header");
                assert_eq!(ty, wire::FRAME_HEADER);
                let mut h = Dec::new(&header);
                h.short();
                h.short();
                let size = h.longlong() as usize;
                let mut body = Vec::with_capacity(size);
                while body.len() < size {
                    let (ty, _, chunk) = raw.read_frame().expect("content body");
                    assert_eq!(ty, wire::FRAME_BODY);
                    body.extend_from_slice(&chunk);
                }
                got.push(seq_of(&body));
            }
            m::CHANNEL_CLOSE => {
                let code = d.short();
                let text = d.shortstr();
                let (class_id, method_id) = (d.short(), d.short());
                assert_eq!(
                    (code, text.as_str(), class_id, method_id),
                    (506, TOO_SLOW, 0, 0)
                );
                raw.send_method(1, m::CHANNEL_CLOSE_OK, &[])
                    .expect("close-ok");
                break;
            }
            other => panic!("unexpected method {other:?} on channel 1"),
        }
    }
    raw.channel_open(2);
    raw.send_passive_declare(2, queue);
    let (code, text) = raw.expect_channel_close(2);
    assert_eq!(
        (code, text),
        (404, format!("NOT_FOUND - no queue '{queue}' in vhost '/'"))
    );
    got
}
