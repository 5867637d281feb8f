//! `kill -9` of a relay and of the root mid-stream, with ack_mode on-confirm, persistent
//! messages and durable queues: nothing the root's publisher got confirmed is missing
//! at the relay's subscriber (duplicates are allowed, counted and printed), and the link
//! is back within reconnect_delay plus a margin.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::cluster::{
    body, confirm_select, declare_durable_bound, exchange_toml, parse_body, publish_persistent,
    queue_json, upstream_toml, wait_keys, Node, BINDING_TIMEOUT, LINK_TIMEOUT,
};
use crate::common::{Chan, Conn, Delivery, Event};

const X: &str = "amq.topic";
const KEY: &str = "kill.x";
const SUB_QUEUE: &str = "kill-sub";
/// reconnect_delay of the link, seconds.
const RECONNECT_DELAY: u64 = 1;
/// What the link may take beyond reconnect_delay (its jitter, a debug build's start).
const RECONNECT_MARGIN: Duration = Duration::from_secs(3);

fn relay_of(root: &Node) -> String {
    upstream_toml(
        "root",
        &root.uri(),
        &format!("reconnect_delay = {RECONNECT_DELAY}\nack_mode = \"on-confirm\""),
    ) + &exchange_toml(X, &["root"])
}

/// A confirming publisher of persistent numbered messages at the root, which keeps the
/// set of seqs the broker confirmed even when the broker dies under it.
struct Publisher {
    conn: Conn,
    ch: Chan,
    /// The seq published with each delivery tag (tag 1 is index 0).
    seq_of_tag: Vec<u32>,
    /// Every tag up to this one is confirmed (a `multiple` ack).
    acked_upto: u64,
    /// Tags confirmed one by one above `acked_upto`.
    acked: BTreeSet<u64>,
}

impl Publisher {
    async fn new(root: &Node) -> Publisher {
        let conn = root.connect().await;
        let ch = conn.channel().await;
        confirm_select(&ch).await;
        Publisher {
            conn,
            ch,
            seq_of_tag: Vec::new(),
            acked_upto: 0,
            acked: BTreeSet::new(),
        }
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::Ack {
                tag,
                multiple: true,
            } => self.acked_upto = self.acked_upto.max(tag),
            Event::Ack { tag, .. } => {
                self.acked.insert(tag);
            }
            Event::Nack { tag, .. } => panic!("the root nacked tag {tag}"),
            _ => {}
        }
    }

    fn all_acked(&self) -> bool {
        let last = self.seq_of_tag.len() as u64;
        (1..=last).all(|t| t <= self.acked_upto || self.acked.contains(&t))
    }

    /// Publishes seqs `from..to`, taking confirms as they come; stops early if the
    /// broker goes away. Then waits (bounded) for the outstanding confirms. Returns
    /// whether everything was published and confirmed.
    async fn stream(&mut self, from: u32, to: u32) -> bool {
        let before = self.seq_of_tag.len();
        for seq in from..to {
            if publish_persistent(&self.ch, X, KEY, body("p", seq))
                .await
                .is_err()
            {
                // The broker is gone: what it confirmed before is all there will be.
                while let Ok(ev) = self.ch.events.try_recv() {
                    self.take(ev);
                }
                return false;
            }
            self.seq_of_tag.push(seq);
            while let Ok(ev) = self.ch.events.try_recv() {
                self.take(ev);
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !self.all_acked() {
            match tokio::time::timeout_at(deadline, self.ch.events.recv()).await {
                Ok(Some(ev)) => self.take(ev),
                // The connection is gone, or the broker with it: what is confirmed is.
                Ok(None) | Err(_) => break,
            }
        }
        self.seq_of_tag.len() - before == (to - from) as usize && self.all_acked()
    }

    /// The seqs the broker confirmed.
    fn confirmed(&self) -> BTreeSet<u32> {
        self.seq_of_tag
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                let tag = *i as u64 + 1;
                tag <= self.acked_upto || self.acked.contains(&tag)
            })
            .map(|(_, seq)| *seq)
            .collect()
    }
}

/// Messages at the relay's subscriber queue (0 while the relay has none).
fn relay_depth(relay: &Node) -> u64 {
    queue_json(relay.http_port(), SUB_QUEUE)
        .and_then(|q| q["messages"].as_u64())
        .unwrap_or_default()
}

/// Waits until the relay's subscriber queue holds `n` messages: the link is moving.
fn wait_relay_depth(relay: &Node, n: u64) {
    let moving = crate::common::wait_until(Duration::from_secs(30), || relay_depth(relay) >= n);
    assert!(
        moving,
        "the relay's queue reached only {} of {n} messages",
        relay_depth(relay)
    );
}

/// Declares the relay's durable subscriber queue and waits for its key at the root.
async fn subscribe_durably(root: &Node, relay: &Node) {
    let conn = relay.connect().await;
    let ch = conn.channel().await;
    declare_durable_bound(&ch, SUB_QUEUE, X, KEY).await;
    conn.close().await;
    wait_keys(
        root.http_port(),
        X,
        &relay.name,
        BINDING_TIMEOUT,
        KEY,
        |k| k.contains(KEY),
    );
}

/// Consumes the relay's durable queue until every seq in `confirmed` arrived; returns
/// how often each seq arrived. Panics naming the missing ones after `timeout`.
async fn drain(relay: &Node, confirmed: &BTreeSet<u32>, timeout: Duration) -> BTreeMap<u32, u32> {
    let conn = relay.connect().await;
    let ch = conn.channel().await;
    let (_, mut rx) = ch.consume_auto(SUB_QUEUE).await;
    let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while confirmed.iter().any(|s| !seen.contains_key(s)) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(m)) => {
                let (_, seq) = parse_body(&Delivery::from(m).body);
                *seen.entry(seq).or_insert(0) += 1;
            }
            Ok(None) => panic!("the relay's consumer stream ended"),
            Err(_) => {
                let missing: Vec<&u32> =
                    confirmed.iter().filter(|s| !seen.contains_key(s)).collect();
                panic!(
                    "{} of {} confirmed messages missing at the relay after {timeout:?}, \
                     first: {:?}",
                    missing.len(),
                    confirmed.len(),
                    &missing[..missing.len().min(10)]
                );
            }
        }
    }
    // Whatever else is still on its way (duplicates) is counted too.
    while let Ok(Some(m)) = tokio::time::timeout(crate::cluster::QUIET, rx.recv()).await {
        let (_, seq) = parse_body(&Delivery::from(m).body);
        *seen.entry(seq).or_insert(0) += 1;
    }
    conn.close().await;
    seen
}

fn report(label: &str, seen: &BTreeMap<u32, u32>, confirmed: &BTreeSet<u32>) {
    let duplicates: u32 = seen.values().map(|n| n - 1).sum();
    let unconfirmed = seen.keys().filter(|s| !confirmed.contains(s)).count();
    println!(
        "{label}: {} confirmed, {} distinct received, {duplicates} duplicates, \
         {unconfirmed} received that were never confirmed",
        confirmed.len(),
        seen.len()
    );
}

fn assert_back_in_time(label: &str, took: Duration) {
    let bound = Duration::from_secs(RECONNECT_DELAY) + RECONNECT_MARGIN;
    println!("{label}: link running again {took:?} after the restarted node was ready");
    assert!(
        took <= bound,
        "{label}: link back after {took:?}, more than reconnect_delay + margin ({bound:?})"
    );
}

/// Messages per stream, and how many must have reached the relay when the kill comes.
const STREAM: u32 = 10_000;
const KILL_AT: u64 = 2_000;

async fn kill_relay_mid_stream() {
    let root = Node::start("killr-root", "");
    let mut relay = Node::start("killr-relay", &relay_of(&root));
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    subscribe_durably(&root, &relay).await;

    let mut publisher = Publisher::new(&root).await;
    let streaming = tokio::spawn(async move {
        let whole = publisher.stream(0, STREAM).await;
        (publisher, whole)
    });
    // Mid-stream: the link is forwarding and the root still publishing.
    wait_relay_depth(&relay, KILL_AT);
    relay.kill9();
    let (mut publisher, whole) = streaming.await.expect("publisher task");
    assert!(
        whole,
        "the root did not confirm its stream while the relay was down"
    );
    relay.restart();
    let ready = Instant::now();
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    assert_back_in_time("relay restart", ready.elapsed());
    assert!(
        publisher.stream(STREAM, STREAM + 1_000).await,
        "the second stream"
    );
    let confirmed = publisher.confirmed();
    assert_eq!(confirmed.len(), STREAM as usize + 1_000);
    publisher.conn.close().await;

    let seen = drain(&relay, &confirmed, Duration::from_secs(60)).await;
    report("kill -9 of the relay", &seen, &confirmed);
    for mut node in [relay, root] {
        node.assert_healthy();
    }
}

async fn kill_root_mid_stream() {
    let mut root = Node::start("killroot-root", "");
    let relay = Node::start("killroot-relay", &relay_of(&root));
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    subscribe_durably(&root, &relay).await;

    let mut publisher = Publisher::new(&root).await;
    let streaming = tokio::spawn(async move {
        publisher.stream(0, STREAM).await;
        publisher
    });
    // Mid-stream: the link has unacknowledged deliveries and the publisher unconfirmed
    // publishes when the root dies.
    wait_relay_depth(&relay, KILL_AT);
    root.kill9();
    let first = streaming.await.expect("publisher task");
    let mut confirmed = first.confirmed();
    println!(
        "kill -9 of the root: {} of {} published confirmed before it died",
        confirmed.len(),
        first.seq_of_tag.len()
    );
    drop(first);
    let down = relay.broker().wait_for_log("FED-1003", LINK_TIMEOUT);
    assert!(
        down.is_some(),
        "no FED-1003 at the relay after the root died; FED lines:\n{}",
        crate::cluster::fed_lines(relay.broker()).join("\n")
    );
    root.restart();
    let ready = Instant::now();
    relay.wait_link_running("root", X, 2, LINK_TIMEOUT);
    assert_back_in_time("root restart", ready.elapsed());

    let mut publisher = Publisher::new(&root).await;
    assert!(
        publisher.stream(STREAM, STREAM + 2_000).await,
        "the stream after the restart"
    );
    confirmed.extend(publisher.confirmed());
    publisher.conn.close().await;

    let seen = drain(&relay, &confirmed, Duration::from_secs(60)).await;
    report("kill -9 of the root", &seen, &confirmed);
    for mut node in [relay, root] {
        node.assert_healthy();
    }
}

mod tests {
    fed_tests! {
        kill_relay_mid_stream => 150,
        kill_root_mid_stream => 150,
    }
}
