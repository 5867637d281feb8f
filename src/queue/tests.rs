use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::protocol::FieldTable;

/// A pulled queue's run (`Queue::dispatch_pulled`) against the general dispatch.
mod pull;
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
        max_priority: None,
        single_active_consumer: false,
        dead_letter: None,
        stored: false,
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
    Queue::new(
        QueueId(1),
        0,
        "/".into(),
        "q".into(),
        settings(ttl_ms),
        QueueLimits::default(),
        now,
    )
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
    let a = q.add_consumer(target(1), false, false, 0, now).expect("a");
    let b = q.add_consumer(target(2), false, false, 0, now).expect("b");
    let mut out = Vec::new();
    assert_eq!(q.dispatch(now, 100, &mut out), 0, "no credit, no dispatch");
    q.grant(a, 10, u64::MAX);
    q.grant(b, 1, u64::MAX);
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
    let c = q.add_consumer(target(1), false, false, 0, now).expect("c");
    q.grant(c, 2, u64::MAX);
    let mut out = Vec::new();
    q.dispatch(now, 10, &mut out);
    assert!(q.requeue(2));
    assert!(q.requeue(1));
    assert!(!q.requeue(1), "already requeued");
    q.grant(c, 3, u64::MAX);
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
    let got = q.get(now + Duration::from_millis(200), true, None);
    assert!(got.is_none(), "the second message expired too");
    assert_eq!(q.counters.expired, 2);
}

/// A TTL of 0: a consumer with credit gets the message when it arrives (the same clock
/// reading); one without credit then does not get it later, nor does `basic.get` ever.
#[test]
fn ttl_zero_reaches_only_a_consumer_with_credit_at_once() {
    let now = Instant::now();
    let mut q = queue(Some(0), now);
    let c = q.add_consumer(target(1), false, false, 0, now).expect("c");
    q.grant(c, 1, u64::MAX);
    q.enqueue(msg(b"taken"), now);
    let mut out = Vec::new();
    assert_eq!(q.dispatch(now, 10, &mut out), 1, "delivered in its turn");
    q.enqueue(msg(b"no credit"), now);
    assert_eq!(q.dispatch(now, 10, &mut out), 0);
    assert_eq!(q.head_expiry(), Some(now));
    q.grant(c, 1, u64::MAX);
    let later = now + Duration::from_nanos(1);
    assert_eq!(
        q.dispatch(later, 10, &mut out),
        0,
        "expired by the next turn"
    );
    assert_eq!(q.counters.expired, 1);
    q.enqueue(msg(b"got"), later);
    assert!(q.get(later, true, None).is_none(), "got with a TTL of 0");
    assert_eq!((q.ready_count(), q.counters.expired), (0, 2));
}

#[test]
fn exclusive_consumer_rules() {
    let now = Instant::now();
    let mut q = queue(None, now);
    q.add_consumer(target(1), false, false, 0, now)
        .expect("first");
    assert_eq!(
        q.add_consumer(target(2), false, true, 0, now),
        Err(ConsumeRefused::ExclusiveInUse)
    );
    let mut q = queue(None, now);
    q.add_consumer(target(1), false, true, 0, now)
        .expect("exclusive");
    assert_eq!(
        q.add_consumer(target(2), false, false, 0, now),
        Err(ConsumeRefused::ExclusiveInUse)
    );
}

#[test]
fn auto_delete_after_last_consumer() {
    let now = Instant::now();
    let mut q = queue(None, now);
    assert!(!q.auto_delete_due());
    let c = q.add_consumer(target(1), true, false, 0, now).expect("c");
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

fn persistent_msg(body: &'static [u8]) -> LocalMessage {
    let mut chunks = BodyChunks::new();
    chunks.push(Bytes::from_static(body));
    let props = crate::protocol::BasicProperties {
        delivery_mode: Some(2),
        ..Default::default()
    };
    LocalMessage::new(Message::new(
        "ex".into(),
        "rk".into(),
        props.to_bytes(),
        chunks,
        body.len() as u64,
    ))
}

#[test]
fn holdings_count_ready_unacked_and_unwritten_no_ack() {
    let t0 = Instant::now();
    let mut q = queue(None, t0);
    for _ in 0..3 {
        q.enqueue(msg(b"0123456789"), t0);
    }
    q.enqueue(persistent_msg(b"p"), t0 + Duration::from_millis(5));
    assert!(q.holds_persistent());
    let manual = q
        .add_consumer(target(1), false, false, 0, t0)
        .expect("manual");
    let no_ack = q
        .add_consumer(target(2), true, false, 0, t0)
        .expect("no-ack");
    q.grant(manual, 1, u64::MAX);
    q.grant(no_ack, 1, u64::MAX);
    let mut out = Vec::new();
    assert_eq!(q.dispatch(t0, 10, &mut out), 2);
    let later = t0 + Duration::from_millis(50);
    let h = q.holdings(later);
    assert_eq!((h.count, h.bytes), (4, 31));
    assert_eq!(h.oldest_age, Some(Duration::from_millis(50)));
    // The no-ack delivery stops counting once written; the manual one once acked.
    q.written(no_ack, 1, 10);
    assert_eq!(q.held_count(), 3);
    assert!(q.ack(1));
    assert_eq!((q.held_count(), q.held_bytes()), (2, 11));
    assert_eq!(q.counters.consumed, 2);
    // A consumer that goes away stops holding what it had in flight.
    q.grant(no_ack, 5, u64::MAX);
    out.clear();
    q.dispatch(t0, 10, &mut out);
    assert_eq!(q.held_count(), 2);
    q.remove_consumer(no_ack, later);
    assert_eq!(q.held_count(), 0);
    assert!(!q.holds_persistent());
}

#[test]
fn byte_credit_bounds_a_dispatch() {
    let now = Instant::now();
    let mut q = queue(None, now);
    for _ in 0..10 {
        q.enqueue(msg(b"0123456789"), now);
    }
    let c = q.add_consumer(target(1), true, false, 0, now).expect("c");
    q.grant(c, 100, 25);
    let mut out = Vec::new();
    assert_eq!(
        q.dispatch(now, 100, &mut out),
        3,
        "25 bytes of credit: 10+10+10"
    );
    assert!(!q.can_dispatch());
    q.grant(c, 0, 1);
    assert_eq!(q.dispatch(now, 100, &mut out), 1);
}

#[test]
fn ring_discards_keep_accounting() {
    let t0 = Instant::now();
    let mut q = queue(None, t0);
    for i in 0..5u64 {
        q.enqueue(msg(b"abc"), t0 + Duration::from_millis(i * 10));
    }
    assert_eq!(q.discard_head(false), Some(3));
    assert_eq!(q.discard_older_than(t0 + Duration::from_millis(30)), 2);
    assert_eq!((q.ready_count(), q.ready_bytes()), (2, 6));
    assert_eq!(q.counters.discarded, 3);
    q.release_all();
    assert_eq!(q.held_bytes(), 0);
}

#[test]
fn getters_are_remembered_for_a_window() {
    let t0 = Instant::now();
    let mut q = queue(None, t0);
    let ch = crate::model::ids::ChannelRef {
        shard: 0,
        conn: ConnId {
            slot: 3,
            generation: 1,
        },
        channel: 2,
        epoch: 1,
    };
    assert!(q.get(t0, true, Some(ch)).is_none());
    assert_eq!(
        q.recent_getters(t0 + Duration::from_secs(1), Duration::from_secs(5)),
        vec![ch]
    );
    assert!(q
        .recent_getters(t0 + Duration::from_secs(6), Duration::from_secs(5))
        .is_empty());
}

#[test]
fn entries_are_counted_in_the_ledger() {
    std::thread::spawn(|| {
        let now = Instant::now();
        let before = crate::model::ledger::snapshot();
        let mut q = queue(None, now);
        q.enqueue(msg(b"abc"), now);
        q.enqueue(msg(b"def"), now);
        let mid = crate::model::ledger::snapshot();
        assert!(
            mid.entries - before.entries >= 2 * std::mem::size_of::<Entry>() as i64,
            "the ready list's allocation is counted"
        );
        assert!(mid.messages > before.messages);
        drop(q);
        let after = crate::model::ledger::snapshot();
        assert_eq!(after, before, "dropping the queue releases every byte");
    })
    .join()
    .expect("thread");
}

fn prio_msg(priority: Option<u8>) -> LocalMessage {
    let props = crate::protocol::properties::BasicProperties {
        priority,
        ..Default::default()
    };
    LocalMessage::new(Message::new(
        "ex".into(),
        "rk".into(),
        props.to_bytes(),
        BodyChunks::new(),
        0,
    ))
}

fn prio_queue(max: u8, ttl_ms: Option<u64>, now: Instant) -> Queue {
    let mut s = settings(ttl_ms);
    s.max_priority = Some(max);
    Queue::new(
        QueueId(1),
        0,
        "/".into(),
        "q".into(),
        s,
        QueueLimits::default(),
        now,
    )
}

fn seqs(out: &[Dispatch]) -> Vec<u64> {
    out.iter().map(|d| d.seq).collect()
}

#[test]
fn the_record_did_not_grow() {
    // The priority level lives in the padding: a plain queue's entries cost what they did.
    // Its two times are stamps since the queue was made (8 bytes each, not 16).
    assert!(std::mem::size_of::<Entry>() <= 40);
}

#[test]
fn a_queue_is_ten_lines() {
    // Every subscriber has one: what most queues never use (dead-lettering, flow-stopped
    // publishers, the slow-consumer policy, `basic.get` channels, length limits and
    // capacity) is boxed until used, and queues declared alike share their settings.
    // 512 bytes is also one of the allocator's size classes; 576 would take 640.
    assert!(
        std::mem::size_of::<Queue>() <= 512,
        "{}",
        std::mem::size_of::<Queue>()
    );
}

#[test]
fn priority_queue_delivers_highest_first_fifo_within() {
    let now = Instant::now();
    let mut q = prio_queue(5, None, now);
    // seq:         1     2        3        4        5        6
    for p in [None, Some(3), Some(9), Some(5), Some(3), Some(0)] {
        q.enqueue(prio_msg(p), now);
    }
    assert!(q.is_priority());
    assert_eq!(q.stats().messages, 6);
    let got: Vec<u64> = std::iter::from_fn(|| q.get(now, true, None).map(|(e, _)| e.seq)).collect();
    // 9 counts as 5 (the maximum): level 5 is 3 then 4 in arrival order.
    assert_eq!(got, [3, 4, 2, 5, 1, 6]);
    assert_eq!(q.ready_bytes(), 0);
}

#[test]
fn priority_queue_requeue_keeps_order_within_a_level() {
    let now = Instant::now();
    let mut q = prio_queue(5, None, now);
    for p in [Some(0), Some(5), Some(5), Some(0)] {
        q.enqueue(prio_msg(p), now);
    }
    let c = q.add_consumer(target(1), false, false, 0, now).expect("c");
    q.grant(c, 3, u64::MAX);
    let mut out = Vec::new();
    q.dispatch(now, 10, &mut out);
    assert_eq!(seqs(&out), [2, 3, 1]);
    q.enqueue(prio_msg(Some(5)), now); // seq 5
    assert!(q.requeue(3) && q.requeue(1) && q.requeue(2));
    q.grant(c, 10, u64::MAX);
    out.clear();
    q.dispatch(now, 10, &mut out);
    assert_eq!(seqs(&out), [2, 3, 5, 1, 4]);
    let redelivered: Vec<bool> = out.iter().map(|d| d.redelivered).collect();
    assert_eq!(redelivered, [true, true, false, true, false]);
}

#[test]
fn priority_queue_expires_and_drops_at_the_head() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    // Queue TTL 100 ms: a low-priority message expires only once it is the head.
    let mut q = prio_queue(5, Some(100), t0);
    q.enqueue(prio_msg(Some(0)), t0); // seq 1, expires at 100
    q.enqueue(prio_msg(Some(5)), t0 + ms(50)); // seq 2, expires at 150
    assert_eq!(q.head_expiry(), Some(t0 + ms(150)));
    assert_eq!(q.oldest_age(t0 + ms(120)), Some(ms(120)));
    assert_eq!(q.expire_head(t0 + ms(120)), 0, "the head has not expired");
    assert_eq!(q.ready_count(), 2);
    assert_eq!(q.expire_head(t0 + ms(160)), 2, "then both go");
    // drop-head: the head is the highest level's oldest message.
    let mut q = prio_queue(5, None, t0);
    q.enqueue(prio_msg(Some(0)), t0);
    q.enqueue(prio_msg(Some(0)), t0);
    q.enqueue(prio_msg(Some(5)), t0);
    assert_eq!(q.discard_head(false), Some(0));
    let got: Vec<u64> = std::iter::from_fn(|| q.get(t0, true, None).map(|(e, _)| e.seq)).collect();
    assert_eq!(got, [1, 2]);
    assert_eq!(q.counters.discarded, 1);
}

#[test]
fn consumer_priorities_serve_the_highest_with_credit() {
    let now = Instant::now();
    let mut q = queue(None, now);
    let low = q
        .add_consumer(target(1), false, false, 1, now)
        .expect("low");
    let high_a = q.add_consumer(target(2), false, false, 10, now).expect("a");
    let high_b = q.add_consumer(target(3), false, false, 10, now).expect("b");
    q.grant(low, 100, u64::MAX);
    q.grant(high_a, 2, u64::MAX);
    q.grant(high_b, 2, u64::MAX);
    for _ in 0..6 {
        q.enqueue(msg(b"x"), now);
    }
    let mut out = Vec::new();
    assert_eq!(q.dispatch(now, 100, &mut out), 6);
    let who: Vec<u32> = out.iter().map(|d| d.target.consumer).collect();
    // The two of priority 10 take turns until both are blocked, then priority 1.
    assert_eq!(who, [2, 3, 2, 3, 1, 1]);
    // Credit back to one high consumer: it is served again before the low one.
    q.grant(high_b, 1, u64::MAX);
    q.enqueue(msg(b"x"), now);
    q.enqueue(msg(b"x"), now);
    out.clear();
    q.dispatch(now, 100, &mut out);
    let who: Vec<u32> = out.iter().map(|d| d.target.consumer).collect();
    assert_eq!(who, [3, 1]);
    // The high ones gone, rotation is plain again.
    assert!(q.remove_consumer(high_a, now) && q.remove_consumer(high_b, now));
    let other = q
        .add_consumer(target(4), false, false, 1, now)
        .expect("other");
    q.grant(other, 100, u64::MAX);
    for _ in 0..4 {
        q.enqueue(msg(b"x"), now);
    }
    out.clear();
    q.dispatch(now, 100, &mut out);
    let who: Vec<u32> = out.iter().map(|d| d.target.consumer).collect();
    assert!(who == [4, 1, 4, 1] || who == [1, 4, 1, 4], "{who:?}");
}

#[test]
fn single_active_consumer_fails_over_in_registration_order() {
    let now = Instant::now();
    let mut s = settings(None);
    s.single_active_consumer = true;
    let mut q = Queue::new(
        QueueId(1),
        0,
        "/".into(),
        "q".into(),
        s,
        QueueLimits::default(),
        now,
    );
    assert_eq!(
        q.add_consumer(target(9), false, true, 0, now),
        Err(ConsumeRefused::ExclusiveInUse),
        "exclusive consume on a single-active-consumer queue"
    );
    let first = q.add_consumer(target(1), false, false, 0, now).expect("1");
    // A higher priority does not make a later consumer the active one (RabbitMQ 3.10).
    let second = q.add_consumer(target(2), false, false, 5, now).expect("2");
    let third = q.add_consumer(target(3), false, false, 0, now).expect("3");
    for k in [first, second, third] {
        q.grant(k, 2, u64::MAX);
    }
    for _ in 0..3 {
        q.enqueue(msg(b"x"), now);
    }
    let mut out = Vec::new();
    assert_eq!(q.dispatch(now, 100, &mut out), 2);
    assert!(out.iter().all(|d| d.target.consumer == 1));
    assert!(!q.can_dispatch(), "the active consumer is blocked");
    assert_eq!(q.single_active().map(|c| c.key), Some(first));
    assert!(q.remove_consumer(first, now));
    assert!(q.can_dispatch());
    out.clear();
    assert_eq!(q.dispatch(now, 100, &mut out), 1);
    assert_eq!(out[0].target.consumer, 2);
    q.remove_consumers_where(|t| t.consumer == 2);
    assert_eq!(q.single_active().map(|c| c.key), Some(third));
}

#[test]
fn an_evicted_entry_behind_expired_ones_is_never_handed_out() {
    let t0 = Instant::now();
    let mut s = settings(Some(100));
    s.stored = true;
    s.durable = true;
    let mut q = Queue::new(
        QueueId(1),
        0,
        "/".into(),
        "q".into(),
        s,
        QueueLimits::default(),
        t0,
    );
    q.enqueue(persistent_msg(b"a"), t0);
    q.enqueue(persistent_msg(b"b"), t0);
    let t50 = t0 + Duration::from_millis(50);
    for _ in 0..10 {
        q.enqueue(persistent_msg(b"later"), t50);
    }
    let placeholder = persistent_msg(b"");
    let (n, _) = q.evict(2, u64::MAX, &placeholder, |_| true);
    assert_eq!(n, 10);
    // The two loaded entries expire; the head is then evicted and not expired.
    let t120 = t0 + Duration::from_millis(120);
    assert!(q.get(t120, true, None).is_none());
    assert!(q.page_in_wanted);
    assert_eq!(
        q.ready_count(),
        10,
        "the expired two went, the evicted ten wait"
    );
    assert!(q.page_in(3, persistent_msg(b"later")));
    let (e, _) = q.get(t120, true, None).expect("read back");
    assert_eq!((e.seq, e.evicted, e.msg.body_size()), (3, false, 5));
    // Once expired, an evicted entry is dropped without being read back.
    assert!(q
        .get(t50 + Duration::from_millis(101), true, None)
        .is_none());
    assert_eq!(q.ready_count(), 0);
    assert_eq!(q.evicted_count(), 0);
}

/// The fields every enqueue and dispatch touch stay together (`Queue`'s layout): a
/// reordering that spreads them again is a cache miss more per message per queue at
/// 10,000 subscribers, which no functional test would notice.
#[test]
fn hot_fields_share_a_few_lines() {
    use std::mem::{align_of, offset_of};
    let line = |offset: usize| offset / 64;
    assert_eq!(align_of::<Queue>(), 64);
    // The ready list, the consumers, the flags and the settings (shared, behind a
    // pointer): the first three lines.
    for offset in [
        offset_of!(Queue, ready),
        offset_of!(Queue, ready_bytes),
        offset_of!(Queue, next_seq),
        offset_of!(Queue, consumers),
        offset_of!(Queue, round_robin),
        offset_of!(Queue, inflight),
        offset_of!(Queue, inflight_bytes),
        offset_of!(Queue, persistent),
        offset_of!(Queue, evicted),
        offset_of!(Queue, last_used),
        offset_of!(Queue, condemned),
        offset_of!(Queue, in_dirty_list),
        offset_of!(Queue, page_in_wanted),
        offset_of!(Queue, pick),
        offset_of!(Queue, pull_conn),
        offset_of!(Queue, settings),
    ] {
        assert!(
            line(offset) <= 2,
            "offset {offset} beyond the first three lines"
        );
    }
    // The counters every message counts share one line.
    let counted = [
        offset_of!(Queue, counters.enqueued),
        offset_of!(Queue, counters.delivered),
        offset_of!(Queue, counters.delivered_no_ack),
        offset_of!(Queue, counters.redelivered),
        offset_of!(Queue, counters.consumed) + 7,
    ];
    assert!(
        counted.iter().all(|&o| line(o) == line(counted[0])),
        "{counted:?}"
    );
    // An enqueue's limit checks: the max-length and capacity options and the
    // slow-consumer state's binding count, within two lines.
    let max_length = line(offset_of!(Queue, limits.max_length));
    for offset in [
        offset_of!(Queue, limits.capacity),
        offset_of!(Queue, limits.slow.topic_bindings),
    ] {
        assert!(line(offset) <= max_length + 1, "offset {offset}");
    }
}

/// The write pass dispatches a queue only while its one consumer is a no-ack one on the
/// queue's own shard (and the option is on); any other set of consumers is dispatched
/// per turn.
#[test]
fn only_a_lone_local_no_ack_consumer_pulls_its_queue() {
    let now = Instant::now();
    let mut q = queue(None, now);
    let conn = target(1).conn;
    assert_eq!(q.pull_conn(), None);
    let first = q
        .add_consumer(target(1), true, false, 0, now)
        .expect("consume");
    q.refresh_pull(0, true);
    assert_eq!(q.pull_conn(), Some(conn));
    q.refresh_pull(0, false);
    assert_eq!(q.pull_conn(), None, "the option is off");
    q.refresh_pull(1, true);
    assert_eq!(q.pull_conn(), None, "the consumer is on another shard");
    let second = q
        .add_consumer(target(2), true, false, 0, now)
        .expect("consume");
    q.refresh_pull(0, true);
    assert_eq!(q.pull_conn(), None, "two consumers");
    q.remove_consumer(first, now);
    q.refresh_pull(0, true);
    assert_eq!(q.pull_conn(), Some(conn));
    q.remove_consumer(second, now);
    q.add_consumer(target(3), false, false, 0, now)
        .expect("consume");
    q.refresh_pull(0, true);
    assert_eq!(q.pull_conn(), None, "a consumer that acks");
}

/// A queue whose limits or TTL act on ready messages (drop-head, reject-publish, expiry)
/// is dispatched per turn: waiting for the write pass, messages a turn would have handed
/// to the consumer could be dropped or expire.
#[test]
fn a_length_limit_or_a_queue_ttl_keeps_dispatch_per_turn() {
    let now = Instant::now();
    let mut with_ttl = queue(Some(60_000), now);
    with_ttl
        .add_consumer(target(1), true, false, 0, now)
        .expect("consume");
    with_ttl.refresh_pull(0, true);
    assert_eq!(with_ttl.pull_conn(), None, "x-message-ttl");

    let mut limited = queue(None, now);
    limited
        .add_consumer(target(1), true, false, 0, now)
        .expect("consume");
    limited.refresh_pull(0, true);
    assert!(limited.pull_conn().is_some());
    limited.limits.max_length = Some(Box::new(crate::policy::max_length::MaxLength {
        count: Some(10),
        bytes: None,
        overflow: crate::policy::max_length::Overflow::DropHead,
    }));
    limited.refresh_pull(0, true);
    assert_eq!(limited.pull_conn(), None, "x-max-length");
}

/// Queues declared alike share one copy of their settings; a queue declared otherwise
/// gets its own, and a run-time policy that changes one queue's settings leaves the
/// others' as they were.
#[test]
fn queues_declared_alike_share_their_settings() {
    use std::rc::Rc;
    let plain = || QueueSettings {
        exclusive: true,
        auto_delete: true,
        ..QueueSettings::default()
    };
    let a = plain().shared();
    let b = plain().shared();
    assert!(Rc::ptr_eq(&a, &b));
    let with_ttl = QueueSettings {
        message_ttl: Some(Duration::from_secs(1)),
        ..plain()
    }
    .shared();
    assert!(!Rc::ptr_eq(&a, &with_ttl));
    assert_eq!(with_ttl.message_ttl, Some(Duration::from_secs(1)));
    let mut c = plain().shared();
    assert!(!Rc::ptr_eq(&c, &a), "the last one made was another");
    let d = plain().shared();
    assert!(Rc::ptr_eq(&c, &d));
    Rc::make_mut(&mut c).expires = Some(Duration::from_secs(5));
    assert_eq!((c.expires, d.expires), (Some(Duration::from_secs(5)), None));
}
