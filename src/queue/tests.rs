use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::model::ids::{ConnId, ConsumerTarget};
use crate::model::message::{BodyChunks, LocalMessage, Message};

fn msg(body: &'static [u8]) -> LocalMessage {
    let mut chunks = BodyChunks::new();
    chunks.push(Bytes::from_static(body));
    // Property flags 0: no properties.
    LocalMessage::new(Message::new(
        "ex".into(),
        "rk".into(),
        Bytes::from_static(&[0, 0]),
        chunks,
        body.len() as u64,
    ))
}

fn settings(ttl_ms: Option<u64>) -> QueueSettings {
    QueueSettings {
        durable: false,
        exclusive: false,
        auto_delete: true,
        arguments: FieldTable::default(),
        message_ttl: ttl_ms.map(Duration::from_millis),
        expires: None,
    }
}

fn target(consumer: u32) -> ConsumerTarget {
    ConsumerTarget {
        shard: 0,
        conn: ConnId {
            slot: 0,
            generation: 1,
        },
        channel: 1,
        consumer,
    }
}

fn queue(ttl_ms: Option<u64>, now: Instant) -> Queue {
    Queue::new(QueueId(1), 0, "/".into(), "q".into(), settings(ttl_ms), now)
}

#[test]
fn accounting_is_exact() {
    let now = Instant::now();
    let mut q = queue(None, now);
    q.enqueue(msg(b"abc"), now);
    q.enqueue(msg(b"defgh"), now + Duration::from_millis(5));
    assert_eq!(q.ready_count(), 2);
    assert_eq!(q.ready_bytes(), 8);
    assert_eq!(
        q.oldest_age(now + Duration::from_millis(10)),
        Some(Duration::from_millis(10))
    );
    assert_eq!(q.purge(), 2);
    assert_eq!(q.ready_bytes(), 0);
}

#[test]
fn dispatch_needs_credit_and_rotates() {
    let now = Instant::now();
    let mut q = queue(None, now);
    for _ in 0..4 {
        q.enqueue(msg(b"x"), now);
    }
    let a = q.add_consumer(target(1), false, false, now).expect("a");
    let b = q.add_consumer(target(2), false, false, now).expect("b");
    let mut out = Vec::new();
    assert_eq!(q.dispatch(now, 100, &mut out), 0, "no credit, no dispatch");
    q.grant(a, 10);
    q.grant(b, 1);
    assert_eq!(q.dispatch(now, 100, &mut out), 4);
    let consumers: Vec<u32> = out.iter().map(|d| d.target.consumer).collect();
    assert_eq!(consumers, vec![1, 2, 1, 1]);
    let seqs: Vec<u64> = out.iter().map(|d| d.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    assert_eq!(q.stats().unacked, 4);
}

#[test]
fn requeue_restores_order_and_marks_redelivered() {
    let now = Instant::now();
    let mut q = queue(None, now);
    for _ in 0..3 {
        q.enqueue(msg(b"x"), now);
    }
    let c = q.add_consumer(target(1), false, false, now).expect("c");
    q.grant(c, 2);
    let mut out = Vec::new();
    q.dispatch(now, 10, &mut out);
    assert!(q.requeue(2));
    assert!(q.requeue(1));
    assert!(!q.requeue(1), "already requeued");
    q.grant(c, 3);
    out.clear();
    q.dispatch(now, 10, &mut out);
    let got: Vec<(u64, bool)> = out.iter().map(|d| (d.seq, d.redelivered)).collect();
    assert_eq!(got, vec![(1, true), (2, true), (3, false)]);
    assert!(q.ack(1) && q.ack(2) && q.ack(3));
    assert!(!q.ack(3));
}

#[test]
fn ttl_expires_at_head() {
    let now = Instant::now();
    let mut q = queue(Some(100), now);
    q.enqueue(msg(b"old"), now);
    q.enqueue(msg(b"new"), now + Duration::from_millis(80));
    assert_eq!(q.head_expiry(), Some(now + Duration::from_millis(100)));
    assert_eq!(q.expire_head(now + Duration::from_millis(150)), 1);
    assert_eq!(q.ready_count(), 1);
    let got = q.get(now + Duration::from_millis(200), true);
    assert!(got.is_none(), "the second message expired too");
    assert_eq!(q.expired_total, 2);
}

#[test]
fn exclusive_consumer_rules() {
    let now = Instant::now();
    let mut q = queue(None, now);
    q.add_consumer(target(1), false, false, now).expect("first");
    assert_eq!(
        q.add_consumer(target(2), false, true, now),
        Err(ConsumeRefused::ExclusiveInUse)
    );
    let mut q = queue(None, now);
    q.add_consumer(target(1), false, true, now)
        .expect("exclusive");
    assert_eq!(
        q.add_consumer(target(2), false, false, now),
        Err(ConsumeRefused::ExclusiveInUse)
    );
}

#[test]
fn auto_delete_after_last_consumer() {
    let now = Instant::now();
    let mut q = queue(None, now);
    assert!(!q.auto_delete_due());
    let c = q.add_consumer(target(1), true, false, now).expect("c");
    assert!(!q.auto_delete_due());
    q.remove_consumer(c, now);
    assert!(q.auto_delete_due());
}

#[test]
fn shared_message_is_not_copied() {
    let now = Instant::now();
    let m = msg(b"shared");
    let mut q1 = queue(None, now);
    let mut q2 = queue(None, now);
    q1.enqueue(m.clone(), now);
    q2.enqueue(m.clone(), now);
    assert_eq!(std::rc::Rc::strong_count(&m), 3);
    assert_eq!(m.share_count(), 1, "one Arc reference for the whole shard");
    q1.purge();
    q2.purge();
    assert_eq!(std::rc::Rc::strong_count(&m), 1);
}
