//! Many subscriber connections on `--shards 2`, each an exclusive server-named queue bound
//! to amq.topic: every subscriber gets every message exactly once, in publish order; and
//! subscribers that vanish mid-stream (socket dropped, reset, or closed cleanly) do not
//! disturb the others, and their exclusive queues go.

use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::BasicAckArguments;
use sluice::client::{Channel, Consumer, NO_PROPERTIES};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::common::{bounded_for, Broker, Chan, RawConn};
use crate::support::*;

/// The routing key every message is published with.
const KEY: &str = "fan.eu.tick";

/// Binding patterns that all match [`KEY`]; subscriber `i` binds `PATTERNS[i % len]`.
const PATTERNS: [&str; 8] = [
    "fan.eu.tick",
    "fan.*.tick",
    "fan.#",
    "#",
    "*.eu.*",
    "#.tick",
    "fan.eu.#",
    "*.*.*",
];

/// What one subscriber saw.
struct Outcome {
    who: String,
    shard: usize,
    result: Result<(), String>,
}

/// Reads deliveries from a sluice-client consumer until the end marker (or `deadline`);
/// returns the sequence numbers in arrival order.
async fn drain_sluice(
    ch: &Channel,
    consumer: &mut Consumer,
    ack: Ack,
    deadline: Instant,
) -> Result<Vec<u32>, String> {
    let mut seqs = Vec::new();
    loop {
        let d = next_sluice(consumer, deadline, seqs.len()).await?;
        if d.redelivered {
            return Err(format!("redelivered flag on {}", show(&d.body)));
        }
        if d.routing_key != KEY || d.exchange != "amq.topic" {
            return Err(format!(
                "delivered with exchange {:?} key {:?}",
                d.exchange.to_string(),
                d.routing_key.to_string()
            ));
        }
        let end = &d.body[..] == END;
        if ack == Ack::Manual && (end || d.delivery_tag % 10 == 0) {
            ch.basic_ack(d.delivery_tag, true)
                .await
                .map_err(|e| format!("ack: {e}"))?;
        }
        if end {
            return Ok(seqs);
        }
        match seq_of(&d.body) {
            Some(s) => seqs.push(s),
            None => return Err(format!("unexpected body {:?}", show(&d.body))),
        }
    }
}

/// As [`drain_sluice`], for amqprs.
async fn drain_amqprs(
    ch: &Chan,
    rx: &mut mpsc::UnboundedReceiver<amqprs::channel::ConsumerMessage>,
    ack: Ack,
    deadline: Instant,
) -> Result<Vec<u32>, String> {
    let mut seqs = Vec::new();
    loop {
        let mut m = next_amqprs(rx, deadline, seqs.len()).await?;
        let deliver = m.deliver.take().expect("deliver");
        let body = m.content.take().expect("content");
        if deliver.redelivered() {
            return Err(format!("redelivered flag on {}", show(&body)));
        }
        if deliver.routing_key() != KEY || deliver.exchange() != "amq.topic" {
            return Err(format!(
                "delivered with exchange {:?} key {:?}",
                deliver.exchange(),
                deliver.routing_key()
            ));
        }
        let end = body == END;
        if ack == Ack::Manual && (end || deliver.delivery_tag() % 10 == 0) {
            ch.basic_ack(BasicAckArguments::new(deliver.delivery_tag(), true))
                .await
                .map_err(|e| format!("ack: {e}"))?;
        }
        if end {
            return Ok(seqs);
        }
        match seq_of(&body) {
            Some(s) => seqs.push(s),
            None => return Err(format!("unexpected body {:?}", show(&body))),
        }
    }
}

/// Publishes 1..=n (then, if `end`, the end marker) to amq.topic with [`KEY`] in confirm
/// mode, in windows of 50; panics unless every publish is acked.
async fn publish_confirmed(ch: &Channel, from: u32, to: u32, end: bool) {
    let mut pending = Vec::new();
    for seq in from..=to {
        pending.push(
            ch.basic_publish_confirmed("amq.topic", KEY, false, NO_PROPERTIES, body(seq))
                .await
                .expect("basic.publish"),
        );
        if pending.len() == 50 || seq == to {
            for c in pending.drain(..) {
                assert!(c.await.expect("confirm"), "publish nacked");
            }
        }
    }
    if end {
        let c = ch
            .basic_publish_confirmed(
                "amq.topic",
                KEY,
                false,
                NO_PROPERTIES,
                bytes::Bytes::from_static(END),
            )
            .await
            .expect("basic.publish");
        assert!(c.await.expect("confirm"), "end marker nacked");
    }
}

/// Sums up outcomes: panics with the first few failures.
fn judge(outcomes: &[Outcome], expected: usize) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().err().map(|e| format!("{}: {e}", o.who)))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} subscribers did not get every message exactly once in order; first:\n  {}",
        failed.len(),
        outcomes.len(),
        failed[..failed.len().min(10)].join("\n  ")
    );
    assert_eq!(outcomes.len(), expected, "subscriber outcomes");
}

// ---------------------------------------------------------------------------------------
// 1. 2,000 subscriber connections
// ---------------------------------------------------------------------------------------

const SUBSCRIBERS: usize = 2_000;
/// Of which amqprs connections (the rest use sluice's client).
const AMQPRS: usize = 400;
/// Two in every `MANUAL_EVERY` subscribers (one amqprs, one sluice client) ack manually
/// (prefetch 50); the rest are no-ack.
const MANUAL_EVERY: usize = 40;
const MESSAGES: u32 = 200;
const SETUP_CONCURRENCY: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_subscribers_each_get_every_message_in_order() {
    // 2,000 client sockets plus the broker's pipes and our own.
    raise_nofile(SUBSCRIBERS as u64 + 200);
    let _heavy = crate::HEAVY.lock().await;
    bounded_for(Duration::from_secs(150), async {
        let broker = Arc::new(Broker::start(2));
        let t0 = std::time::Instant::now();
        let permits = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<()>();
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let mut set = JoinSet::new();
        for i in 0..SUBSCRIBERS {
            let broker = Arc::clone(&broker);
            let permits = Arc::clone(&permits);
            let ready = ready_tx.clone();
            let mut go = go_rx.clone();
            let pattern = PATTERNS[i % PATTERNS.len()];
            let ack = if matches!(i % MANUAL_EVERY, 7 | 8) {
                Ack::Manual
            } else {
                Ack::None
            };
            let amqprs = i % (SUBSCRIBERS / AMQPRS) == SUBSCRIBERS / AMQPRS / 2;
            set.spawn(async move {
                let permit = permits.acquire_owned().await.unwrap();
                let who = format!(
                    "subscriber {i} ({}, {ack:?}, {pattern})",
                    if amqprs { "amqprs" } else { "sluice client" }
                );
                if amqprs {
                    let (conn, ch, mut rx, q) = amqprs_subscriber(&broker, pattern, ack).await;
                    drop(permit);
                    let _ = ready.send(());
                    let _ = go.wait_for(|g| *g).await;
                    let deadline = Instant::now() + Duration::from_secs(90);
                    let result = drain_amqprs(&ch, &mut rx, ack, deadline)
                        .await
                        .and_then(|seqs| check_sequence(&q, &seqs, MESSAGES));
                    drop(conn);
                    Outcome {
                        who,
                        shard: shard_of_queue(&q, 2),
                        result,
                    }
                } else {
                    let (conn, ch, mut consumer, q) =
                        sluice_subscriber(&broker, pattern, ack).await;
                    drop(permit);
                    let _ = ready.send(());
                    let _ = go.wait_for(|g| *g).await;
                    let deadline = Instant::now() + Duration::from_secs(90);
                    let result = drain_sluice(&ch, &mut consumer, ack, deadline)
                        .await
                        .and_then(|seqs| check_sequence(&q, &seqs, MESSAGES));
                    drop(consumer);
                    drop(ch);
                    drop(conn);
                    Outcome {
                        who,
                        shard: shard_of_queue(&q, 2),
                        result,
                    }
                }
            });
        }
        drop(ready_tx);
        for n in 0..SUBSCRIBERS {
            if ready_rx.recv().await.is_none() {
                // A set-up task panicked: show why.
                while let Some(r) = set.join_next().await {
                    r.expect("subscriber set-up");
                }
                panic!("only {n} subscribers were set up");
            }
        }
        let setup = t0.elapsed();
        let _ = go_tx.send(true);

        let publisher = connect(&broker).await;
        let pch = publisher.open_channel().await.expect("open channel");
        pch.confirm_select().await.expect("confirm.select");
        let t1 = std::time::Instant::now();
        publish_confirmed(&pch, 1, MESSAGES, true).await;
        let published = t1.elapsed();

        let mut outcomes = Vec::with_capacity(SUBSCRIBERS);
        while let Some(r) = set.join_next().await {
            outcomes.push(r.expect("subscriber task"));
        }
        let delivered = t1.elapsed();
        let on_shard0 = outcomes.iter().filter(|o| o.shard == 0).count();
        eprintln!(
            "fanout_scale: {SUBSCRIBERS} subscribers ({AMQPRS} amqprs; {on_shard0} on shard 0, \
             {} on shard 1) set up in {setup:?}; {MESSAGES} messages confirmed in {published:?}, \
             all delivered in {delivered:?}",
            SUBSCRIBERS - on_shard0
        );
        judge(&outcomes, SUBSCRIBERS);
        let mut broker = Arc::into_inner(broker).expect("no other broker handle");
        broker.assert_healthy();
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. Subscribers that leave mid-stream
// ---------------------------------------------------------------------------------------

/// How a raw-socket subscriber leaves (the third leaver, on sluice's client, closes
/// cleanly with connection.close).
#[derive(Clone, Copy, Debug)]
enum Leave {
    /// The socket is closed without connection.close (FIN).
    Drop,
    /// The socket is reset (SO_LINGER 0, RST).
    Reset,
}

/// Messages a leaver reads before it goes; the first half of the stream is published
/// before anyone leaves, so the broker still has deliveries in flight for it.
const LEAVE_AFTER: usize = 10;
/// Leavers of each kind.
const LEAVERS: usize = 4;

/// A raw-socket subscriber on its own thread: it reads [`LEAVE_AFTER`] deliveries, then
/// drops (or resets) its socket without a word. Returns the queue name at once; the
/// join handle yields the sequence numbers read.
fn raw_leaver(
    broker: &Broker,
    pattern: &str,
    how: Leave,
) -> (String, std::thread::JoinHandle<Vec<u32>>) {
    let mut raw = broker.raw();
    raw.channel_open(1);
    let q = raw.queue_declare(1, "", false, true, false);
    raw.queue_bind(1, &q, "amq.topic", pattern);
    raw.basic_consume(1, &q, true);
    let handle = std::thread::spawn(move || {
        let mut seqs = Vec::new();
        while seqs.len() < LEAVE_AFTER {
            let d = raw.read_delivery(1);
            seqs.push(seq_of(&d.body).expect("numbered body"));
        }
        if let Leave::Reset = how {
            socket2::SockRef::from(&raw.stream)
                .set_linger(Some(Duration::ZERO))
                .expect("SO_LINGER 0");
        }
        drop::<RawConn>(raw);
        seqs
    });
    (q, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_leaving_mid_stream_do_not_disturb_the_others() {
    bounded_for(Duration::from_secs(60), async {
        let mut broker = Broker::start(2);
        const STAYERS: usize = 60;
        const N: u32 = 400;

        // The stayers: sluice-client and amqprs subscribers, no-ack and manual ack.
        let mut set = JoinSet::new();
        for i in 0..STAYERS {
            let pattern = PATTERNS[i % PATTERNS.len()];
            let ack = if i % 5 == 4 { Ack::Manual } else { Ack::None };
            if i % 4 == 0 {
                let (conn, ch, rx, q) = amqprs_subscriber(&broker, pattern, ack).await;
                set.spawn(async move {
                    let (ch, mut rx) = (ch, rx);
                    let deadline = Instant::now() + Duration::from_secs(40);
                    let r = drain_amqprs(&ch, &mut rx, ack, deadline)
                        .await
                        .and_then(|s| check_sequence(&q, &s, N));
                    drop(conn);
                    Outcome {
                        who: format!("amqprs stayer {i} ({ack:?})"),
                        shard: shard_of_queue(&q, 2),
                        result: r,
                    }
                });
            } else {
                let (conn, ch, mut consumer, q) = sluice_subscriber(&broker, pattern, ack).await;
                set.spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(40);
                    let r = drain_sluice(&ch, &mut consumer, ack, deadline)
                        .await
                        .and_then(|s| check_sequence(&q, &s, N));
                    drop((consumer, ch, conn));
                    Outcome {
                        who: format!("sluice stayer {i} ({ack:?})"),
                        shard: shard_of_queue(&q, 2),
                        result: r,
                    }
                });
            }
        }

        // The leavers, LEAVERS of each kind: raw sockets dropped (FIN) or reset (RST)
        // without a word, and sluice clients that close cleanly.
        let mut raw_leavers = Vec::new();
        let mut closers = Vec::new();
        for i in 0..LEAVERS {
            let pattern = PATTERNS[(i + 3) % PATTERNS.len()];
            for how in [Leave::Drop, Leave::Reset] {
                let (q, h) = raw_leaver(&broker, pattern, how);
                raw_leavers.push((format!("{how:?} leaver {q}"), q, h));
            }
            let (conn, ch, mut consumer, q) = sluice_subscriber(&broker, pattern, Ack::None).await;
            let task = tokio::spawn(async move {
                let mut seqs = Vec::new();
                while seqs.len() < LEAVE_AFTER {
                    let d = tokio::time::timeout(Duration::from_secs(10), consumer.recv())
                        .await
                        .expect("closing leaver: delivery in time")
                        .expect("closing leaver: delivery");
                    seqs.push(seq_of(&d.body).expect("numbered body"));
                }
                drop(consumer);
                drop(ch);
                conn.close().await.expect("clean connection.close");
                seqs
            });
            closers.push((format!("closing leaver {q}"), q, task));
        }
        let mut gone: Vec<String> = Vec::new();

        // First half, then wait until every leaver has gone, then the second half.
        let publisher = connect(&broker).await;
        let pch = publisher.open_channel().await.expect("open channel");
        pch.confirm_select().await.expect("confirm.select");
        publish_confirmed(&pch, 1, N / 2, false).await;
        for (who, q, h) in raw_leavers {
            let seqs = tokio::task::spawn_blocking(move || h.join())
                .await
                .unwrap()
                .unwrap_or_else(|_| panic!("{who} panicked"));
            check_sequence(&who, &seqs, LEAVE_AFTER as u32).unwrap();
            gone.push(q);
        }
        for (who, q, task) in closers {
            let seqs = task.await.unwrap_or_else(|e| panic!("{who}: {e}"));
            check_sequence(&who, &seqs, LEAVE_AFTER as u32).unwrap();
            gone.push(q);
        }
        publish_confirmed(&pch, N / 2 + 1, N, true).await;

        let mut outcomes = Vec::new();
        while let Some(r) = set.join_next().await {
            outcomes.push(r.expect("stayer task"));
        }
        judge(&outcomes, STAYERS);

        // The leavers' exclusive queues are gone: a passive declare from another
        // connection is a 404 channel close, and the broker logged the deletion.
        let observer = connect(&broker).await;
        let gone_on_shard0 = gone.iter().filter(|q| shard_of_queue(q, 2) == 0).count();
        eprintln!(
            "fanout_scale: {} leavers ({gone_on_shard0} on shard 0), {STAYERS} stayers",
            gone.len()
        );
        for q in &gone {
            match wait_queue_gone(&observer, q, Duration::from_secs(10)).await {
                Ok((code, text)) => {
                    assert_eq!((code, text), (404, no_queue_text(q)), "queue {q}");
                }
                Err(count) => panic!(
                    "exclusive queue {q} of a departed subscriber still \
                     exists 10 s later, holding {count} messages"
                ),
            }
            let line = format!("[vh(/)/qu({q})] QUE-1002 : Deleted");
            assert!(
                broker.wait_for_log(&line, Duration::from_secs(5)).is_some(),
                "no `{line}` line"
            );
        }
        broker.assert_healthy();
    })
    .await;
}
