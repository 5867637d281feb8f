//! Back-pressure through the tree: a relay with a 64 MiB memory watermark and a
//! subscriber that stopped reading; the root publishes far more than 64 MiB. The relay
//! must stop taking from the root (its memory stays near its watermark), the backlog
//! builds in the root's link queue, which is the `cycle` ring its queue_arguments ask
//! for (capped by x-slow-consumer-max-depth, discarding the oldest), and the root's RSS
//! stays bounded.

use amqprs::channel::BasicConsumeArguments;

use crate::cluster::{
    exchange_toml, qos, queue_json, rss_bytes, upstream_queue, upstream_toml, wait_keys, Node,
    BINDING_TIMEOUT, LINK_TIMEOUT,
};

const X: &str = "amq.topic";
const KEY: &str = "bp.x";
const MIB: u64 = 1024 * 1024;
/// The relay's memory.high_watermark.
const WATERMARK: u64 = 64 * MIB;
/// x-slow-consumer-max-depth of the root's link queue.
const RING_DEPTH: u64 = 16 * MIB;
/// The link's prefetch: at most this many messages are unacknowledged on it.
const PREFETCH: u64 = 100;
const BODY: usize = 64 * 1024;
/// What the root is sent: 512 MiB, eight times the relay's watermark.
const MESSAGES: u64 = 8_192;

/// `message_bytes` of queue `name` on `node` (0 once it is gone).
fn queue_bytes(node: &Node, name: &str) -> u64 {
    queue_json(node.http_port(), name)
        .map(|q| q["message_bytes"].as_u64().unwrap_or_default())
        .unwrap_or_default()
}

async fn relay_watermark_caps_the_root() {
    let root = Node::start("bp-root", "");
    let link_args = format!(
        "prefetch_count = {PREFETCH}\nreconnect_delay = 1\nqueue_arguments = {{ \
         \"x-slow-consumer-policy\" = \"cycle\", \"x-slow-consumer-max-depth\" = {RING_DEPTH} }}"
    );
    let relay_toml = "[memory]\nhigh_watermark = \"64MiB\"\n\n".to_owned()
        + &upstream_toml("root", &root.uri(), &link_args)
        + &exchange_toml(X, &["root"]);
    let relay = Node::start("bp-relay", &relay_toml);
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);

    // The stuck subscriber: takes ten deliveries and never acks, so everything else
    // stays in its queue at the relay.
    let sub_conn = relay.connect().await;
    let sub_ch = sub_conn.channel().await;
    let sub_queue = sub_ch.declare_server_named().await;
    crate::cluster::bind(&sub_ch, &sub_queue, X, KEY).await;
    qos(&sub_ch, 10).await;
    let (_, _stuck) = sub_ch
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
    let root_rss_before = rss_bytes(root.pid());
    let mut root_rss_peak = root_rss_before;
    let mut link_peak = 0u64;
    let mut relay_peak = 0u64;
    let conn = root.connect().await;
    let ch = conn.channel().await;
    let body = vec![b'b'; BODY];
    for i in 0..MESSAGES {
        ch.publish(X, KEY, &body).await;
        if i % 256 == 255 {
            root_rss_peak = root_rss_peak.max(rss_bytes(root.pid()));
            link_peak = link_peak.max(queue_bytes(&root, &link_queue));
            relay_peak = relay_peak.max(queue_bytes(&relay, &sub_queue));
        }
    }
    conn.close().await;
    // Let the root settle what it has read, then sample once more.
    let settled = crate::common::eventually(std::time::Duration::from_secs(20), || async {
        queue_json(root.http_port(), &link_queue)
            .is_some_and(|q| q["discarded"].as_u64().unwrap_or_default() > 0)
    })
    .await;
    root_rss_peak = root_rss_peak.max(rss_bytes(root.pid()));
    link_peak = link_peak.max(queue_bytes(&root, &link_queue));
    relay_peak = relay_peak.max(queue_bytes(&relay, &sub_queue));
    let link = queue_json(root.http_port(), &link_queue)
        .unwrap_or_else(|| panic!("the root has no link queue {link_queue:?}"));
    println!(
        "published {} MiB at the root: root RSS {} -> peak {} MiB; link queue peak {} \
         bytes, discarded {}; relay subscriber queue peak {} bytes",
        MESSAGES * BODY as u64 / MIB,
        root_rss_before / MIB,
        root_rss_peak / MIB,
        link_peak,
        link["discarded"],
        relay_peak
    );
    let alarm = relay
        .broker()
        .wait_for_log("BRK-1007", std::time::Duration::ZERO);
    assert!(
        alarm.is_some(),
        "the relay never went above its 64 MiB watermark (BRK-1007)"
    );
    assert!(
        settled,
        "the root's link queue discarded nothing: the backlog did not build at the root \
         ({link})"
    );
    // The ring holds at most its depth (unacknowledged deliveries included) and one
    // message more.
    assert!(
        link_peak <= RING_DEPTH + BODY as u64,
        "the root's link queue held {link_peak} bytes, over x-slow-consumer-max-depth \
         {RING_DEPTH}"
    );
    // The relay took no more than its watermark plus what the link had in flight and a
    // read's worth when the alarm came.
    let relay_bound = WATERMARK + PREFETCH * BODY as u64 + 8 * MIB;
    assert!(
        relay_peak <= relay_bound,
        "the relay's queue grew to {relay_peak} bytes past its watermark (bound \
         {relay_bound}): the link kept taking from the root under the memory alarm"
    );
    // The root holds the ring, the link's unacknowledged window and buffers: far less
    // than the 512 MiB it was sent.
    let growth = root_rss_peak.saturating_sub(root_rss_before);
    assert!(
        growth <= 128 * MIB,
        "the root's RSS grew by {} MiB while it was sent {} MiB",
        growth / MIB,
        MESSAGES * BODY as u64 / MIB
    );
    sub_conn.close().await;
    for mut node in [relay, root] {
        node.assert_healthy();
    }
}

mod tests {
    fed_tests! {
        relay_watermark_caps_the_root => 180,
    }
}
