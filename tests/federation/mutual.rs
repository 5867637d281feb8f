//! Two brokers federating each other's `amq.topic`: no loop, each message once per
//! subscriber on each side, and none bounced back to where it came from.

use crate::cluster::{
    exchange_toml, free_port, publish_numbered, received_from, upstream_toml, wait_keys, Node,
    Subscriber, BINDING_TIMEOUT, DELIVERY_TIMEOUT, LINK_TIMEOUT,
};

const X: &str = "amq.topic";
const COUNT: u32 = 1_000;

/// The TOML of a node federating `amq.topic` from the node on `port` (upstream "peer"),
/// with `max_hops`.
fn peer_of(port: u16, max_hops: u16) -> String {
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    upstream_toml(
        "peer",
        &uri,
        &format!("reconnect_delay = 1\nmax_hops = {max_hops}"),
    ) + &exchange_toml(X, &["peer"])
}

async fn mutual(max_hops: u16) {
    let (port_a, port_b) = (free_port(), free_port());
    let tag = format!("mutualh{max_hops}");
    let (name_a, name_b) = (format!("{tag}-a"), format!("{tag}-b"));
    // A's link retries until B is up.
    let a = Node::start_on(&name_a, port_a, &peer_of(port_b, max_hops));
    let b = Node::start_on(&name_b, port_b, &peer_of(port_a, max_hops));
    a.wait_link_running("peer", X, 1, LINK_TIMEOUT);
    b.wait_link_running("peer", X, 1, LINK_TIMEOUT);

    let mut subs = vec![
        Subscriber::new(&a, "a-sub", X, &["mutual.#"]).await,
        Subscriber::new(&b, "b-sub", X, &["mutual.#"]).await,
    ];
    wait_keys(
        a.http_port(),
        X,
        &name_b,
        BINDING_TIMEOUT,
        "mutual.#",
        |k| k.contains("mutual.#"),
    );
    wait_keys(
        b.http_port(),
        X,
        &name_a,
        BINDING_TIMEOUT,
        "mutual.#",
        |k| k.contains("mutual.#"),
    );

    for (node, publisher) in [(&a, "pa"), (&b, "pb")] {
        let conn = node.connect().await;
        let ch = conn.channel().await;
        publish_numbered(&ch, X, "mutual.x", publisher, COUNT).await;
        conn.close().await;
    }

    for sub in &mut subs {
        sub.collect(2 * COUNT as usize, DELIVERY_TIMEOUT).await;
    }
    for sub in &mut subs {
        sub.assert_quiet().await;
        sub.assert_exactly(&["pa", "pb"], COUNT);
    }
    // Local messages carry no trail; the peer's carry exactly the one hop from the peer.
    for (sub, local, peer) in [(&subs[0], "pa", &name_b), (&subs[1], "pb", &name_a)] {
        let mut trails = std::collections::BTreeMap::new();
        for d in &sub.got {
            let (publisher, _) = crate::cluster::parse_body(&d.body);
            let trail = received_from(d);
            let want = if publisher == local {
                vec![]
            } else {
                vec![(peer.clone(), X.to_owned())]
            };
            assert_eq!(
                trail, want,
                "{}: x-received-from of {publisher}'s message",
                sub.label
            );
            *trails.entry(trail.len()).or_insert(0u32) += 1;
        }
        println!(
            "{}: messages by x-received-from length: {trails:?}",
            sub.label
        );
    }
    for mut node in [a, b] {
        node.assert_healthy();
    }
}

async fn mutual_max_hops_1() {
    mutual(1).await
}

/// With two hops allowed, only the node check stops a message going back.
async fn mutual_max_hops_2() {
    mutual(2).await
}

mod tests {
    fed_tests! {
        mutual_max_hops_1 => 120,
        mutual_max_hops_2 => 120,
    }
}
