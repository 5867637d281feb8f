//! kill -9: what a confirm, an ack and a tx.commit-ok promise must hold after SIGKILL and
//! a restart on the same directory.

use std::collections::BTreeSet;

use amqprs::channel::{BasicAckArguments, QueueDeclareArguments};

use crate::common::{unique, Delivery};
use crate::support::*;

store_tests!(
    kill9_while_publishing_keeps_every_confirmed_message,
    kill9_after_acks_does_not_bring_them_back,
    kill9_after_tx_commit_keeps_the_transaction,
);

/// Two durable queues, Q0 homed on shard 0 and Q1 on shard 1. One confirm-mode channel
/// publishes persistent 200-byte messages, two to Q0 for every one to Q1, numbered per
/// queue, keeping up to 200 unconfirmed; once 800 are confirmed the broker is killed
/// with SIGKILL (200 publishes still in flight). The confirms recorded are every
/// basic.ack the client had received by then (single or multiple).
///
/// After a restart on the same directory, for each queue: every confirmed message is
/// there; the numbers are strictly increasing (order kept, no duplicates); each one was
/// published (unconfirmed ones may or may not be there); bodies are intact; none is
/// redelivered (none was ever delivered).
async fn kill9_while_publishing_keeps_every_confirmed_message() {
    const SIZE: usize = 200;
    const WINDOW: u64 = 200;
    const KILL_AT: u64 = 800;
    const MAX: u64 = 20_000;
    let node = Node::new(None);
    let mut broker = node.start(SHARDS);
    let qs = queues_on("store-crash", SHARDS, 1);
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    for q in &qs {
        declare_durable(&p.ch, q).await;
    }
    // sent[tag - 1] = (queue index, message number)
    let mut sent: Vec<(usize, u64)> = Vec::new();
    let mut next = [0u64; 2];
    loop {
        while p.published < MAX && p.published - p.confirmed() < WINDOW {
            let qi = usize::from(p.published % 3 == 2);
            let i = next[qi];
            next[qi] += 1;
            p.publish("", &qs[qi], persistent(), &body(&qs[qi], i, SIZE))
                .await;
            sent.push((qi, i));
        }
        if p.confirmed() >= KILL_AT {
            break;
        }
        assert!(
            p.published < MAX,
            "{MAX} published, only {} confirmed",
            p.confirmed()
        );
        p.next().await;
    }
    crash(&mut broker, &node, SHARDS);
    // Every basic.ack the client received before the kill (the socket is gone now).
    p.poll();
    assert!(p.returns.is_empty() && p.flows.is_empty());
    let confirmed = p.acked.clone();
    let in_flight = p.published - confirmed.len() as u64;
    drop((p, conn));

    let conn = broker.connect().await;
    for (qi, q) in qs.iter().enumerate() {
        let got = drain(&conn, q).await;
        let nums: Vec<u64> = got
            .iter()
            .map(|d| {
                let (tag, i) = parse_body(&d.body);
                assert_eq!(&tag, q, "a message of another queue in {q}");
                assert_delivery(d, q, i, SIZE, false);
                i
            })
            .collect();
        assert!(
            nums.windows(2).all(|w| w[0] < w[1]),
            "{q}: numbers not strictly increasing: {:?}",
            out_of_order(&nums)
        );
        if let Some(&last) = nums.last() {
            assert!(
                last < next[qi],
                "{q}: #{last} was never published (only {})",
                next[qi]
            );
        }
        let present: BTreeSet<u64> = nums.iter().copied().collect();
        let missing: Vec<u64> = confirmed
            .iter()
            .map(|&tag| sent[(tag - 1) as usize])
            .filter(|&(i_q, i)| i_q == qi && !present.contains(&i))
            .map(|(_, i)| i)
            .collect();
        assert!(
            missing.is_empty(),
            "{q}: {} confirmed messages missing after kill -9 (e.g. {:?}); {} confirmed \
             in all, {in_flight} in flight at the kill, {} present",
            missing.len(),
            &missing[..missing.len().min(10)],
            confirmed.len(),
            nums.len()
        );
    }
    // Both queues really took part.
    for qi in 0..2 {
        let confirmed_here = confirmed
            .iter()
            .filter(|&&tag| sent[(tag - 1) as usize].0 == qi)
            .count();
        assert!(
            confirmed_here > 100,
            "only {confirmed_here} confirmed on Q{qi}"
        );
    }
    conn.close().await;
    stop(&mut broker);
}

fn out_of_order(nums: &[u64]) -> Vec<(u64, u64)> {
    nums.windows(2)
        .filter(|w| w[0] >= w[1])
        .map(|w| (w[0], w[1]))
        .take(10)
        .collect()
}

/// The contract's deterministic procedure. Twenty persistent messages on a durable queue
/// (confirmed); on channel C: basic.get (manual ack) of 0..9, ack 0..4 one by one and
/// 5..7 with one multiple ack, leave 8 and 9 unacked; a passive declare of the queue on C
/// (declare-ok); a persistent marker published on C with confirms, confirmed. Then
/// SIGKILL. After a restart: exactly 8..19 then the marker, in order; 0..7 do not come
/// back; 10..19 and the marker were never delivered and are not redelivered.
async fn kill9_after_acks_does_not_bring_them_back() {
    const SIZE: usize = 100;
    let node = Node::new(None);
    let mut broker = node.start(SHARDS);
    let q = unique("store-acked");
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, &q).await;
    for i in 0..20 {
        p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
    }
    p.wait_all().await;

    let mut tags = Vec::new();
    for i in 0..10 {
        let (get_ok, _, content) = p.ch.get_eventually(&q, false).await;
        assert_eq!(parse_body(&content).1, i, "basic.get order");
        tags.push(get_ok.delivery_tag());
    }
    for &tag in &tags[..5] {
        p.ch.basic_ack(BasicAckArguments::new(tag, false))
            .await
            .expect("basic.ack");
    }
    p.ch.basic_ack(BasicAckArguments::new(tags[7], true))
        .await
        .expect("basic.ack multiple");
    assert_eq!(
        p.ch.message_count(&q).await,
        10,
        "ready after the gets (10..19)"
    );
    p.publish("", &q, persistent(), &body(&q, 1000, SIZE)).await;
    p.wait_all().await;
    crash(&mut broker, &node, SHARDS);
    drop((p, conn));

    let conn = broker.connect().await;
    let got = drain(&conn, &q).await;
    let nums: Vec<u64> = got.iter().map(|d| parse_body(&d.body).1).collect();
    let expected: Vec<u64> = (8..20).chain([1000]).collect();
    assert_eq!(
        nums, expected,
        "after kill -9: acked 0..7 gone, 8..19 and the marker kept"
    );
    for d in &got {
        let (_, i) = parse_body(&d.body);
        assert!(d.body == body(&q, i, SIZE), "body of #{i}");
        assert_eq!(d.props.delivery_mode(), Some(2));
        if i >= 10 {
            assert!(!d.redelivered, "#{i} was never delivered, yet redelivered");
        }
    }
    conn.close().await;
    stop(&mut broker);
}

/// A tx channel publishes 50 persistent messages and one transient one to a durable
/// queue and commits; after commit-ok it publishes 10 more persistent messages without
/// committing. The same connection owns a durable exclusive queue holding a persistent
/// message. SIGKILL (the owner never disconnected), restart: exactly the 50 committed
/// persistent messages, in order; the exclusive queue is gone (404).
async fn kill9_after_tx_commit_keeps_the_transaction() {
    const SIZE: usize = 300;
    let node = Node::new(None);
    let mut broker = node.start(SHARDS);
    let q = unique("store-tx");
    let conn = broker.connect().await;
    let tx = conn.channel().await;
    declare_durable(&tx, &q).await;
    let xq = unique("store-tx-exclusive");
    tx.queue_declare(
        QueueDeclareArguments::new(&xq)
            .durable(true)
            .exclusive(true)
            .finish(),
    )
    .await
    .expect("declare the exclusive queue")
    .expect("declare-ok");
    tx.publish_props("", &xq, persistent(), b"exclusive").await;
    tx.tx_select().await.expect("tx.select");
    for i in 0..50 {
        tx.publish_props("", &q, persistent(), &body(&q, i, SIZE))
            .await;
        if i == 20 {
            tx.publish_props("", &q, transient(), b"transient in the tx")
                .await;
        }
    }
    tx.tx_commit().await.expect("tx.commit");
    for i in 50..60 {
        tx.publish_props("", &q, persistent(), &body(&q, i, SIZE))
            .await;
    }
    // The uncommitted publishes reached the broker: it has answered something sent after
    // them.
    let probe = conn.channel().await;
    assert_eq!(
        probe.message_count(&q).await,
        51,
        "committed: 50 + 1 transient"
    );
    assert_eq!(
        tx.message_count(&q).await,
        51,
        "nothing of the open transaction"
    );
    assert_eq!(
        probe.message_count(&xq).await,
        1,
        "the exclusive queue's message"
    );
    crash(&mut broker, &node, SHARDS);
    drop((tx, probe, conn));

    let conn = broker.connect().await;
    let got: Vec<Delivery> = drain(&conn, &q).await;
    assert_series(&got, &q, 0..50, SIZE, |_| false);
    assert_queue_gone(&conn, &xq).await;
    conn.close().await;
    stop(&mut broker);
}
