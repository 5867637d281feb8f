//! A pulled queue's run (`Queue::dispatch_pulled`) hands its consumer what the general
//! dispatch (`Queue::dispatch`) would, leaves every count as it does, and stops where
//! the general loop must take over.

use super::*;

fn ttl_msg(body: &'static [u8], ttl_ms: u64) -> LocalMessage {
    let mut chunks = BodyChunks::new();
    chunks.push(Bytes::from_static(body));
    LocalMessage::new(Message::with_ttl(
        "ex".into(),
        "rk".into(),
        Bytes::from_static(&[0, 0]),
        crate::model::message::ReceivedBody::owned(chunks),
        body.len() as u64,
        Some(ttl_ms),
    ))
}

/// A stored (durable) queue, so that what leaves it is journaled.
fn stored_queue(now: Instant) -> Queue {
    let mut s = settings(None);
    s.stored = true;
    s.durable = true;
    Queue::new(
        QueueId(7),
        0,
        "/".into(),
        "stored".into(),
        s,
        QueueLimits::default(),
        now,
    )
}

/// What a consumer slot, the queue's in-flight counts, its counters and rotation say
/// after a dispatch: a pulled run must leave them as the general dispatch does.
#[derive(Debug, PartialEq)]
struct After {
    credit: u32,
    credit_bytes: u64,
    slot_inflight: (u64, u64),
    queue_inflight: (u64, u64),
    counters: QueueCounters,
    stats: QueueStats,
    last_used: Instant,
    round_robin: usize,
    can_dispatch: bool,
    persistent: u64,
}

fn after(q: &Queue) -> After {
    let c = &q.consumers[0];
    After {
        credit: c.credit,
        credit_bytes: c.credit_bytes,
        slot_inflight: (c.inflight, c.inflight_bytes),
        queue_inflight: (q.inflight, q.inflight_bytes),
        counters: q.counters,
        stats: q.stats(),
        last_used: q.last_used,
        round_robin: q.round_robin,
        can_dispatch: q.can_dispatch(),
        persistent: q.persistent,
    }
}

/// Two queues with the same messages, each with one no-ack consumer granted `credit`
/// messages and `bytes`, the second pulled; returns them with their journals.
fn twins(
    make: fn(Instant) -> Queue,
    bodies: &[&'static [u8]],
    persistent: bool,
    credit: u32,
    bytes: u64,
    now: Instant,
) -> (Queue, Queue) {
    let (mut general, mut pulled) = (make(now), make(now));
    for &body in bodies {
        let m = if persistent {
            persistent_msg(body)
        } else {
            msg(body)
        };
        general.enqueue(LocalMessage::clone(&m), now);
        pulled.enqueue(m, now);
    }
    for q in [&mut general, &mut pulled] {
        let key = q
            .add_consumer(target(1), true, false, 0, now)
            .expect("consume");
        q.grant(key, credit, bytes);
        q.refresh_pull(0, true);
    }
    (general, pulled)
}

/// Dispatches `general` the general way and `pulled` as a run at `later`; checks they
/// agree and returns how many went.
fn dispatch_both(general: &mut Queue, pulled: &mut Queue, budget: usize, later: Instant) -> usize {
    let mut journal = crate::model::journal::Journal::default();
    crate::model::journal::swap(&mut journal);
    let mut out = Vec::new();
    let n = general.dispatch(later, budget, &mut out);
    let mut general_journal = crate::model::journal::Journal::default();
    crate::model::journal::swap(&mut general_journal);
    let mut msgs = Vec::new();
    let run = pulled
        .dispatch_pulled(later, budget, &mut msgs)
        .expect("a pulled queue");
    let mut pulled_journal = crate::model::journal::Journal::default();
    crate::model::journal::swap(&mut pulled_journal);
    assert_eq!(run.count as usize, n);
    assert_eq!((run.target, run.general_next), (target(1), false));
    assert_eq!(msgs.len(), n);
    assert!(out
        .iter()
        .zip(&msgs)
        .all(|(d, m)| std::ptr::eq(&*d.msg, &**m) && d.no_ack && !d.redelivered));
    let bytes: u64 = out.iter().map(|d| d.msg.accounted_size()).sum();
    assert_eq!(run.bytes, bytes);
    assert_eq!(general_journal.gone, pulled_journal.gone);
    assert_eq!(general_journal.delivered, pulled_journal.delivered);
    assert_eq!(after(general), after(pulled));
    n
}

/// Within message credit, byte credit and the budget, and for a stored queue's
/// persistent messages (journaled as gone), a run hands out what the general dispatch
/// would and leaves the same counts.
#[test]
fn a_pulled_run_hands_out_what_the_general_dispatch_would() {
    let now = Instant::now();
    let later = now + Duration::from_millis(3);
    let bodies: [&'static [u8]; 7] = [b"a", b"bb", b"ccc", b"dddd", b"eeeee", b"ff", b"g"];
    // (credit, bytes, budget, expected): message credit, byte credit (the message that
    // crosses it still goes), the budget, no credit at all, everything.
    let size = msg(b"a").accounted_size();
    for (credit, bytes, budget, expected) in [
        (2, u64::MAX, 10, 2),
        (10, size + 1, 10, 2),
        (10, u64::MAX, 3, 3),
        (0, u64::MAX, 10, 0),
        (100, u64::MAX, 100, 7),
    ] {
        let (mut general, mut pulled) = twins(queue_for_twins, &bodies, false, credit, bytes, now);
        let n = dispatch_both(&mut general, &mut pulled, budget, later);
        assert_eq!(
            n, expected,
            "credit {credit}, bytes {bytes}, budget {budget}"
        );
    }
    let (mut general, mut pulled) = twins(stored_queue, &bodies, true, 100, u64::MAX, now);
    assert_eq!(dispatch_both(&mut general, &mut pulled, 4, later), 4);
    assert_eq!(dispatch_both(&mut general, &mut pulled, 10, later), 3);
    // A FIFO that wrapped around its buffer (the run spans both of its slices).
    let (mut general, mut pulled) = twins(stored_queue, &bodies, true, 100, u64::MAX, now);
    assert_eq!(dispatch_both(&mut general, &mut pulled, 5, later), 5);
    for &body in &bodies[..5] {
        let m = persistent_msg(body);
        general.enqueue(LocalMessage::clone(&m), now);
        pulled.enqueue(m, now);
    }
    let (front, back) = pulled.ready.plain().expect("plain").as_slices();
    assert!(!front.is_empty() && !back.is_empty(), "wrapped");
    assert_eq!(dispatch_both(&mut general, &mut pulled, 100, later), 7);
}

fn queue_for_twins(now: Instant) -> Queue {
    queue(None, now)
}

/// Gives `q` one no-ack consumer with plenty of credit, makes it pulled and takes a run.
fn pull_with_a_no_ack_consumer(
    q: &mut Queue,
    now: Instant,
    msgs: &mut Vec<LocalMessage>,
) -> PulledRun {
    let key = q
        .add_consumer(target(1), true, false, 0, now)
        .expect("consume");
    q.grant(key, 100, u64::MAX);
    q.refresh_pull(0, true);
    q.dispatch_pulled(now, 10, msgs).expect("pulled")
}

/// A pulled run stops where the general loop must take over — at a message with an
/// expiry of its own, at a redelivered one, at an evicted one — and says so; a queue
/// that is not pulled gives no run at all.
#[test]
fn a_pulled_run_stops_where_the_general_dispatch_must_see_the_head() {
    let now = Instant::now();
    let mut q = queue(None, now);
    q.enqueue(msg(b"1"), now);
    q.enqueue(ttl_msg(b"2", 60_000), now);
    q.enqueue(msg(b"3"), now);
    let key = q
        .add_consumer(target(1), true, false, 0, now)
        .expect("consume");
    q.grant(key, 100, u64::MAX);
    let mut msgs = Vec::new();
    assert_eq!(
        q.dispatch_pulled(now, 10, &mut msgs),
        None,
        "not pulled yet"
    );
    q.refresh_pull(0, true);
    let run = q.dispatch_pulled(now, 10, &mut msgs).expect("pulled");
    assert_eq!((run.count, run.general_next, msgs.len()), (1, true, 1));
    let mut out = Vec::new();
    assert_eq!(
        q.dispatch(now, 10, &mut out),
        2,
        "the general loop takes it"
    );
    msgs.clear();
    let run = q.dispatch_pulled(now, 10, &mut msgs).expect("pulled");
    assert_eq!((run.count, run.general_next), (0, false), "nothing left");

    // A message given back by a consumer that acks is redelivered.
    let mut q = queue(None, now);
    q.enqueue(msg(b"1"), now);
    q.enqueue(msg(b"2"), now);
    let acks = q
        .add_consumer(target(2), false, false, 0, now)
        .expect("consume");
    q.grant(acks, 1, u64::MAX);
    out.clear();
    assert_eq!(q.dispatch(now, 10, &mut out), 1);
    assert!(q.requeue(out[0].seq));
    q.remove_consumer(acks, now);
    let run = pull_with_a_no_ack_consumer(&mut q, now, &mut msgs);
    assert_eq!((run.count, run.general_next), (0, true));
    out.clear();
    assert_eq!(q.dispatch(now, 10, &mut out), 2);
    assert!(out[0].redelivered && !out[1].redelivered);

    // An evicted head (its body on disk only): the general loop asks for it back.
    let mut q = stored_queue(now);
    for _ in 0..4 {
        q.enqueue(persistent_msg(b"on disk"), now);
    }
    let placeholder = persistent_msg(b"");
    assert_eq!(q.evict(0, u64::MAX, &placeholder, |_| true).0, 4);
    let run = pull_with_a_no_ack_consumer(&mut q, now, &mut msgs);
    assert_eq!((run.count, run.general_next), (0, true));
    assert!(!q.page_in_wanted);
    out.clear();
    assert_eq!(q.dispatch(now, 10, &mut out), 0);
    assert!(q.page_in_wanted, "the general loop asks for the head back");
}

/// A subscriber's queue emptied by a small pull keeps room for two entries, not its
/// last burst's (issue 23), and the ledger follows; a queue whose pulls take more, or
/// that a pull leaves messages in, keeps the room it needs.
#[test]
fn an_emptied_pulled_queue_gives_its_burst_room_back() {
    std::thread::spawn(|| {
        let now = Instant::now();
        let before = crate::model::ledger::snapshot();
        let entry = std::mem::size_of::<Entry>() as i64;
        let held = || crate::model::ledger::snapshot().entries - before.entries;
        let mut q = queue(None, now);
        for _ in 0..8 {
            q.enqueue(msg(b"burst"), now);
        }
        assert!(held() >= 8 * entry);
        let mut msgs = Vec::new();
        let run = pull_with_a_no_ack_consumer(&mut q, now, &mut msgs);
        assert_eq!(run.count, 8);
        assert!(
            held() >= 8 * entry,
            "a pull of 8: the room stays for the next burst"
        );
        // A quiet pull of one: the burst's room goes.
        q.enqueue(msg(b"one"), now);
        let run = q.dispatch_pulled(now, 10, &mut msgs).expect("pulled");
        assert_eq!(run.count, 1);
        assert_eq!(held(), 2 * entry);
        // Refilled: it grows again as it needs; a pull leaving two behind keeps it all.
        for _ in 0..12 {
            q.enqueue(msg(b"again"), now);
        }
        let run = q.dispatch_pulled(now, 10, &mut msgs).expect("pulled");
        assert_eq!((run.count, q.stats().messages), (10, 2));
        assert!(held() >= 12 * entry, "two still wait: no trim");
        let run = q.dispatch_pulled(now, 10, &mut msgs).expect("pulled");
        assert_eq!((run.count, q.stats().messages), (2, 0));
        assert_eq!(held(), 2 * entry, "emptied by a pull of two");
        drop((q, msgs));
        assert_eq!(crate::model::ledger::snapshot(), before);
    })
    .join()
    .expect("thread");
}
