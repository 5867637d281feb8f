//! Subscribers that leave together (a client fleet restarting, a network blip) leave
//! the broker as many exclusive queues to delete on its own. It deletes them in rounds
//! (`shard::control::own_deletes`), not with a control round trip held in memory for
//! each at once: with one task per queue, 10,000 subscribers closing together took the
//! broker from 57 to 99 MiB of RSS for the second the deletions took (issue 23).
//!
//! 2,000 raw-socket subscribers on `--shards 2` (each an exclusive server-named queue
//! bound to amq.topic, a no-ack consumer) send `connection.close` together; then every
//! queue and consumer is gone (the management overview counts none), and the broker's
//! peak RSS (`VmHWM`) rose above its RSS with all of them connected by less than 90% of
//! what setting them up had cost. Measured when this test was written: 53–65% in
//! rounds, 113–121% with a task per queue. What is left is the connections waking
//! together: every parked reader restarts and every close-ok is encoded in one turn.
//!
//! A deletion the broker makes on its own is checked against the queue it meant: a
//! client that declares the name of an exclusive auto-delete queue again as soon as its
//! owner left keeps its new queue (before, the second of the two deletions such a queue
//! gets could take the new one: 2 of 3 runs of that test failed; it is a race, and with
//! the check disabled 3 of 4 runs of its final form fail).

use std::time::{Duration, Instant};

use crate::common::http;
use crate::common::raw::RawConn;
use crate::common::wire::m;
use crate::common::Broker;
use crate::support::{name_on, raise_nofile, raw_subscriber};

/// Subscribers that leave together.
const SUBSCRIBERS: usize = 2_000;
/// Subscribers set up (and kept) before the first measurement: the allocator's first
/// pages and the first room of every per-shard table come with them.
const WARM: usize = 100;
const KEY: &str = "mass.disconnect";
/// How long the broker may take to delete every queue.
const DELETE_WITHIN: Duration = Duration::from_secs(20);

/// The object counts of the management overview: (queues, consumers, connections).
fn totals(broker: &Broker) -> (u64, u64, u64) {
    let overview = http::get(broker.http_port(), "/api/overview").json();
    let count = |what: &str| {
        overview["object_totals"][what]
            .as_u64()
            .unwrap_or_else(|| panic!("object_totals.{what} in {overview}"))
    };
    (count("queues"), count("consumers"), count("connections"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_leaving_together_take_their_queues_without_a_memory_spike() {
    let _heavy = crate::HEAVY.lock().await;
    raise_nofile((WARM + SUBSCRIBERS + 100) as u64);
    let broker = Broker::start(2);
    let warm: Vec<RawConn> = (0..WARM).map(|_| raw_subscriber(&broker, KEY)).collect();
    let before = broker.rss();
    let mut leaving: Vec<RawConn> = (0..SUBSCRIBERS)
        .map(|_| raw_subscriber(&broker, KEY))
        .collect();
    let connected = broker.rss();
    let set_up_cost = connected.saturating_sub(before);
    assert_eq!(
        totals(&broker),
        (
            (WARM + SUBSCRIBERS) as u64,
            (WARM + SUBSCRIBERS) as u64,
            (WARM + SUBSCRIBERS) as u64
        ),
        "every subscriber's queue, consumer and connection before they leave"
    );

    // All of them close before any close-ok is read, as a client fleet going away does;
    // each closes its socket once it has its close-ok, as clients do.
    for raw in &mut leaving {
        raw.send_close();
    }
    for mut raw in leaving {
        raw.expect_method(0, m::CONNECTION_CLOSE_OK);
    }

    let deadline = Instant::now() + DELETE_WITHIN;
    let expected = (WARM as u64, WARM as u64, WARM as u64);
    let mut now = totals(&broker);
    while now != expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        now = totals(&broker);
    }
    assert_eq!(
        now, expected,
        "(queues, consumers, connections) {DELETE_WITHIN:?} after {SUBSCRIBERS} subscribers \
         closed: the ones that stayed, and nothing of those that left"
    );

    let peak = broker.peak_rss();
    let rise = peak.saturating_sub(connected);
    assert!(
        rise <= set_up_cost / 10 * 9,
        "the broker's RSS peaked at {peak} bytes while {SUBSCRIBERS} subscribers left, \
         {rise} above its {connected} with them connected; setting them up had cost \
         {set_up_cost}"
    );
    drop(warm);
}

/// Times a client takes over the name of an exclusive auto-delete queue whose
/// connection just closed.
const TAKEOVERS: usize = 500;

/// An exclusive auto-delete queue is deleted twice over when its connection closes (its
/// owner gone, and its last consumer cancelled on the queue's shard), maybe in two
/// rounds. A client that declares the name again as soon as it is free (405 until then)
/// keeps the queue it declared: the later deletion finds another queue under the name
/// and leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_over_after_its_exclusive_owner_left_keeps_the_new_queue() {
    let _heavy = crate::HEAVY.lock().await;
    let broker = Broker::start(2);
    let mut taker = broker.raw();
    // One channel, opened again after each 405 (a 404 or 405 closes it).
    let channel = 1;
    taker.channel_open(channel);
    let names: Vec<String> = (0..TAKEOVERS).map(|i| format!("taken-over-{i}")).collect();
    for name in &names {
        let mut owner = broker.raw();
        owner.channel_open(1);
        owner.queue_declare(1, name, false, true, true);
        owner.basic_consume(1, name, true);
        owner.close_cleanly();
        drop(owner);
        let mut locked = 0;
        loop {
            taker.send_queue_declare(channel, name, [false, false, false]);
            let got = taker.read_method().expect("queue.declare answer");
            if got.id == m::QUEUE_DECLARE_OK && got.channel == channel {
                break;
            }
            assert_eq!(got.id, m::CHANNEL_CLOSE, "answer to queue.declare {name}");
            let mut d = got.dec();
            let (code, text) = (d.short(), d.shortstr());
            assert_eq!(code, 405, "{text}");
            taker
                .send_method(channel, m::CHANNEL_CLOSE_OK, &[])
                .expect("send channel.close-ok");
            locked += 1;
            assert!(
                locked < 10_000,
                "{name} still locked after {locked} declares"
            );
            taker.channel_open(channel);
        }
    }
    // Every deletion asked for so far has had its round once a later one has, on both
    // shards (each shard hands its deletions over in order): the sentinels' queues, one
    // homed on each shard, exclusive and auto-delete, are asked for by their queues'
    // shards and by their connection's.
    let mut sentinel = broker.raw();
    sentinel.channel_open(1);
    let sentinels: Vec<String> = (0..broker.shards())
        .map(|shard| name_on("taken-over-sentinel", shard, broker.shards()))
        .collect();
    for name in &sentinels {
        sentinel.queue_declare(1, name, false, true, true);
        sentinel.basic_consume(1, name, true);
    }
    sentinel.close_cleanly();
    drop(sentinel);
    for name in &sentinels {
        wait_gone(&mut taker, channel, name).await;
    }
    for name in &names {
        taker.send_passive_declare(channel, name);
        taker.expect_method(channel, m::QUEUE_DECLARE_OK);
    }
}

/// Waits (bounded) until a passive declare of `name`, an exclusive queue of a connection
/// that closed, is answered 404 instead of 405 (another connection's exclusive queue is
/// locked while it exists). Either closes the channel, which is answered and opened again.
async fn wait_gone(raw: &mut RawConn, channel: u16, name: &str) {
    let deadline = Instant::now() + DELETE_WITHIN;
    loop {
        raw.send_passive_declare(channel, name);
        let (code, text) = raw.expect_channel_close(channel);
        raw.channel_open(channel);
        if code == 404 {
            return;
        }
        assert_eq!(code, 405, "passive declare of {name}: {text}");
        assert!(
            Instant::now() < deadline,
            "{name} still there {DELETE_WITHIN:?} after its connection closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
