//! Ordering: a queue.declare on one connection racing mandatory, confirmed publishes to
//! that queue (default exchange) from a connection on the other shard. Whatever the
//! interleaving, every publish is either returned (312 NO_ROUTE, before the queue
//! exists) or in the queue — never dropped yet confirmed and not returned.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice::client::{Channel, Connection, Returned, NO_PROPERTIES};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::bounded_for;
use crate::support::*;

const SHARDS: usize = 2;
/// Races per publisher (one publisher per shard, racing concurrently).
const ROUNDS: usize = 150;
/// Publishes in flight (unconfirmed) at most.
const WINDOW: usize = 64;
/// Publishes after declare-ok before a round stops.
const AFTER_OK: u32 = 16;

struct Publisher {
    _conn: Connection,
    ch: Channel,
    returns: UnboundedReceiver<Returned>,
    shard: usize,
}

async fn publisher(broker: &crate::common::Broker) -> Publisher {
    let conn = connect(broker).await;
    let mut ch = conn.open_channel().await.expect("open channel");
    let probe = ch
        .queue_declare("", exclusive())
        .await
        .expect("declare server-named queue")
        .name
        .to_string();
    ch.confirm_select().await.expect("confirm.select");
    let returns = ch.take_returns().expect("returns receiver");
    Publisher {
        _conn: conn,
        ch,
        returns,
        shard: shard_of_queue(&probe, SHARDS),
    }
}

/// What one race showed.
struct Round {
    published: u32,
    /// Publishes returned (1..=returned).
    returned: u32,
    /// Publishes handed to the client when the declare was sent / when declare-ok came.
    at_declare: u32,
    at_declare_ok: u32,
}

/// Publishes `body(1..)` mandatory to `queue` until told to stop; returns the publisher
/// and how many it published. Panics on a nack.
async fn publish_until(
    p: Publisher,
    queue: String,
    count: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
) -> (Publisher, u32) {
    let mut inflight = std::collections::VecDeque::new();
    let mut seq = 0u32;
    while !stop.load(Ordering::Acquire) {
        seq += 1;
        let c =
            p.ch.basic_publish_confirmed("", queue.as_str(), true, NO_PROPERTIES, body(seq))
                .await
                .expect("basic.publish");
        count.store(seq, Ordering::Release);
        inflight.push_back((seq, c));
        if inflight.len() >= WINDOW {
            let (s, c) = inflight.pop_front().unwrap();
            assert!(c.await.expect("confirm"), "publish {s} to {queue} nacked");
        }
        if seq % 8 == 0 {
            tokio::task::yield_now().await;
        }
    }
    for (s, c) in inflight {
        assert!(c.await.expect("confirm"), "publish {s} to {queue} nacked");
    }
    (p, seq)
}

/// One race: `p` publishes to `queue` while `d` declares it.
async fn race(p: Publisher, d: &Channel, queue: &str) -> (Publisher, Round) {
    let count = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(publish_until(
        p,
        queue.to_owned(),
        Arc::clone(&count),
        Arc::clone(&stop),
    ));
    // Let a few publishes go out (and be returned) first.
    while count.load(Ordering::Acquire) < 4 {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let at_declare = count.load(Ordering::Acquire);
    d.queue_declare(queue, Default::default())
        .await
        .expect("queue.declare");
    let at_declare_ok = count.load(Ordering::Acquire);
    while count.load(Ordering::Acquire) < at_declare_ok + AFTER_OK {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    stop.store(true, Ordering::Release);
    let (mut p, published) = task.await.expect("publisher task");

    // Every publish is confirmed by now; its return (if any) came before its ack.
    let mut returned = Vec::new();
    while let Ok(r) = p.returns.try_recv() {
        assert_eq!(
            (
                r.reply_code,
                r.reply_text.to_string(),
                r.exchange.to_string()
            ),
            (312, "NO_ROUTE".to_owned(), String::new()),
            "basic.return of a publish to {queue}"
        );
        assert_eq!(
            r.routing_key.to_string(),
            queue,
            "a return from another round"
        );
        returned.push(seq_of(&r.body).expect("numbered body"));
    }
    let k = returned.len() as u32;
    assert!(
        returned.iter().copied().eq(1..=k),
        "{queue}: returns are not the first publishes: {returned:?}"
    );

    // Everything not returned is in the queue, in order.
    let info = d
        .queue_declare(queue, passive())
        .await
        .expect("passive declare");
    let mut got = Vec::new();
    while let Some(m) = d.basic_get(queue, true).await.expect("basic.get") {
        got.push(seq_of(&m.body).expect("numbered body"));
    }
    d.queue_delete(queue, false, false)
        .await
        .expect("queue.delete");
    let lost: Vec<u32> = (k + 1..=published).filter(|s| !got.contains(s)).collect();
    assert!(
        lost.is_empty() && info.message_count == published - k,
        "{queue}: {published} publishes confirmed, {k} returned, but the queue holds {} \
         ({} by count): confirmed-yet-dropped {:?} (declare sent after {at_declare}, \
         declare-ok after {at_declare_ok})",
        got.len(),
        info.message_count,
        &lost[..lost.len().min(20)]
    );
    assert!(
        got.iter().copied().eq(k + 1..=published),
        "{queue}: queue order {:?}…",
        &got[..got.len().min(20)]
    );
    (
        p,
        Round {
            published,
            returned: k,
            at_declare,
            at_declare_ok,
        },
    )
}

/// `ROUNDS` races of `p` against declares on `d` of queues homed on the other shard.
async fn races(mut p: Publisher, d: Channel) -> (usize, Vec<Round>) {
    let mut rounds = Vec::new();
    let other = (p.shard + 1) % SHARDS;
    for _ in 0..ROUNDS {
        let queue = name_on("race", other, SHARDS);
        let (back, round) = race(p, &d, &queue).await;
        p = back;
        rounds.push(round);
    }
    (p.shard, rounds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_racing_publishes_from_the_other_shard_loses_nothing() {
    let _heavy = crate::HEAVY.lock().await;
    bounded_for(Duration::from_secs(90), async {
        let mut broker = crate::common::Broker::start(SHARDS);
        // One publisher on each shard (connections are spread by SO_REUSEPORT).
        let mut on: Vec<Option<Publisher>> = (0..SHARDS).map(|_| None).collect();
        for _ in 0..40 {
            if on.iter().all(Option::is_some) {
                break;
            }
            let p = publisher(&broker).await;
            let s = p.shard;
            on[s].get_or_insert(p);
        }
        let publishers: Vec<Publisher> = on
            .into_iter()
            .map(|p| p.expect("no connection landed on one of the shards in 40 tries"))
            .collect();

        let mut tasks = Vec::new();
        for p in publishers {
            let dconn = connect(&broker).await;
            let d = dconn.open_channel().await.expect("open channel");
            tasks.push(tokio::spawn(async move {
                let r = races(p, d).await;
                drop(dconn);
                r
            }));
        }
        for t in tasks {
            let (shard, rounds) = t.await.expect("race task");
            // Where in the stream the queue started taking publishes, relative to the
            // publishes handed to the client when the declare went out / came back.
            let returned: Vec<u64> = rounds.iter().map(|r| u64::from(r.returned)).collect();
            let first = |r: &Round| r.returned + 1;
            let before = rounds.iter().filter(|r| first(r) <= r.at_declare).count();
            let during = rounds
                .iter()
                .filter(|r| first(r) > r.at_declare && first(r) <= r.at_declare_ok)
                .count();
            let published: u64 = rounds.iter().map(|r| u64::from(r.published)).sum();
            eprintln!(
                "fanout_scale race: publisher on shard {shard}, queues on shard {}: {} rounds, \
                 {published} publishes; first routed publish #{}..#{} (median #{}); it was \
                 handed to the client before the declare went out in {before} rounds, while \
                 the declare was in flight in {during}, after declare-ok in {}",
                (shard + 1) % SHARDS,
                rounds.len(),
                returned.iter().min().unwrap() + 1,
                returned.iter().max().unwrap() + 1,
                median(returned.clone()) + 1,
                rounds.len() - before - during,
            );
        }
        broker.assert_healthy();
    })
    .await;
}
