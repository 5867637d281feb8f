//! `kill -9` of a relay and of the root mid-stream, with ack_mode on-confirm, persistent
//! messages and durable queues: nothing the root's publisher got confirmed is missing
//! at the relay's subscriber (duplicates are allowed, counted and printed), and the link
//! is back within reconnect_delay plus a margin.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::cluster::{
    body, confirm_select, declare_durable_bound, exchange_toml, parse_body, publish_persistent,
    upstream_toml, wait_keys, Node, BINDING_TIMEOUT, LINK_TIMEOUT,
};
use crate::common::{Chan, Conn, Delivery};

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

/// A confirming publisher of persistent numbered messages at the root.
struct Publisher {
    conn: Conn,
    ch: Chan,
    /// Tags published on this channel.
    tags: u64,
}

impl Publisher {
    async fn new(root: &Node) -> Publisher {
        let conn = root.connect().await;
        let ch = conn.channel().await;
        confirm_select(&ch).await;
        Publisher { conn, ch, tags: 0 }
    }

    /// Publishes seqs `from..to` and waits for every confirm.
    async fn confirmed(&mut self, from: u32, to: u32) {
        for seq in from..to {
            publish_persistent(&self.ch, X, KEY, body("p", seq))
                .await
                .expect("basic.publish");
            self.tags += 1;
        }
        self.ch.wait_acked(self.tags).await;
    }
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

/// Consumes the relay's durable queue until every seq in `0..confirmed` arrived; returns
/// how often each seq arrived. Panics naming the missing ones after `timeout`.
async fn drain(relay: &Node, confirmed: u32, timeout: Duration) -> BTreeMap<u32, u32> {
    let conn = relay.connect().await;
    let ch = conn.channel().await;
    let (_, mut rx) = ch.consume_auto(SUB_QUEUE).await;
    let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while (0..confirmed).any(|s| !seen.contains_key(&s)) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(m)) => {
                let (_, seq) = parse_body(&Delivery::from(m).body);
                *seen.entry(seq).or_insert(0) += 1;
            }
            Ok(None) => panic!("the relay's consumer stream ended"),
            Err(_) => {
                let missing: Vec<u32> = (0..confirmed).filter(|s| !seen.contains_key(s)).collect();
                panic!(
                    "{} of {confirmed} confirmed messages missing at the relay after \
                     {timeout:?}, first: {:?}",
                    missing.len(),
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

fn report(label: &str, seen: &BTreeMap<u32, u32>, confirmed: u32) {
    let duplicates: u32 = seen.values().map(|n| n - 1).sum();
    let beyond = seen.keys().filter(|s| **s >= confirmed).count();
    println!(
        "{label}: {confirmed} confirmed, {} distinct received, {duplicates} duplicates, \
         {beyond} unconfirmed extra",
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

async fn kill_relay_mid_stream() {
    let root = Node::start("killr-root", "");
    let mut relay = Node::start("killr-relay", &relay_of(&root));
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    subscribe_durably(&root, &relay).await;

    let mut publisher = Publisher::new(&root).await;
    publisher.confirmed(0, 3_000).await;
    // The link is still moving these when the relay dies.
    relay.kill9();
    publisher.confirmed(3_000, 5_000).await;
    relay.restart();
    let ready = Instant::now();
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    assert_back_in_time("relay restart", ready.elapsed());
    publisher.confirmed(5_000, 6_000).await;
    publisher.conn.close().await;

    let seen = drain(&relay, 6_000, Duration::from_secs(60)).await;
    report("kill -9 of the relay", &seen, 6_000);
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
    publisher.confirmed(0, 3_000).await;
    // Mid-stream: the link has unacknowledged deliveries when the root dies.
    root.kill9();
    drop(publisher);
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
    publisher.confirmed(3_000, 5_000).await;
    publisher.conn.close().await;

    let seen = drain(&relay, 5_000, Duration::from_secs(60)).await;
    report("kill -9 of the root", &seen, 5_000);
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
