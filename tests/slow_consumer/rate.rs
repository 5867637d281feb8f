//! The minimum-rate threshold never cuts off a subscriber for being new or idle: it is
//! judged only over a full rate window during which its queue had a backlog and a
//! consumer. (That it fires for a consumer below the rate under a sustained backlog is
//! in `thresholds`.)

use std::time::Duration;

use crate::common::unique;
use crate::harness::*;

slow_tests!(
    new_and_idle_subscribers_are_spared,
    rate_breach_under_cycle_is_only_logged
);

/// amqprs. min_rate 50 msg/s, 500 ms windows. Over three windows:
/// - `busy`: attached before the publisher starts at about 100 msg/s, consuming fast;
/// - `idle`: attached, nothing published to it;
/// - `late`: a 100-message backlog built with no consumer, then a consumer attaches and
///   drains it.
///
/// None is detected or closed, and each gets exactly its messages afterwards.
async fn new_and_idle_subscribers_are_spared(shards: usize) {
    let broker = Cfg::default().start(shards);
    let rate = [(MIN_RATE, Arg::Int(50))];
    let mut busy = Sub::manual(&broker, &unique("busy"), false, &rate, "spare.busy", 0).await;
    let mut idle = Sub::manual(&broker, &unique("idle"), false, &rate, "spare.idle", 0).await;
    let (_p, pch) = publisher(&broker).await;

    // `late` has a backlog and no consumer for a whole window: never judged.
    let late_conn = broker.connect().await;
    let late_ch = late_conn.channel().await;
    let late_q = declare_bound(
        &late_ch,
        &unique("late"),
        false,
        &rate,
        "amq.topic",
        "spare.late",
    )
    .await;
    publish_seqs(&pch, "amq.topic", "spare.late", 1..=100, 64).await;
    late_ch.wait_message_count(&late_q, 100).await;

    // Three windows: `busy` is fed ~100 msg/s and acks everything at once.
    let mut sent = 0u32;
    let start = tokio::time::Instant::now();
    let mut busy_got = Vec::new();
    while start.elapsed() < Duration::from_millis(1500) {
        publish_seqs(&pch, "amq.topic", "spare.busy", sent + 1..=sent + 10, 64).await;
        sent += 10;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let more = buffered_tags(&mut busy.rx);
        if let Some(&(_, tag)) = more.last() {
            busy.ack_upto(tag).await;
        }
        busy_got.extend(more.into_iter().map(|(s, _)| s));
    }
    let (_, late_rx) = late_ch.consume_auto(&late_q).await;
    let mut late = Sub {
        conn: late_conn,
        ch: late_ch,
        queue: late_q,
        rx: late_rx,
    };
    // One more window with everyone attached and nothing outstanding.
    tokio::time::sleep(Duration::from_millis(600)).await;

    for (name, sub) in [
        ("busy", &mut busy),
        ("idle", &mut idle),
        ("late", &mut late),
    ] {
        assert_not_detected(&broker, &sub.queue);
        assert_no_close(&mut sub.ch, name);
        publish_end(&pch, "amq.topic", &format!("spare.{name}")).await;
    }
    busy_got.extend(read_to_end(&mut busy.rx).await);
    assert_seqs("busy subscriber", &busy_got, 1..=sent);
    idle.expect_all(0).await;
    late.expect_all(100).await;
    assert_not_detected(&broker, &busy.queue);
}

/// Deliveries already buffered, as (sequence, delivery tag).
fn buffered_tags(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<amqprs::channel::ConsumerMessage>,
) -> Vec<(u32, u64)> {
    let mut got = Vec::new();
    while let Ok(m) = rx.try_recv() {
        let d = crate::common::Delivery::from(m);
        got.push((seq_of(&d.body), d.delivery_tag));
    }
    got
}

/// amqprs. A cycle queue with min_rate 20 msg/s and a consumer acking ~5 msg/s under a
/// ~100 msg/s publisher: SUB-1003 with policy=cycle is logged, and nothing else happens —
/// the consumer keeps consuming, the queue stays.
async fn rate_breach_under_cycle_is_only_logged(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut slow = Sub::manual(
        &broker,
        &unique("cycle-rate"),
        false,
        &[(POLICY, Arg::Str("cycle")), (MIN_RATE, Arg::Int(20))],
        "cycle.rate",
        1,
    )
    .await;
    let (_p, pch) = publisher(&broker).await;
    let needle = queue_line(&slow.queue, "SUB-1003");
    let mut sent = 0u32;
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + ACT;
    while find_line(&broker.logs(), &needle).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no SUB-1003 for the slow cycle consumer; log tail:\n{}",
            tail(&broker)
        );
        publish_seqs(&pch, "amq.topic", "cycle.rate", sent + 1..=sent + 20, 64).await;
        sent += 20;
        let d = crate::common::next_delivery(&mut slow.rx).await;
        got.push(seq_of(&d.body));
        tokio::time::sleep(Duration::from_millis(200)).await;
        slow.ack_upto(d.delivery_tag).await;
    }
    let (_, line) = wait_line(&broker, &needle, ACT).await;
    assert!(
        line.contains("threshold=rate (limit 20.0 msg/s)") && line.ends_with(" policy=cycle"),
        "{line}"
    );
    // Still consuming, in order, from a queue that was not deleted.
    for _ in 0..3 {
        let d = crate::common::next_delivery(&mut slow.rx).await;
        got.push(seq_of(&d.body));
        slow.ack_upto(d.delivery_tag).await;
    }
    assert_prefix("slow cycle consumer", &got);
    assert_no_close(&mut slow.ch, "slow cycle consumer");
    assert!(queue_exists(&slow.conn, &slow.queue).await);
    assert!(lines_with(&broker, &format!("[vh(/)/qu({})] QUE-1002", slow.queue)).is_empty());
}
