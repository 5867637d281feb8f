//! What an idle subscriber costs the broker (issue 23's bound: at most 8 KiB of broker
//! RSS per subscriber with its connection, channel, queue, binding and consumer; ~5 KiB
//! on two shards when this test was written): 2,000 raw-socket subscribers, each an
//! exclusive server-named queue bound to amq.topic with a no-ack consumer, measured by
//! the broker's RSS from /proc; then one message reaches every one of them, so they are
//! subscribers indeed.

use crate::common::raw::RawConn;
use crate::common::wire::Props;
use crate::common::Broker;
use crate::support::{raise_nofile, raw_subscriber};

/// Subscribers measured.
const SUBSCRIBERS: usize = 2_000;
/// Subscribers set up before the first measurement: the allocator's first pages and the
/// first room of every per-shard table come with them, not with the ones measured.
const WARM: usize = 100;
/// The bound.
const PER_SUBSCRIBER_MAX: u64 = 8 * 1024;
const KEY: &str = "idle.memory";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_subscriber_costs_at_most_8_kib_of_rss() {
    let _heavy = crate::HEAVY.lock().await;
    raise_nofile((WARM + SUBSCRIBERS + 100) as u64);
    let broker = Broker::start(2);
    let mut subscribers: Vec<RawConn> = (0..WARM).map(|_| raw_subscriber(&broker, KEY)).collect();
    let before = broker.rss();
    subscribers.extend((0..SUBSCRIBERS).map(|_| raw_subscriber(&broker, KEY)));
    // Every consume-ok is in: the broker holds all of them now.
    let after = broker.rss();
    let per = after.saturating_sub(before) / SUBSCRIBERS as u64;
    assert!(
        per <= PER_SUBSCRIBER_MAX,
        "{per} bytes of broker RSS per idle subscriber (RSS {before} -> {after} for \
         {SUBSCRIBERS} subscribers)"
    );
    let mut publisher = broker.raw();
    publisher.channel_open(1);
    publisher
        .publish(
            1,
            "amq.topic",
            KEY,
            &Props::default(),
            b"to every subscriber",
        )
        .expect("publish");
    for raw in &mut subscribers {
        assert_eq!(raw.read_delivery(1).body, b"to every subscriber");
    }
}
