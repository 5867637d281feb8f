//! Back-pressure through the tree: a relay with a 64 MiB memory watermark and a
//! subscriber that stopped reading, while the root is sent far more than 64 MiB. The
//! relay must stop taking from the root (its queue stays near its watermark), the
//! backlog builds in the root's link queue, and that queue behaves as the link's
//! queue_arguments say:
//!
//! - `cycle`: `x-slow-consumer-policy = cycle` with `x-slow-consumer-max-depth`: a ring
//!   capped at its depth, discarding the oldest; the root's publisher is never held;
//! - `capacity`: `x-qpid-capacity`: the queue goes overfull (QUE-1003) and the root's
//!   publisher is held back (flow control up the tree).
//!
//! Either way the root's RSS stays bounded.

use std::time::{Duration, Instant};

use amqprs::channel::BasicConsumeArguments;

use crate::cluster::{
    exchange_toml, qos, queue_json, rss_bytes, upstream_queue, upstream_toml, wait_keys, Node,
    Subscriber, BINDING_TIMEOUT, LINK_TIMEOUT,
};
use crate::common::Conn;

const X: &str = "amq.topic";
const KEY: &str = "bp.x";
const MIB: u64 = 1024 * 1024;
/// The relay's memory.high_watermark.
const WATERMARK: u64 = 64 * MIB;
/// The cap of the root's link queue (ring depth or capacity).
const LINK_CAP: u64 = 16 * MIB;
/// The link's prefetch: at most this many messages are unacknowledged on it.
const PREFETCH: u64 = 100;
const BODY: usize = 64 * 1024;
/// What the root is sent: 256 MiB, four times the relay's watermark.
const MESSAGES: u64 = 4_096;
/// How long the root's publisher must make no progress to count as held back.
const HELD_FOR: Duration = Duration::from_secs(3);

/// `message_bytes` of queue `name` on `node` (0 while it does not exist).
fn queue_bytes(node: &Node, name: &str) -> u64 {
    queue_json(node.http_port(), name)
        .map(|q| q["message_bytes"].as_u64().unwrap_or_default())
        .unwrap_or_default()
}

/// A root, and a relay with the 64 MiB watermark whose link declares its upstream queue
/// with `queue_arguments`, and a stuck subscriber at the relay.
struct Setup {
    root: Node,
    relay: Node,
    link_queue: String,
    sub_queue: String,
    /// The stuck subscriber: ten deliveries taken, never acked.
    sub: Subscriber,
}

async fn setup(tag: &str, queue_arguments: &str) -> Setup {
    let root = Node::start(&format!("{tag}-root"), "");
    let link_args = format!(
        "prefetch_count = {PREFETCH}\nreconnect_delay = 1\nqueue_arguments = {queue_arguments}"
    );
    let relay_toml = "[memory]\nhigh_watermark = \"64MiB\"\n\n".to_owned()
        + &upstream_toml("root", &root.uri(), &link_args)
        + &exchange_toml(X, &["root"]);
    let relay = Node::start(&format!("{tag}-relay"), &relay_toml);
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);

    let conn = relay.connect().await;
    let ch = conn.channel().await;
    let sub_queue = ch.declare_server_named().await;
    crate::cluster::bind(&ch, &sub_queue, X, KEY).await;
    qos(&ch, 10).await;
    let (_, rx) = ch
        .basic_consume_rx(
            BasicConsumeArguments::new(&sub_queue, "")
                .manual_ack(true)
                .finish(),
        )
        .await
        .expect("basic.consume");
    wait_keys(
        root.http_port(),
        X,
        &relay.name,
        BINDING_TIMEOUT,
        KEY,
        |k| k.contains(KEY),
    );
    let link_queue = upstream_queue(X, &relay.name);
    let sub = Subscriber {
        label: "stuck".to_owned(),
        conn,
        ch,
        queue: sub_queue.clone(),
        rx,
        got: Vec::new(),
    };
    Setup {
        root,
        relay,
        link_queue,
        sub_queue,
        sub,
    }
}

/// Peaks sampled while the root was being published to.
#[derive(Default, Debug)]
struct Peaks {
    root_rss_before: u64,
    root_rss: u64,
    link_queue: u64,
    relay_queue: u64,
}

impl Peaks {
    fn sample(&mut self, s: &Setup) {
        self.root_rss = self.root_rss.max(rss_bytes(s.root.pid()));
        self.link_queue = self.link_queue.max(queue_bytes(&s.root, &s.link_queue));
        self.relay_queue = self.relay_queue.max(queue_bytes(&s.relay, &s.sub_queue));
    }

    fn print(&self, label: &str, published: u64) {
        println!(
            "{label}: {} of {} MiB published at the root; root RSS {} -> peak {} MiB; link \
             queue peak {} bytes; relay subscriber queue peak {} bytes",
            published * BODY as u64 / MIB,
            MESSAGES * BODY as u64 / MIB,
            self.root_rss_before / MIB,
            self.root_rss / MIB,
            self.link_queue,
            self.relay_queue
        );
    }

    /// What holds whichever policy the link queue has.
    fn assert_bounded(&self, s: &Setup, link_cap_slack: u64) {
        assert!(
            s.relay
                .broker()
                .wait_for_log("BRK-1007", Duration::ZERO)
                .is_some(),
            "the relay never went above its 64 MiB watermark (BRK-1007)"
        );
        // The relay took no more than its watermark, what the link had in flight and a
        // read's worth when the alarm came.
        let relay_bound = WATERMARK + PREFETCH * BODY as u64 + 8 * MIB;
        assert!(
            self.relay_queue <= relay_bound,
            "the relay's queue grew to {} bytes past its watermark (bound {relay_bound}): \
             the link kept taking from the root under the memory alarm",
            self.relay_queue
        );
        assert!(
            self.link_queue <= LINK_CAP + link_cap_slack,
            "the root's link queue held {} bytes, over its cap {LINK_CAP} (+{link_cap_slack})",
            self.link_queue
        );
        // The root holds the capped queue, the link's unacknowledged window and buffers:
        // far less than the 256 MiB it was sent.
        let growth = self.root_rss.saturating_sub(self.root_rss_before);
        assert!(
            growth <= 128 * MIB,
            "the root's RSS grew by {} MiB while it was sent up to {} MiB",
            growth / MIB,
            MESSAGES * BODY as u64 / MIB
        );
    }
}

/// How many messages the root has put into its link queue (`message_stats.publish`).
fn enqueued(s: &Setup) -> u64 {
    queue_json(s.root.http_port(), &s.link_queue)
        .and_then(|q| q["message_stats"]["publish"].as_u64())
        .unwrap_or_default()
}

/// Publishes `MESSAGES` at the root from a task and samples peaks until the root has
/// enqueued them all into the link queue, or has made no progress for [`HELD_FOR`]
/// (bounded by `limit`). Returns how many the root enqueued. (What the client library
/// has taken says nothing: it buffers what the broker does not read.)
async fn publish_and_sample(s: &Setup, peaks: &mut Peaks, limit: Duration) -> u64 {
    let conn: Conn = s.root.connect().await;
    let publisher = tokio::spawn(async move {
        let ch = conn.channel().await;
        let body = vec![b'b'; BODY];
        for _ in 0..MESSAGES {
            ch.publish(X, KEY, &body).await;
        }
        conn.close().await;
    });
    let deadline = Instant::now() + limit;
    let (mut last, mut since) = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        peaks.sample(s);
        let now = enqueued(s);
        if now >= MESSAGES || Instant::now() >= deadline {
            break;
        }
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= HELD_FOR {
            break;
        }
    }
    publisher.abort();
    peaks.sample(s);
    enqueued(s)
}

async fn relay_watermark_cycle_ring() {
    let s = setup(
        "bpcycle",
        &format!(
            "{{ \"x-slow-consumer-policy\" = \"cycle\", \"x-slow-consumer-max-depth\" = {LINK_CAP} }}"
        ),
    )
    .await;
    let mut peaks = Peaks {
        root_rss_before: rss_bytes(s.root.pid()),
        ..Peaks::default()
    };
    let published = publish_and_sample(&s, &mut peaks, Duration::from_secs(120)).await;
    peaks.print("cycle", published);
    let link = queue_json(s.root.http_port(), &s.link_queue)
        .unwrap_or_else(|| panic!("the root has no link queue {:?}", s.link_queue));
    assert_eq!(
        published, MESSAGES,
        "a cycle ring never holds its publisher, yet the root stalled; link queue: {link}"
    );
    assert!(
        link["discarded"].as_u64().unwrap_or_default() > 0,
        "the root's link queue discarded nothing: it is not the cycle ring its \
         queue_arguments ask for ({link})"
    );
    // A ring holds at most its depth (unacknowledged deliveries included) and one message.
    peaks.assert_bounded(&s, BODY as u64);
    let Setup {
        root, relay, sub, ..
    } = s;
    sub.close().await;
    for mut node in [relay, root] {
        node.assert_healthy();
    }
}

async fn relay_watermark_capacity_holds_root_publisher() {
    let s = setup("bpcap", &format!("{{ \"x-qpid-capacity\" = {LINK_CAP} }}")).await;
    let mut peaks = Peaks {
        root_rss_before: rss_bytes(s.root.pid()),
        ..Peaks::default()
    };
    let published = publish_and_sample(&s, &mut peaks, Duration::from_secs(120)).await;
    peaks.print("capacity", published);
    assert!(
        published < MESSAGES,
        "the root's publisher was never held back by its overfull link queue ({published} \
         of {MESSAGES} published)"
    );
    let line = s
        .root
        .broker()
        .wait_for_log("QUE-1003", Duration::from_secs(5));
    assert!(
        line.as_deref().is_some_and(|l| l.contains(&s.link_queue)),
        "no QUE-1003 for {:?} at the root: {line:?}",
        s.link_queue
    );
    // Overfull exceeds the capacity by at most what was in flight: the inbox, the grace
    // bytes and a read (config/sluice.toml [flow]).
    peaks.assert_bounded(&s, 8 * MIB);
    let Setup {
        root, relay, sub, ..
    } = s;
    sub.close().await;
    for mut node in [relay, root] {
        node.assert_healthy();
    }
}

mod tests {
    fed_tests! {
        relay_watermark_cycle_ring => 180,
        relay_watermark_capacity_holds_root_publisher => 180,
    }
}
