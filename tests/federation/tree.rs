//! Trees: root → 2 relays → subscribers, and root → mid → leaf with max_hops 1 and 2.

use crate::cluster::{
    exchange_toml, propagated_keys, publish_numbered, received_from, upstream_toml, wait_keys,
    Node, Subscriber, BINDING_TIMEOUT, DELIVERY_TIMEOUT, LINK_TIMEOUT, QUIET,
};

const X: &str = "amq.topic";
/// Messages per publisher.
const COUNT: u32 = 2_000;

/// The TOML of a downstream federating `amq.topic` from `upstream` (named "up").
fn relay_of(upstream: &Node, extra: &str) -> String {
    upstream_toml(
        "up",
        &upstream.uri(),
        &format!("reconnect_delay = 1\n{extra}"),
    ) + &exchange_toml(X, &["up"])
}

/// Two publishers at the root, each on its own connection, `COUNT` messages each with
/// its own routing key.
async fn two_publishers(root: &Node, keys: [&'static str; 2]) {
    let mut tasks = Vec::new();
    for (publisher, key) in ["p1", "p2"].into_iter().zip(keys) {
        let conn = root.connect().await;
        tasks.push(tokio::spawn(async move {
            let ch = conn.channel().await;
            publish_numbered(&ch, X, key, publisher, COUNT).await;
            // Closing waits for the broker to have read everything before it.
            conn.close().await;
        }));
    }
    for t in tasks {
        t.await.expect("publisher task");
    }
}

async fn two_level_tree() {
    let root = Node::start("tree2-root", "");
    let relays = [
        Node::start("tree2-relay-a", &relay_of(&root, "")),
        Node::start("tree2-relay-b", &relay_of(&root, "")),
    ];
    for relay in &relays {
        relay.wait_link_running("up", X, 1, LINK_TIMEOUT);
    }
    let mut subs = vec![Subscriber::new(&root, "root-sub", X, &["tree.#"]).await];
    for relay in &relays {
        for i in 0..2 {
            let label = format!("{}-sub-{i}", relay.name);
            subs.push(Subscriber::new(relay, &label, X, &["tree.#"]).await);
        }
    }
    for relay in &relays {
        wait_keys(
            root.http_port(),
            X,
            &relay.name,
            BINDING_TIMEOUT,
            "tree.#",
            |k| k.contains("tree.#"),
        );
    }

    two_publishers(&root, ["tree.a", "tree.b"]).await;

    for sub in &mut subs {
        sub.collect(2 * COUNT as usize, DELIVERY_TIMEOUT).await;
    }
    for sub in &mut subs {
        sub.assert_quiet().await;
        sub.assert_exactly(&["p1", "p2"], COUNT);
    }
    // At the root nothing was forwarded; at a relay every message came over one hop,
    // from the root.
    for d in &subs[0].got {
        assert_eq!(
            received_from(d),
            vec![],
            "root-sub: a local message has a trail"
        );
    }
    for sub in &subs[1..] {
        for d in &sub.got {
            assert_eq!(
                received_from(d),
                vec![("tree2-root".to_owned(), X.to_owned())],
                "{}: x-received-from of a message from the root",
                sub.label
            );
        }
    }
    for sub in subs {
        sub.close().await;
    }
    for mut node in relays.into_iter().chain([root]) {
        node.assert_healthy();
    }
}

/// root → mid → leaf, every link with `max_hops`; a subscriber at mid on `three.#` and
/// one at the leaf on `three.leaf.#`.
async fn three_level(max_hops: u16) {
    let hops = format!("max_hops = {max_hops}");
    let tag = format!("tree3h{max_hops}");
    let root = Node::start(&format!("{tag}-root"), "");
    let mid = Node::start(&format!("{tag}-mid"), &relay_of(&root, &hops));
    let leaf = Node::start(&format!("{tag}-leaf"), &relay_of(&mid, &hops));
    mid.wait_link_running("up", X, 1, LINK_TIMEOUT);
    leaf.wait_link_running("up", X, 1, LINK_TIMEOUT);

    let mut mid_sub = Subscriber::new(&mid, "mid-sub", X, &["three.#"]).await;
    let mut leaf_sub = Subscriber::new(&leaf, "leaf-sub", X, &["three.leaf.#"]).await;
    // The leaf's interest reaches mid in any case.
    wait_keys(
        mid.http_port(),
        X,
        &leaf.name,
        BINDING_TIMEOUT,
        "three.leaf.#",
        |k| k.contains("three.leaf.#"),
    );
    if max_hops >= 2 {
        wait_keys(
            root.http_port(),
            X,
            &mid.name,
            BINDING_TIMEOUT,
            "both keys",
            |k| k.contains("three.#") && k.contains("three.leaf.#"),
        );
    } else {
        wait_keys(
            root.http_port(),
            X,
            &mid.name,
            BINDING_TIMEOUT,
            "three.#",
            |k| k.contains("three.#"),
        );
    }

    let conn = root.connect().await;
    let ch = conn.channel().await;
    publish_numbered(&ch, X, "three.leaf.x", "p1", COUNT).await;
    conn.close().await;

    mid_sub.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
    mid_sub.assert_quiet().await;
    mid_sub.assert_exactly(&["p1"], COUNT);
    if max_hops >= 2 {
        leaf_sub.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
        leaf_sub.assert_quiet().await;
        leaf_sub.assert_exactly(&["p1"], COUNT);
        for d in &leaf_sub.got {
            assert_eq!(
                received_from(d),
                vec![
                    (mid.name.clone(), X.to_owned()),
                    (root.name.clone(), X.to_owned())
                ],
                "leaf-sub: x-received-from, most recent hop first"
            );
        }
    } else {
        // Everything passed through mid, yet nothing may make the second hop.
        leaf_sub.assert_quiet().await;
        assert!(leaf_sub.got.is_empty());
        tokio::time::sleep(QUIET).await;
        let at_root = propagated_keys(root.http_port(), X, &mid.name);
        assert!(
            !at_root.contains("three.leaf.#"),
            "with max_hops 1 the leaf's binding travelled two hops: {at_root:?}"
        );
    }
    for mut node in [leaf, mid, root] {
        node.assert_healthy();
    }
}

async fn three_level_max_hops_1() {
    three_level(1).await
}

async fn three_level_max_hops_2() {
    three_level(2).await
}

mod tests {
    fed_tests! {
        two_level_tree => 120,
        three_level_max_hops_1 => 120,
        three_level_max_hops_2 => 120,
    }
}
